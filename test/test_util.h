// Shared helpers for the tests: fixture paths, files, running the ptc binary, rewriting zips.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ptc/graph.h"
#include "ptc/passes.h"
#include "zip_writer.h"

namespace ptc::test {

std::string source_dir();                         // the repository root
std::string fixture(const std::string& name);     // models/<name>
std::string temp_dir();                           // a fresh folder for this test process
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);

// The graph passes' options with channels_last_weights on (the rest as by default).
inline GraphPassOptions channels_last_options() {
  GraphPassOptions o;
  o.channels_last_weights = true;
  return o;
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs `ptc ARGS` (the binary built next to the tests) through the shell.
RunResult run_ptc(const std::string& args);
// The same with environment assignments first, e.g. run_ptc_env("PTC_CACHE_DIR=/tmp/c ", "compile ...").
RunResult run_ptc_env(const std::string& env, const std::string& args);

// Runs a shell command; returns its exit status (128 + signal when killed), with stdout and
// stderr together in `output`.
int run_shell(const std::string& cmd, std::string& output);

// Copies a zip archive entry by entry; `edit(name, bytes)` may change an entry's bytes or
// return nullopt to drop it. Entries are written stored (uncompressed). `extra` entries are
// appended (name, bytes).
void rewrite_zip(const std::string& src, const std::string& dst,
                 const std::function<std::optional<std::string>(const std::string&, const std::string&)>& edit,
                 const std::vector<std::pair<std::string, std::string>>& extra = {});

// Arguments for a hand-built node of `kind`, aligned with its schema: the `given` ones by name,
// schema defaults for the rest (a REQUIRE fails on an unknown name or a missing required one).
std::vector<Arg> schema_args(OpKind kind, std::map<std::string, Arg> given);

// Builds graphs by hand; node output types come from the shape rules (infer_node_types).
struct GraphBuilder {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  GraphBuilder() { g->name = "t"; }
  sym::Expr sym(const std::string& name, int64_t lo = 2, int64_t hi = 64);
  Value* input(const std::string& name, DType dt, std::vector<sym::Expr> sizes);
  Value* weight(const std::string& name, const std::string& target, DType dt, std::vector<int64_t> sizes,
                std::vector<double> values, GraphInput::Role role = GraphInput::Role::Parameter);
  std::vector<Value*> node(OpKind kind, const std::string& name, std::map<std::string, Arg> given,
                           const std::string& trace = "");
  Value* op(OpKind kind, const std::string& name, std::map<std::string, Arg> given, const std::string& trace = "") {
    return node(kind, name, std::move(given), trace)[0];
  }
};

}  // namespace ptc::test
