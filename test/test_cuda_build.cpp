// The CUDA backend where no GPU is: every fixture compiles with --device cuda (nvcc), and the
// library has the C ABI, links the CUDA runtime statically and no libtorch / Python. The numbers
// are checked on a GPU machine by scripts/cuda_check.py (see docs/cuda.md).
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

using namespace ptc;

namespace {

std::string shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  pclose(p);
  return out;
}

}  // namespace

TEST_CASE("every fixture compiles for CUDA, and the library exports the C ABI and links no libtorch or libcudart.so", "[cuda]") {
  std::vector<std::string> models{"mlp.pt2",     "mlp.core.pt2",      "mlp_dyn.pt2",       "small_cnn.pt2",     "tiny_tfm.pt2",
                                  "tiny_tfm.core.pt2", "tfm_dyn.pt2", "mbv2_dyn.pt2", "mlp_dyn_bf16.pt2", "small_cnn_f16.pt2", "tfm_dyn_bf16.pt2"};
#ifdef PTC_TEST_TORCHSCRIPT
  models.push_back("small_cnn.pt");
#endif
  for (const std::string& name : models) {
    INFO(name);
    std::string so = test::temp_dir() + "/cuda_" + name + ".so";
    auto r = test::run_ptc("compile -q --device cuda " + test::fixture(name) + " -o " + so);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::string syms = shell("nm -D --defined-only " + so);
    for (const char* fn : {"ptc_open", "ptc_run", "ptc_run_async", "ptc_device", "ptc_output_shape", "ptc_last_error"})
      CHECK(syms.find(fn) != std::string::npos);
    CHECK(syms.find("ptc_model_weights") == std::string::npos);  // the blob is not exported
    std::string deps = shell("ldd " + so);
    INFO(deps);
    CHECK(deps.find("libcublasLt") != std::string::npos);
    // cuDNN only where there are convolutions (small_cnn, mbv2_dyn).
    const bool convs = name.rfind("small_cnn", 0) == 0 || name.rfind("mbv2", 0) == 0;
    CHECK((deps.find("libcudnn") != std::string::npos) == convs);
    CHECK(deps.find("libcudart.so") == std::string::npos);  // the CUDA runtime is linked statically
    CHECK(deps.find("torch") == std::string::npos);
    CHECK(deps.find("libc10") == std::string::npos);
    CHECK(deps.find("python") == std::string::npos);
    // Exact fp32 lays out channels-last only the MobileNet-style net (depthwise and 1x1 layers):
    // cuDNN's exact NHWC kernels are slower than its NCHW ones for the rest.
    const bool cl = test::run_ptc("inspect --json " + so).output.find("\"channels_last\": true") != std::string::npos;
    CHECK(cl == (name == "mbv2_dyn.pt2"));
  }
}

TEST_CASE("CUDA training libraries (--train --device cuda) compile and export the training ABI", "[cuda]") {
  // small_cnn: cuDNN convolutions and their gradients, max-pool backward; index_ops: embedding's
  // scatter_add.
  for (const std::string name : {"small_cnn.pt2", "index_ops.core.pt2"}) {
    INFO(name);
    std::string so = test::temp_dir() + "/cuda_train_" + name + ".so";
    auto r = test::run_ptc("compile -q --device cuda --train " + test::fixture(name) + " -o " + so);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::string syms = shell("nm -D --defined-only " + so);
    for (const char* fn : {"ptc_forward_train", "ptc_backward", "ptc_sgd_step", "ptc_adamw_step", "ptc_param_data", "ptc_buffer_data",
                           "ptc_manual_seed", "ptc_run", "ptc_device"})
      CHECK(syms.find(fn) != std::string::npos);
    std::string deps = shell("ldd " + so);
    INFO(deps);
    CHECK(deps.find("libcudart.so") == std::string::npos);
    CHECK(deps.find("torch") == std::string::npos);
    CHECK((deps.find("libcudnn") != std::string::npos) == (name == "small_cnn.pt2"));
  }
  // Training parts that replay CUDA graphs compile too. Their contexts keep cuDNN's transform
  // algorithms (FFT, non-fused Winograd) out: exact fp32 and not an inference library.
  const std::string src = test::temp_dir() + "/cuda_train_graphs_src";
  auto g = test::run_ptc("compile -q --no-cache --device cuda --train --cuda-graphs --emit-dir " + src + " " + test::fixture("small_cnn.pt2") +
                         " -o " + test::temp_dir() + "/cuda_train_graphs.so");
  INFO(g.output);
  CHECK(g.exit_code == 0);
  for (const char* part : {"/fwd_model.cu", "/bwd_model.cu"}) {
    INFO(part);
    CHECK(test::read_file(src + part).find("model->pool, ptc_rt::MathModes{ptc_rt::MathMode::FP32, ptc_rt::MathMode::FP32, ptc_rt::MathMode::FP32}, false};") != std::string::npos);
  }
}

