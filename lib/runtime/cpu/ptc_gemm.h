// ptc_gemm.h — fp32 GEMM for generated CPU code: header-only, C++17 + (optional) OpenMP.
//
//   C[m, n] = ep( alpha * sum_k A[m, k] * B[k, n]  +  beta * C[m, n] )
//
// with arbitrary element strides for A and B (row- or column-major A, B as [K, N] or as the
// [N, K] "weight" layout of nn.Linear, padded leading dimensions, ...) and row-major C with a
// leading dimension. beta == 0 never reads C. C must not overlap A or B.
//
// Algorithm (Goto / BLIS): for each KC x NC panel of B (packed), for each MC x KC block of A
// (packed), run the MR x NR register-tiled micro-kernel (ptc_gemm_kernel.h) over the block.
// The epilogue runs on each MR x NR tile right after its last K block is stored, while the
// tile is still in L1, so bias / activation / residual fuse without another pass over C:
//
//   ep(float* c, int64_t row, int64_t col0, int64_t ncols)      // gemm
//   ep(float* c, int64_t batch, int64_t row, int64_t col0, int64_t ncols)   // gemm_batched
//
// c points at C[row, col0] (of batch `batch`), and ncols <= NR contiguous floats are final.
// The epilogue may be called from several threads at once (for disjoint tiles).
//
// Threads: with OpenMP, the problem (batch x M x N) is cut into one sub-problem per thread
// (or a multiple, for balance) along M and/or N, chosen by a cost model of padded compute and
// packing; each thread runs the serial blocked algorithm on its part with its own packing
// buffers; one `#pragma omp parallel for schedule(static)`, no nested regions (inside a parallel
// region, or without -fopenmp, everything runs serially in the calling thread).
//
// Workspace (packing buffers, no global mutable state): either caller-provided, sized by
// gemm_workspace_bytes(M, N, K, nthreads) (any alignment; threads beyond what fits are not
// used), or — when ws == nullptr — a per-thread thread_local buffer that grows to at most
// gemm_workspace_bytes(M, N, K, 1) (≈ (MC + NC) * KC * 4 bytes: 1.3 MiB for AVX-512,
// 2.2 MiB for AVX2) and is freed when the thread exits.
//
// Small problems (M*N*K <= 32^3) and skinny ones (M or N < 4, matrix-vector products) take a
// direct loop path without packing.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ptc_gemm_kernel.h"
#include "ptc_vec.h"

namespace ptc_rt {

struct GemmArgs {
  int64_t M, N, K;
  const float* A;
  int64_t lda_m, lda_k;  // A[m, k] = A[m * lda_m + k * lda_k]
  const float* B;
  int64_t ldb_k, ldb_n;  // B[k, n] = B[k * ldb_k + n * ldb_n]   (weight W[N,K]: ldb_k=1, ldb_n=K)
  float* C;
  int64_t ldc_m;  // C[m, n] = C[m * ldc_m + n]
  float alpha = 1.f;
  float beta = 0.f;
  // Optional: B already packed by gemm_pack_b (e.g. a constant weight, packed once at model
  // load). When set, B / ldb_* are ignored, and gemm_batched's B offsets apply to B_packed.
  const float* B_packed = nullptr;
};

// ---- epilogues -------------------------------------------------------------------------------
struct NoEpilogue {
  void operator()(float*, int64_t, int64_t, int64_t) const {}
  void operator()(float*, int64_t, int64_t, int64_t, int64_t) const {}
};

enum class Act { None, Relu, Gelu /* erf */, GeluTanh };

template <Act A>
inline float apply_act(float v) {
  if (A == Act::Relu) return v > 0.f ? v : 0.f;
  if (A == Act::Gelu) return 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f));
  if (A == Act::GeluTanh) {
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.f + std::tanh(u));
  }
  return v;
}

// C[row, col] = act(C[row, col] + bias[col * stride])  — nn.Linear / addmm bias (stride 0:
// scalar bias; bias == nullptr: activation only).
template <Act A = Act::None>
struct BiasColEpilogue {
  const float* bias = nullptr;
  int64_t stride = 1;
  void operator()(float* c, int64_t /*row*/, int64_t col0, int64_t n) const {
    if (bias && stride == 1) {
      const float* b = bias + col0;
      for (int64_t j = 0; j < n; ++j) c[j] = apply_act<A>(c[j] + b[j]);
    } else if (bias) {
      for (int64_t j = 0; j < n; ++j) c[j] = apply_act<A>(c[j] + bias[(col0 + j) * stride]);
    } else {
      for (int64_t j = 0; j < n; ++j) c[j] = apply_act<A>(c[j]);
    }
  }
  void operator()(float* c, int64_t, int64_t row, int64_t col0, int64_t n) const {
    (*this)(c, row, col0, n);
  }
};

