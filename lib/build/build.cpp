#include "ptc/build.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ptc/cache.h"
#include "ptc/error.h"
#include "ptc/hash.h"
#include "runtime/cpu/ptc_weights.h"

namespace ptc {
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) user_error(p.string(), ": cannot write");
}

// model.so -> model (a path without a trailing .so stays as it is).
std::string without_so(std::string p) {
  size_t dot = p.rfind(".so"), slash = p.find_last_of('/');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) p.resize(dot);
  return p;
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

// Runs a command, returning its exit status and combined output.
int run_command(const std::string& cmd, std::string& output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) user_error("cannot run: ", cmd);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

std::string external_weights_path(const std::string& library_path) { return without_so(library_path) + ".weights"; }
std::string library_header_path(const std::string& library_path) { return without_so(library_path) + ".h"; }

// The CUDA compiler: --nvcc when given, else nvcc on PATH, $CUDA_HOME/bin/nvcc or
// /usr/local/cuda/bin/nvcc.
std::string find_nvcc(const std::string& opt) {
  if (opt != "nvcc") return opt;
  std::string out;
  if (run_command("command -v nvcc", out) == 0) return "nvcc";
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* home = std::getenv(env); home && fs::exists(fs::path(home) / "bin" / "nvcc")) return (fs::path(home) / "bin" / "nvcc").string();
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  user_error("--device cuda needs the CUDA toolkit's nvcc: not on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin (pass --nvcc)");
}

