// ptc_cuda_cudnn.cu — 2-D convolutions and their gradients through cuDNN; see ptc_cuda_rt.h.
// Linked (with -lcudnn) only into libraries that have convolutions.
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ptc_cuda_cudnn_graph.h"
#include "ptc_cuda_rt.h"

namespace ptc_cuda {
namespace {

thread_local std::string g_dnn_error;

const char* dnn_error(const std::string& what, cudnnStatus_t s) {
  g_dnn_error = what + " failed (cuDNN: " + cudnnGetErrorString(s) + ")";
  return g_dnn_error.c_str();
}

// Descriptors and the chosen algorithm of one convolution shape and direction.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnTensorDescriptor_t bias = nullptr;     // a fused epilogue's [1, O, 1, 1]
  cudnnActivationDescriptor_t act = nullptr;  // and its activation
  bool fused_unsupported = false;             // cuDNN refused the fused call: conv + a kernel
  int algo = 0;
  size_t ws = 0;
  void release() {
    if (act) cudnnDestroyActivationDescriptor(act);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// Transform-based algorithms round differently enough that optimizer steps drift from torch's
// fp32 and from float64: FFT ones (errors ~1e-4 relative; resnet18's 5 Nesterov / AdamW steps
// drifted) and the non-fused Winograd (F(4x4, 3x3): a layer4 weight gradient of resnet18 was
// 3e-3 from float64, where torch fp32 is 1e-7). Training libraries take them only when compiled
// with --tf32 or --tf32-conv; an inference library's forward convolutions take them where they
// time fastest, as torch's own fp32 convolutions do (its heuristics and cudnn.benchmark both
// choose among every algorithm), since one forward pass stays within fp32 tolerances.
bool inexact(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool inexact(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool inexact(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The algorithm among cuDNN's ranked ones that ran its checks, is exact (unless `transforms`:
// the user accepted TF32's rounding, or an inference library's forward convolution; torch takes
// FFT and Winograd algorithms there too) and fits the workspace: the first, or with `run`
// (status run(algo, workspace bytes) on the call's buffers) the fastest of the first
// kConvRetimed, each timed again here (a warm-up and three runs) as the call will run it (a
// forward convolution with its fused epilogue, or the separate epilogue kernel where cuDNN does
// not fuse it with that algorithm). cudnnFind* times each algorithm once, on a shape's first
// call and without the epilogue, and close ones swapped places from run to run (resnet18 b8 on
// an H200: 1.28 or 1.72 ms a call). The descriptor gets the math type the chosen algorithm was
// ranked with.
constexpr int kConvRetimed = 4;
template <typename Perf, typename Run>
const char* pick(const Perf* perf, int n, size_t limit, const char* what, bool transforms, ConvPlan& plan, cudaStream_t stream,
                 const Run* run) {
  std::vector<int> ok;
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit && (transforms || !inexact(perf[i].algo))) ok.push_back(i);
  if (ok.empty()) {
    g_dnn_error = std::string("cuDNN has no ") + what + " algorithm for this convolution within a " + std::to_string(limit >> 20) +
                  " MiB workspace";
    return g_dnn_error.c_str();
  }
  int best = ok[0];
  if (run && ok.size() > 1) {
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
      float best_ms = INFINITY;
      for (size_t c = 0; c < ok.size() && c < static_cast<size_t>(kConvRetimed); ++c) {
        const Perf& q = perf[ok[c]];
        if (cudnnSetConvolutionMathType(plan.conv, q.mathType) != CUDNN_STATUS_SUCCESS) continue;
        if ((*run)(q.algo, q.memory) != CUDNN_STATUS_SUCCESS) continue;  // warm-up
        cudaEventRecord(e0, stream);
        bool good = true;
        for (int r = 0; r < 3; ++r) good = good && (*run)(q.algo, q.memory) == CUDNN_STATUS_SUCCESS;
        cudaEventRecord(e1, stream);
        float ms = 0.f;
        if (good && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best_ms) {
          best_ms = ms;
          best = ok[c];
        }
      }
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaGetLastError();
  }
  cudnnStatus_t s = cudnnSetConvolutionMathType(plan.conv, perf[best].mathType);
  if (s != CUDNN_STATUS_SUCCESS) return dnn_error("cudnnSetConvolutionMathType", s);
  plan.algo = static_cast<int>(perf[best].algo);
  plan.ws = perf[best].memory;
  return nullptr;
}

// A fused epilogue cuDNN did not run, as a kernel after the convolution.
const char* run_conv_epilogue(const CudnnConv& a, cudaStream_t stream) {
  // y is a whole NCHW or NHWC buffer (--channels-last): the channel of element i is i / (OH OW) % O
  // or i % O; a residual is laid out as y.
  const int64_t inner = a.ys[1] == 1 ? 1 : a.OH * a.OW;
  return bias_act(a.y, a.N * a.O * a.OH * a.OW, inner, a.O, a.bias, a.residual, a.act, stream, a.type);
}

bool fits_int(const CudnnConv& a) {
  const int64_t v[] = {a.N, a.C, a.H, a.W, a.O, a.KH, a.KW, a.OH, a.OW, a.sh, a.sw, a.ph, a.pw, a.dh, a.dw, a.groups,
                       a.xs[0], a.xs[1], a.xs[2], a.xs[3], a.ys[0], a.ys[1], a.ys[2], a.ys[3]};
  for (int64_t x : v)
    if (x < 0 || x > INT_MAX) return false;
  return true;
}

}  // namespace

struct ConvPlans {
  std::mutex mu;  // the handle's stream and the plan maps
  cudnnHandle_t handle = nullptr;
  std::map<std::vector<int64_t>, ConvPlan> plans;
  // Half-precision forward convolutions through the graph API (ptc_cuda_cudnn_graph.h); null
  // with PTC_CUDNN_LEGACY=1 in the environment at ptc_open (all on the legacy API).
  GraphConvPlans* graph = nullptr;
  ~ConvPlans() {
    graph_conv_plans_destroy(graph);
    for (auto& [key, p] : plans) p.release();
    if (handle) cudnnDestroy(handle);
  }
};

ConvPlans* conv_plans_create(const char** err) {
  ConvPlans* p = new (std::nothrow) ConvPlans();
  if (!p) {
    *err = "out of memory";
    return nullptr;
  }
  cudnnStatus_t s = cudnnCreate(&p->handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    delete p;
    *err = dnn_error("creating a cuDNN handle", s);
    return nullptr;
  }
  const char* legacy = std::getenv("PTC_CUDNN_LEGACY");
  if (!legacy || std::string(legacy) != "1") p->graph = graph_conv_plans_create();
  return p;
}

void conv_plans_destroy(ConvPlans* plans) { delete plans; }

const char* cudnn_conv(const Ctx& ctx, const CudnnConv& a, cudaStream_t stream) {
  if (!ctx.conv) return "cudnn_conv: the model has no cuDNN handle";
  if (a.N == 0 || a.O == 0 || a.C == 0 || a.OH == 0 || a.OW == 0) {
    // Nothing to multiply: the output is zeros (the input gradient, the weight gradient) or,
    // for an empty batch, empty.
    cudaError_t e = cudaSuccess;
    if (a.direction == kConvBackwardData && a.N * a.C * a.H * a.W > 0)
      e = cudaMemsetAsync(a.x, 0, elem_bytes(a.type) * a.N * a.C * a.H * a.W, stream);
    if (a.direction == kConvBackwardFilter && a.O * (a.C / a.groups) * a.KH * a.KW > 0)
      e = cudaMemsetAsync(a.w, 0, elem_bytes(a.type) * a.O * (a.C / a.groups) * a.KH * a.KW, stream);
    if (a.direction == kConvForward && a.N * a.O * a.OH * a.OW > 0)  // over zero input channels: y is the extern's own, contiguous
      e = cudaMemsetAsync(a.y, 0, elem_bytes(a.type) * a.N * a.O * a.OH * a.OW, stream);
    if (e != cudaSuccess) {
      g_dnn_error = std::string("cudnn_conv: ") + cudaGetErrorString(e);
      return g_dnn_error.c_str();
    }
    return a.direction == kConvForward && a.bias ? run_conv_epilogue(a, stream) : nullptr;
  }
  if (a.direction == kConvForward && a.groups == 1 && a.KH == 1 && a.KW == 1 && a.sh == 1 && a.sw == 1 && a.ph == 0 && a.pw == 0 &&
      a.xs[2] == a.W * a.xs[3] && a.ys[3] == 1 && a.ys[2] == a.OW && a.ys[1] == a.OH * a.OW && a.ys[0] == a.O * a.OH * a.OW) {
    // 1x1: per image y[n] [O, H W] = w [O, C] x[n] [C, H W] (see ptc_cuda_rt.h)
    Gemm g{};
    g.M = a.O, g.N = a.H * a.W, g.K = a.C;
    g.A = a.w, g.lda_m = a.C, g.lda_k = 1;
    g.B = a.x, g.ldb_k = a.xs[1], g.ldb_n = a.xs[3];
    g.C = a.y;
    g.type = a.type;
    g.nbatch = 1, g.bsize[0] = a.N, g.bsa[0] = 0, g.bsb[0] = a.xs[0];
    g.bias = a.bias, g.residual = a.bias ? a.residual : nullptr, g.act = a.bias ? a.act : kActNone, g.conv = true, g.bias_rows = true;
    return gemm(ctx, g, stream);
  }
  if (!fits_int(a)) return "cudnn_conv: a size or stride beyond cuDNN's 32-bit range";
  // Half precision: x, w and y in bfloat16 / float16, accumulation in float32 (cuDNN's
  // PSEUDO_HALF / PSEUDO_BFLOAT16 configurations) on the tensor cores; the epilogue as bias_act.
  const cudnnDataType_t dt = a.type == kBF16 ? CUDNN_DATA_BFLOAT16 : a.type == kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  const bool fuse = a.type == kF32;
  auto i32 = [](int64_t v) { return static_cast<int>(v); };
  std::lock_guard<std::mutex> lock(ctx.conv->mu);
  cudnnHandle_t h = ctx.conv->handle;
  cudnnStatus_t set = cudnnSetStream(h, stream);
  if (set != CUDNN_STATUS_SUCCESS) return dnn_error("cudnnSetStream", set);
  if (a.direction == kConvForward && a.type != kF32 && ctx.conv->graph) {
    bool unsupported = false;
    const char* err = graph_conv_forward(ctx.conv->graph, h, ctx, a, ctx.conv_tf32() || ctx.inference, stream, &unsupported);
    if (err || !unsupported) return err;
  }
  const std::vector<int64_t> key{a.direction, a.N, a.C, a.H, a.W, a.O, a.KH, a.KW, a.OH, a.OW, a.sh, a.sw, a.ph, a.pw, a.dh, a.dw,
                                 a.groups, a.xs[0], a.xs[1], a.xs[2], a.xs[3], a.ys[0], a.ys[1], a.ys[2], a.ys[3],
                                 static_cast<int64_t>(ctx.gemm_ws_bytes), a.bias ? 1 + a.act : 0, a.w_nhwc, a.type};
  auto it = ctx.conv->plans.find(key);
  if (it == ctx.conv->plans.end()) {
    ConvPlan p;
    cudnnStatus_t s = cudnnCreateTensorDescriptor(&p.x);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&p.y);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateFilterDescriptor(&p.w);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&p.conv);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnSetTensor4dDescriptorEx(p.x, dt, i32(a.N), i32(a.C), i32(a.H), i32(a.W), i32(a.xs[0]), i32(a.xs[1]),
                                       i32(a.xs[2]), i32(a.xs[3]));
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnSetTensor4dDescriptorEx(p.y, dt, i32(a.N), i32(a.O), i32(a.OH), i32(a.OW), i32(a.ys[0]), i32(a.ys[1]),
                                       i32(a.ys[2]), i32(a.ys[3]));
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnSetFilter4dDescriptor(p.w, dt, a.w_nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, i32(a.O), i32(a.C / a.groups),
                                     i32(a.KH), i32(a.KW));
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnSetConvolution2dDescriptor(p.conv, i32(a.ph), i32(a.pw), i32(a.sh), i32(a.sw), i32(a.dh), i32(a.dw),
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionGroupCount(p.conv, i32(a.groups));
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnSetConvolutionMathType(p.conv, a.type != kF32 ? CUDNN_TENSOR_OP_MATH : ctx.conv_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
    if (s == CUDNN_STATUS_SUCCESS && a.bias && fuse) {
      s = cudnnCreateTensorDescriptor(&p.bias);
      if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i32(a.O), 1, 1);
      if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateActivationDescriptor(&p.act);
      if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetActivationDescriptor(p.act,
                                         a.act == kActRelu6  ? CUDNN_ACTIVATION_CLIPPED_RELU
                                         : a.act == kActRelu ? CUDNN_ACTIVATION_RELU
                                                             : CUDNN_ACTIVATION_IDENTITY,
                                         CUDNN_PROPAGATE_NAN, a.act == kActRelu6 ? 6.0 : 0.0);
    }
    if (s != CUDNN_STATUS_SUCCESS) {
      p.release();
      return dnn_error("describing a convolution", s);
    }
    // The algorithm: timed on this call's buffers (cudnnFind*AlgorithmEx, what torch does with
    // cudnn.benchmark on; it writes only the output and the workspace) unless the stream is
    // being captured into a CUDA graph, where timing cannot run: then cuDNN's heuristic ranking.
    // (The heuristics once took a 7 ms direct kernel for resnet18's first weight gradient.)
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const bool timed = cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone;
    int n = 0;
    const char* err = nullptr;
    // Algorithms may take up to kConvMaxWorkspace and half the free memory; timing them needs
    // a workspace that large for the call (from the model's pool, given back right after).
    void* ws = ctx.gemm_ws;
    size_t wsb = conv_workspace_limit(ctx);
    void* find_ws = nullptr;
    if (timed && wsb > ctx.gemm_ws_bytes) {
      if (pool_alloc(&find_ws, wsb, ctx.pool, stream) == cudaSuccess) {
        ws = find_ws;
      } else {
        cudaGetLastError();
        wsb = ctx.gemm_ws_bytes;
      }
    }
    const float one = 1.f, zero = 0.f;
    if (a.direction == kConvForward) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      s = timed ? cudnnFindConvolutionForwardAlgorithmEx(h, p.x, a.x, p.w, a.w, p.conv, p.y, a.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, ws, wsb)
                : cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf);
      // What a call will run: with an epilogue the fused call, or where cuDNN does not fuse it
      // with this algorithm the convolution and bias_act (whose cost may decide).
      auto run = [&](cudnnConvolutionFwdAlgo_t algo, size_t bytes) {
        if (a.bias && fuse) {
          const float alpha2 = a.residual ? 1.f : 0.f;
          const cudnnStatus_t st = cudnnConvolutionBiasActivationForward(h, &one, p.x, a.x, p.w, a.w, p.conv, algo, ws, bytes, &alpha2, p.y,
                                                                         a.residual ? a.residual : a.y, p.bias, a.bias, p.act, p.y, a.y);
          if (st != CUDNN_STATUS_NOT_SUPPORTED && st != CUDNN_STATUS_BAD_PARAM) return st;
        }
        const cudnnStatus_t st = cudnnConvolutionForward(h, &one, p.x, a.x, p.w, a.w, p.conv, algo, ws, bytes, &zero, p.y, a.y);
        if (st == CUDNN_STATUS_SUCCESS && a.bias && run_conv_epilogue(a, stream)) return CUDNN_STATUS_EXECUTION_FAILED;
        return st;
      };
      if (s == CUDNN_STATUS_SUCCESS) err = pick(perf, n, wsb, "forward", ctx.conv_tf32() || ctx.inference, p, stream, timed ? &run : nullptr);
    } else if (a.direction == kConvBackwardData) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      s = timed ? cudnnFindConvolutionBackwardDataAlgorithmEx(h, p.w, a.w, p.y, a.y, p.conv, p.x, a.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n,
                                                              perf, ws, wsb)
                : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf);
      auto run = [&](cudnnConvolutionBwdDataAlgo_t algo, size_t bytes) {
        return cudnnConvolutionBackwardData(h, &one, p.w, a.w, p.y, a.y, p.conv, algo, ws, bytes, &zero, p.x, a.x);
      };
      if (s == CUDNN_STATUS_SUCCESS) err = pick(perf, n, wsb, "backward-data", ctx.conv_tf32(), p, stream, timed ? &run : nullptr);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      s = timed ? cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p.x, a.x, p.y, a.y, p.conv, p.w, a.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                                &n, perf, ws, wsb)
                : cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv, p.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf);
      auto run = [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t bytes) {
        return cudnnConvolutionBackwardFilter(h, &one, p.x, a.x, p.y, a.y, p.conv, algo, ws, bytes, &zero, p.w, a.w);
      };
      if (s == CUDNN_STATUS_SUCCESS) err = pick(perf, n, wsb, "backward-filter", ctx.conv_tf32(), p, stream, timed ? &run : nullptr);
    }
    if (find_ws) {
      // The pool keeps what is freed into it: once the free is done, the timing workspace's
      // memory goes back to the device (a shape's first call only; the timing waited anyway).
      cudaFreeAsync(find_ws, stream);
      if (ctx.pool && cudaStreamSynchronize(stream) == cudaSuccess) cudaMemPoolTrimTo(ctx.pool, 0);
    }
    if (s != CUDNN_STATUS_SUCCESS || err) {
      p.release();
      return err ? err : dnn_error("choosing a convolution algorithm", s);
    }
    it = ctx.conv->plans.emplace(key, p).first;
  }
  ConvPlan& p = it->second;
  void* ws = ctx.gemm_ws;
  void* own_ws = nullptr;  // an algorithm that takes more than the run's workspace
  if (p.ws > ctx.gemm_ws_bytes) {
    cudaError_t e = pool_alloc(&own_ws, p.ws, ctx.pool, stream);
    if (e != cudaSuccess) {
      cudaGetLastError();
      g_dnn_error = "cudnn_conv: out of device memory for a " + std::to_string(p.ws >> 20) + " MiB convolution workspace";
      return g_dnn_error.c_str();
    }
    ws = own_ws;
  }
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  const char* what = nullptr;
  const float one = 1.f, zero = 0.f;
  bool epilogue_kernel = false;
  if (a.direction == kConvForward && a.bias && fuse && !p.fused_unsupported) {
    // y = act(conv(x) + alpha2 z + bias): z is the residual (alpha2 1) or y itself (alpha2 0).
    const float alpha2 = a.residual ? 1.f : 0.f;
    s = cudnnConvolutionBiasActivationForward(h, &one, p.x, a.x, p.w, a.w, p.conv, static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), ws, p.ws,
                                              &alpha2, p.y, a.residual ? a.residual : a.y, p.bias, a.bias, p.act, p.y, a.y);
    what = "cudnnConvolutionBiasActivationForward";
    if (s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM) {
      p.fused_unsupported = true;  // this algorithm or layout does not fuse (the identity activation takes only
                                   // IMPLICIT_PRECOMP_GEMM): from now on conv + a kernel
      s = CUDNN_STATUS_SUCCESS;
    } else {
      if (own_ws) cudaFreeAsync(own_ws, stream);
      return s == CUDNN_STATUS_SUCCESS ? nullptr : dnn_error(what, s);
    }
  }
  if (a.direction == kConvForward) {
    s = cudnnConvolutionForward(h, &one, p.x, a.x, p.w, a.w, p.conv, static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), ws, p.ws, &zero,
                                p.y, a.y);
    what = "cudnnConvolutionForward";
    epilogue_kernel = a.bias != nullptr;
  } else if (a.direction == kConvBackwardData) {
    s = cudnnConvolutionBackwardData(h, &one, p.w, a.w, p.y, a.y, p.conv, static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo), ws,
                                     p.ws, &zero, p.x, a.x);
    what = "cudnnConvolutionBackwardData";
  } else {
    s = cudnnConvolutionBackwardFilter(h, &one, p.x, a.x, p.y, a.y, p.conv, static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo), ws,
                                       p.ws, &zero, p.w, a.w);
    what = "cudnnConvolutionBackwardFilter";
  }
  if (own_ws) cudaFreeAsync(own_ws, stream);
  if (s != CUDNN_STATUS_SUCCESS) return dnn_error(what, s);
  return epilogue_kernel ? run_conv_epilogue(a, stream) : nullptr;
}

}  // namespace ptc_cuda
