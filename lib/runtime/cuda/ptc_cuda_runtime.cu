// ptc_cuda_runtime.cu — see ptc_cuda_rt.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ptc_cuda_rt.h"

namespace ptc_cuda {

cudaError_t pool_create(cudaMemPool_t* pool) {
  *pool = nullptr;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  e = cudaMemPoolCreate(pool, &props);
  if (e != cudaSuccess) return e;
  uint64_t keep = UINT64_MAX;
  e = cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e != cudaSuccess) {
    cudaMemPoolDestroy(*pool);
    *pool = nullptr;
  }
  return e;
}
namespace {

thread_local std::string g_error;

const char* cuda_error(const char* what, cudaError_t e) {
  g_error = std::string(what) + ": " + cudaGetErrorString(e);
  return g_error.c_str();
}
const char* lt_error(const char* what, cublasStatus_t s) {
  g_error = std::string(what) + " failed (cuBLASLt status " + std::to_string(static_cast<int>(s)) + ")";
  return g_error.c_str();
}

// ptc's 3xTF32 GEMM (tc_gemm) competes for exact-fp32 GEMMs unless PTC_CUDA_GEMM=cublas.
bool tc_gemm_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("PTC_CUDA_GEMM");
    return !(v && std::string(v) == "cublas");
  }();
  return on;
}

// Element conversions of the operand types (ElemType) to and from float.
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

// `p` advanced by `elems` elements of type `type`.
template <typename P> P* advance(P* p, int64_t elems, int type) {
  using B = std::conditional_t<std::is_const<P>::value, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<B*>(p) + elems * static_cast<int64_t>(elem_bytes(type)));
}

// Any strides: one thread per output element (used only when cuBLASLt cannot take the layout).
template <typename T, typename O = T>
__global__ void gemm_naive(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda_m, int64_t lda_k, const T* B, int64_t ldb_k,
                           int64_t ldb_n, O* C) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < M * N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / N, n = i % N;
    float acc = 0.f;
    for (int64_t k = 0; k < K; ++k) acc += to_f(A[m * lda_m + k * lda_k]) * to_f(B[k * ldb_k + n * ldb_n]);
    C[i] = from_f<O>(acc);
  }
}

template <typename T>
__global__ void bias_act_kernel(T* y, int64_t count, int64_t inner, int64_t channels, const T* bias, const T* residual, int act) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = to_f(y[i]);
    if (bias) v += to_f(bias[(i / inner) % channels]);
    if (residual) v += to_f(residual[i]);
    y[i] = from_f<T>(apply_act(v, act));
  }
}

// bias_act_kernel over 16-byte groups with 32-bit index math: four elements share a channel
// (inner % 4 == 0) or take four consecutive channels (inner 1, channels % 4 == 0).
__device__ __forceinline__ float act_one(float v, float b, float r, int act) {
  v += b;  // in bias_act_kernel's order
  v += r;
  return apply_act(v, act);
}
__global__ void bias_act_kernel4(float* y, uint32_t count4, uint32_t inner, uint32_t channels, const float* bias, const float* residual,
                                 int act) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count4; i += gridDim.x * blockDim.x) {
    float4 v = reinterpret_cast<float4*>(y)[i];
    float4 b = make_float4(0.f, 0.f, 0.f, 0.f), r = b;
    if (bias) {
      if (inner == 1) {
        b = reinterpret_cast<const float4*>(bias)[(i % (channels / 4))];
      } else {
        const float c = bias[(i * 4 / inner) % channels];
        b = make_float4(c, c, c, c);
      }
    }
    if (residual) r = reinterpret_cast<const float4*>(residual)[i];
    v = make_float4(act_one(v.x, b.x, r.x, act), act_one(v.y, b.y, r.y, act), act_one(v.z, b.z, r.z, act), act_one(v.w, b.w, r.w, act));
    reinterpret_cast<float4*>(y)[i] = v;
  }
}

// A col-major operand for cuBLASLt of `rows` x `cols` from element strides (row stride rs,
// column stride cs): plain when rs == 1, transposed when cs == 1.
struct Operand {
  bool ok = false;
  cublasOperation_t op = CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};