void build_library(const LibrarySource& src, const WeightLayout& weights, const Graph& g, const std::string& out_path,
                   const BuildOptions& opts) {
  const bool cuda = opts.device == "cuda";
  bool temp = opts.work_dir.empty();
  fs::path dir = temp ? fs::temp_directory_path() / ("ptc-build-" + std::to_string(getpid()) + "-" +
                                                     std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()))
                      : fs::path(opts.work_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) user_error(dir.string(), ": cannot create the build folder: ", ec.message());

  for (const auto& [name, text] : src.files) write(dir / name, text);
  for (const auto& [name, text] : embedded_files()) write(dir / name, text);
  // The weights: a blob linked in with .incbin, or a side file mapped at ptc_open.
  std::string weights_file;
  if (!weights.external) {
    std::ofstream blob(dir / "weights.bin", std::ios::binary);
    weights.stream(g, [&](const unsigned char* p, size_t n) { blob.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n)); });
    if (!blob) user_error((dir / "weights.bin").string(), ": cannot write");
    write(dir / "weights.S",
          "  .section .rodata\n  .balign 64\n  .globl ptc_model_weights\n  .hidden ptc_model_weights\n  .type ptc_model_weights, @object\n"
          "ptc_model_weights:\n  .incbin \"weights.bin\"\n  .byte 0\n  .section .note.GNU-stack,\"\",@progbits\n");
  } else {
    weights_file = external_weights_path(out_path);
    std::string tmp = weights_file + ".tmp" + std::to_string(getpid());
    errno = 0;
    std::ofstream f(tmp, std::ios::binary);
    unsigned char header[ptc_rt::kWeightsHeader] = {};
    std::memcpy(header, "PTCWGT01", 8);
    uint64_t fields[3] = {weights.total_bytes, weights.checksum, weights.model_id};
    std::memcpy(header + 8, fields, sizeof fields);
    f.write(reinterpret_cast<const char*>(header), sizeof header);
    weights.stream(g, [&](const unsigned char* p, size_t n) { f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n)); });
    f.close();
    if (!f) {
      const int err = errno;  // ofstream keeps no reason; the failed write or close left it in errno
      std::error_code ignore;
      fs::remove(tmp, ignore);  // a partial file would only take the disk space that was missing
      user_error(tmp, ": cannot write the weights file", err ? std::string(": ") + std::strerror(err) : "",
                 " (it needs ", weights.total_bytes >> 20, " MiB on that disk)");
    }
    fs::rename(tmp, weights_file, ec);
    if (ec) user_error(weights_file, ": cannot write the weights file: ", ec.message());
  }

  // Every translation unit to an object, several at once, then one link.
  std::vector<std::string> units = src.runtime_units;  // the slowest first
  for (const auto& f : src.files) units.push_back(f.first);
  std::string flags = "-std=c++17 -O3 -march=" + opts.cpu_arch +
                      " -fopenmp -fno-trapping-math -fno-math-errno -fPIC -fvisibility=hidden -Wno-unused" +
                      (opts.profile ? " -DPTC_PROFILE" : "");
  // --sanitize: instrumented code, readable reports, and the first error fails the run.
  const std::string sanitize =
      opts.sanitize.empty() ? "" : " -fsanitize=" + opts.sanitize + " -fno-sanitize-recover=all -fno-omit-frame-pointer";
  flags += sanitize + (opts.sanitize.empty() ? "" : " -g1");
  std::string nvcc_flags, nvcc;
  if (cuda) {
    nvcc = find_nvcc(opts.nvcc);
    // SASS for the chosen GPU plus its PTX, which newer GPUs' drivers compile at load.
    std::string arch = opts.cuda_arch.rfind("sm_", 0) == 0 ? opts.cuda_arch.substr(3) : opts.cuda_arch;
    nvcc_flags = "-std=c++17 -gencode arch=compute_" + arch + ",code=[sm_" + arch + ",compute_" + arch +
                 "] --expt-relaxed-constexpr -Xcompiler -fPIC,-fvisibility=hidden -w";
  }
  std::vector<std::string> cmds, outputs(units.size()), keys(units.size());
  const bool use_cache = opts.cache && opts.cache->enabled();
  std::map<std::string, const std::string*> sources;  // unit -> its text, for the object cache's keys
  if (use_cache) {
    for (const auto& [name, text] : src.files) sources.emplace(name, &text);
    for (const auto& [name, text] : embedded_files()) sources.emplace(name, &text);
  }
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string& u = units[i];
    bool cu = u.size() > 3 && u.compare(u.size() - 3, 3, ".cu") == 0;
    std::string compiler = cu ? nvcc + " " + nvcc_flags : opts.cxx + " " + flags;
    // model.cpp (and a training library's fwd_model.cpp / bwd_model.cpp) is glue: tensor
    // tables, input checks, the run sequence. No loop in it is hot, and -O1 compiles it much
    // faster (bert: 1.45 -> 0.98 s; mobilenet_v2's training backward: 83 -> 6.5 s). nvcc's -O is
    // the host code's level only (device code is optimized regardless), and a generated .cu's
    // host code is that glue and kernel launches.
    const std::string stem = u.substr(0, u.rfind('.'));
    const bool glue = stem == "model" || (stem.size() > 6 && stem.compare(stem.size() - 6, 6, "_model") == 0);
    compiler += glue ? " -O1" : cu ? " -O3" : "";
    cmds.push_back("cd " + shell_quote(dir.string()) + " && " + compiler + " -c " + u + " -o " + u + ".o");
    if (use_cache) {
      // The object's address: ptc itself (its embedded headers), the compiler and its flags, the
      // host CPU for -march=native, and the unit's source.
      Sha256 h;
      h.field("ptc-object-v1").field(ptc_identity()).field(tool_identity(cu ? nvcc : opts.cxx)).field(compiler).field(u);
      if (!cu && opts.cpu_arch == "native") h.field(host_cpu_identity());
      keys[i] = h.field(*sources.at(u)).hex();
    }
  }
  if (!weights.external) {  // the weights blob through the host assembler, beside the other units (not cached)
    // Second in line: assembling a large blob takes a while, and overlaps the runtime's unit.
    units.insert(units.begin() + 1, "weights.S");
    outputs.insert(outputs.begin() + 1, std::string());
    keys.insert(keys.begin() + 1, std::string());
    cmds.insert(cmds.begin() + 1, "cd " + shell_quote(dir.string()) + " && " + opts.cxx + " -c weights.S -o weights.S.o");
  }
  std::vector<int> rcs(units.size(), 0);
  std::vector<char> cached(units.size(), 0);
  int jobs = opts.jobs > 0 ? opts.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::min<int>(jobs, static_cast<int>(units.size()));
  auto t0 = std::chrono::steady_clock::now();
  {
    std::atomic<size_t> next{0};
    std::atomic<int> done{0};
    std::mutex log_mu;
    auto worker = [&] {
      for (size_t i; (i = next++) < cmds.size();) {
        std::string obj = (dir / (units[i] + ".o")).string();
        if (!keys[i].empty() && opts.cache->fetch("objects", keys[i], {{"unit.o", obj}})) {
          cached[i] = 1;
        } else {
          spdlog::debug("building: {}", cmds[i]);
          rcs[i] = run_command(cmds[i], outputs[i]);
          if (rcs[i] == 0 && !keys[i].empty()) opts.cache->store("objects", keys[i], {{"unit.o", obj}});
        }
        std::lock_guard<std::mutex> lock(log_mu);
        int k = ++done;
        if (opts.progress) spdlog::info("[{}/{}] {}{}", k, static_cast<int>(cmds.size()), units[i], cached[i] ? " (cached)" : "");
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < jobs; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
  }
  for (size_t i = 0; i < units.size(); ++i)
    if (rcs[i] != 0) {
      if (units[i] == "ptc_cuda_cudnn.cu" && outputs[i].find("cudnn.h") != std::string::npos)
        user_error("this model's convolutions run on cuDNN, but nvcc cannot find cudnn.h: install cuDNN 9 where nvcc looks (",
                   "/usr/local/cuda/include) or name its include folder in CPATH:\n", outputs[i].substr(0, 2000));
      user_error(cuda ? "nvcc" : "the host compiler", " failed on the generated code (", (dir / units[i]).string(), "):\n",
                 outputs[i].substr(0, 4000));
    }
  spdlog::debug("compiled {} translation units ({} from the cache, {} at a time) in {:.2f} s", units.size(),
                std::count(cached.begin(), cached.end(), 1), jobs,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  std::string tmp_out = out_path + ".tmp" + std::to_string(getpid());
  std::string objects;
  for (const auto& u : units) objects += " " + u + ".o";
  std::string cmd = "cd " + shell_quote(dir.string()) + " && ";
  // The file name as the soname: programs linked against the library look it up by name (on
  // their rpath), not by the path it had at build time.
  std::string soname = shell_quote(opts.soname.empty() ? fs::path(out_path).filename().string() : opts.soname);
  if (cuda)  // nvcc links the CUDA runtime statically (libcudart_static) by default
    cmd += nvcc + " -shared -Xlinker -soname=" + soname + " -o " + shell_quote(fs::absolute(tmp_out).string()) + objects + " -lcublasLt" +
           (std::count(units.begin(), units.end(), "ptc_cuda_cudnn.cu") ? " -lcudnn" : "") + (weights.external ? " -ldl" : "");
  else
    cmd += opts.cxx + sanitize + " -shared -fopenmp -Wl,-soname," + soname + " -o " + shell_quote(fs::absolute(tmp_out).string()) + objects + (weights.external ? " -ldl" : "");
  spdlog::debug("linking: {}", cmd);
  std::string output;
  int rc = run_command(cmd, output);
  spdlog::debug("host compiler took {:.2f} s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (rc != 0) {
    fs::remove(tmp_out, ec);
    if (output.find("-lcudnn") != std::string::npos)
      user_error("this model's convolutions run on cuDNN, but the linker cannot find libcudnn.so: install cuDNN 9 where nvcc ",
                 "looks (/usr/local/cuda/lib64) or name its library folder in LIBRARY_PATH:\n", output.substr(0, 2000));
    user_error("linking the generated library failed (", dir.string(), "):\n", output.substr(0, 4000));
  }
  fs::rename(tmp_out, out_path, ec);
  if (ec) user_error(out_path, ": cannot write the library: ", ec.message());
  if (temp) fs::remove_all(dir, ec);
}

}  // namespace ptc