// C[row, col] = act(C[row, col] + bias[row * stride])  — e.g. convolution as GEMM with the
// output channels along M.
template <Act A = Act::None>
struct BiasRowEpilogue {
  const float* bias = nullptr;
  int64_t stride = 1;
  void operator()(float* c, int64_t row, int64_t /*col0*/, int64_t n) const {
    const float b = bias ? bias[row * stride] : 0.f;
    for (int64_t j = 0; j < n; ++j) c[j] = apply_act<A>(c[j] + b);
  }
  void operator()(float* c, int64_t, int64_t row, int64_t col0, int64_t n) const {
    (*this)(c, row, col0, n);
  }
};

namespace gemm_detail {

// Per-thread packing buffer size (floats) for any sub-problem of an M x N x K problem.
inline int64_t per_thread_floats(int64_t M, int64_t N, int64_t K) {
  const int64_t kc = std::min<int64_t>(KC, std::max<int64_t>(K, 1));
  const int64_t mc = std::min<int64_t>(MC, round_up(std::max<int64_t>(M, 1), MR));
  const int64_t nc = std::min<int64_t>(NC, round_up(std::max<int64_t>(N, 1), NR));
  return a_buffer_floats(mc, kc) + round_up(nc * kc, 16);
}

inline float* align64(void* p) {
  const uintptr_t u = (reinterpret_cast<uintptr_t>(p) + 63) & ~static_cast<uintptr_t>(63);
  return reinterpret_cast<float*>(u);
}

// Grow-only per-thread buffer (for ws == nullptr).
struct TlsBuffer {
  float* p = nullptr;
  int64_t n = 0;
  ~TlsBuffer() { std::free(p); }
  float* get(int64_t floats) {
    if (floats > n) {
      std::free(p);
      const size_t bytes = static_cast<size_t>(round_up(floats * 4, 64));
      p = static_cast<float*>(std::aligned_alloc(64, bytes));
      n = p ? floats : 0;
      if (!p) throw std::bad_alloc();
    }
    return p;
  }
};
inline float* tls_buffer(int64_t floats) {
  static thread_local TlsBuffer buf;
  return buf.get(floats);
}

inline int max_threads() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}
inline int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// Serial blocked GEMM on rows [m0, m1) x columns [n0, n1) of one problem; ws holds
// per_thread_floats(...) floats, 64-byte aligned. ep4(c, row, col0, ncols).
template <class Ep4>
void gemm_block(const GemmArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* ws,
                Ep4& ep) {
  const int64_t M = m1 - m0, N = n1 - n0, K = g.K;
  const int64_t kc = k_block(K);
  const int64_t mc = round_up(ceil_div(M, ceil_div(M, MC)), MR);  // balanced, multiple of MR
  const int64_t nc = round_up(ceil_div(N, ceil_div(N, NC)), NR);
  float* const Ap = ws;
  float* const Bp = ws + a_buffer_floats(std::min<int64_t>(MC, round_up(M, MR)), kc);
  const int64_t ldc = g.ldc_m;

  for (int64_t jc = n0; jc < n1; jc += nc) {
    const int64_t ncur = std::min(nc, n1 - jc);
    for (int64_t pc = 0; pc < K; pc += kc) {
      const int64_t kcur = std::min(kc, K - pc);
      const bool last = pc + kcur >= K;
      const float beta = pc == 0 ? g.beta : 1.f;
      const float* bpanel = Bp;
      if (g.B_packed)  // see gemm_pack_b: k block at pc * Npad, then NR-column slivers
        bpanel = g.B_packed + pc * round_up(g.N, NR) + jc * kcur;
      else
        pack_b(g.B + pc * g.ldb_k + jc * g.ldb_n, g.ldb_k, g.ldb_n, kcur, ncur, Bp);
      for (int64_t ic = m0; ic < m1; ic += mc) {
        const int64_t mcur = std::min(mc, m1 - ic);
        pack_a(g.A + ic * g.lda_m + pc * g.lda_k, g.lda_m, g.lda_k, mcur, kcur, Ap);
        for (int64_t jr = 0; jr < ncur; jr += NR) {
          const int nr = static_cast<int>(std::min<int64_t>(NR, ncur - jr));
          const float* bs = bpanel + jr * kcur;
          for (int64_t ir = 0; ir < mcur; ir += MR) {
            const int mr = static_cast<int>(std::min<int64_t>(MR, mcur - ir));
            const float* as = Ap + ir * kcur;
            float* c = g.C + (ic + ir) * ldc + (jc + jr);
            if (mr == MR && nr == NR)
              ukernel(kcur, as, bs, c, ldc, g.alpha, beta);
            else
              ukernel_edge(kcur, as, bs, c, ldc, mr, nr, g.alpha, beta);
            if (last)
              for (int i = 0; i < mr; ++i) ep(c + i * ldc, ic + ir + i, jc + jr, nr);
          }
        }
      }
    }
  }
}