Operand operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  Operand o;
  if (rs == 1 || rows == 1) {
    o = {true, CUBLAS_OP_N, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), cols == 1 ? rows : cs};
    if (o.ld < rows) o.ok = false;
  }
  if (!o.ok && (cs == 1 || cols == 1)) {
    o = {true, CUBLAS_OP_T, static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), rows == 1 ? cols : rs};
    if (o.ld < cols) o.ok = false;
  }
  return o;
}

}  // namespace

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};                     // the heuristic's first, then the fastest timed
  std::vector<cublasLtMatmulAlgo_t> candidates;     // the heuristic's top ones, timed on first use
  int tc = -1;  // exact fp32: tc_gemm's configuration when it timed fastest (and the call's operands fit it)
  bool tuned = false;
  bool failed = false;  // no algorithm takes this epilogue
};

// Candidates the heuristic proposes per GEMM layout; each is timed once on first use (outside
// CUDA graph capture) and the fastest kept, as torch's cuDNN benchmark mode does for convolutions.
constexpr int kGemmCandidates = 8;

struct GemmPlans {
  std::mutex mu;
  std::map<std::array<int64_t, 16>, Plan> plans;
  ~GemmPlans() {
    for (auto& [key, p] : plans) {
      if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
      if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
      if (p.la) cublasLtMatrixLayoutDestroy(p.la);
      if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    }
  }
};

GemmPlans* gemm_plans_create() { return new (std::nothrow) GemmPlans(); }
void gemm_plans_destroy(GemmPlans* plans) { delete plans; }

namespace {

// Builds the descriptors and picks the algorithm for one layout; nullptr or an error text.
// `type` (ElemType): the operands' and the bias's type, `out_type` C's; accumulation and scaling
// are fp32.
const char* make_plan(cublasLtHandle_t lt, const Operand& ob, const Operand& oa, int64_t M, int64_t N, int64_t ldc, int32_t batch, int64_t sa,
                      int64_t sb, int64_t sc, size_t ws_bytes, cublasLtEpilogue_t epilogue, bool tf32, int type, int out_type, Plan& plan) {
  auto cuda_type = [](int t) { return t == kBF16 ? CUDA_R_16BF : t == kF16 ? CUDA_R_16F : CUDA_R_32F; };
  const cudaDataType_t dt = cuda_type(type), out_dt = cuda_type(out_type);
  const char* err = nullptr;
  auto check = [&](cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS && !err) err = lt_error(what, s);
    return s == CUBLAS_STATUS_SUCCESS;
  };
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows, uint64_t cols, int64_t ld, int64_t stride) {
    if (!check(cublasLtMatrixLayoutCreate(l, t, rows, cols, ld), "cublasLtMatrixLayoutCreate")) return;
    if (batch > 1) {
      check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), "batch count");
      check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), "batch stride");
    }
  };
  // Exact fp32 (CUBLAS_COMPUTE_32F) unless the context's math mode for this GEMM (Ctx::math: gemm,
  // or conv for a convolution's GEMM) is TF32.
  if (check(cublasLtMatmulDescCreate(&plan.desc, tf32 && type == kF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
            "cublasLtMatmulDescCreate")) {
    check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ob.op, sizeof ob.op), "transa");
    check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &oa.op, sizeof oa.op), "transb");
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), "epilogue");
      if (type != kF32) check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &dt, sizeof dt), "bias type");
    }
  }
  layout(&plan.la, dt, ob.rows, ob.cols, ob.ld, sb);
  layout(&plan.lb, dt, oa.rows, oa.cols, oa.ld, sa);
  layout(&plan.lc, out_dt, static_cast<uint64_t>(N), static_cast<uint64_t>(M), ldc, sc);
  cublasLtMatmulPreference_t pref = nullptr;
  if (!err && check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) {
    uint64_t wsb = ws_bytes;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb), "workspace");
    cublasLtMatmulHeuristicResult_t heur[kGemmCandidates] = {};
    int found = 0;
    if (check(cublasLtMatmulAlgoGetHeuristic(lt, plan.desc, plan.la, plan.lb, plan.lc, plan.lc, pref, kGemmCandidates, heur, &found),
              "cublasLtMatmulAlgoGetHeuristic")) {
      if (found == 0) err = "cuBLASLt found no algorithm for a GEMM";
      plan.algo = heur[0].algo;
      for (int i = 0; i < found; ++i)
        if (heur[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(heur[i].algo);
    }
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  return err;
}

}  // namespace

