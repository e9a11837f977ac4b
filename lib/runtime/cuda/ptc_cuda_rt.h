// ptc_cuda_rt.h — the compiled-once runtime of a generated CUDA library (ptc_cuda_runtime.cu):
// GEMMs through cuBLASLt (fp32: exact, or TF32 as Ctx::math says; bf16 / fp16 operands with fp32
// accumulation) with any-stride operands and batches
// (in exact fp32 also ptc's 3xTF32 tensor-core kernels, ptc_cuda_gemm_tc.cu, where they time faster), a
// direct 2-D convolution, fused attention; and (ptc_cuda_cudnn.cu, linked only into libraries
// with convolutions) 2-D convolutions and their gradients through cuDNN. Host functions; they
// queue work on the given stream and return an error text (nullptr on success).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>
#include <cublasLt.h>

#include "ptc_cuda_limits.h"
#include "ptc_precision.h"

namespace ptc_cuda {

// cuBLASLt descriptors and the chosen algorithm per GEMM shape and layout, made on first use
// (thread-safe); one per model.
struct GemmPlans;
GemmPlans* gemm_plans_create();
void gemm_plans_destroy(GemmPlans* plans);

// A cuDNN handle and the descriptors and algorithm per convolution shape (ptc_cuda_cudnn.cu).
struct ConvPlans;
// nullptr with an error text in *err (no cuDNN library, no GPU).
ConvPlans* conv_plans_create(const char** err);
void conv_plans_destroy(ConvPlans* plans);

// A stream-ordered memory pool (on the current device) that keeps the memory freed into it
// (release threshold: unlimited), so that later calls' workspaces reuse it. The device's default
// pool hands freed memory back at every synchronization, and each run then maps it again.
cudaError_t pool_create(cudaMemPool_t* pool);
// `bytes` from `pool` on `stream` (the default pool where `pool` is null).
inline cudaError_t pool_alloc(void** p, size_t bytes, cudaMemPool_t pool, cudaStream_t stream) {
  return pool ? cudaMallocFromPoolAsync(p, bytes, pool, stream) : cudaMallocAsync(p, bytes, stream);
}

// Whether kernels can read `p` (*device: device or managed memory); the query's error, if any
// (then cleared, so that it does not stick to the next call).
inline cudaError_t device_memory(const void* p, bool* device) {
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) cudaGetLastError();
  *device = e == cudaSuccess && (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
  return e;
}

// The context a kernel launcher gets: the model's cuBLASLt handle and plans, its cuDNN plans
// (nullptr without convolutions), this run's GEMM / convolution workspace, and the model's pool.
struct Ctx {
  cublasLtHandle_t lt;
  GemmPlans* plans;
  void* gemm_ws;
  size_t gemm_ws_bytes;
  ConvPlans* conv = nullptr;
  cudaMemPool_t pool = nullptr;
  // How the GEMMs, convolutions (cuDNN's, and the GEMMs of 1x1 and patchify convolutions:
  // Gemm::conv) and attention compute (ptc compile --precision; ptc_precision.h). TF32: GEMMs in
  // CUBLAS_COMPUTE_32F_FAST_TF32 and convolutions with CUDNN_DEFAULT_MATH (TF32 tensor cores; fp32
  // storage and accumulation).
  ptc_rt::MathModes math;
  // An inference library (not a training library's part): its forward convolutions may also take
  // cuDNN's FFT and non-fused Winograd algorithms where they time fastest, as torch's fp32
  // convolutions do (ptc_cuda_cudnn.cu: pick).
  bool inference = false;
  bool conv_tf32() const { return math.conv == ptc_rt::MathMode::TF32; }
};

constexpr int kMaxBatchDims = 6;

// The element type of a GEMM's or convolution's operands, result and epilogue vectors: float32,
// or bfloat16 / float16 (tensor cores, float32 accumulation, the result rounded once).
enum ElemType { kF32 = 0, kBF16 = 1, kF16 = 2 };
inline size_t elem_bytes(int t) { return t == kF32 ? 4 : 2; }

// A library call's fused epilogue (GEMM, convolution): y = act(y + bias[channel] + residual).
// ReLU6: clamp to [0, 6]; GELU with tanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (GEMMs:
// cuBLASLt's GELU epilogue).
enum Act { kActNone = 0, kActRelu = 1, kActRelu6 = 2, kActGeluTanh = 3 };
#ifdef __CUDACC__
// `act` applied to v; NaN stays NaN, as in torch's relu.
__host__ __device__ inline float apply_act(float v, int act) {
  if (act == kActGeluTanh) return 0.5f * v * (1.f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  if (act != kActNone) v = v != v ? v : fmaxf(v, 0.f);
  if (act == kActRelu6) v = v != v ? v : fminf(v, 6.f);
  return v;
}
#endif
// That epilogue as a kernel after the call, where the library does not run it: over `count`
// elements of a contiguous y whose channel is (i / inner) % channels (GEMM: inner 1, channels N;
// NCHW convolution: inner OH * OW, channels O); bias / residual may be null; all of element type
// `type` (computed in float32). NaN stays NaN, as in torch's relu. An error text or nullptr.
const char* bias_act(void* y, int64_t count, int64_t inner, int64_t channels, const void* bias, const void* residual, int act,
                     cudaStream_t stream, int type = kF32);

// Operands, result and epilogue vectors all of element type `type` (kBF16 / kF16: cuBLASLt's
// half-precision tensor-core kernels with float32 accumulation and scaling).
struct Gemm {
  int64_t M, N, K;
  const void* A; int64_t lda_m, lda_k;  // A[m, k] = A[m * lda_m + k * lda_k]
  const void* B; int64_t ldb_k, ldb_n;  // B[k, n] = B[k * ldb_k + n * ldb_n]
  void* C;                              // C[batch..., m, n], contiguous
  int type = kF32;
  int nbatch = 0;                        // leading batch dimensions
  int64_t bsize[kMaxBatchDims], bsa[kMaxBatchDims], bsb[kMaxBatchDims];  // sizes, A and B strides
  // Epilogue (cuBLASLt's, or bias_act after it where cuBLASLt cannot take it):
  // C = act(A B + bias[n] + residual), each part optional; act kActNone, kActRelu or kActGeluTanh.
  const void* bias = nullptr;      // [N], contiguous; the same for every batch
  const void* residual = nullptr;  // laid out as C (cuBLASLt's C with beta = 1)
  int act = kActNone;
  bool conv = false;  // a convolution's GEMM (1x1, patchify): TF32 with Ctx::conv_tf32
  // The bias is per row: bias[m], [M] (an NCHW 1x1 convolution's output channel; cuBLASLt's
  // epilogue takes only a per-column bias, so then bias_act runs after it).
  bool bias_rows = false;
  // C's element type where it differs from `type`: kF32 from kBF16 / kF16 operands (the float32
  // accumulator stored without rounding; then no bias and no residual). -1: `type`.
  int out_type = -1;
};
const char* gemm(const Ctx& ctx, const Gemm& g, cudaStream_t stream);

// ptc's own exact-fp32 GEMM on TF32 tensor cores (ptc_cuda_gemm_tc.cu): each operand split into
// two TF32 parts, three tensor-core products per pair (3xTF32), fp32 accumulation, so that the
// result keeps fp32's accuracy. gemm() times it against cuBLASLt's fp32 algorithms on a shape's
// first call (exact fp32 only) and keeps the faster.
//   C[z][m, n] = act(sum_k A[z][m, k] B[z][k, n] + bias[n] + residual[z][m, n])
struct TcGemm {
  int64_t M, N, K;
  const float* A; int64_t lda;  // A[m, k] = A[m * lda + k]
  const float* B; int64_t ldb;  // B[k, n] = B[n * ldb + k] (b_kmajor) or B[k * ldb + n]
  bool b_kmajor;
  float* C;                     // [M, N] contiguous per problem
  int64_t batch, sa, sb, sc;    // problems z < batch at A + z sa, B + z sb, C (and residual) + z sc
  const float* bias;            // [N] (or [M] with bias_rows) or null
  const float* residual;        // laid out as C, or null
  int act;
  bool bias_rows = false;       // bias[m] instead of bias[n]
};
// Whether tc_gemm takes these operands: 16-byte aligned, k-contiguous A, K and the leading
// dimensions multiples of 4 (and N too for an n-contiguous B).
bool tc_gemm_fits(const TcGemm& g);
// Configurations (the tile shapes that won somewhere in an H200 sweep): 0 mma.sync, 64 x 64 (4
// warps; any sm_80+); 1-3 Hopper's warp-specialized wgmma (an sm_90a image; an error text
// elsewhere), 64 x 64, 128 x 64 and 128 x 128.
constexpr int kTcGemmMmaConfigs = 1, kTcGemmConfigs = 4;
const char* tc_gemm(const TcGemm& g, int config, cudaStream_t stream);
// Workspace bytes gemm may use (cuBLASLt's), per call.
constexpr size_t kGemmWorkspace = size_t{32} << 20;

struct Conv2d {
  const float* x; int64_t xs[4];  // input [N, C, H, W] with strides
  const float* w; int64_t ws[4];  // weight [O, C/groups, KH, KW] with strides
  const float* bias; int64_t bias_stride;  // nullptr: none
  float* y;                       // output [N, O, OH, OW], contiguous
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
};
const char* conv2d(const Conv2d& a, cudaStream_t stream);

// A 2-D convolution or one of its gradients through cuDNN (legacy convolution API), exact fp32
// (CUDNN_FMA_MATH: no TF32, as torch with allow_tf32 off; CUDNN_DEFAULT_MATH, which permits TF32, with Ctx::conv_tf32()). The algorithm is chosen on a shape's
// first call: the fastest whose workspace fits kConvMaxWorkspace and half the free device
// memory, timed by cuDNN on that call's buffers (as torch with cudnn.benchmark on), or cuDNN's
// heuristic first while a CUDA graph is captured. An algorithm that needs more than the run's
// workspace gets its own from the model's pool for the call.
//   forward:         y = conv(x, w) (a bias is a pointwise op after it, fused into its consumers,
//                    or into this call with an activation: see below)
//   backward data:   x = the input gradient, from y = dy
//   backward filter: w = the weight gradient, from x and y = dy
// x [N, C, H, W] and y [N, O, OH, OW] take any non-negative strides; w [O, C/groups, KH, KW] is
// contiguous; the output operand is written whole (beta 0).
// Forward only, with a bias: y = act(conv(x, w) + bias[o] + residual), in one
// cudnnConvolutionBiasActivationForward call (bias_act after the convolution where cuDNN does not
// take it: its identity activation runs with IMPLICIT_PRECOMP_GEMM only); the residual
// (optional) is laid out as y.
// A forward 1x1 stride-1 unpadded ungrouped convolution with a contiguous NCHW output (and an
// input whose rows and columns flatten) is no cuDNN call but the batched GEMM
// y[n] [O, H W] = w [O, C] x[n] [C, H W] (gemm(): cuBLASLt or the 3xTF32 kernels, bias per row):
// cuDNN's exact kernels for it took 1.5-2x the GEMM's time (resnet50 on an H200).
enum ConvDirection { kConvForward = 0, kConvBackwardData = 1, kConvBackwardFilter = 2 };
// kBF16 / kF16 (`type`, of x, w, y and the epilogue's vectors): cuDNN's half-precision
// tensor-core kernels with float32 accumulation; the epilogue runs as bias_act after them.
struct CudnnConv {
  int direction = kConvForward;
  void* x; int64_t xs[4];
  void* w;
  int w_nhwc = 0;  // the filter is stored KRSC ([O, KH, KW, C/groups]: CUDNN_TENSOR_NHWC), else KCRS
  void* y; int64_t ys[4];
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  const void* bias = nullptr;      // [O], contiguous; nullptr: no epilogue
  const void* residual = nullptr;  // as y
  int act = kActNone;
  int type = kF32;
};
const char* cudnn_conv(const Ctx& ctx, const CudnnConv& a, cudaStream_t stream);
// The run's convolution workspace, and the most any one algorithm may take (resnet18's first
// weight gradient at batch 32 is 7 ms within 64 MiB and under 1 ms with its im2col columns).
constexpr size_t kConvWorkspace = size_t{64} << 20;
constexpr size_t kConvMaxWorkspace = size_t{2} << 30;
// The workspace a convolution algorithm may take on a shape's first call: up to
// kConvMaxWorkspace and half the free memory, at least the run's own.
inline size_t conv_workspace_limit(const Ctx& ctx) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return ctx.gemm_ws_bytes;
  }
  const size_t most = free_bytes / 2 < kConvMaxWorkspace ? free_bytes / 2 : kConvMaxWorkspace;
  return most > ctx.gemm_ws_bytes ? most : ctx.gemm_ws_bytes;
}

