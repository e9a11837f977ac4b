// The CPU backend: C++ kernels with OpenMP and SIMD (lib/codegen/cpu), built by the host C++
// compiler for --cpu-arch (default: the host's own instruction set), linked with the CPU runtime
// units (GEMM, convolution, attention: lib/runtime/cpu).
#include <algorithm>

#include "../backends.h"
#include "ptc/cache.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {
namespace {

// oneDNN, found when ptc was built (CMakeLists.txt: PTC_ONEDNN): the channels-last convolutions'
// library (lib/runtime/cpu/ptc_runtime_onednn.cpp).
#ifdef PTC_ONEDNN_LIB_DIR
constexpr bool kHaveOneDnn = true;
constexpr const char* kOneDnnInclude = PTC_ONEDNN_INCLUDE_DIR;
constexpr const char* kOneDnnLibDir = PTC_ONEDNN_LIB_DIR;
#else
constexpr bool kHaveOneDnn = false;
constexpr const char* kOneDnnInclude = "";
constexpr const char* kOneDnnLibDir = "";
#endif
constexpr const char* kOneDnnUnit = "ptc_runtime_onednn.cpp";

// Where the compiler and the loader look anyway: no -I, -L or rpath for these.
bool system_dir(const std::string& d) {
  return d == "/usr/include" || d == "/usr/lib" || d == "/usr/lib64" || d == "/usr/lib/x86_64-linux-gnu" || d == "/usr/lib/aarch64-linux-gnu";
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  const char* description() const override { return "C++/OpenMP kernels built by the host C++ compiler"; }

  void check_options(const CompileOptions& o) const override {
    if (o.cuda_graphs) user_error("--cuda-graphs needs --device cuda");
    if (o.train && o.channels_last == 1) user_error("--channels-last is for inference libraries so far (not with --train)");
    if (o.channels_last == 1 && !kHaveOneDnn)
      user_error("--channels-last on the CPU needs oneDNN, and this ptc was built without it (install libdnnl-dev and rebuild ptc)");
  }
  // NHWC convolutions on oneDNN for a convolutional net: at least two convolutions, every one
  // ungrouped or depthwise (oneDNN's grouped NHWC kernels are untested here). A single
  // convolution (a ViT's patch embedding) gains nothing and costs compile time (vit_b_16: 7.9
  // against 6.1 s). Not in sanitized builds: oneDNN is not instrumented, and it brings GNU
  // OpenMP where ThreadSanitizer builds run LLVM's.
  bool channels_last_pays(const Graph& g, const CompileOptions& o) const override {
    if (!kHaveOneDnn || !o.build.sanitize.empty()) return false;
    const auto convs = std::count_if(g.nodes().begin(), g.nodes().end(), [](const auto& n) { return rewrite::is_forward_convolution(*n); });
    return convs >= 2 && ptc::channels_last_pays(g, /*exact=*/false);
  }
  // bf16 / fp16: autocast's rounding of the library operations' operands and results, computed
  // by the float32 kernels (library_ops_f32), except as half_native says.
  bool supports(Precision p) const override { return p == Precision::FP32 || p == Precision::BF16 || p == Precision::FP16; }
  // Channels-last convolutions and linear layers on oneDNN stay in bfloat16 (oneDNN's bf16
  // primitives where the CPU has them, else widened per call: ConvNhwcArgs::bf16_io,
  // MatmulArgs::bf16_io), so the activations between them are stored in bf16 and their
  // epilogues (bias, residual, activation) fuse into the primitive. The fused attention reads and
  // writes bf16 too (AMX tiles, else widened per call: AttentionArgs::bf16_io). Inference only.
  HalfLibraryOps half_native(const CompileOptions& o, bool channels_last) const override {
    HalfLibraryOps h;
    h.conv = channels_last && kHaveOneDnn;
    h.gemm = library_gemm(o) && !o.train;
    h.attention = !o.train;
    h.gemm_constant_weight = true;
    h.float16 = false;
    return h;
  }
  static bool library_gemm(const CompileOptions& o) { return kHaveOneDnn && o.build.sanitize.empty() && !o.no_library_gemm; }

  LowerOptions lower_options(bool channels_last, const CompileOptions& opts) const override {
    PTC_CHECK(!channels_last || kHaveOneDnn, "the CPU backend's channels-last convolutions need oneDNN");
    LowerOptions o;
    o.channels_last = channels_last;
    o.max_pool_grad_extern = true;
    // Linear layers on oneDNN's matmul (constant weights reordered once into its blocked layout:
    // 1.1-1.2x ptc's own GEMM at transformer shapes, docs/benchmarks.md). Not in sanitized
    // builds, for the reason channels_last_pays gives.
    o.library_gemm = library_gemm(opts);
    o.half_attention = !opts.train;  // (bf16 only: half_native leaves fp16 attention in float32)
    o.attention_layout_like_q = true;  // (the output projection then reads the attention's output)
    return o;
  }
  std::string kernel_library(const loop::Program& p, const sched::Kernel& k) const override {
    return cpu_kernel_on_onednn(p, k) ? "oneDNN" : "";
  }
  sched::ScheduleOptions schedule_options() const override {
    sched::ScheduleOptions o;
    o.extern_epilogues = sched::Epilogues::Any;  // the GEMM's and convolution's epilogues are generated code
    o.library_gemm_acts = cpu_onednn_gemm_acts();  // (bf16 linear layers take library epilogues only)
    return o;
  }

  LibrarySource generate(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights,
                         const CodegenOptions& opts, const std::string& part) const override {
    return generate_cpu(p, s, g, weights, part, opts);
  }
  TrainingStyle training_style() const override { return {"model.cpp", "ptc_train_cpu.h", false}; }

  std::string compile_command(const std::string& unit, const BuildOptions& opts) const override {
    const std::string inc = unit == kOneDnnUnit && !system_dir(kOneDnnInclude) ? std::string(" -I") + kOneDnnInclude : "";
    return host_compile_command(unit, opts) + inc;
  }
  std::string compiler_name(const std::string&) const override { return "the host compiler"; }
  std::string unit_identity(const std::string&, const BuildOptions& opts) const override { return toolchain_identity(opts); }
  std::vector<std::string> link_commands(const std::string& objects, const std::string& out, const std::string& soname,
                                         const std::vector<std::string>& units, bool external_weights,
                                         const BuildOptions& opts) const override {
    // The host compiler's default linker (GNU ld) takes about a second per 250 MB of embedded
    // weights; lld or gold link the same objects 3-6x faster. Where the faster one fails, the
    // default links.
    std::string libs = external_weights ? " -ldl" : "";
    if (std::find(units.begin(), units.end(), kOneDnnUnit) != units.end()) {
      const std::string dir = kOneDnnLibDir;
      libs += system_dir(dir) ? " -ldnnl" : " -L" + dir + " -Wl,-rpath," + dir + " -ldnnl";
    }
    const std::string link = " -shared -fopenmp -Wl,-soname," + soname + " -o " + out + objects + libs;
    const std::string& fast = fast_linker(opts.cxx);
    std::vector<std::string> cmds;
    if (!fast.empty()) cmds.push_back(opts.cxx + sanitize_flags(opts) + " " + fast + link);
    cmds.push_back(opts.cxx + sanitize_flags(opts) + link);
    return cmds;
  }
  std::vector<std::string> runtime_units() const override {
    std::vector<std::string> units = embedded_units("ptc_runtime", ".cpp");
    if (!kHaveOneDnn) units.erase(std::remove(units.begin(), units.end(), kOneDnnUnit), units.end());
    return units;
  }

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