TEST_CASE("CUDA builds of a model with convolutions name cuDNN when it is missing", "[cuda]") {
  // nvcc stand-ins: one without cudnn.h (the cuDNN runtime unit fails as nvcc would), one
  // whose link finds no libcudnn.so; everything else goes to the real nvcc.
  namespace fs = std::filesystem;
  const std::string dir = test::temp_dir();
  std::string nvcc = shell("command -v nvcc");
  while (!nvcc.empty() && (nvcc.back() == '\n' || nvcc.back() == ' ')) nvcc.pop_back();
  if (nvcc.empty()) nvcc = "/usr/local/cuda/bin/nvcc";
  auto stand_in = [&](const std::string& name, const std::string& pattern, const std::string& message) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << "#!/bin/sh\ncase \"$*\" in\n  " << pattern << ") echo \"" << message
                        << "\" >&2; exit 1;;\nesac\nexec " << nvcc << " \"$@\"\n";
    fs::permissions(path, fs::perms::owner_all);
    return path;
  };
  const std::string no_header = stand_in("nvcc_no_cudnn_h", "*ptc_cuda_cudnn.cu*",
                                         "ptc_cuda_cudnn.cu:3:10: fatal error: cudnn.h: No such file or directory");
  const std::string no_lib = stand_in("nvcc_no_libcudnn", "*-lcudnn*", "/usr/bin/ld: cannot find -lcudnn: No such file or directory");
  const std::string so = dir + "/cuda_no_cudnn.so";
  auto r = test::run_ptc("compile -q --no-cache --device cuda --nvcc " + no_header + " " + test::fixture("small_cnn.pt2") + " -o " + so);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("this model's convolutions run on cuDNN, but nvcc cannot find cudnn.h") != std::string::npos);
  auto l = test::run_ptc("compile -q --no-cache --device cuda --nvcc " + no_lib + " " + test::fixture("small_cnn.pt2") + " -o " + so);
  INFO(l.output);
  CHECK(l.exit_code == 1);
  CHECK(l.output.find("the linker cannot find libcudnn.so") != std::string::npos);
  // With the real nvcc, the graph-replaying build of the same model compiles too.
  auto g = test::run_ptc("compile -q --no-cache --device cuda --cuda-graphs " + test::fixture("small_cnn.pt2") + " -o " + dir + "/cuda_graphs_cnn.so");
  INFO(g.output);
  CHECK(g.exit_code == 0);
  // --tf32: the library's context lets cuBLASLt and cuDNN use TF32, and its manifest says so.
  const std::string tf32_dir = dir + "/cuda_tf32_src";
  auto t = test::run_ptc("compile -q --no-cache --device cuda --tf32 --emit-dir " + tf32_dir + " " + test::fixture("small_cnn.pt2") +
                         " -o " + dir + "/cuda_tf32_cnn.so");
  INFO(t.output);
  REQUIRE(t.exit_code == 0);
  CHECK(test::read_file(tf32_dir + "/model.cu").find("model->pool, ptc_rt::MathModes{ptc_rt::MathMode::TF32, ptc_rt::MathMode::TF32, ptc_rt::MathMode::TF32}, true};") != std::string::npos);
  const std::string tf32_manifest = test::run_ptc("inspect --json " + dir + "/cuda_tf32_cnn.so").output;
  CHECK(tf32_manifest.find("\"precision\": \"tf32\"") != std::string::npos);
  // ... and lays its (ungrouped) convolutions out NHWC, unless told not to
  CHECK(tf32_manifest.find("\"channels_last\": true") != std::string::npos);
  auto nc = test::run_ptc("compile -q --no-cache --device cuda --tf32 --no-channels-last " + test::fixture("small_cnn.pt2") + " -o " + dir +
                          "/cuda_tf32_nchw.so");
  INFO(nc.output);
  REQUIRE(nc.exit_code == 0);
  CHECK(test::run_ptc("inspect --json " + dir + "/cuda_tf32_nchw.so").output.find("\"channels_last\": false") != std::string::npos);
  // --tf32 (and bf16 / fp16) attention runs on TF32 tensor cores: the launcher hands the context's flag on (the
  // runtime's mma.sync kernel compiles in every CUDA library).
  const std::string tfm_dir = dir + "/cuda_tf32_tfm_src";
  auto tt = test::run_ptc("compile -q --no-cache --device cuda --tf32 --emit-dir " + tfm_dir + " " + test::fixture("tiny_tfm.pt2") + " -o " +
                          dir + "/cuda_tf32_tfm.so");
  INFO(tt.output);
  REQUIRE(tt.exit_code == 0);
  CHECK(test::read_file(tfm_dir + "/model.cu").find("a.tf32 = ctx.math.attention != ptc_rt::MathMode::FP32;") != std::string::npos);
  // A model without convolutions does not need cuDNN at all.
  auto m = test::run_ptc("compile -q --no-cache --device cuda --nvcc " + no_lib + " " + test::fixture("mlp.pt2") + " -o " + dir + "/cuda_mlp_no_cudnn.so");
  INFO(m.output);
  CHECK(m.exit_code == 0);
}

