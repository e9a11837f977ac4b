// ptc_gemm_kernel.h — the fp32 GEMM's register-blocked micro-kernel, its packing routines and
// its blocking parameters (used by ptc_gemm.h; see there for the algorithm).
//
// Micro-kernel: C[MR x NR] (+)= A_sliver[MR x kc] * B_sliver[kc x NR], NR = NV vectors, all
// MR*NV accumulators in vector registers; per k it loads NV vectors of B and broadcasts MR
// scalars of A, each broadcast feeding NV FMAs (check: objdump -d | grep vfmadd231ps).
//
// Packed formats (contiguous, in 64-byte aligned buffers, zero-padded to full slivers):
//   A block  mc x kc  -> ceil(mc/MR) slivers, sliver s = kc x MR floats: a[k*MR + i] = A[s*MR+i, k]
//   B panel  kc x nc  -> ceil(nc/NR) slivers, sliver t = kc x NR floats: b[k*NR + j] = B[k, t*NR+j]
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ptc_vec.h"

// ---- blocking parameters ---------------------------------------------------------------------
// MR x NR is the register tile (NR = NV * kVecWidth). Loop order (BLIS): for each NC-column
// panel, for each KC-deep block: pack the KC x NC panel of B (L2/L3); for each MC-row block of A:
// pack it (MC x KC, L2); then for each NR sliver of B (KC x NR, reused by the MC/MR micro-tiles)
// for each MR sliver of A: micro-kernel. C is read and written K/KC times, so a deep KC pays
// off when C does not fit in cache. All can be overridden with -DPTC_GEMM_MR=... etc. (MC must be
// a multiple of MR, NC of NR). Measured on Zen 5 (48 KiB L1d, 1 MiB L2): the in-cache
// micro-kernel runs at ~262 GF/s/core (AVX-512) and ~128 GF/s/core (AVX2, 6x16); whole GEMMs at
// 85-90% (AVX-512) and ~96% (AVX2) of that; KC from 256 to 1024 is within ~10%, deeper is better.
#if defined(__AVX512F__) && !defined(PTC_VEC_BYTES)
// 32 zmm registers: 14x32 tile = 28 accumulators + 2 B vectors + broadcast operand.
// A block 112 x 1024 x 4 B = 448 KiB (L2), B panel 1024 x 512 x 4 B = 2 MiB (L2/L3),
// B sliver 1024 x 32 x 4 B = 128 KiB (streams from L2, reused 8x); workspace 2.5 MiB/thread.
#define PTC_GEMM_DEF_MR 14
#define PTC_GEMM_DEF_NV 2
#define PTC_GEMM_DEF_KC 1024
#define PTC_GEMM_DEF_MC 112
#define PTC_GEMM_DEF_NC 512
#elif defined(__AVX__) && !defined(PTC_VEC_BYTES)
// 16 ymm registers: 6x16 tile = 12 accumulators + 2 B vectors + 1 broadcast (the BLIS Haswell
// kernel). B sliver 256 x 16 x 4 B = 16 KiB (L1), A block 168 x 256 x 4 B = 168 KiB (L2),
// B panel 256 x 1024 x 4 B = 1 MiB; workspace 1.2 MiB/thread.
#define PTC_GEMM_DEF_MR 6
#define PTC_GEMM_DEF_NV 2
#define PTC_GEMM_DEF_KC 256
#define PTC_GEMM_DEF_MC 168
#define PTC_GEMM_DEF_NC 1024
#elif defined(__ARM_NEON) || defined(__aarch64__)
// 32 q registers: 8x12 tile = 24 accumulators + 3 B vectors + broadcast (not tuned: no machine).
#define PTC_GEMM_DEF_MR 8
#define PTC_GEMM_DEF_NV 3
#define PTC_GEMM_DEF_KC 256
#define PTC_GEMM_DEF_MC 128
#define PTC_GEMM_DEF_NC 1020
#else
// 16-byte vectors (SSE2) or generic: 6x8 tile = 12 accumulators (not tuned).
#define PTC_GEMM_DEF_MR 6
#define PTC_GEMM_DEF_NV 2
#define PTC_GEMM_DEF_KC 256
#define PTC_GEMM_DEF_MC 120
#define PTC_GEMM_DEF_NC 1024
#endif