const char* bias_act(void* y_, int64_t count, int64_t inner, int64_t channels, const void* bias_, const void* residual_, int act,
                     cudaStream_t stream, int type) {
  if (count <= 0 || (!bias_ && !residual_ && act == kActNone)) return nullptr;
  if (type != kF32) {  // half precision: one element per thread, computed in float
    const int64_t blocks = std::min<int64_t>((count + 255) / 256, int64_t{1} << 20);
    if (type == kBF16)
      bias_act_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
          static_cast<__nv_bfloat16*>(y_), count, inner, channels, static_cast<const __nv_bfloat16*>(bias_),
          static_cast<const __nv_bfloat16*>(residual_), act);
    else
      bias_act_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(static_cast<__half*>(y_), count, inner, channels,
                                                                         static_cast<const __half*>(bias_),
                                                                         static_cast<const __half*>(residual_), act);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? nullptr : cuda_error("the epilogue kernel", e);
  }
  float* y = static_cast<float*>(y_);
  const float* bias = static_cast<const float*>(bias_);
  const float* residual = static_cast<const float*>(residual_);
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (count % 4 == 0 && count < (int64_t{1} << 31) && (inner % 4 == 0 || (inner == 1 && channels % 4 == 0)) && aligned(y) &&
      (!residual || aligned(residual)) && (!bias || inner != 1 || aligned(bias))) {
    const int64_t blocks = std::min<int64_t>((count / 4 + 255) / 256, int64_t{1} << 20);
    bias_act_kernel4<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(y, static_cast<uint32_t>(count / 4), static_cast<uint32_t>(inner),
                                                                        static_cast<uint32_t>(channels), bias, residual, act);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? nullptr : cuda_error("the epilogue kernel", e);
  }
  const int64_t blocks = std::min<int64_t>((count + 255) / 256, int64_t{1} << 20);
  bias_act_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(y, count, inner, channels, bias, residual, act);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cuda_error("the epilogue kernel", e);
}