// ---- direct path (small / skinny problems, no packing) ---------------------------------------
constexpr int64_t kDirectCols = 4 * W;  // columns per register block in the axpy form

template <class Ep4>
void gemm_direct(const GemmArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, Ep4& ep) {
  const int64_t K = g.K;
  for (int64_t m = m0; m < m1; ++m) {
    const float* a = g.A + m * g.lda_m;
    float* crow = g.C + m * g.ldc_m;
    if (g.ldb_n == 1) {
      // axpy form: a register block of up to 4 vectors of C, B rows contiguous
      for (int64_t nb = n0; nb < n1; nb += kDirectCols) {
        const int64_t nn = std::min<int64_t>(kDirectCols, n1 - nb);
        vfloat acc[4] = {vzero(), vzero(), vzero(), vzero()};
        if (nn == kDirectCols) {
          for (int64_t k = 0; k < K; ++k) {
            const float av = a[k * g.lda_k];
            const float* b = g.B + k * g.ldb_k + nb;
            for (int v = 0; v < 4; ++v) acc[v] += vload(b + v * W) * av;
          }
        } else {
          for (int64_t k = 0; k < K; ++k) {
            const float av = a[k * g.lda_k];
            const float* b = g.B + k * g.ldb_k + nb;
            for (int v = 0; v * W < nn; ++v) {
              const int cnt = static_cast<int>(std::min<int64_t>(W, nn - v * W));
              acc[v] += (cnt == W ? vload(b + v * W) : vload_partial(b + v * W, cnt)) * av;
            }
          }
        }
        float* c = crow + nb;
        for (int64_t j = 0; j < nn; ++j) {
          const float s = g.alpha * acc[j / W][j % W];
          c[j] = g.beta == 0.f ? s : s + g.beta * c[j];
        }
      }
    } else if (g.lda_k == 1 && g.ldb_k == 1) {
      // dot form: A row and B column (a W row) both contiguous in k
      for (int64_t n = n0; n < n1; ++n) {
        const float* b = g.B + n * g.ldb_n;
        vfloat acc = vzero();
        int64_t k = 0;
        for (; k + W <= K; k += W) acc += vload(a + k) * vload(b + k);
        float s = vreduce_add(acc);
        for (; k < K; ++k) s += a[k] * b[k];
        s *= g.alpha;
        crow[n] = g.beta == 0.f ? s : s + g.beta * crow[n];
      }
    } else {  // general strides
      for (int64_t n = n0; n < n1; ++n) {
        const float* b = g.B + n * g.ldb_n;
        float s = 0.f;
        for (int64_t k = 0; k < K; ++k) s += a[k * g.lda_k] * b[k * g.ldb_k];
        s *= g.alpha;
        crow[n] = g.beta == 0.f ? s : s + g.beta * crow[n];
      }
    }
    ep(crow + n0, m, n0, n1 - n0);
  }
}

inline bool use_direct(int64_t M, int64_t N, int64_t K) {
  return M * N * K <= 32 * 32 * 32 || M < 4 || N < 4;
}

