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
// c points at C[row, col0] (of batch `batch`), and the ncols contiguous floats there are final
// (ncols is a tile width, e.g. NR; rely on nothing about it). Each element is passed exactly
// once; the epilogue may run on several threads at once (for disjoint tiles), in any order.
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
// gemm_workspace_bytes(M, N, K, 1) (≈ (MC + NC) * KC * 4 bytes: 2.5 MiB for AVX-512,
// 1.2 MiB for AVX2) and is freed when the thread exits.
//
// Matrix-vector-like problems (M <= 4, or N <= 8 with contiguous A rows and B columns) take a
// direct loop path without packing (see use_direct); all others, even tiny ones, are packed.
// A constant B (a weight) can be packed once with gemm_pack_b and passed as GemmArgs::B_packed.
//
// Files: ptc_vec.h (portable SIMD vector), ptc_gemm_kernel.h (micro-kernel, packing, blocking
// parameters and their rationale), this file (driver and API).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <atomic>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ptc_gemm_kernel.h"
#include "ptc_rt.h"  // GemmArgs
#include "ptc_vec.h"

namespace ptc_rt {

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

// Grow-only per-thread buffer (for ws == nullptr); nullptr if the allocation fails.
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

// How gemm_block fills a B panel: packb(g, k0, kc, n0, nc, dst) writes rows [k0, k0+kc) x
// columns [n0, n0+nc) of the problem's B (nc <= NC) in the packed sliver format (see
// ptc_gemm_kernel.h). This one reads B through its strides; an implicit GEMM passes its own
// (a convolution gathers its im2col columns straight into the panel, ptc_conv.h).
struct StridedPackB {
  static constexpr bool kStrided = true;
  static constexpr double kCost = 8.0;  // per packed element, in multiply-adds (choose_split)
  void operator()(const GemmArgs& g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                  float* dst) const {
    pack_b(g.B + k0 * g.ldb_k + n0 * g.ldb_n, g.ldb_k, g.ldb_n, kc, nc, dst);
  }
};

// Serial blocked GEMM on rows [m0, m1) x columns [n0, n1) of one problem; ws holds
// per_thread_floats(...) floats, 64-byte aligned. ep4(c, row, col0, ncols).
template <class Ep4, class PackB = StridedPackB>
void gemm_block(const GemmArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float* ws,
                Ep4& ep, const PackB& packb = PackB{}) {
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
        packb(g, pc, kcur, jc, ncur, Bp);
      for (int64_t ic = m0; ic < m1; ic += mc) {
        const int64_t mcur = std::min(mc, m1 - ic);
        const float* ablock = Ap;
        if (g.A_packed)  // see packed_a_index: k block at pc * Mpad, then MR-row slivers
          ablock = g.A_packed + pc * round_up(g.M, MR) + ic * kcur;
        else
          pack_a(g.A + ic * g.lda_m + pc * g.lda_k, g.lda_m, g.lda_k, mcur, kcur, Ap);
        for (int64_t jr = 0; jr < ncur; jr += NR) {
          const int nr = static_cast<int>(std::min<int64_t>(NR, ncur - jr));
          const float* bs = bpanel + jr * kcur;
          for (int64_t ir = 0; ir < mcur; ir += MR) {
            const int mr = static_cast<int>(std::min<int64_t>(MR, mcur - ir));
            const float* as = ablock + ir * kcur;
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

// Where element (m, k) of an M x K matrix A goes in GemmArgs::A_packed (floats: K * round_up(M,
// MR), zero-padded): per K block (k_block), MR-row slivers of kcur x MR, as pack_a writes them.
inline int64_t packed_a_index(int64_t M, int64_t K, int64_t m, int64_t k) {
  const int64_t kc = k_block(K), pc = k / kc * kc, kcur = std::min(kc, K - pc);
  return pc * round_up(M, MR) + (m / MR) * MR * kcur + (k - pc) * MR + m % MR;
}

// ---- direct path (matrix-vector-like problems, no packing) -----------------------------------
constexpr int64_t kDirectCols = 4 * W;  // column granularity of the thread split
// accumulator vectors the axpy form may hold in registers (32 vector registers: 24; 16: 12)
#if defined(__AVX512F__) || defined(__ARM_NEON) || defined(__aarch64__)
constexpr int kDirectAccs = 24;
#else
constexpr int kDirectAccs = 12;
#endif

inline void store_direct(float* c, float v, const GemmArgs& g) {
  v *= g.alpha;
  *c = g.beta == 0.f ? v : v + g.beta * *c;
}

// axpy form for MB rows starting at m (B's rows contiguous): MB x VB vectors of C accumulate in
// registers while B is streamed once, a chunk of VB * W columns at a time.
template <int MB, class Ep4>
void direct_axpy(const GemmArgs& g, int64_t m, int64_t n0, int64_t n1, Ep4& ep) {
  constexpr int VB = std::min(16, kDirectAccs / MB);
  const int64_t K = g.K;
  const float* a[MB];
  for (int i = 0; i < MB; ++i) a[i] = g.A + (m + i) * g.lda_m;
  for (int64_t nb = n0; nb < n1; nb += VB * W) {
    const int64_t nn = std::min<int64_t>(VB * W, n1 - nb);
    vfloat acc[MB][VB];
    for (int i = 0; i < MB; ++i)
      for (int v = 0; v < VB; ++v) acc[i][v] = vzero();
    if (nn == VB * W) {
      for (int64_t k = 0; k < K; ++k) {
        const float* b = g.B + k * g.ldb_k + nb;
        float av[MB];
        for (int i = 0; i < MB; ++i) av[i] = a[i][k * g.lda_k];
#pragma GCC unroll 16
        for (int v = 0; v < VB; ++v) {
          const vfloat bv = vload(b + v * W);
          for (int i = 0; i < MB; ++i) acc[i][v] += bv * av[i];
        }
      }
    } else {  // last chunk: whole vectors, then one partial vector
      const int nfull = static_cast<int>(nn / W), rem = static_cast<int>(nn % W);
      for (int64_t k = 0; k < K; ++k) {
        const float* b = g.B + k * g.ldb_k + nb;
        float av[MB];
        for (int i = 0; i < MB; ++i) av[i] = a[i][k * g.lda_k];
        for (int v = 0; v < nfull; ++v) {
          const vfloat bv = vload(b + v * W);
          for (int i = 0; i < MB; ++i) acc[i][v] += bv * av[i];
        }
        if (rem) {
          const vfloat bv = vload_partial(b + nfull * W, rem);
          for (int i = 0; i < MB; ++i) acc[i][nfull] += bv * av[i];
        }
      }
    }
    for (int i = 0; i < MB; ++i) {
      float* c = g.C + (m + i) * g.ldc_m + nb;
      for (int64_t j = 0; j < nn; ++j) store_direct(c + j, acc[i][j / W][j % W], g);
      ep(c, m + i, nb, nn);
    }
  }
}

// Rows [m0, m1) x columns [n0, n1) without packing: the axpy form (above) when B's rows are
// contiguous, else per row and chunk of columns the dot form (A's rows and B's columns
// contiguous in k: 4 dot products at a time) or plain loops (general strides).
template <class Ep4>
void gemm_direct(const GemmArgs& g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, Ep4& ep) {
  const int64_t K = g.K;
  const bool dot = g.lda_k == 1 && g.ldb_k == 1;
  if (g.ldb_n == 1 && !(dot && g.N < W)) {
    for (int64_t m = m0; m < m1; m += 4) {
      switch (std::min<int64_t>(4, m1 - m)) {
        case 1: direct_axpy<1>(g, m, n0, n1, ep); break;
        case 2: direct_axpy<2>(g, m, n0, n1, ep); break;
        case 3: direct_axpy<3>(g, m, n0, n1, ep); break;
        default: direct_axpy<4>(g, m, n0, n1, ep); break;
      }
    }
    return;
  }
  for (int64_t nb = n0; nb < n1; nb += kDirectCols) {
    const int64_t nn = std::min<int64_t>(kDirectCols, n1 - nb);
    for (int64_t m = m0; m < m1; ++m) {
      const float* a = g.A + m * g.lda_m;
      float* c = g.C + m * g.ldc_m + nb;
      if (dot) {
        const int64_t kv = K - K % W;
        int64_t j = 0;
        for (; j + 4 <= nn; j += 4) {  // 4 columns at a time: 4 independent accumulators
          const float* b0 = g.B + (nb + j) * g.ldb_n;
          const float* b1 = b0 + g.ldb_n;
          const float* b2 = b1 + g.ldb_n;
          const float* b3 = b2 + g.ldb_n;
          vfloat s0 = vzero(), s1 = vzero(), s2 = vzero(), s3 = vzero();
          for (int64_t k = 0; k < kv; k += W) {
            const vfloat av = vload(a + k);
            s0 += av * vload(b0 + k);
            s1 += av * vload(b1 + k);
            s2 += av * vload(b2 + k);
            s3 += av * vload(b3 + k);
          }
          float r0 = vreduce_add(s0), r1 = vreduce_add(s1);
          float r2 = vreduce_add(s2), r3 = vreduce_add(s3);
          for (int64_t k = kv; k < K; ++k) {
            r0 += a[k] * b0[k];
            r1 += a[k] * b1[k];
            r2 += a[k] * b2[k];
            r3 += a[k] * b3[k];
          }
          store_direct(c + j, r0, g);
          store_direct(c + j + 1, r1, g);
          store_direct(c + j + 2, r2, g);
          store_direct(c + j + 3, r3, g);
        }
        for (; j < nn; ++j) {
          const float* b = g.B + (nb + j) * g.ldb_n;
          vfloat acc = vzero();
          for (int64_t k = 0; k < kv; k += W) acc += vload(a + k) * vload(b + k);
          float r = vreduce_add(acc);
          for (int64_t k = kv; k < K; ++k) r += a[k] * b[k];
          store_direct(c + j, r, g);
        }
      } else {  // general strides
        for (int64_t j = 0; j < nn; ++j) {
          const float* b = g.B + (nb + j) * g.ldb_n;
          float r = 0.f;
          for (int64_t k = 0; k < K; ++k) r += a[k * g.lda_k] * b[k * g.ldb_k];
          store_direct(c + j, r, g);
        }
      }
      ep(c, m, nb, nn);
    }
  }
}

// The direct path wins for matrix-vector-like shapes only (measured on AVX-512 and AVX2): few
// rows when B's rows (axpy form) or both A's rows and B's columns (dot form) are contiguous,
// or few columns with the dot form. Everything else, however small, is faster packed.
inline bool use_direct(const GemmArgs& g) {
  const bool dot = g.lda_k == 1 && g.ldb_k == 1;
  return (g.M <= 4 && (dot || g.ldb_n == 1)) || (g.N <= 8 && dot);
}

// Split one problem into tm x tn parts so that batch * tm * tn spreads evenly over P threads,
// minimising the per-part cost (padded compute + packing).
inline void choose_split(int64_t P, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t mr,
                         int64_t nr, bool packs, int64_t* tm_out, int64_t* tn_out, double pack_b_cost = 8.0) {
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
      if (packs)  // packing B once (pack_b_cost per element: a gather costs more), A once per NC panel
        cost += static_cast<double>(K) * (pack_b_cost * nt + 8.0 * mt * std::ceil(nt / NC));
      else  // direct path: B streamed once per group of 4 rows
        cost += static_cast<double>(K) * nt * std::ceil(mt / 4);
      if (best < 0 || cost < best) { best = cost; *tm_out = tm; *tn_out = tn; }
    }
    if (best >= 0) return;
  }
}

// The driver for gemm and gemm_batched. off(b, &oa, &ob, &oc): element offsets of batch b.
// ep5(c, batch, row, col0, ncols). Returns false iff a thread_local buffer could not be allocated.
// packb: see StridedPackB (any other packer disables the unpacked direct path).
template <class OffFn, class Ep5, class PackB = StridedPackB>
bool gemm_run(const GemmArgs& g, int64_t batch, const OffFn& off, Ep5& ep, void* ws,
              size_t ws_bytes, const PackB& packb = PackB{}) {
  const int64_t M = g.M, N = g.N, K = g.K;
  if (M <= 0 || N <= 0 || batch <= 0) return true;

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
    return true;
  }

  const double flops = 2.0 * static_cast<double>(M) * N * K * batch;
  const bool direct = PackB::kStrided && !g.B_packed && use_direct(g);
  // Threads: one per 2 MFLOP; the direct path (matrix-vector-like, bound by streaming B: a decode
  // step's projections) also one per 256 KiB of B, which one thread cannot stream at full speed.
  const double work = std::max(flops / 2e6, direct ? 4.0 * static_cast<double>(N) * K * batch / 262144.0 : 0.0);
  int64_t P = max_threads();
  P = std::max<int64_t>(1, std::min<int64_t>(P, static_cast<int64_t>(work)));

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
    choose_split(P, batch, M, N, K, MR, NR, true, &tm, &tn, PackB::kCost);
  const int64_t cm = direct ? ceil_div(M, tm) : round_up(ceil_div(M, tm), MR);
  const int64_t cn = round_up(ceil_div(N, tn), direct ? kDirectCols : NR);
  const int64_t items = batch * tm * tn;
  const int nthreads = static_cast<int>(std::min<int64_t>(P, items));
  (void)nthreads;
  std::atomic<bool> ok{true};

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
      if (w)
        gemm_block(s, m0, m1, n0, n1, w, ep4, packb);
      else
        ok.store(false, std::memory_order_relaxed);
    }
  }
  return ok.load();
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
// workspace (see gemm_workspace_bytes). Returns false only if ws == nullptr and a thread's
// packing buffer could not be allocated (C is then incomplete); never throws.
template <class Epilogue>
bool gemm(const GemmArgs& a, Epilogue&& ep, void* ws = nullptr, size_t ws_bytes = 0) {
  auto ep5 = [&](float* c, int64_t, int64_t row, int64_t col0, int64_t n) { ep(c, row, col0, n); };
  auto off = [](int64_t, int64_t* oa, int64_t* ob, int64_t* oc) { *oa = *ob = *oc = 0; };
  return gemm_detail::gemm_run(a, 1, off, ep5, ws, ws_bytes);
}

inline bool gemm(const GemmArgs& a) { return gemm(a, NoEpilogue{}); }

// Batched: problem b uses A + b*stride_a, B + b*stride_b, C + b*stride_c (a stride of 0
// broadcasts, e.g. one weight for all batches). ep(c, batch, row, col0, ncols).
template <class Epilogue>
bool gemm_batched(const GemmArgs& a, int64_t batch, int64_t stride_a, int64_t stride_b,
                  int64_t stride_c, Epilogue&& ep, void* ws = nullptr, size_t ws_bytes = 0) {
  auto off = [=](int64_t b, int64_t* oa, int64_t* ob, int64_t* oc) {
    *oa = b * stride_a;
    *ob = b * stride_b;
    *oc = b * stride_c;
  };
  return gemm_detail::gemm_run(a, batch, off, ep, ws, ws_bytes);
}

// Batched with arbitrary per-batch offsets (several / broadcast batch dims of torch.matmul):
// offsets(b, int64_t* oa, int64_t* ob, int64_t* oc) gives the element offsets of problem b.
template <class OffsetFn, class Epilogue>
bool gemm_batched_fn(const GemmArgs& a, int64_t batch, OffsetFn&& offsets, Epilogue&& ep,
                     void* ws = nullptr, size_t ws_bytes = 0) {
  return gemm_detail::gemm_run(a, batch, offsets, ep, ws, ws_bytes);
}

}  // namespace ptc_rt