TEST_CASE("CUDA libraries build the 3xTF32 GEMM unit with an sm_90a image (wgmma) for sm_90 only", "[cuda]") {
  const std::string so = test::temp_dir() + "/cuda_tc_mlp.so";
  auto building = [](const std::string& log, const std::string& unit) {  // the nvcc command of `unit`
    for (size_t at = log.find("building: "); at != std::string::npos; at = log.find("building: ", at + 1)) {
      const std::string line = log.substr(at, log.find('\n', at) - at);
      if (line.find(" -c " + unit) != std::string::npos) return line;
    }
    return std::string();
  };
  auto r = test::run_ptc_env("PTC_PREBUILT_DIR= ", "compile -v --no-cache --device cuda " + test::fixture("mlp.pt2") + " -o " + so);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string tc = building(r.output, "ptc_cuda_gemm_tc.cu"), rt = building(r.output, "ptc_cuda_runtime.cu");
  REQUIRE(!tc.empty());
  REQUIRE(!rt.empty());
  CHECK(tc.find("code=sm_90a") != std::string::npos);
  CHECK(tc.find("code=compute_90") != std::string::npos);  // PTX for newer GPUs
  CHECK(rt.find("sm_90a") == std::string::npos);
  auto a = test::run_ptc_env("PTC_PREBUILT_DIR= ", "compile -v --no-cache --device cuda --cuda-arch sm_80 " + test::fixture("mlp.pt2") + " -o " + so);
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const std::string tc80 = building(a.output, "ptc_cuda_gemm_tc.cu");
  REQUIRE(!tc80.empty());
  CHECK(tc80.find("sm_90a") == std::string::npos);
  CHECK(tc80.find("code=[sm_80,compute_80]") != std::string::npos);
  // The kernels' benchmark against cuBLAS (run on a GPU machine) builds as docs/cuda.md says.
  std::string nvcc = shell("command -v nvcc");
  while (!nvcc.empty() && (nvcc.back() == '\n' || nvcc.back() == ' ')) nvcc.pop_back();
  if (nvcc.empty()) nvcc = "/usr/local/cuda/bin/nvcc";
  const std::string root = test::source_dir(), bench = test::temp_dir() + "/cuda_gemm_bench";
  const std::string out = shell(nvcc + " -O1 -std=c++17 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I" + root +
                                "/lib/runtime/cuda -I" + root + "/lib/runtime/common " + root + "/scripts/cuda_gemm_bench.cu " + root +
                                "/lib/runtime/cuda/ptc_cuda_gemm_tc.cu -lcublas -o " + bench + " && echo BUILT");
  INFO(out);
  CHECK(out.find("BUILT") != std::string::npos);
}

