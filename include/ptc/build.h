// Build: writes the generated sources, the runtime helpers and the weights blob into a folder
// and runs the host C++ compiler to link one shared library.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ptc/codegen.h"

namespace ptc {

class Backend;

struct BuildOptions {
  std::string cxx = "c++";         // host compiler
  std::string cpu_arch = "native"; // -march value
  std::string work_dir;            // where sources go (kept); empty: a temporary folder, removed
  bool profile = false;            // time each kernel; the library prints the table at ptc_close
  int jobs = 0;                    // translation units compiled at once (0: one per hardware thread)
  const Backend* backend = nullptr; // the target (ptc/backend.h); required by build_library and prebuild_runtime
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
// The embedded files whose names start with `prefix` and end with `suffix` (a backend's runtime
// units: ptc_runtime*.cpp, ptc_cuda_*.cu).
std::vector<std::string> embedded_units(const std::string& prefix, const std::string& suffix);

// Helpers for the backends' build commands (lib/backend).
// Whether `unit` is a library's glue (model.cpp, fwd_model.cu, ...): tables, input checks and the
// run sequence, where no loop is hot; it compiles at -O1.
bool is_glue_unit(const std::string& unit);
// The host C++ compiler's command (without -c and file names) for one translation unit.
std::string host_compile_command(const std::string& unit, const BuildOptions& opts);
// " -fsanitize=..." for --sanitize (empty without).
std::string sanitize_flags(const BuildOptions& opts);
// -fuse-ld=lld or -fuse-ld=gold where `cxx` can link with that linker ("" otherwise).
const std::string& fast_linker(const std::string& cxx);
// prebuilt/ beside the running ptc executable.
std::string default_prebuilt_dir();

// The runtime helper files embedded into ptc (name -> contents).
const std::map<std::string, std::string>& embedded_files();

}  // namespace ptc
