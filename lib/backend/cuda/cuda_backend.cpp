// The CUDA backend: fused CUDA kernels (lib/codegen/cuda), cuBLASLt GEMMs and ptc's 3xTF32
// kernels, cuDNN convolutions and ptc's flash-style attention (lib/runtime/cuda), built by nvcc
// for --cuda-arch; no GPU is needed to compile.
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "../backends.h"
#include "ptc/cache.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/passes.h"
#include "runtime/cuda/ptc_cuda_limits.h"

namespace ptc {
namespace fs = std::filesystem;
namespace {

bool is_cuda_unit(const std::string& u) { return u.size() > 3 && u.compare(u.size() - 3, 3, ".cu") == 0; }

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

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  const char* description() const override {
    return "CUDA kernels, cuBLASLt GEMMs, cuDNN convolutions, built with nvcc";
  }

  void check_options(const CompileOptions& o) const override {
    if (o.train && o.channels_last == 1) user_error("--channels-last is for inference libraries so far (not with --train)");
    if (o.build.profile) user_error("--profile is not supported for --device cuda yet (use Nsight Compute)");
    if (!o.build.sanitize.empty()) user_error("--sanitize is for --device cpu; check CUDA libraries with compute-sanitizer instead");
  }
  bool supports(Precision) const override { return true; }
  // cuBLASLt's and cuDNN's half-precision tensor-core kernels, and ptc's half attention
  // (ptc_cuda_attention.cu: mma.sync m16n8k16, compute capability 8.0 or newer; for older
  // targets attention computes in float32).
  HalfLibraryOps half_native(const CompileOptions& o, bool) const override {
    HalfLibraryOps h;
    h.gemm = h.conv = true;
    const std::string& arch = o.build.cuda_arch;
    const std::string digits = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : arch;
    h.attention = !digits.empty() && std::isdigit(static_cast<unsigned char>(digits[0])) && std::atoi(digits.c_str()) >= 80;
    return h;
  }
  // cuBLASLt's fast kernels want 16-byte aligned rows (8 half-precision elements).
  int64_t linear_rows_multiple() const override { return 8; }
  bool depthwise_weights_channels_fastest() const override { return true; }
  void resolve_tools(BuildOptions& build) const override { build.nvcc = find_nvcc(build.nvcc); }

  // cuDNN's TF32 tensor-core kernels are NHWC ones; in exact fp32 only MobileNet-style nets pay
  // (passes.h: channels_last_pays).
  bool channels_last_pays(const Graph& g, const CompileOptions& o) const override {
    return ptc::channels_last_pays(g, math_modes(o.precision).conv == MathMode::FP32);
  }
  LowerOptions lower_options(bool channels_last, const CompileOptions&) const override {
    LowerOptions o;
    o.max_fused_head = ptc_cuda::kAttentionMaxHead;
    o.half_attention = true;
    o.cudnn_conv = true;
    o.attention_heads_inner = true;
    o.channels_last = channels_last;
    o.arg_reductions = false;  // the CUDA reductions have no (value, index) pairs
    return o;
  }
  sched::ScheduleOptions schedule_options() const override {
    sched::ScheduleOptions o;
    o.extern_epilogues = sched::Epilogues::Library;  // cuBLASLt / cuDNN run bias / residual / ReLU
    // and cuBLASLt the tanh form of GELU (GPT-2's MLP); not the erf form, which it has not
    o.library_gemm_acts = kCudaGemmActs;
    return o;
  }

  LibrarySource generate(const loop::Program& p, const sched::Schedule& s, const Graph& g, const WeightLayout& weights,
                         const CodegenOptions& opts, const std::string& part) const override {
    return generate_cuda(p, s, g, weights, opts, part);
  }
  TrainingStyle training_style() const override { return {"model.cu", "ptc_train_cuda.cuh", true}; }

  std::string compile_command(const std::string& u, const BuildOptions& opts) const override {
    if (!is_cuda_unit(u)) return host_compile_command(u, opts);  // the manifest
    // SASS for the chosen GPU plus its PTX, which newer GPUs' drivers compile at load.
    const std::string arch = opts.cuda_arch.rfind("sm_", 0) == 0 ? opts.cuda_arch.substr(3) : opts.cuda_arch;
    // The 3xTF32 GEMM's wgmma kernels exist only in an sm_90a image (Hopper's arch-specific
    // instructions): for sm_90 that unit's SASS is sm_90a (which H100 / H200 load), with
    // compute_90 PTX for newer GPUs, whose image leaves them out (ptc_cuda_gemm_tc.cu probes).
    const std::string sass = arch == "90" && u == "ptc_cuda_gemm_tc.cu" ? "90a" : arch;
    const std::string gencode = sass == arch ? " -gencode arch=compute_" + arch + ",code=[sm_" + arch + ",compute_" + arch + "]"
                                             : " -gencode arch=compute_" + sass + ",code=sm_" + sass + " -gencode arch=compute_" + arch +
                                                   ",code=compute_" + arch;
    // nvcc's -O is the host code's level only (device code is optimized regardless), and a
    // generated .cu's host code is glue and kernel launches.
    return opts.nvcc + " -std=c++17" + gencode + " --expt-relaxed-constexpr -Xcompiler -fPIC,-fvisibility=hidden -w" +
           (is_glue_unit(u) ? " -O1" : " -O3");
  }
  std::string compiler_name(const std::string& u) const override { return is_cuda_unit(u) ? "nvcc" : "the host compiler"; }
  std::string unit_identity(const std::string& u, const BuildOptions& opts) const override {
    if (is_cuda_unit(u)) return tool_identity(opts.nvcc);
    return tool_identity(opts.cxx) + (opts.cpu_arch == "native" ? host_cpu_identity() : "");
  }
  std::vector<std::string> link_commands(const std::string& objects, const std::string& out, const std::string& soname,
                                         const std::vector<std::string>& units, bool external_weights,
                                         const BuildOptions& opts) const override {
    // nvcc links the CUDA runtime statically (libcudart_static) by default.
    bool cudnn = false;
    for (const auto& u : units) cudnn = cudnn || u == "ptc_cuda_cudnn.cu";
    return {opts.nvcc + " -shared -Xlinker -soname=" + soname + " -o " + out + objects + " -lcublasLt" + (cudnn ? " -lcudnn" : "") +
            (external_weights ? " -ldl" : "")};
  }
  std::string explain_failure(const std::string& unit, const std::string& output) const override {
    if (unit == "ptc_cuda_cudnn.cu" && output.find("cudnn.h") != std::string::npos)
      return "this model's convolutions run on cuDNN, but nvcc cannot find cudnn.h: install cuDNN 9 where nvcc looks "
             "(/usr/local/cuda/include) or name its include folder in CPATH:\n" + output.substr(0, 2000);
    if (unit.empty() && output.find("-lcudnn") != std::string::npos)
      return "this model's convolutions run on cuDNN, but the linker cannot find libcudnn.so: install cuDNN 9 where nvcc looks "
             "(/usr/local/cuda/lib64) or name its library folder in LIBRARY_PATH:\n" + output.substr(0, 2000);
    return "";
  }
  std::vector<std::string> runtime_units() const override { return embedded_units("ptc_cuda_", ".cu"); }

  std::string arch(const BuildOptions& opts) const override { return opts.cuda_arch; }
  std::string toolchain_identity(const BuildOptions& opts) const override {
    return tool_identity(opts.cxx) + tool_identity(opts.nvcc);
  }
};

}  // namespace

const Backend& cuda_backend() {
  static const CudaBackend backend;
  return backend;
}

}  // namespace ptc