TEST_CASE("CUDA builds: a bad nvcc path or --profile gets one clear error", "[cuda]") {
  std::string so = test::temp_dir() + "/cuda_bad.so";
  auto r = test::run_ptc("compile -q --device cuda --nvcc /nonexistent/nvcc " + test::fixture("mlp.pt2") + " -o " + so);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("nvcc failed on the generated code") != std::string::npos);
  auto p = test::run_ptc("compile -q --device cuda --profile " + test::fixture("mlp.pt2") + " -o " + so);
  CHECK(p.exit_code == 1);
  CHECK(p.output.find("--profile is not supported for --device cuda") != std::string::npos);
  auto t = test::run_ptc("compile -q " + test::fixture("mlp.pt2") + " -o " + so + " --tf32");
  CHECK(t.exit_code == 1);
  CHECK(t.output.find("--precision tf32 is not available for --device cpu (it needs --device cuda)") != std::string::npos);
  auto tc = test::run_ptc("compile -q " + test::fixture("small_cnn.pt2") + " -o " + so + " --tf32-conv");
  CHECK(tc.exit_code == 1);
  CHECK(tc.output.find("--precision tf32-conv is not available for --device cpu (it needs --device cuda)") != std::string::npos);
  auto c = test::run_ptc("compile -q --train " + test::fixture("small_cnn.pt2") + " -o " + so + " --channels-last");
  CHECK(c.exit_code == 1);
  CHECK(c.output.find("--channels-last is for inference libraries so far") != std::string::npos);
  auto ct = test::run_ptc("compile -q --device cuda --train --channels-last " + test::fixture("small_cnn.pt2") + " -o " + so);
  CHECK(ct.exit_code == 1);
  CHECK(ct.output.find("--channels-last is for inference libraries so far") != std::string::npos);
}

TEST_CASE("the --precision flag: one setting for every backend; unsupported precisions and contradicting aliases get one sentence", "[cli]") {
  const std::string so = test::temp_dir() + "/precision_bad.so";
  for (const char* p : {"tf32", "tf32-conv"}) {  // TF32 is a tensor-core format: CUDA only
    auto r = test::run_ptc(std::string("compile -q --device cpu --precision ") + p + " " + test::fixture("mlp.pt2") + " -o " + so);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find(std::string("--precision ") + p + " is not available for --device cpu (it needs --device cuda)") != std::string::npos);
  }
  auto c = test::run_ptc("compile -q --device cuda --precision tf32 --tf32-conv " + test::fixture("mlp.pt2") + " -o " + so);
  CHECK(c.exit_code == 1);
  CHECK(c.output.find("--tf32-conv means --precision tf32-conv, which contradicts --precision tf32") != std::string::npos);
  auto u = test::run_ptc("compile -q --precision tf64 " + test::fixture("mlp.pt2") + " -o " + so);
  CHECK(u.exit_code == 1);
  CHECK(u.output.find("--precision") != std::string::npos);
  CHECK(!std::filesystem::exists(so));
}

