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

#include "blob_object.h"
#include "ptc/backend.h"
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

bool is_glue_unit(const std::string& u) {
  // model.cpp (and a training library's fwd_model.cpp / bwd_model.cpp) is glue: tensor tables,
  // input checks, the run sequence. No loop in it is hot, and -O1 compiles it much faster (bert:
  // 1.45 -> 0.98 s; mobilenet_v2's training backward: 83 -> 6.5 s).
  const std::string stem = u.substr(0, u.rfind('.'));
  return stem == "model" || (stem.size() > 6 && stem.compare(stem.size() - 6, 6, "_model") == 0);
}

// --sanitize: instrumented code, readable reports, and the first error fails the run.
std::string sanitize_flags(const BuildOptions& opts) {
  return opts.sanitize.empty() ? "" : " -fsanitize=" + opts.sanitize + " -fno-sanitize-recover=all -fno-omit-frame-pointer";
}

// -mprefer-vector-width=512: on AVX-512 targets the generated loops vectorize 16 floats wide (GCC's
// -march=native keeps 256-bit vectors on Intel CPUs; ResNet's bf16 stem max pool runs 1.7x faster
// at 512); elsewhere it changes nothing.
std::string host_compile_command(const std::string& u, const BuildOptions& opts) {
  return opts.cxx + " -std=c++17 -O3 -march=" + opts.cpu_arch + " -mprefer-vector-width=512" +
         " -fopenmp -fno-trapping-math -fno-math-errno -fPIC -fvisibility=hidden -Wno-unused" +
         (opts.profile ? " -DPTC_PROFILE" : "") + sanitize_flags(opts) + (opts.sanitize.empty() ? "" : " -g1") +
         (is_glue_unit(u) ? " -O1" : "");
}

namespace {

// A runtime unit's object by content: the compiler and its command, the host CPU for
// -march=native, and every runtime file ptc embeds (the unit and the headers it includes). Not
// ptc's own identity: a reinstalled ptc with the same runtime finds the same objects.
std::string runtime_object_key(const std::string& u, const std::string& compiler, const BuildOptions& opts) {
  Sha256 h;
  h.field("ptc-runtime-object-v1").field(opts.backend->unit_identity(u, opts)).field(compiler).field(u);
  for (const auto& [name, text] : embedded_files()) h.field(name).field(text);
  return h.hex();
}

// Where prebuilt runtime objects are looked up: $PTC_PREBUILT_DIR when set (empty: nowhere), else
// beside the ptc executable: prebuilt/ (a build tree) or ../lib/ptc/prebuilt (an installation).
std::vector<std::string> prebuilt_dirs() {
  if (const char* d = std::getenv("PTC_PREBUILT_DIR")) return *d ? std::vector<std::string>{d} : std::vector<std::string>{};
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  std::vector<std::string> dirs;
  for (const fs::path& d : {exe.parent_path() / "prebuilt", exe.parent_path().parent_path() / "lib" / "ptc" / "prebuilt"})
    if (fs::is_directory(d, ec)) dirs.push_back(d.string());
  return dirs;
}

}  // namespace

const std::string& fast_linker(const std::string& cxx) {
  static std::mutex mu;
  static std::map<std::string, std::string> found;
  std::lock_guard<std::mutex> lock(mu);
  auto it = found.find(cxx);
  if (it != found.end()) return it->second;
  std::string flag;
  for (const char* ld : {"lld", "gold"}) {
    std::string out;
    if (run_command(cxx + " -fuse-ld=" + ld + " -Wl,--version -shared -o /dev/null -x c /dev/null", out) == 0) {
      flag = std::string("-fuse-ld=") + ld;
      break;
    }
  }
  return found.emplace(cxx, flag).first->second;
}