// Fused scaled-dot-product attention, flash-style (tiled, online softmax, no Tq x Tk buffer;
// ptc_cuda_attention.cu):
//   o[b, h, i, :] = sum_j softmax_j(scale * q[b, h, i, :] . k[b, h, j, :] + mask) v[b, h, j, :]
// float32 q, k, v and o (elem kF32): exact fp32, or with tf32 (ptc compile --precision tf32) and
// head sizes up to kAttentionMmaHead on tensor cores: q.k and p.v take TF32 inputs (10-bit
// mantissas) and accumulate in fp32, as torch's matmuls do with allow_tf32; the softmax stays
// fp32. bfloat16 / float16 q, k, v and o (elem kBF16 / kF16): tensor cores (compute capability
// 8.0+) with fp32 accumulation and an fp32 softmax, the probabilities rounded to the half dtype
// for p.v. A float mask is float32 in every case. Head sizes D, Dv up to kAttentionMaxHead. A row whose keys are all masked is zeros
// (masked_rows_zero: scaled_dot_product_attention) or NaN (the fused multi-head attention); Tk = 0
// gives zeros.
enum { kMaskNone = 0, kMaskKeep = 1, kMaskDrop = 2, kMaskAdd = 3 };  // bool keep / drop where true; float added
// kAttentionMaxHead and kAttentionMmaHead: ptc_cuda_limits.h.
struct Attention {
  const void* q; int64_t qs[4];   // [B, H, Tq, D] with strides (in elements), of type elem
  const void* k; int64_t ks[4];   // [B, H, Tk, D]
  const void* v; int64_t vs[4];   // [B, H, Tk, Dv]
  const void* mask = nullptr; int64_t ms[4] = {0, 0, 0, 0};  // [B, H, Tq, Tk] (broadcast strides 0)
  int mask_kind = kMaskNone;
  void* o;                        // [B, H, Tq, Dv], contiguous, of type elem
  int64_t B, H, Tq, Tk, D, Dv;
  float scale;
  bool causal = false;            // key j allowed for query i when j <= i
  bool masked_rows_zero = false;
  bool o_heads_inner = false;     // o is [B, Tq, H, Dv] instead
  bool tf32 = false;              // TF32 tensor cores (Ctx::math.attention) where the head sizes allow
  int64_t kv_group = 1;           // grouped-query attention: head h reads k / v head h / kv_group
  int elem = kF32;                // ElemType of q, k, v and o
};
const char* attention(const Attention& a, cudaStream_t stream);

}  // namespace ptc_cuda
