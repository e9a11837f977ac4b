// ptc_gemm_kernel.h — the fp32 GEMM's register-blocked micro-kernel, its packing routines and
// its blocking parameters (used by ptc_gemm.h; see there for the algorithm).
//
// Micro-kernel: C[MR x NR] (+)= A_sliver[MR x kc] * B_sliver[kc x NR], NR = NV vectors, all
// MR*NV accumulators in vector registers; per k it loads NV vectors of B and broadcasts MR
// scalars of A (AVX-512: embedded-broadcast FMAs).
//
// Packed formats (both contiguous, 64-byte aligned, zero-padded to full slivers):
//   A block  mc x kc  -> ceil(mc/MR) slivers, sliver s = kc x MR floats: a[k*MR + i] = A[s*MR+i, k]
//   B panel  kc x nc  -> ceil(nc/NR) slivers, sliver t = kc x NR floats: b[k*NR + j] = B[k, t*NR+j]
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ptc_vec.h"

// ---- blocking parameters ---------------------------------------------------------------------
// MR x NR is the register tile (NR = NV * kVecWidth); KC is the depth of one packed block; MC
// rows of A (MC x KC floats) are packed per block and should stay in L2; a KC x NR sliver of B is
// reused across all MC/MR micro-tiles and should stay in L1; the KC x NC panel of B lives in L2/L3.
// All can be overridden with -DPTC_GEMM_MR=... etc. (MC must be a multiple of MR, NC of NR).
#if defined(__AVX512F__) && !defined(PTC_VEC_BYTES)
// 32 zmm registers: 14x32 tile = 28 accumulators + 2 B vectors + broadcast operand.
// B sliver 256x32x4 = 32 KiB (L1 48 KiB on Zen 4/5, 48 KiB on Ice Lake+), A block 336x256x4 = 336 KiB (L2).
#define PTC_GEMM_DEF_MR 14
#define PTC_GEMM_DEF_NV 2
#define PTC_GEMM_DEF_KC 256
#define PTC_GEMM_DEF_MC 336
#define PTC_GEMM_DEF_NC 1024
#elif defined(__AVX__) && !defined(PTC_VEC_BYTES)
// 16 ymm registers: 6x16 tile = 12 accumulators + 2 B vectors + 1 broadcast (the BLIS Haswell
// kernel). B sliver 256x16x4 = 16 KiB (L1 32 KiB), A block 168x256x4 = 168 KiB (L2 256 KiB+).
#define PTC_GEMM_DEF_MR 6
#define PTC_GEMM_DEF_NV 2
#define PTC_GEMM_DEF_KC 256
#define PTC_GEMM_DEF_MC 168
#define PTC_GEMM_DEF_NC 2048
#elif defined(__ARM_NEON) || defined(__aarch64__)
// 32 q registers: 8x12 tile = 24 accumulators + 3 B vectors + broadcast.
#define PTC_GEMM_DEF_MR 8
#define PTC_GEMM_DEF_NV 3
#define PTC_GEMM_DEF_KC 256
#define PTC_GEMM_DEF_MC 128
#define PTC_GEMM_DEF_NC 2040
#else
// 16-byte vectors (SSE2) or generic: 6x8 tile = 12 accumulators.
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

// c[i*ldc + j] = alpha * (a_sliver * b_sliver)[i][j] + beta * c[i*ldc + j]   (full MR x NR tile)
// beta == 0 never reads c (so uninitialised/NaN outputs are fine).
PTC_GEMM_NOINLINE inline void ukernel(int64_t kc, const float* PTC_GEMM_RESTRICT a,
                                      const float* PTC_GEMM_RESTRICT b, float* PTC_GEMM_RESTRICT c,
                                      int64_t ldc, float alpha, float beta) {
#if defined(__clang__)
#pragma clang fp contract(fast)
#endif
  vfloat acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[i][j] = vzero();

#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    vfloat bv[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) bv[j] = vload(b + j * W);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const float ai = a[i];
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[i][j] += bv[j] * ai;
    }
    a += MR;
    b += NR;
  }

  if (beta == 0.f) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) vstore(c + i * ldc + j * W, acc[i][j] * alpha);
  } else {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) {
        float* p = c + i * ldc + j * W;
        vstore(p, acc[i][j] * alpha + vload(p) * beta);
      }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// Partial tile (mr < MR or nr < NR): run the full kernel into a scratch tile, then merge.