void build_library(const LibrarySource& src, const WeightLayout& weights, const Graph& g, const std::string& out_path,
                   const BuildOptions& opts) {
  PTC_CHECK(opts.backend, "build_library needs a backend");
  const Backend& backend = *opts.backend;
  bool temp = opts.work_dir.empty();
  fs::path dir = temp ? fs::temp_directory_path() / ("ptc-build-" + std::to_string(getpid()) + "-" +
                                                     std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()))
                      : fs::path(opts.work_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) user_error(dir.string(), ": cannot create the build folder: ", ec.message());

  for (const auto& [name, text] : src.files) write(dir / name, text);
  for (const auto& [name, text] : embedded_files()) write(dir / name, text);
  // The weights: a blob linked into the library, or a side file mapped at ptc_open. The blob is
  // an object ptc writes itself (blob_object.h), in the build's worker pool beside the compiles;
  // on hosts it cannot write objects for, a .incbin the assembler builds.
  std::string weights_file;
  const bool blob_object = !weights.external && can_write_blob_object();
  if (!weights.external && !blob_object) {
    std::ofstream blob(dir / "weights.bin", std::ios::binary);
    weights.stream(g, [&](const unsigned char* p, size_t n) { blob.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n)); });
    if (!blob) user_error((dir / "weights.bin").string(), ": cannot write");
    write(dir / "weights.S",
          "  .section .rodata\n  .balign 64\n  .globl ptc_model_weights\n  .hidden ptc_model_weights\n  .type ptc_model_weights, @object\n"
          "ptc_model_weights:\n  .incbin \"weights.bin\"\n  .byte 0\n  .section .note.GNU-stack,\"\",@progbits\n");
  } else if (weights.external) {
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

  // Every translation unit to an object, several at once, then one link. A runtime unit (the
  // model-independent GEMM / convolution / attention helpers) is taken prebuilt when `ptc
  // prebuild` compiled it with the same command (runtime_object_key).
  std::vector<std::string> units = src.runtime_units;  // the slowest first
  const size_t n_runtime = units.size();
  for (const auto& f : src.files) units.push_back(f.first);
  std::vector<std::string> cmds, outputs(units.size()), keys(units.size()), objects(units.size());
  const bool use_cache = opts.cache && opts.cache->enabled();
  std::map<std::string, const std::string*> sources;  // unit -> its text, for the object cache's keys
  for (const auto& [name, text] : src.files) sources.emplace(name, &text);
  const std::vector<std::string> prebuilt = prebuilt_dirs();
  std::vector<char> from_prebuilt(units.size(), 0);
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string& u = units[i];
    const std::string compiler = backend.compile_command(u, opts);
    objects[i] = u + ".o";
    cmds.push_back("cd " + shell_quote(dir.string()) + " && " + compiler + " -c " + u + " -o " + u + ".o");
    if (i < n_runtime) {
      const std::string key = runtime_object_key(u, compiler, opts);
      for (const auto& d : prebuilt)
        if (fs::is_regular_file(fs::path(d) / (key + ".o"), ec)) {
          objects[i] = fs::absolute(fs::path(d) / (key + ".o")).string();
          from_prebuilt[i] = 1;
          break;
        }
      if (use_cache) keys[i] = key;
    } else if (use_cache) {
      // The object's address: ptc itself (its embedded headers), the compiler and its flags, the
      // host CPU for -march=native, and the unit's source.
      Sha256 h;
      h.field("ptc-object-v1").field(ptc_identity()).field(backend.unit_identity(u, opts)).field(compiler).field(u);
      keys[i] = h.field(*sources.at(u)).hex();
    }
  }
  if (!weights.external) {  // the weights blob, beside the other units (not cached)
    // Second in line: writing a large blob takes a while, and overlaps the runtime's unit.
    const size_t at = std::min<size_t>(1, units.size());
    const std::string unit = blob_object ? "weights" : "weights.S";
    units.insert(units.begin() + at, unit);
    outputs.insert(outputs.begin() + at, std::string());
    keys.insert(keys.begin() + at, std::string());
    objects.insert(objects.begin() + at, unit + ".o");
    from_prebuilt.insert(from_prebuilt.begin() + at, 0);
    cmds.insert(cmds.begin() + at, blob_object ? std::string() : "cd " + shell_quote(dir.string()) + " && " + opts.cxx + " -c weights.S -o weights.S.o");
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
        if (from_prebuilt[i]) {
          cached[i] = 2;
        } else if (cmds[i].empty()) {  // the weights object
          try {
            write_blob_object(obj, "ptc_model_weights", [&](const std::function<void(const unsigned char*, size_t)>& sink) { weights.stream(g, sink); });
          } catch (const std::exception& e) {
            rcs[i] = 1;
            outputs[i] = e.what();
          }
        } else if (!keys[i].empty() && opts.cache->fetch("objects", keys[i], {{"unit.o", obj}})) {
          cached[i] = 1;
        } else {
          spdlog::debug("building: {}", cmds[i]);
          rcs[i] = run_command(cmds[i], outputs[i]);
          if (rcs[i] == 0 && !keys[i].empty()) opts.cache->store("objects", keys[i], {{"unit.o", obj}});
        }
        std::lock_guard<std::mutex> lock(log_mu);
        int k = ++done;
        if (opts.progress)
          spdlog::info("[{}/{}] {}{}", k, static_cast<int>(cmds.size()), units[i],
                       cached[i] == 2 ? " (prebuilt)" : cached[i] ? " (cached)" : "");
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < jobs; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
  }
  for (size_t i = 0; i < units.size(); ++i)
    if (rcs[i] != 0) {
      if (cmds[i].empty()) user_error(outputs[i]);  // writing the weights object
      const std::string why = backend.explain_failure(units[i], outputs[i]);
      if (!why.empty()) user_error(why);
      user_error(backend.compiler_name(units[i]), " failed on the generated code (", (dir / units[i]).string(), "):\n",
                 outputs[i].substr(0, 4000));
    }
  spdlog::debug("compiled {} translation units ({} from the cache, {} prebuilt, {} at a time) in {:.2f} s", units.size(),
                std::count(cached.begin(), cached.end(), 1), std::count(cached.begin(), cached.end(), 2), jobs,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  std::string tmp_out = out_path + ".tmp" + std::to_string(getpid());
  std::string object_list;
  for (const auto& o : objects) object_list += " " + shell_quote(o);
  const std::string soname = shell_quote(opts.soname.empty() ? fs::path(out_path).filename().string() : opts.soname);
  std::string output;
  int rc = 1;
  for (const std::string& link : backend.link_commands(object_list, shell_quote(fs::absolute(tmp_out).string()), soname, units,
                                                       weights.external, opts)) {
    if (rc == 0) break;
    if (!output.empty()) spdlog::debug("that link failed; trying the next:\n{}", output.substr(0, 2000));
    output.clear();
    const std::string cmd = "cd " + shell_quote(dir.string()) + " && " + link;
    spdlog::debug("linking: {}", cmd);
    rc = run_command(cmd, output);
  }
  spdlog::debug("host compiler took {:.2f} s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (rc != 0) {
    fs::remove(tmp_out, ec);
    const std::string why = backend.explain_failure("", output);
    if (!why.empty()) user_error(why);
    user_error("linking the generated library failed (", dir.string(), "):\n", output.substr(0, 4000));
  }
  fs::rename(tmp_out, out_path, ec);
  if (ec) user_error(out_path, ": cannot write the library: ", ec.message());
  if (temp) fs::remove_all(dir, ec);
}