#ifndef PTC_GEMM_MR
#define PTC_GEMM_MR PTC_GEMM_DEF_MR
#endif
#ifndef PTC_GEMM_NV
#define PTC_GEMM_NV PTC_GEMM_DEF_NV
#endif
#ifndef PTC_GEMM_KC
#define PTC_GEMM_KC PTC_GEMM_DEF_KC
#endif
#ifndef PTC_GEMM_MC
#define PTC_GEMM_MC PTC_GEMM_DEF_MC
#endif
#ifndef PTC_GEMM_NC
#define PTC_GEMM_NC PTC_GEMM_DEF_NC
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PTC_GEMM_NOINLINE __attribute__((noinline))
#define PTC_GEMM_RESTRICT __restrict__
#else
#define PTC_GEMM_NOINLINE
#define PTC_GEMM_RESTRICT
#endif

namespace ptc_rt {
namespace gemm_detail {

constexpr int MR = PTC_GEMM_MR;
constexpr int NV = PTC_GEMM_NV;
constexpr int W = kVecWidth;
constexpr int NR = NV * W;
constexpr int64_t KC = PTC_GEMM_KC;
constexpr int64_t MC = PTC_GEMM_MC;
constexpr int64_t NC = PTC_GEMM_NC;
static_assert(MC % MR == 0, "PTC_GEMM_MC must be a multiple of PTC_GEMM_MR");
static_assert(NC % NR == 0, "PTC_GEMM_NC must be a multiple of NR = PTC_GEMM_NV * vector width");

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// ---- micro-kernel ----------------------------------------------------------------------------
// FMA contraction of `acc += a * b` must be on here even when the including file is compiled in
// ISO mode (-std=c++17 sets -ffp-contract=off in GCC): enable it for these functions only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
#endif

// c[i*ldc + j] = alpha * (a_sliver * b_sliver)[i][j] + beta * c[i*ldc + j] for the first R
// rows and RV vectors of columns of a sliver pair (R = MR, RV = NV: the full MR x NR tile; the
// smaller instances serve edge tiles without computing the padding). beta == 0 never reads c
// (so uninitialised/NaN outputs are fine).
template <int R, int RV>
PTC_GEMM_NOINLINE void ukernel_rv(int64_t kc, const float* PTC_GEMM_RESTRICT a,
                                  const float* PTC_GEMM_RESTRICT b, float* PTC_GEMM_RESTRICT c,
                                  int64_t ldc, float alpha, float beta) {
#if defined(__clang__)
#pragma clang fp contract(fast)
#endif
  // Prefetch the C tile: it is only touched after the k loop, by then it is in L1.
#pragma GCC unroll 32
  for (int i = 0; i < R; ++i) {
    __builtin_prefetch(c + i * ldc, 1, 3);
    __builtin_prefetch(c + i * ldc + RV * W - 1, 1, 3);
  }
  vfloat acc[R][RV];
#pragma GCC unroll 32
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < RV; ++j) acc[i][j] = vzero();

#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    vfloat bv[RV];
#pragma GCC unroll 8
    for (int j = 0; j < RV; ++j) bv[j] = vload(b + j * W);
#pragma GCC unroll 32
    for (int i = 0; i < R; ++i) {
      const float ai = a[i];
#pragma GCC unroll 8
      for (int j = 0; j < RV; ++j) acc[i][j] += bv[j] * ai;
    }
    a += MR;
    b += NR;
  }

  if (beta == 0.f) {
#pragma GCC unroll 32
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < RV; ++j) vstore(c + i * ldc + j * W, acc[i][j] * alpha);
  } else {
#pragma GCC unroll 32
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < RV; ++j) {
        float* p = c + i * ldc + j * W;
        vstore(p, acc[i][j] * alpha + vload(p) * beta);
      }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

inline void ukernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, float alpha,
                    float beta) {
  ukernel_rv<MR, NV>(kc, a, b, c, ldc, alpha, beta);
}