TEST_CASE("CUDA --precision bf16 / fp16: GEMMs and convolutions in half precision compile (cuBLASLt, cuDNN), also for --train",
          "[cuda][half]") {
  for (const char* p : {"bf16", "fp16"})
    for (const char* name : {"mlp_dyn.pt2", "small_cnn.pt2", "tfm_dyn.pt2", "mbv2_dyn.pt2", "tfm_dyn_bf16.pt2"}) {
      INFO(name << " --precision " << p);
      const std::string so = test::temp_dir() + "/cuda_" + p + "_" + name + ".so";
      auto r = test::run_ptc(std::string("compile -q --device cuda --precision ") + p + " " + test::fixture(name) + " -o " + so +
                             " --dump-loops -");
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      // A model exported in bfloat16 computes in bfloat16 whatever the flag; an fp32 one in `p`.
      const std::string half = std::string(name).find("bf16") != std::string::npos || std::string(p) == "bf16" ? "bf16" : "f16";
      // every GEMM / convolution / attention extern writes a half-precision buffer
      std::istringstream lines(r.output);
      std::map<std::string, std::string> dtype_of;  // buffer -> dtype, from the buffer lines
      int externs = 0, attention = 0;
      for (std::string line; std::getline(lines, line);) {
        std::smatch m;
        if (std::regex_search(line, m, std::regex("^(?:temp|output|weight|input) (\\w+): (\\w+)\\[")))
          dtype_of[m[1]] = m[2];
        if (std::regex_search(line, m, std::regex("^(\\w+) = (gemm|conv|attention)\\("))) {
          ++externs;
          attention += m[2] == "attention";
          CHECK(dtype_of[m[1]] == half);
        }
      }
      CHECK(externs > 0);
      if (std::string(name).find("tfm") != std::string::npos) CHECK(attention > 0);  // ptc_cuda_attention.cu's half kernels
      std::string syms = shell("nm -D --defined-only " + so);
      CHECK(syms.find("ptc_run") != std::string::npos);
    }
  // Pointwise kernels over half-precision buffers have a vectorized version that reads and
  // writes them 4 elements (8 bytes) at a time (ptc_cuda::load4 / store4), and nvcc builds it.
  // A half-precision convolution's bias and ReLU run in its cuDNN call (the schedule sees
  // through the conversions between float32 and the half type).
  struct Emitted {
    std::string name, flags, type;
  };
  for (const Emitted& e : {Emitted{"tfm_dyn.pt2", "--precision fp16", "ptc_rt::half"}, Emitted{"mlp_dyn_bf16.pt2", "", "ptc_rt::bfloat16"},
                           Emitted{"small_cnn_f16.pt2", "", "ptc_rt::half"}}) {
    INFO(e.name << " " << e.flags);
    const std::string dir = test::temp_dir() + "/cuda_vec_" + e.name;
    auto r = test::run_ptc("compile -q --device cuda --no-cache " + e.flags + " " + test::fixture(e.name) + " -o " + dir + ".so --emit-dir " + dir);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const std::string src = test::read_file(dir + "/model.cu");
    if (e.name == "small_cnn_f16.pt2") {
      CHECK(src.find("a.type = ptc_cuda::kF16;") != std::string::npos);
      CHECK(src.find("a.bias = ") != std::string::npos);
      CHECK(src.find("a.act = ptc_cuda::kActRelu;") != std::string::npos);
      continue;
    }
    bool half_vector = false;
    const std::regex half_load("load4\\(b(\\d+) ");
    for (auto it = std::sregex_iterator(src.begin(), src.end(), half_load); it != std::sregex_iterator(); ++it) {
      const std::string b = "b" + (*it)[1].str();
      for (const char* end : {",", ")"})
        for (const char* qual : {"* __restrict__ ", "* "}) half_vector = half_vector || src.find(e.type + qual + b + end) != std::string::npos;
    }
    CHECK(half_vector);
  }
  // Mixed-precision training: bf16 GEMMs and convolutions with their gradients (cuDNN's
  // backward-data and backward-filter in bf16), fp32 master weights.
  for (const char* p : {"bf16", "fp16"})
    for (const char* name : {"mlp.pt2", "small_cnn.pt2"}) {
      INFO(name << " --train --precision " << p);
      const std::string so = test::temp_dir() + "/cuda_train_" + p + "_" + name + ".so";
      auto r = test::run_ptc(std::string("compile -q --device cuda --train --precision ") + p + " " + test::fixture(name) + " -o " + so);
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      const std::string syms = shell("nm -D --defined-only " + so);
      CHECK(syms.find("ptc_backward") != std::string::npos);
      CHECK(syms.find("ptc_unscale_grads") != std::string::npos);  // loss scaling
    }
}

