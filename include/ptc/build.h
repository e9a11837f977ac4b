// Build: writes the generated sources, the runtime helpers and the weights blob into a folder
// and runs the host C++ compiler to link one shared library.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ptc/codegen.h"

namespace ptc {

struct BuildOptions {
  std::string cxx = "c++";         // host compiler
  std::string cpu_arch = "native"; // -march value
  std::string work_dir;            // where sources go (kept); empty: a temporary folder, removed
  bool profile = false;            // time each kernel; the library prints the table at ptc_close
  int jobs = 0;                    // translation units compiled at once (0: one per hardware thread)
  std::string device = "cpu";      // cpu or cuda
  std::string nvcc = "nvcc";       // CUDA compiler (cuda)
  std::string cuda_arch = "sm_90"; // GPU architecture (cuda): SASS for it plus its PTX
  const class CompileCache* cache = nullptr;  // object files by content (null or disabled: none)
  bool progress = false;           // log each translation unit as it finishes (info level)
  std::string soname;              // the library's soname (empty: its file name)
  std::string sanitize;            // -fsanitize= list for the generated code, e.g. address,undefined (cpu)
};

// Writes and compiles; the library appears at `out_path` atomically (temp file + rename).
// Throws UserError with the compiler's output when it fails.
void build_library(const LibrarySource& src, const WeightLayout& weights, const Graph& g, const std::string& out_path,
                   const BuildOptions& opts);

// Where --weights external puts the weights next to a library: model.so -> model.weights (the
// generated library looks there when ptc_open gets no path).
std::string external_weights_path(const std::string& library_path);
// The typed header `ptc compile` writes next to a library: model.so -> model.h.
std::string library_header_path(const std::string& library_path);

// The CUDA compiler: `opt` unless it is the default "nvcc", else nvcc on PATH, in $CUDA_HOME/bin
// or /usr/local/cuda/bin. Throws UserError when there is none.
std::string find_nvcc(const std::string& opt);

// Runs a shell command; returns its exit status, with stdout and stderr in `output`.
int run_command(const std::string& cmd, std::string& output);
// `s` as one single-quoted shell word.
std::string shell_quote(const std::string& s);

// Prebuilt runtime units: ptc's model-independent helpers (GEMM, convolution, attention; CUDA:
// the cuBLASLt / cuDNN wrappers) compiled once with exactly the command `ptc compile` would use,
// stored in `out_dir` as <key>.o, where the key hashes that command, the compiler's identity, the
// host CPU (-march=native) and every embedded runtime file. `ptc compile` links such an object
// instead of building the unit again; it finds them in $PTC_PREBUILT_DIR, else beside the ptc
// executable in prebuilt/ (a build tree) or ../lib/ptc/prebuilt (an installation). Returns the
// number of units that failed to build (they are skipped with a warning).
int prebuild_runtime(const BuildOptions& opts, const std::string& out_dir, const std::vector<std::string>& units);
// The runtime units of a device (cpu: ptc_runtime*.cpp; cuda: ptc_cuda_*.cu).
std::vector<std::string> runtime_unit_names(const std::string& device);
// prebuilt/ beside the running ptc executable.
std::string default_prebuilt_dir();

// The runtime helper files embedded into ptc (name -> contents).
const std::map<std::string, std::string>& embedded_files();

}  // namespace ptc