// Edge kernels: rows in {4, 8, MR} (those below MR) x any number of vectors up to NV.
constexpr int kEdgeRows1 = MR > 4 ? 4 : MR;
constexpr int kEdgeRows2 = MR > 8 ? 8 : MR;
template <int R>
inline void ukernel_rows(int v, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                         float alpha, float beta) {
  static_assert(NV <= 4, "edge kernels are instantiated for up to 4 vectors");
  switch (v) {
    case 1: ukernel_rv<R, 1>(kc, a, b, c, ldc, alpha, beta); break;
    case 2: if constexpr (NV >= 2) ukernel_rv<R, 2 <= NV ? 2 : 1>(kc, a, b, c, ldc, alpha, beta); break;
    case 3: if constexpr (NV >= 3) ukernel_rv<R, 3 <= NV ? 3 : 1>(kc, a, b, c, ldc, alpha, beta); break;
    default: ukernel_rv<R, NV>(kc, a, b, c, ldc, alpha, beta); break;
  }
}

// Partial tile (mr < MR or nr < NR): the smallest kernel that covers it, straight into C when it
// covers it exactly, else into a scratch tile that is then merged.
inline void ukernel_edge(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                         int mr, int nr, float alpha, float beta) {
  const int rows = mr <= kEdgeRows1 ? kEdgeRows1 : mr <= kEdgeRows2 ? kEdgeRows2 : MR;
  const int v = (nr + W - 1) / W;
  auto run = [&](float* dst, int64_t ld, float bt) {
    if (rows == kEdgeRows1)
      ukernel_rows<kEdgeRows1>(v, kc, a, b, dst, ld, alpha, bt);
    else if (rows == kEdgeRows2)
      ukernel_rows<kEdgeRows2>(v, kc, a, b, dst, ld, alpha, bt);
    else
      ukernel_rows<MR>(v, kc, a, b, dst, ld, alpha, bt);
  };
  if (rows == mr && v * W == nr) return run(c, ldc, beta);
  alignas(64) float tmp[MR * NR];
  run(tmp, NR, 0.f);
  for (int i = 0; i < mr; ++i) {
    float* ci = c + i * ldc;
    const float* ti = tmp + i * NR;
    if (beta == 0.f) {
      for (int j = 0; j < nr; ++j) ci[j] = ti[j];
    } else {
      for (int j = 0; j < nr; ++j) ci[j] = ti[j] + beta * ci[j];
    }
  }
}

// ---- packing ---------------------------------------------------------------------------------
// Row-major A and weight-layout B need a transpose while packing: W x W blocks are transposed in
// registers (vtranspose). pack_a may write up to W floats past the end of the packed block (the
// workspace reserves that slack, see a_buffer_floats).
constexpr int kNGroupsA = (MR + W - 1) / W;  // W-row groups per A sliver

// A block: rows [0, mc) x depth [0, kc) of A (a points to its element (0,0)), strides (sm, sk).
inline void pack_a(const float* PTC_GEMM_RESTRICT a, int64_t sm, int64_t sk, int64_t mc,
                   int64_t kc, float* PTC_GEMM_RESTRICT dst) {
  const int64_t full = mc / MR;  // full slivers
  if (sm == 1 && full > 0) {
    // column-major A (A^T stored): each k is MR contiguous floats of a column; chunks of 16 k's
    // keep both the reads (16 columns) and the writes (16 * MR floats per sliver) local
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
      const int64_t k1 = std::min<int64_t>(kc, k0 + 16);
      for (int64_t t = 0; t < full; ++t)
        for (int64_t k = k0; k < k1; ++k)
          std::memcpy(dst + t * MR * kc + k * MR, a + k * sk + t * MR, MR * sizeof(float));
    }
  } else if (sk == 1 && full > 0) {
    // row-major A: transpose W x W blocks of (up to) W rows by W k's
    for (int64_t t = 0; t < full; ++t) {
      const float* src = a + t * MR * sm;
      float* d = dst + t * MR * kc;
      int64_t k = 0;
      for (; k + W <= kc; k += W) {
        vfloat r[kNGroupsA][W];
        for (int g = 0; g < kNGroupsA; ++g) {
#pragma GCC unroll 16
          for (int i = 0; i < W; ++i) {
            const int row = g * W + i;
            r[g][i] = row < MR ? vload(src + row * sm + k) : vzero();
          }
          vtranspose(r[g]);
        }
        // row k+x of the sliver gets r[g][x] at column g*W; a partial last group spills into
        // row k+x+1, which is written right after
#pragma GCC unroll 16
        for (int x = 0; x < W; ++x)
          for (int g = 0; g < kNGroupsA; ++g) vstore(d + (k + x) * MR + g * W, r[g][x]);
      }
      for (int rem = static_cast<int>(kc - k); rem > 0; --rem, ++k)  // k tail (< W)
        for (int i = 0; i < MR; ++i) d[k * MR + i] = src[i * sm + k];
    }
  } else {
    for (int64_t t = 0; t < full; ++t)  // general strides
      for (int64_t k = 0; k < kc; ++k)
        for (int i = 0; i < MR; ++i) dst[t * MR * kc + k * MR + i] = a[(t * MR + i) * sm + k * sk];
  }
  const int mr = static_cast<int>(mc - full * MR);
  if (mr > 0) {  // zero-padded last sliver
    const float* src = a + full * MR * sm;
    float* d = dst + full * MR * kc;
    for (int64_t k = 0; k < kc; ++k) {
      int i = 0;
      for (; i < mr; ++i) d[k * MR + i] = src[i * sm + k * sk];
      for (; i < MR; ++i) d[k * MR + i] = 0.f;
    }
  }
}

