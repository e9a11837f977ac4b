// ptc_cuda_runtime.cu — see ptc_cuda_rt.h.
#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "ptc_cuda_rt.h"

namespace ptc_cuda {
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

// Any strides: one thread per output element (used only when cuBLASLt cannot take the layout).
__global__ void gemm_naive(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda_m, int64_t lda_k, const float* B,
                           int64_t ldb_k, int64_t ldb_n, float* C) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < M * N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / N, n = i % N;
    float acc = 0.f;
    for (int64_t k = 0; k < K; ++k) acc += A[m * lda_m + k * lda_k] * B[k * ldb_k + n * ldb_n];
    C[i] = acc;
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
  cublasLtMatmulAlgo_t algo{};
};

struct GemmPlans {
  std::mutex mu;
  std::map<std::array<int64_t, 11>, Plan> plans;
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
const char* make_plan(cublasLtHandle_t lt, const Operand& ob, const Operand& oa, int64_t M, int64_t N, int32_t batch, int64_t sa,
                      int64_t sb, size_t ws_bytes, Plan& plan) {
  const char* err = nullptr;
  auto check = [&](cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS && !err) err = lt_error(what, s);
    return s == CUBLAS_STATUS_SUCCESS;
  };
  const int64_t sc = M * N;
  auto layout = [&](cublasLtMatrixLayout_t* l, uint64_t rows, uint64_t cols, int64_t ld, int64_t stride) {
    if (!check(cublasLtMatrixLayoutCreate(l, CUDA_R_32F, rows, cols, ld), "cublasLtMatrixLayoutCreate")) return;
    if (batch > 1) {
      check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch), "batch count");
      check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride), "batch stride");
    }
  };
  // Exact fp32 (no TF32): CUBLAS_COMPUTE_32F.
  if (check(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")) {
    check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ob.op, sizeof ob.op), "transa");
    check(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &oa.op, sizeof oa.op), "transb");
  }
  layout(&plan.la, ob.rows, ob.cols, ob.ld, sb);
  layout(&plan.lb, oa.rows, oa.cols, oa.ld, sa);
  layout(&plan.lc, static_cast<uint64_t>(N), static_cast<uint64_t>(M), N, sc);
  cublasLtMatmulPreference_t pref = nullptr;
  if (!err && check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) {
    uint64_t wsb = ws_bytes;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb), "workspace");
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    if (check(cublasLtMatmulAlgoGetHeuristic(lt, plan.desc, plan.la, plan.lb, plan.lc, plan.lc, pref, 1, &heur, &found),
              "cublasLtMatmulAlgoGetHeuristic")) {
      if (found == 0) err = "cuBLASLt found no algorithm for a GEMM";
      plan.algo = heur.algo;
    }
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  return err;
}

}  // namespace

const char* gemm(const Ctx& ctx, const Gemm& g, cudaStream_t stream) {
  if (g.M <= 0 || g.N <= 0) return nullptr;
  int64_t outer = 1, inner = 1, sa = 0, sb = 0;
  for (int d = 0; d + 1 < g.nbatch; ++d) outer *= g.bsize[d];
  if (g.nbatch > 0) {
    inner = g.bsize[g.nbatch - 1];
    sa = g.bsa[g.nbatch - 1];
    sb = g.bsb[g.nbatch - 1];
  }
  if (outer * inner == 0) return nullptr;
  if (g.K <= 0) {
    cudaError_t e = cudaMemsetAsync(g.C, 0, static_cast<size_t>(outer * inner * g.M * g.N) * sizeof(float), stream);
    return e == cudaSuccess ? nullptr : cuda_error("cudaMemsetAsync", e);
  }
  // Row-major C[M, N] is col-major C'[N, M]: C' = B'[N, K] x A'[K, M].
  Operand ob = operand(g.N, g.K, g.ldb_n, g.ldb_k);  // cuBLAS "A"
  Operand oa = operand(g.K, g.M, g.lda_k, g.lda_m);  // cuBLAS "B"
  auto offset = [&](int64_t o, int64_t* a, int64_t* b) {
    *a = *b = 0;
    for (int d = g.nbatch - 2; d >= 0; --d) {
      const int64_t i = o % g.bsize[d];
      o /= g.bsize[d];
      *a += i * g.bsa[d];
      *b += i * g.bsb[d];
    }
  };
  if (!ob.ok || !oa.ok) {  // a layout cuBLASLt cannot take: the naive kernel per problem
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t a, b;
        offset(o, &a, &b);
        a += i * sa;
        b += i * sb;
        const int64_t blocks = std::min<int64_t>((g.M * g.N + 255) / 256, 65535);
        gemm_naive<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(g.M, g.N, g.K, g.A + a, g.lda_m, g.lda_k, g.B + b, g.ldb_k,
                                                                         g.ldb_n, g.C + (o * inner + i) * g.M * g.N);
      }
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? nullptr : cuda_error("the GEMM kernel", e);
  }
  const int32_t batch = static_cast<int32_t>(inner);
  const std::array<int64_t, 11> key{g.M, g.N, g.K, ob.op, ob.ld, oa.op, oa.ld, batch, batch > 1 ? sa : 0, batch > 1 ? sb : 0,
                                    static_cast<int64_t>(ctx.gemm_ws_bytes)};
  Plan plan;
  {
    std::lock_guard<std::mutex> lock(ctx.plans->mu);
    auto it = ctx.plans->plans.find(key);
    if (it == ctx.plans->plans.end()) {
      Plan fresh;
      if (const char* err = make_plan(ctx.lt, ob, oa, g.M, g.N, batch, sa, sb, ctx.gemm_ws_bytes, fresh)) {
        GemmPlans tmp;  // frees what was made
        tmp.plans[key] = fresh;
        return err;
      }
      it = ctx.plans->plans.emplace(key, fresh).first;
    }
    plan = it->second;
  }
  const float alpha = 1.f, beta = 0.f;
  const int64_t sc = g.M * g.N;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t a, b;
    offset(o, &a, &b);
    cublasStatus_t s = cublasLtMatmul(ctx.lt, plan.desc, &alpha, g.B + b, plan.la, g.A + a, plan.lb, &beta, g.C + o * inner * sc, plan.lc,
                                      g.C + o * inner * sc, plan.lc, &plan.algo, ctx.gemm_ws, ctx.gemm_ws_bytes, stream);
    if (s != CUBLAS_STATUS_SUCCESS) return lt_error("cublasLtMatmul", s);
  }
  return nullptr;
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
