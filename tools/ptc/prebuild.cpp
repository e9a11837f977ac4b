// `ptc prebuild`: compile the runtime helpers once, for every later `ptc compile` to link.
#include <spdlog/spdlog.h>

#include "commands.h"
#include "ptc/backend.h"
#include "ptc/build.h"

namespace ptc::cli {

std::function<int()> add_prebuild(CLI::App& app) {
  struct Opts {
    BuildOptions build;
    std::string device = "cpu";
    std::string dir;
    bool best_effort = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "prebuild",
      "Compile ptc's runtime helpers (GEMM, convolution, attention; with --device cuda the cuBLASLt / cuDNN wrappers) "
      "once, so that `ptc compile` links them instead of building them for every model (the build runs it for the "
      "default options; run it again for other --cxx / --cpu-arch / --cuda-arch values)");
  cmd->add_option("--dir", o->dir, "Where the objects go (default: prebuilt/ beside the ptc executable)");
  std::vector<std::string> devices;
  for (const Backend* b : backends()) devices.push_back(b->name());
  cmd->add_option("--device", o->device, "The target whose runtime units to build (default: cpu)")->check(CLI::IsMember(devices));
  cmd->add_option("--cpu-arch", o->build.cpu_arch, "The -march of the objects (default: native)");
  cmd->add_option("--cxx", o->build.cxx, "The host C++ compiler (default: c++)");
  cmd->add_option("--cuda-arch", o->build.cuda_arch, "cuda: the GPU architecture (default: sm_90)");
  cmd->add_option("--nvcc", o->build.nvcc, "cuda: the CUDA compiler (default: nvcc)");
  cmd->add_flag("--best-effort", o->best_effort, "Exit 0 even when a unit fails to build (it is then built per model)");
  cmd->add_option("-j,--jobs", o->build.jobs, "Units compiled at once (default: one per hardware thread)")->check(CLI::Range(1, 1024));
  return [o]() {
    const std::string dir = o->dir.empty() ? default_prebuilt_dir() : o->dir;
    const Backend& backend = backend_named(o->device);
    backend.resolve_tools(o->build);
    o->build.backend = &backend;
    int failed = prebuild_runtime(o->build, dir, backend.runtime_units());
    return failed && !o->best_effort ? 1 : 0;
  };
}

}  // namespace ptc::cli