TEST_CASE("CUDA --channels-last: NHWC convolutions with KRSC filters compile, and the manifest says so", "[cuda]") {
  const std::string dir = test::temp_dir(), src = dir + "/cuda_cl_src", so = dir + "/cuda_cl_cnn.so";
  auto r = test::run_ptc("compile -q --no-cache --device cuda --channels-last --emit-dir " + src + " " + test::fixture("small_cnn.pt2") + " -o " + so);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const std::string kernels = test::read_file(src + "/model.cu");
  // both convolutions: a KRSC filter and NHWC output strides ([N, O, OH, OW] as [N, OH, OW, O])
  size_t n = 0;
  for (size_t at = kernels.find("a.w_nhwc = 1;"); at != std::string::npos; at = kernels.find("a.w_nhwc = 1;", at + 1)) ++n;
  CHECK(n == 2);
  CHECK(test::run_ptc("inspect --json " + so).output.find("\"channels_last\": true") != std::string::npos);
  // A MobileNetV2-style net is channels-last by default with --tf32 (its grouped convolutions are
  // depthwise): only the 3x3 stem runs in cuDNN; the 1x1 convolutions are cuBLASLt GEMMs.
  const std::string msrc = dir + "/cuda_cl_mbv2_src", mso = dir + "/cuda_cl_mbv2.so";
  auto m = test::run_ptc("compile -q --no-cache --device cuda --tf32 --emit-dir " + msrc + " " + test::fixture("mbv2_dyn.pt2") + " -o " + mso);
  INFO(m.output);
  REQUIRE(m.exit_code == 0);
  CHECK(test::run_ptc("inspect --json " + mso).output.find("\"channels_last\": true") != std::string::npos);
  const std::string mk = test::read_file(msrc + "/model.cu");
  auto count = [&mk](const std::string& what) {
    size_t k = 0;
    for (size_t at = mk.find(what); at != std::string::npos; at = mk.find(what, at + 1)) ++k;
    return k;
  };
  CHECK(count("a.w_nhwc = 1;") == 1);
  CHECK(count("ptc_cuda::gemm(") == 6);
  // Its two stride-1 depthwise convolutions (32x32 and 16x16 outputs) are register-tiled: a thread
  // takes 4 output columns of 4 channels, reads the input columns they share once, and stores
  // each column's 4 channels (nvcc built it above).
  CHECK(count("const int64_t x2 = y2 * 4;") == 2);
  CHECK(count("ptc_cuda::store4(") >= count("const int64_t x2 = y2 * 4;") * 4);
  for (int r = 1; r < 4; ++r) CHECK(count(" + " + std::to_string(r) + " * n3, ") >= 2);
  // --precision tf32-conv (torch's defaults): TF32 for the convolutions only. The context says so, the five
  // GEMMs that are 1x1 convolutions are marked as a convolution's (the classifier's is not), and
  // the model is channels-last as with --tf32.
  const std::string csrc = dir + "/cuda_tf32_conv_mbv2_src", cso = dir + "/cuda_tf32_conv_mbv2.so";
  auto c = test::run_ptc("compile -q --no-cache --device cuda --precision tf32-conv --emit-dir " + csrc + " " + test::fixture("mbv2_dyn.pt2") + " -o " + cso);
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  const std::string cm = test::run_ptc("inspect --json " + cso).output;
  CHECK(cm.find("\"precision\": \"tf32-conv\"") != std::string::npos);
  CHECK(cm.find("\"channels_last\": true") != std::string::npos);
  const std::string ck = test::read_file(csrc + "/model.cu");
  size_t marked = 0;
  for (size_t at = ck.find("g.conv = true;"); at != std::string::npos; at = ck.find("g.conv = true;", at + 1)) ++marked;
  CHECK(marked == 5);
  // (GEMMs and attention exact, convolutions TF32; an inference library: forward convolutions may
  // take transforms)
  CHECK(ck.find("model->pool, ptc_rt::MathModes{ptc_rt::MathMode::FP32, ptc_rt::MathMode::TF32, ptc_rt::MathMode::FP32}, true};") !=
        std::string::npos);
}