const char* gemm(const Ctx& ctx, const Gemm& g, cudaStream_t stream) {
  if (g.M <= 0 || g.N <= 0) return nullptr;
  const int ot = g.out_type < 0 ? g.type : g.out_type;  // C's type
  if (ot != g.type && (ot != kF32 || g.bias || g.residual))
    return "a GEMM with a float32 result from half-precision operands takes no bias or residual";
  // Batch dims: merge neighbours that collapse for A, B and C alike, then run the largest one as
  // cuBLASLt's strided batch and loop over the others here.
  const int64_t mn = g.M * g.N;
  int nb = 0;
  int64_t size[kMaxBatchDims], sa_[kMaxBatchDims], sb_[kMaxBatchDims], sc_[kMaxBatchDims];
  {
    int64_t cstride = mn;
    int64_t cs[kMaxBatchDims];
    for (int d = g.nbatch - 1; d >= 0; --d) {
      cs[d] = cstride;
      cstride *= g.bsize[d];
    }
    for (int d = 0; d < g.nbatch; ++d) {
      if (g.bsize[d] == 1) continue;
      if (nb > 0 && sa_[nb - 1] == g.bsize[d] * g.bsa[d] && sb_[nb - 1] == g.bsize[d] * g.bsb[d] && sc_[nb - 1] == g.bsize[d] * cs[d]) {
        size[nb - 1] *= g.bsize[d];
        sa_[nb - 1] = g.bsa[d];
        sb_[nb - 1] = g.bsb[d];
        sc_[nb - 1] = cs[d];
        continue;
      }
      size[nb] = g.bsize[d];
      sa_[nb] = g.bsa[d];
      sb_[nb] = g.bsb[d];
      sc_[nb] = cs[d];
      ++nb;
    }
  }
  int64_t total = 1;
  for (int d = 0; d < nb; ++d) total *= size[d];
  for (int d = 0; d < g.nbatch; ++d)
    if (g.bsize[d] == 0) total = 0;
  if (total == 0) return nullptr;
  // The epilogue as a kernel after the product (the bias's channel: n, or m with bias_rows).
  auto epilogue_kernel = [&](const void* residual) {
    return bias_act(g.C, total * mn, g.bias_rows ? g.N : 1, g.bias_rows ? g.M : g.N, g.bias, residual, g.act, stream, ot);
  };
  if (g.K <= 0) {
    cudaError_t e = cudaMemsetAsync(g.C, 0, static_cast<size_t>(total * mn) * elem_bytes(ot), stream);
    if (e != cudaSuccess) return cuda_error("cudaMemsetAsync", e);
    return epilogue_kernel(g.residual);
  }
  int big = -1;
  for (int d = 0; d < nb; ++d)
    if (big < 0 || size[d] > size[big]) big = d;
  const int64_t inner = big >= 0 ? size[big] : 1, sa = big >= 0 ? sa_[big] : 0, sb = big >= 0 ? sb_[big] : 0, sc = big >= 0 ? sc_[big] : mn;
  const int64_t outer = total / inner;
  // Offsets of outer problem o (the batch dims other than `big`).
  auto offset = [&](int64_t o, int64_t* a, int64_t* b, int64_t* c) {
    *a = *b = *c = 0;
    for (int d = nb - 1; d >= 0; --d) {
      if (d == big) continue;
      const int64_t i = o % size[d];
      o /= size[d];
      *a += i * sa_[d];
      *b += i * sb_[d];
      *c += i * sc_[d];
    }
  };
  // Row-major C[M, N] is col-major C'[N, M]: C' = B'[N, K] x A'[K, M].
  Operand ob = operand(g.N, g.K, g.ldb_n, g.ldb_k);  // cuBLAS "A"
  Operand oa = operand(g.K, g.M, g.lda_k, g.lda_m);  // cuBLAS "B"
  if (!ob.ok || !oa.ok) {  // a layout cuBLASLt cannot take: the naive kernel per problem
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t a, b, c;
        offset(o, &a, &b, &c);
        const int64_t blocks = std::min<int64_t>((mn + 255) / 256, 65535);
        const void* A = advance(g.A, a + i * sa, g.type);
        const void* B = advance(g.B, b + i * sb, g.type);
        void* C = advance(g.C, c + i * sc, ot);
        if (g.type != ot && g.type == kBF16)
          gemm_naive<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(g.M, g.N, g.K, static_cast<const __nv_bfloat16*>(A), g.lda_m, g.lda_k,
                                                                           static_cast<const __nv_bfloat16*>(B), g.ldb_k, g.ldb_n,
                                                                           static_cast<float*>(C));
        else if (g.type != ot)
          gemm_naive<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(g.M, g.N, g.K, static_cast<const __half*>(A), g.lda_m, g.lda_k,
                                                                           static_cast<const __half*>(B), g.ldb_k, g.ldb_n, static_cast<float*>(C));
        else if (g.type == kBF16)
          gemm_naive<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(g.M, g.N, g.K, static_cast<const __nv_bfloat16*>(A), g.lda_m, g.lda_k,
                                                                           static_cast<const __nv_bfloat16*>(B), g.ldb_k, g.ldb_n,
                                                                           static_cast<__nv_bfloat16*>(C));
        else if (g.type == kF16)
          gemm_naive<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(g.M, g.N, g.K, static_cast<const __half*>(A), g.lda_m, g.lda_k,
                                                                           static_cast<const __half*>(B), g.ldb_k, g.ldb_n, static_cast<__half*>(C));
        else
          gemm_naive<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(g.M, g.N, g.K, static_cast<const float*>(A), g.lda_m, g.lda_k,
                                                                           static_cast<const float*>(B), g.ldb_k, g.ldb_n, static_cast<float*>(C));
      }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_error("the GEMM kernel", e);
    return epilogue_kernel(g.residual);
  }
  // cuBLASLt's epilogue: bias (per column, a 16-byte aligned vector: heuristic kernels assume
  // aligned operands) and ReLU in the descriptor, the residual as C with beta = 1.
  const bool lt_bias = g.bias && !g.bias_rows && reinterpret_cast<uintptr_t>(g.bias) % 16 == 0;
  const bool relu = g.act == kActRelu, gelu = g.act == kActGeluTanh;
  cublasLtEpilogue_t epi = lt_bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                           : !g.bias && relu ? CUBLASLT_EPILOGUE_RELU
                           : !g.bias && gelu ? CUBLASLT_EPILOGUE_GELU
                                             : CUBLASLT_EPILOGUE_DEFAULT;
  const int32_t batch = static_cast<int32_t>(inner);
  const bool tf32 = g.type == kF32 && (g.conv ? ctx.math.conv : ctx.math.gemm) == ptc_rt::MathMode::TF32;
  // (A half-precision C whose rows are not 16-byte aligned leaves cuBLASLt only its unaligned
  // kernels; the pad_linear_weights pass pads such layers' weights instead.)
  const int64_t ldc = g.N;
  void* cout = g.C;
  auto key_for = [&](cublasLtEpilogue_t ep) {
    return std::array<int64_t, 16>{g.M, g.N, g.K, ob.op, ob.ld, oa.op, oa.ld, batch, batch > 1 ? sa : 0, batch > 1 ? sb : 0,
                                   batch > 1 ? sc : 0, static_cast<int64_t>(ctx.gemm_ws_bytes), static_cast<int64_t>(ep), tf32, g.type * 4 + ot, ldc};
  };
  std::lock_guard<std::mutex> lock(ctx.plans->mu);  // also guards the descriptor's bias pointer
  // The plan for `ep`, made on first use; end() with *err set when none could be made. A failed
  // epilogue plan is kept (marked failed) so that later calls go straight to the plain one.
  auto find_plan = [&](cublasLtEpilogue_t ep, const char** err) {
    auto at = ctx.plans->plans.find(key_for(ep));
    if (at != ctx.plans->plans.end()) return at;
    Plan fresh;
    *err = make_plan(ctx.lt, ob, oa, g.M, g.N, ldc, batch, sa, sb, sc, ctx.gemm_ws_bytes, ep, tf32, g.type, ot, fresh);
    if (*err) {
      GemmPlans tmp;  // frees what was made
      tmp.plans[key_for(ep)] = fresh;
      if (ep == CUBLASLT_EPILOGUE_DEFAULT) return ctx.plans->plans.end();
      fresh = Plan{};
      fresh.failed = true;
    }
    return ctx.plans->plans.emplace(key_for(ep), fresh).first;
  };
  const char* err = nullptr;
  auto it = find_plan(epi, &err);
  if (it != ctx.plans->plans.end() && it->second.failed) {  // no algorithm with this epilogue: plain GEMM, then a kernel
    epi = CUBLASLT_EPILOGUE_DEFAULT;
    it = find_plan(epi, &err);
  }
  if (it == ctx.plans->plans.end()) return err;
  Plan& plan = it->second;
  if (epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS || epi == CUBLASLT_EPILOGUE_GELU_BIAS) {
    cublasStatus_t st = cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_error("bias pointer", st);
  }
  const float alpha = 1.f, beta = g.residual ? 1.f : 0.f;
  // The whole GEMM with one algorithm. Running it again gives the same result (C is never the
  // output unless beta = 0), so candidates can be timed on the call's own buffers.
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    for (int64_t o = 0; o < outer; ++o) {
      int64_t a, b, c;
      offset(o, &a, &b, &c);
      const void* cin = g.residual ? advance(g.residual, c, ot) : advance(static_cast<const void*>(cout), c, ot);
      cublasStatus_t st = cublasLtMatmul(ctx.lt, plan.desc, &alpha, advance(g.B, b, g.type), plan.la, advance(g.A, a, g.type), plan.lb, &beta,
                                         cin, plan.lc, advance(cout, c, ot), plan.lc, &algo, ctx.gemm_ws, ctx.gemm_ws_bytes, stream);
      if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
  };
  // ptc's 3xTF32 kernel (exact fp32 only: with TF32 allowed cuBLASLt's tensor-core GEMMs win): a
  // k-contiguous A and a k- or n-contiguous B, the whole epilogue in the kernel.
  TcGemm tg{};
  auto tc_problem = [&](int64_t o) {  // outer problem o
    int64_t a, b, c;
    offset(o, &a, &b, &c);
    TcGemm t = tg;
    t.A += a, t.B += b, t.C += c;
    if (t.residual) t.residual += c;
    return t;
  };
  bool tc_fits = false;
  if (g.type == kF32 && !tf32 && tc_gemm_enabled() && g.lda_k == 1 && (g.ldb_k == 1 || g.ldb_n == 1)) {
    const bool kmajor = g.ldb_k == 1 && (g.ldb_n != 1 || g.K > 1);
    tg = TcGemm{g.M, g.N, g.K, static_cast<const float*>(g.A), g.lda_m, static_cast<const float*>(g.B), kmajor ? g.ldb_n : g.ldb_k, kmajor,
                static_cast<float*>(g.C), inner, sa, sb, sc, static_cast<const float*>(g.bias), static_cast<const float*>(g.residual), g.act,
                g.bias_rows};
    tc_fits = true;
    for (int64_t o = 0; tc_fits && o < outer; ++o) tc_fits = tc_gemm_fits(tc_problem(o));  // every problem's pointers aligned
  }
  auto run_tc = [&](int config) -> const char* {
    for (int64_t o = 0; o < outer; ++o)
      if (const char* e = tc_gemm(tc_problem(o), config, stream)) return e;
    return nullptr;
  };
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (!plan.tuned && (plan.candidates.size() > 1 || tc_fits) && cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
      capture == cudaStreamCaptureStatusNone) {
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
      float best = INFINITY;
      // cuBLASLt's time includes the epilogue kernel it leaves (a per-row bias, ReLU6): the 3xTF32
      // kernels run the whole epilogue.
      auto run_with_epilogue = [&](const cublasLtMatmulAlgo_t& algo) {
        const cublasStatus_t st = run(algo);
        if (st == CUBLAS_STATUS_SUCCESS && epi == CUBLASLT_EPILOGUE_DEFAULT && epilogue_kernel(nullptr)) return CUBLAS_STATUS_EXECUTION_FAILED;
        return st;
      };
      for (const auto& algo : plan.candidates) {
        if (run(algo) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; an algorithm these pointers do not suit
        cudaEventRecord(e0, stream);
        bool ok = run_with_epilogue(algo) == CUBLAS_STATUS_SUCCESS && run_with_epilogue(algo) == CUBLAS_STATUS_SUCCESS;
        cudaEventRecord(e1, stream);
        float ms = 0.f;
        if (ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best) {
          best = ms;
          plan.algo = algo;
        }
      }
      for (int config = 0; tc_fits && config < kTcGemmConfigs; ++config) {
        if (run_tc(config)) continue;  // warm-up; a configuration this GPU has no image for
        cudaEventRecord(e0, stream);
        bool ok = !run_tc(config) && !run_tc(config);
        cudaEventRecord(e1, stream);
        float ms = 0.f;
        if (ok && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best) {
          best = ms;
          plan.tc = config;
        }
      }
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaGetLastError();
    plan.tuned = true;
  }
  if (plan.tc >= 0 && tc_fits) return run_tc(plan.tc);
  if (cublasStatus_t st = run(plan.algo); st != CUBLAS_STATUS_SUCCESS) return lt_error("cublasLtMatmul", st);
  if (epi != CUBLASLT_EPILOGUE_DEFAULT) return nullptr;
  return epilogue_kernel(nullptr);  // cuBLASLt added the residual as C
}