// Split one problem into tm x tn parts so that batch * tm * tn spreads evenly over P threads,
// minimising the per-part cost (padded compute + packing).
inline void choose_split(int64_t P, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t mr,
                         int64_t nr, bool packs, int64_t* tm_out, int64_t* tn_out) {
  *tm_out = *tn_out = 1;
  if (P <= 1) return;
  int64_t t = 1;
  if (batch < 4 * P) {
    int64_t a = batch, b = P;
    while (b) { const int64_t r = a % b; a = b; b = r; }
    t = P / a;  // batch * t is a multiple of P
  }
  const int64_t max_m = ceil_div(M, mr), max_n = ceil_div(N, nr);
  for (; t > 1; --t) {
    double best = -1;
    for (int64_t tm = 1; tm <= t; ++tm) {
      if (t % tm) continue;
      const int64_t tn = t / tm;
      if (tm > max_m || tn > max_n) continue;
      const double mt = static_cast<double>(round_up(ceil_div(M, tm), mr));
      const double nt = static_cast<double>(round_up(ceil_div(N, tn), nr));
      double cost = mt * nt * static_cast<double>(K);
      if (packs) cost += 8.0 * static_cast<double>(K) * (nt + mt * std::ceil(nt / NC));
      if (best < 0 || cost < best) { best = cost; *tm_out = tm; *tn_out = tn; }
    }
    if (best >= 0) return;
  }
}

// The driver for gemm and gemm_batched. off(b, &oa, &ob, &oc): element offsets of batch b.
// ep5(c, batch, row, col0, ncols).
template <class OffFn, class Ep5>
void gemm_run(const GemmArgs& g, int64_t batch, const OffFn& off, Ep5& ep, void* ws,
              size_t ws_bytes) {
  const int64_t M = g.M, N = g.N, K = g.K;
  if (M <= 0 || N <= 0 || batch <= 0) return;

  auto sub = [&](int64_t b) {
    int64_t oa = 0, ob = 0, oc = 0;
    off(b, &oa, &ob, &oc);
    GemmArgs s = g;
    s.A += oa;
    if (s.B_packed)
      s.B_packed += ob;
    else
      s.B += ob;
    s.C += oc;
    return s;
  };

  if (K <= 0) {  // C = beta * C, then the epilogue
    for (int64_t b = 0; b < batch; ++b) {
      const GemmArgs s = sub(b);
      for (int64_t m = 0; m < M; ++m) {
        float* c = s.C + m * s.ldc_m;
        for (int64_t n = 0; n < N; ++n) c[n] = s.beta == 0.f ? 0.f : s.beta * c[n];
        ep(c, b, m, 0, N);
      }
    }
    return;
  }

  const double flops = 2.0 * static_cast<double>(M) * N * K * batch;
  int64_t P = max_threads();
  P = std::max<int64_t>(1, std::min<int64_t>(P, static_cast<int64_t>(flops / 2e6)));
  const bool direct = !g.B_packed && use_direct(M, N, K);

  const int64_t ptf = per_thread_floats(M, N, K);
  float* wsa = nullptr;
  if (!direct && ws) {
    wsa = align64(ws);
    const size_t used = static_cast<size_t>(reinterpret_cast<char*>(wsa) - static_cast<char*>(ws));
    const int64_t fit = ws_bytes > used ? static_cast<int64_t>((ws_bytes - used) / (ptf * 4)) : 0;
    if (fit < 1) wsa = nullptr;  // too small: fall back to thread_local buffers
    else P = std::min(P, fit);
  }

  int64_t tm = 1, tn = 1;
  if (direct)
    choose_split(P, batch, M, N, K, 1, kDirectCols, false, &tm, &tn);
  else
    choose_split(P, batch, M, N, K, MR, NR, true, &tm, &tn);
  const int64_t cm = direct ? ceil_div(M, tm) : round_up(ceil_div(M, tm), MR);
  const int64_t cn = round_up(ceil_div(N, tn), direct ? kDirectCols : NR);
  const int64_t items = batch * tm * tn;
  const int nthreads = static_cast<int>(std::min<int64_t>(P, items));
  (void)nthreads;

#ifdef _OPENMP
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1)
#endif
  for (int64_t it = 0; it < items; ++it) {
    const int64_t b = it / (tm * tn);
    const int64_t r = it % (tm * tn);
    const int64_t m0 = (r / tn) * cm, n0 = (r % tn) * cn;
    if (m0 >= M || n0 >= N) continue;
    const int64_t m1 = std::min(M, m0 + cm), n1 = std::min(N, n0 + cn);
    const GemmArgs s = sub(b);
    auto ep4 = [&](float* c, int64_t row, int64_t col0, int64_t n) { ep(c, b, row, col0, n); };
    if (direct) {
      gemm_direct(s, m0, m1, n0, n1, ep4);
    } else {
      float* w = wsa ? wsa + thread_id() * ptf : tls_buffer(ptf);
      gemm_block(s, m0, m1, n0, n1, w, ep4);
    }
  }
}

}  // namespace gemm_detail

