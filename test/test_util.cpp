#include "test_util.h"

#include <catch2/catch.hpp>

#include "frontend/pt2_context.h"
#include "ptc/rewrite.h"
#include "ptc/passes.h"

#include <sys/wait.h>
#include <unistd.h>
#include <unzip.h>
#include <zip.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ptc::test {

std::string source_dir() { return PTC_SOURCE_DIR; }
std::string fixture(const std::string& name) { return source_dir() + "/models/" + name; }

std::string temp_dir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/ptc-test-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    return std::string(tmpl);
  }();
  return dir;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path);
}

RunResult run_ptc(const std::string& args) { return run_ptc_env("", args); }

int run_shell(const std::string& cmd, std::string& output) {
  output.clear();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("popen failed");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

RunResult run_ptc_env(const std::string& env, const std::string& args) {
  RunResult r;
  r.exit_code = run_shell(env + std::string(PTC_BINARY) + " " + args, r.output);
  return r;
}

void rewrite_zip(const std::string& src, const std::string& dst,
                 const std::function<std::optional<std::string>(const std::string&, const std::string&)>& edit,
                 const std::vector<std::pair<std::string, std::string>>& extra) {
  unzFile in = unzOpen64(src.c_str());
  if (!in) throw std::runtime_error("cannot open zip " + src);
  zipFile out = zipOpen64(dst.c_str(), APPEND_STATUS_CREATE);
  if (!out) throw std::runtime_error("cannot create zip " + dst);
  auto add = [&](const std::string& name, const std::string& bytes) {
    zip_fileinfo fi{};
    if (zipOpenNewFileInZip64(out, name.c_str(), &fi, nullptr, 0, nullptr, 0, nullptr, 0, 0, 1) != ZIP_OK ||
        zipWriteInFileInZip(out, bytes.data(), static_cast<unsigned>(bytes.size())) != ZIP_OK ||
        zipCloseFileInZip(out) != ZIP_OK)
      throw std::runtime_error("cannot write zip entry " + name);
  };
  for (int rc = unzGoToFirstFile(in); rc == UNZ_OK; rc = unzGoToNextFile(in)) {
    unz_file_info64 info{};
    char name[4096];
    unzGetCurrentFileInfo64(in, &info, name, sizeof name, nullptr, 0, nullptr, 0);
    std::string bytes(static_cast<size_t>(info.uncompressed_size), '\0');
    unzOpenCurrentFile(in);
    if (!bytes.empty()) unzReadCurrentFile(in, bytes.data(), static_cast<unsigned>(bytes.size()));
    unzCloseCurrentFile(in);
    auto edited = edit(name, bytes);
    if (edited) add(name, *edited);
  }
  for (const auto& [name, bytes] : extra) add(name, bytes);
  unzClose(in);
  zipClose(out, nullptr);
}

std::vector<Arg> schema_args(OpKind kind, std::map<std::string, Arg> given) {
  std::vector<Arg> args;
  for (const SchemaArg& sa : op_info(kind).schema.args) {
    auto it = given.find(sa.name);
    if (it != given.end()) {
      args.push_back(it->second);
      given.erase(it);
    } else {
      REQUIRE(sa.has_default);
      args.push_back(pt2::default_argument(sa));
    }
  }
  REQUIRE(given.empty());  // every given argument is in the schema
  return args;
}

sym::Expr GraphBuilder::sym(const std::string& name, int64_t lo, int64_t hi) {
  g->symbols[name] = sym::Range{lo, hi};
  return sym::symbol(name, {lo, hi});
}

Value* GraphBuilder::input(const std::string& name, DType dt, std::vector<sym::Expr> sizes) {
  return g->add_input(name, Type::tensor(dt, std::move(sizes)), GraphInput::Role::User);
}

Value* GraphBuilder::weight(const std::string& name, const std::string& target, DType dt, std::vector<int64_t> sizes,
                            std::vector<double> values, GraphInput::Role role) {
  Type t = Type::tensor(dt, std::vector<sym::Expr>(sizes.begin(), sizes.end()));
  g->weights[target] = rewrite::owned_tensor(t, values);
  return g->add_input(name, t, role, target);
}

std::vector<Value*> GraphBuilder::node(OpKind kind, const std::string& name, std::map<std::string, Arg> given,
                                       const std::string& trace) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->name = name;
  n->target = op_info(kind).schema.qualified();
  n->source.stack_trace = trace;
  n->args = schema_args(kind, std::move(given));
  std::vector<Type> types = infer_node_types(*n);
  REQUIRE(!types.empty());
  for (size_t i = 0; i < types.size(); ++i)
    n->outputs.push_back(g->add_value(i ? name + "_" + std::to_string(i) : name, types[i]));
  return g->add_node(std::move(n))->outputs;
}

}  // namespace ptc::test
