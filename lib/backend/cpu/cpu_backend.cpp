// The CPU backend: C++ kernels with OpenMP and SIMD (lib/codegen/cpu), built by the host C++
// compiler for --cpu-arch (default: the host's own instruction set), linked with the CPU runtime
// units (GEMM, convolution, attention: lib/runtime/cpu).
#include "../backends.h"
#include "ptc/cache.h"
#include "ptc/compile.h"
#include "ptc/error.h"

namespace ptc {
namespace {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  const char* description() const override { return "C++/OpenMP kernels built by the host C++ compiler"; }

  void check_options(const CompileOptions& o) const override {
    if (o.cuda_graphs) user_error("--cuda-graphs needs --device cuda");
    if (o.channels_last == 1) user_error("--channels-last needs --device cuda (cuDNN's NHWC convolutions)");
  }
  // bf16 / fp16: autocast's rounding of the library operations' operands and results, computed
  // by the float32 kernels (library_ops_f32).
  bool supports(Precision p) const override { return p == Precision::FP32 || p == Precision::BF16 || p == Precision::FP16; }

  LowerOptions lower_options(bool channels_last) const override {
    PTC_CHECK(!channels_last, "the CPU backend has no channels-last convolutions");
    LowerOptions o;
    o.max_pool_grad_extern = true;
    return o;
  }
  sched::ScheduleOptions schedule_options() const override {
    sched::ScheduleOptions o;
    o.extern_epilogues = sched::Epilogues::Any;  // the GEMM's and convolution's epilogues are generated code
    return o;
  }

  LibrarySource generate(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights,
                         const CodegenOptions&, const std::string& part) const override {
    return generate_cpu(p, s, g, weights, part);
  }
  TrainingStyle training_style() const override { return {"model.cpp", "ptc_train_cpu.h", false}; }

  std::string compile_command(const std::string& unit, const BuildOptions& opts) const override {
    return host_compile_command(unit, opts);
  }
  std::string compiler_name(const std::string&) const override { return "the host compiler"; }
  std::string unit_identity(const std::string&, const BuildOptions& opts) const override { return toolchain_identity(opts); }
  std::vector<std::string> link_commands(const std::string& objects, const std::string& out, const std::string& soname,
                                         const std::vector<std::string>&, bool external_weights,
                                         const BuildOptions& opts) const override {
    // The host compiler's default linker (GNU ld) takes about a second per 250 MB of embedded
    // weights; lld or gold link the same objects 3-6x faster. Where the faster one fails, the
    // default links.
    const std::string link = " -shared -fopenmp -Wl,-soname," + soname + " -o " + out + objects + (external_weights ? " -ldl" : "");
    const std::string& fast = fast_linker(opts.cxx);
    std::vector<std::string> cmds;
    if (!fast.empty()) cmds.push_back(opts.cxx + sanitize_flags(opts) + " " + fast + link);
    cmds.push_back(opts.cxx + sanitize_flags(opts) + link);
    return cmds;
  }
  std::vector<std::string> runtime_units() const override { return embedded_units("ptc_runtime", ".cpp"); }

  std::string arch(const BuildOptions& opts) const override { return opts.cpu_arch; }
  std::string toolchain_identity(const BuildOptions& opts) const override {
    return tool_identity(opts.cxx) + (opts.cpu_arch == "native" ? host_cpu_identity() : "");
  }
  void add_manifest_flags(const BuildOptions& opts, nlohmann::ordered_json& flags) const override {
    if (opts.cpu_arch != "native") return;
    const std::string cpu = host_cpu_identity().substr(0, host_cpu_identity().find('\n'));
    flags["host_cpu"] = cpu.substr(cpu.find(':') == std::string::npos ? 0 : cpu.find(':') + 2);
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace ptc