// ---- API -------------------------------------------------------------------------------------

// Bytes of caller workspace for gemm / gemm_batched of this size run by up to nthreads threads
// (includes 64 bytes of alignment slack; any alignment of the pointer is fine).
inline size_t gemm_workspace_bytes(int64_t M, int64_t N, int64_t K, int nthreads) {
  return static_cast<size_t>(gemm_detail::per_thread_floats(M, N, K)) * 4 *
             static_cast<size_t>(std::max(nthreads, 1)) + 64;
}

// Pre-packing B (K x N, any strides) for GemmArgs::B_packed: gemm_packed_b_floats(K, N) floats
// at dst (64-byte alignment recommended). The packed layout depends on the blocking compiled
// into this header (target ISA, PTC_GEMM_* macros): pack and use it in the same library.
inline size_t gemm_packed_b_floats(int64_t K, int64_t N) {
  return static_cast<size_t>(std::max<int64_t>(K, 0) *
                             gemm_detail::round_up(std::max<int64_t>(N, 1), gemm_detail::NR));
}
inline void gemm_pack_b(int64_t K, int64_t N, const float* B, int64_t ldb_k, int64_t ldb_n,
                        float* dst) {
  using namespace gemm_detail;
  if (K <= 0 || N <= 0) return;
  const int64_t kc = k_block(K);  // the same K blocks as gemm_block
  const int64_t npad = round_up(N, NR);
  for (int64_t pc = 0; pc < K; pc += kc)
    pack_b(B + pc * ldb_k, ldb_k, ldb_n, std::min(kc, K - pc), N, dst + pc * npad);
}

// C = ep(alpha * A * B + beta * C). ws: nullptr (thread_local buffers) or ws_bytes of caller
// workspace (see gemm_workspace_bytes).
template <class Epilogue>
void gemm(const GemmArgs& a, Epilogue&& ep, void* ws = nullptr, size_t ws_bytes = 0) {
  auto ep5 = [&](float* c, int64_t, int64_t row, int64_t col0, int64_t n) { ep(c, row, col0, n); };
  auto off = [](int64_t, int64_t* oa, int64_t* ob, int64_t* oc) { *oa = *ob = *oc = 0; };
  gemm_detail::gemm_run(a, 1, off, ep5, ws, ws_bytes);
}

inline void gemm(const GemmArgs& a) { gemm(a, NoEpilogue{}); }

// Batched: problem b uses A + b*stride_a, B + b*stride_b, C + b*stride_c (a stride of 0
// broadcasts, e.g. one weight for all batches). ep(c, batch, row, col0, ncols).
template <class Epilogue>
void gemm_batched(const GemmArgs& a, int64_t batch, int64_t stride_a, int64_t stride_b,
                  int64_t stride_c, Epilogue&& ep, void* ws = nullptr, size_t ws_bytes = 0) {
  auto off = [=](int64_t b, int64_t* oa, int64_t* ob, int64_t* oc) {
    *oa = b * stride_a;
    *ob = b * stride_b;
    *oc = b * stride_c;
  };
  gemm_detail::gemm_run(a, batch, off, ep, ws, ws_bytes);
}

// Batched with arbitrary per-batch offsets (several / broadcast batch dims of torch.matmul):
// offsets(b, int64_t* oa, int64_t* ob, int64_t* oc) gives the element offsets of problem b.
template <class OffsetFn, class Epilogue>
void gemm_batched_fn(const GemmArgs& a, int64_t batch, OffsetFn&& offsets, Epilogue&& ep,
                     void* ws = nullptr, size_t ws_bytes = 0) {
  gemm_detail::gemm_run(a, batch, offsets, ep, ws, ws_bytes);
}

}  // namespace ptc_rt