namespace {

__global__ void conv2d_direct(Conv2d a) {
  const int64_t total = a.N * a.O * a.OH * a.OW;
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r = i;
    const int64_t ow = r % a.OW; r /= a.OW;
    const int64_t oh = r % a.OH; r /= a.OH;
    const int64_t o = r % a.O;
    const int64_t n = r / a.O;
    const int64_t g = o / Og;
    float acc = a.bias ? a.bias[o * a.bias_stride] : 0.f;
    for (int64_t ci = 0; ci < Cg; ++ci) {
      const float* xin = a.x + n * a.xs[0] + (g * Cg + ci) * a.xs[1];
      const float* w = a.w + o * a.ws[0] + ci * a.ws[1];
      for (int64_t kh = 0; kh < a.KH; ++kh) {
        const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
        if (ih < 0 || ih >= a.H) continue;
        for (int64_t kw = 0; kw < a.KW; ++kw) {
          const int64_t iw = ow * a.sw - a.pw + kw * a.dw;
          if (iw >= 0 && iw < a.W) acc += w[kh * a.ws[2] + kw * a.ws[3]] * xin[ih * a.xs[2] + iw * a.xs[3]];
        }
      }
    }
    a.y[i] = acc;
  }
}

}  // namespace

const char* conv2d(const Conv2d& a, cudaStream_t stream) {
  const int64_t total = a.N * a.O * a.OH * a.OW;
  if (total <= 0) return nullptr;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 1 << 20);
  conv2d_direct<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(a);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cuda_error("the convolution kernel", e);
}

}  // namespace ptc_cuda