// B panel: depth [0, kc) x columns [0, nc) of B (b points to its element (0,0)), strides (sk, sn).
inline void pack_b(const float* PTC_GEMM_RESTRICT b, int64_t sk, int64_t sn, int64_t kc,
                   int64_t nc, float* PTC_GEMM_RESTRICT dst) {
  const int64_t full = nc / NR;  // full slivers
  if (sn == 1 && full > 0) {
    // row-major B [K, N]: each k is NR contiguous floats; chunks of 16 k's read 16 rows once
    // across all slivers and write 16 * NR contiguous floats per sliver
    for (int64_t k0 = 0; k0 < kc; k0 += 16) {
      const int64_t k1 = std::min<int64_t>(kc, k0 + 16);
      for (int64_t t = 0; t < full; ++t)
        for (int64_t k = k0; k < k1; ++k) {
#pragma GCC unroll 8
          for (int j = 0; j < NV; ++j)
            vstore(dst + t * NR * kc + k * NR + j * W, vload(b + k * sk + t * NR + j * W));
        }
    }
  } else if (sk == 1 && full > 0) {
    // weight layout W[N, K] (B = W^T): transpose W x W blocks (W rows of W by W k's)
    const int64_t kv = kc - kc % W;
    for (int64_t t = 0; t < full; ++t) {
      const float* src = b + t * NR * sn;
      float* d = dst + t * NR * kc;
      for (int64_t k = 0; k < kv; k += W) {
        for (int j = 0; j < NV; ++j) {
          vfloat r[W];
#pragma GCC unroll 16
          for (int i = 0; i < W; ++i) r[i] = vload(src + (j * W + i) * sn + k);
          vtranspose(r);
#pragma GCC unroll 16
          for (int x = 0; x < W; ++x) vstore(d + (k + x) * NR + j * W, r[x]);
        }
      }
      for (int rem = static_cast<int>(kc - kv), k = 0; k < rem; ++k)  // k tail (< W)
        for (int j = 0; j < NR; ++j) d[(kv + k) * NR + j] = src[j * sn + kv + k];
    }
  } else {
    for (int64_t t = 0; t < full; ++t)  // general strides
      for (int64_t k = 0; k < kc; ++k)
        for (int j = 0; j < NR; ++j) dst[t * NR * kc + k * NR + j] = b[k * sk + (t * NR + j) * sn];
  }
  const int nr = static_cast<int>(nc - full * NR);
  if (nr > 0) {  // zero-padded last sliver
    const float* src = b + full * NR * sn;
    float* d = dst + full * NR * kc;
    for (int64_t k = 0; k < kc; ++k) {
      int j = 0;
      for (; j < nr; ++j) d[k * NR + j] = src[k * sk + j * sn];
      for (; j < NR; ++j) d[k * NR + j] = 0.f;
    }
  }
}

// Depth of the K blocks for a given K: balanced, at most KC (gemm and gemm_pack_b agree on it).
inline int64_t k_block(int64_t K) { return ceil_div(K, ceil_div(K, KC)); }

// Floats of the packed-A buffer for mc x kc (with the slack pack_a may write), 64-byte multiple.
inline int64_t a_buffer_floats(int64_t mc, int64_t kc) { return round_up(mc * kc + W, 16); }

}  // namespace gemm_detail
}  // namespace ptc_rt