inline void ukernel_edge(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                         int mr, int nr, float alpha, float beta) {
  alignas(64) float tmp[MR * NR];
  ukernel(kc, a, b, tmp, NR, alpha, 0.f);
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
// A block: rows [0, mc) x depth [0, kc) of A (a points to its element (0,0)), strides (sm, sk).
inline void pack_a(const float* PTC_GEMM_RESTRICT a, int64_t sm, int64_t sk, int64_t mc,
                   int64_t kc, float* PTC_GEMM_RESTRICT dst) {
  for (int64_t r0 = 0; r0 < mc; r0 += MR) {
    const int mr = static_cast<int>(std::min<int64_t>(MR, mc - r0));
    const float* src = a + r0 * sm;
    if (mr == MR && sm == 1) {  // column-major A (A^T stored): each k is MR contiguous floats
      for (int64_t k = 0; k < kc; ++k) std::memcpy(dst + k * MR, src + k * sk, MR * sizeof(float));
    } else if (mr == MR && sk == 1) {  // row-major A: transpose MR rows into the sliver
      const float* rows[MR];
      for (int i = 0; i < MR; ++i) rows[i] = src + i * sm;
      int64_t k = 0;
      for (; k + 4 <= kc; k += 4) {
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) {
          const float* s = rows[i] + k;
          dst[(k + 0) * MR + i] = s[0];
          dst[(k + 1) * MR + i] = s[1];
          dst[(k + 2) * MR + i] = s[2];
          dst[(k + 3) * MR + i] = s[3];
        }
      }
      for (; k < kc; ++k)
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) dst[k * MR + i] = rows[i][k];
    } else {  // general strides and the zero-padded last sliver
      for (int64_t k = 0; k < kc; ++k) {
        float* d = dst + k * MR;
        const float* s = src + k * sk;
        int i = 0;
        for (; i < mr; ++i) d[i] = s[i * sm];
        for (; i < MR; ++i) d[i] = 0.f;
      }
    }
    dst += MR * kc;
  }
}

// B panel: depth [0, kc) x columns [0, nc) of B (b points to its element (0,0)), strides (sk, sn).
inline void pack_b(const float* PTC_GEMM_RESTRICT b, int64_t sk, int64_t sn, int64_t kc,
                   int64_t nc, float* PTC_GEMM_RESTRICT dst) {
  for (int64_t c0 = 0; c0 < nc; c0 += NR) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, nc - c0));
    const float* src = b + c0 * sn;
    if (nr == NR && sn == 1) {  // row-major B [K, N]: each k is NR contiguous floats
      for (int64_t k = 0; k < kc; ++k) {
#pragma GCC unroll 8
        for (int j = 0; j < NV; ++j) vstore(dst + k * NR + j * W, vload(src + k * sk + j * W));
      }
    } else if (nr == NR && sk == 1) {  // weight layout W[N, K] (B = W^T): transpose NR rows
      for (int64_t j0 = 0; j0 < NR; j0 += 8) {  // 8 rows at a time keeps 8 read streams
        const float* rows[8];
        for (int j = 0; j < 8; ++j) rows[j] = src + std::min<int64_t>(j0 + j, NR - 1) * sn;
        const int nj = static_cast<int>(std::min<int64_t>(8, NR - j0));
        if (nj == 8) {
          for (int64_t k = 0; k < kc; ++k) {
            float* d = dst + k * NR + j0;
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) d[j] = rows[j][k];
          }
        } else {
          for (int64_t k = 0; k < kc; ++k)
            for (int j = 0; j < nj; ++j) dst[k * NR + j0 + j] = rows[j][k];
        }
      }
    } else {  // general strides and the zero-padded last sliver
      for (int64_t k = 0; k < kc; ++k) {
        float* d = dst + k * NR;
        const float* s = src + k * sk;
        int j = 0;
        for (; j < nr; ++j) d[j] = s[j * sn];
        for (; j < NR; ++j) d[j] = 0.f;
      }
    }
    dst += NR * kc;
  }
}

}  // namespace gemm_detail
}  // namespace ptc_rt