std::string default_prebuilt_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) user_error("cannot find the ptc executable (/proc/self/exe) to place prebuilt objects beside it; pass --dir");
  return (exe.parent_path() / "prebuilt").string();
}

std::vector<std::string> embedded_units(const std::string& prefix, const std::string& suffix) {
  std::vector<std::string> units;
  for (const auto& [name, text] : embedded_files())
    if (name.size() >= prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      units.push_back(name);
  return units;
}

int prebuild_runtime(const BuildOptions& opts, const std::string& out_dir, const std::vector<std::string>& units) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) user_error(out_dir, ": cannot create the folder: ", ec.message());
  fs::path dir = fs::temp_directory_path() / ("ptc-prebuild-" + std::to_string(getpid()));
  fs::create_directories(dir, ec);
  if (ec) user_error(dir.string(), ": cannot create the build folder: ", ec.message());
  for (const auto& [name, text] : embedded_files()) write(dir / name, text);
  PTC_CHECK(opts.backend, "prebuild_runtime needs a backend");
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  std::mutex log_mu;
  auto worker = [&] {
    for (size_t i; (i = next++) < units.size();) {
      const std::string& u = units[i];
      const std::string compiler = opts.backend->compile_command(u, opts);
      const fs::path obj = fs::path(out_dir) / (runtime_object_key(u, compiler, opts) + ".o");
      std::error_code e;
      if (fs::is_regular_file(obj, e)) {
        std::lock_guard<std::mutex> lock(log_mu);
        spdlog::info("{}: up to date ({})", u, obj.string());
        continue;
      }
      std::string output, tmp = obj.string() + ".tmp" + std::to_string(getpid());
      int rc = run_command("cd " + shell_quote(dir.string()) + " && " + compiler + " -c " + u + " -o " + shell_quote(tmp), output);
      if (rc == 0) fs::rename(tmp, obj, e);
      std::lock_guard<std::mutex> lock(log_mu);
      if (rc != 0 || e) {
        fs::remove(tmp, e);
        ++failed;
        spdlog::warn("{}: not prebuilt; `ptc compile` will build it for each model that needs it:\n{}", u, output.substr(0, 2000));
      } else {
        spdlog::info("{}: {}", u, obj.string());
      }
    }
  };
  int jobs = opts.jobs > 0 ? opts.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(jobs, static_cast<int>(units.size())); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  fs::remove_all(dir, ec);
  return failed;
}

}  // namespace ptc
