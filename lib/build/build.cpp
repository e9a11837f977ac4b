#include "ptc/build.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ptc/error.h"

namespace ptc {
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) user_error(p.string(), ": cannot write");
}

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

// Runs a command, returning its exit status and combined output.
int run(const std::string& cmd, std::string& output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) user_error("cannot run: ", cmd);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

void build_cpu_library(const CpuSource& src, const WeightLayout& weights, const Graph& g,
                       const std::string& out_path, const BuildOptions& opts) {
  bool temp = opts.work_dir.empty();
  fs::path dir = temp ? fs::temp_directory_path() / ("ptc-build-" + std::to_string(getpid()) + "-" +
                                                     std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()))
                      : fs::path(opts.work_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) user_error(dir.string(), ": cannot create the build folder: ", ec.message());

  write(dir / "model.cpp", src.model_cpp);
  for (const auto& [name, text] : embedded_files()) write(dir / name, text);
  // The weights blob, assembled from the model's storages (64-byte aligned), linked in with .incbin.
  {
    std::ofstream blob(dir / "weights.bin", std::ios::binary);
    size_t pos = 0;
    for (const auto& e : weights.entries) {
      if (e.offset < pos) continue;  // a storage shared with an earlier entry
      std::string pad(e.offset - pos, '\0');
      blob.write(pad.data(), static_cast<std::streamsize>(pad.size()));
      const TensorData& td = g.weights.at(e.name);
      blob.write(reinterpret_cast<const char*>(td.storage), static_cast<std::streamsize>(e.bytes));
      pos = e.offset + e.bytes;
    }
    if (!blob) user_error((dir / "weights.bin").string(), ": cannot write");
  }
  write(dir / "weights.S",
        "  .section .rodata\n  .balign 64\n  .globl ptc_model_weights\n  .type ptc_model_weights, @object\n"
        "ptc_model_weights:\n  .incbin \"weights.bin\"\n  .byte 0\n  .section .note.GNU-stack,\"\",@progbits\n");

  std::string tmp_out = out_path + ".tmp" + std::to_string(getpid());
  std::string cmd = "cd " + shell_quote(dir.string()) + " && " + opts.cxx + " -std=c++17 -O3 -march=" + opts.cpu_arch +
                    " -fopenmp -fPIC -shared -fvisibility=hidden -Wno-unused -o " +
                    shell_quote(fs::absolute(tmp_out).string()) + " model.cpp weights.S";
  spdlog::debug("building: {}", cmd);
  auto t0 = std::chrono::steady_clock::now();
  std::string output;
  int rc = run(cmd, output);
  spdlog::debug("host compiler took {:.2f} s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (rc != 0) {
    fs::remove(tmp_out, ec);
    user_error("the host compiler failed on the generated code (", dir.string(), "/model.cpp):\n", output.substr(0, 4000));
  }
  fs::rename(tmp_out, out_path, ec);
  if (ec) user_error(out_path, ": cannot write the library: ", ec.message());
  if (temp) fs::remove_all(dir, ec);
}

}  // namespace ptc
