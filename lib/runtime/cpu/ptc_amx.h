// ptc_amx.h — Intel AMX bf16 tiles for the CPU runtime, chosen at run time.
//
// ready() says whether this process may run AMX-BF16 tile instructions: the CPU has AMX-TILE and
// AMX-BF16, the OS saves tile state (XCR0 bits 17 and 18), and Linux granted this process the tile
// data (arch_prctl ARCH_REQ_XCOMP_PERM). PTC_CPU_BF16=0 turns AMX off, as it turns off oneDNN's
// bf16 kernels; PTC_CPU_AMX=0 turns off only ptc's own AMX kernels (oneDNN's stay), and
// PTC_CPU_AMX=1 runs every bf16 product of a linear layer on them (forced(): by default only the
// shapes where they beat oneDNN's). The functions that use tiles carry their own target attribute, so a library built
// for any x86-64 level still runs, and takes the AMX path only where ready() holds.
//
// Tiles here are always 16 rows of 64 bytes: an A tile is 16 rows x 32 bf16 (row-major), a B tile
// 16 rows of 16 bf16 pairs (VNNI: row r holds B[2r][n], B[2r+1][n] for n = 0..15), a C tile 16 x 16
// fp32. TDPBF16PS adds A B into C with fp32 accumulation of the exact bf16 products.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ptc_half.h"

#if defined(__x86_64__) && !defined(__NVCC__) && (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define PTC_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ptc_rt {
namespace amx {

#ifdef PTC_AMX
// PTC_CPU_AMX: 1 or 0 where set, else -1.
inline int forced() {
  static const int f = [] {
    const char* e = std::getenv("PTC_CPU_AMX");
    return e && *e ? (std::strcmp(e, "0") != 0 ? 1 : 0) : -1;
  }();
  return f;
}
inline bool ready() {
  static const bool ok = [] {
    for (const char* var : {"PTC_CPU_BF16", "PTC_CPU_AMX"}) {
      const char* e = std::getenv(var);
      if (e && std::strcmp(e, "0") == 0) return false;
    }
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return false;  // OSXSAVE
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 22) & 1u) || !((d >> 24) & 1u)) return false;  // AMX-BF16, AMX-TILE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG, XTILEDATA
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows x 64 bytes, for this thread (call before the tiles are used: another library
// may have configured them otherwise).
__attribute__((target("amx-tile"))) inline void configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  __asm__ volatile("" : : "r"(&cfg) : "memory");  // (the load below reads cfg: keep its stores)
  _tile_loadconfig(&cfg);
}
__attribute__((target("amx-tile"))) inline void release() { _tile_release(); }

// C[16 x 64] (fp32, 4 tiles side by side; ldc in floats) = (zero ? 0 : C) + A[16 x 32 kt] B, with
// A row-major bf16 (lda in elements) and B as kt x 4 VNNI tiles, tile (k, c) at b + (k 4 + c) 512.
__attribute__((target("amx-tile,amx-bf16"))) inline void row_block(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t kt, float* c,
                                                                    int64_t ldc, bool zero) {
  const int64_t sc = ldc * 4, sa = lda * 2;
  if (zero) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, c, sc);
    _tile_loadd(1, c + 16, sc);
    _tile_loadd(2, c + 32, sc);
    _tile_loadd(3, c + 48, sc);
  }
  for (int64_t k = 0; k < kt; ++k) {
    const uint16_t* bk = b + k * 4 * 512;
    _tile_loadd(4, a + k * 32, sa);
    _tile_loadd(5, bk, 64);
    _tile_loadd(6, bk + 512, 64);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(7, bk + 1024, 64);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(5, bk + 1536, 64);
    _tile_dpbf16ps(2, 4, 7);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, c, sc);
  _tile_stored(1, c + 16, sc);
  _tile_stored(2, c + 32, sc);
  _tile_stored(3, c + 48, sc);
}

// C[32 x 32] (fp32, 2 x 2 tiles; ldc in floats) = A[32 x 32 kt] B: A packed tile after tile (the
// tiles of rows 0-15 at a, of rows 16-31 at a + a_next, 512 elements from one k to the next), B's
// two column tiles at b + k bk and b + k bk + 512.
__attribute__((target("amx-tile,amx-bf16"))) inline void block_2x2(const uint16_t* a, int64_t a_next, const uint16_t* b, int64_t bk, int64_t kt,
                                                                    float* c, int64_t ldc) {
  const int64_t sc = ldc * 4;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t k = 0; k < kt; ++k) {
    _tile_loadd(4, a + k * 512, 64);
    _tile_loadd(6, b + k * bk, 64);
    _tile_loadd(5, a + a_next + k * 512, 64);
    _tile_loadd(7, b + k * bk + 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, sc);
  _tile_stored(1, c + 16, sc);
  _tile_stored(2, c + 16 * ldc, sc);
  _tile_stored(3, c + 16 * ldc + 16, sc);
}
// The same for 16 rows: C[16 x 32] = A[16 x 32 kt] B.
__attribute__((target("amx-tile,amx-bf16"))) inline void block_1x2(const uint16_t* a, const uint16_t* b, int64_t bk, int64_t kt, float* c,
                                                                    int64_t ldc) {
  const int64_t sc = ldc * 4;
  _tile_zero(0);
  _tile_zero(1);
  for (int64_t k = 0; k < kt; ++k) {
    _tile_loadd(4, a + k * 512, 64);
    _tile_loadd(6, b + k * bk, 64);
    _tile_loadd(7, b + k * bk + 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
  }
  _tile_stored(0, c, sc);
  _tile_stored(1, c + 16, sc);
}
#else
inline int forced() { return -1; }
inline bool ready() { return false; }
inline void configure() {}
inline void release() {}
inline void row_block(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t, bool) {}
inline void block_2x2(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t) {}
inline void block_1x2(const uint16_t*, const uint16_t*, int64_t, int64_t, float*, int64_t) {}
#endif

// C[M16 x N64] (+)= A[M16 x K32] B for A row-major bf16 [M16 rows, lda], B packed by pack_b
// (K32 / 32 x N64 / 16 tiles), C fp32 with ldc; M16, N64, K32 multiples of 16, 64, 32.
inline void gemm_tiles(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t M16, int64_t N64, int64_t K32, float* c, int64_t ldc,
                       bool zero) {
  const int64_t kt = K32 / 32;
  for (int64_t n = 0; n < N64; n += 64)
    for (int64_t m = 0; m < M16; m += 16) row_block(a + m * lda, lda, b + (n / 64) * kt * 4 * 512, kt, c + m * ldc + n, ldc, zero);
}

// The B operand of gemm_tiles (and gemm) for B[k, n], k < K, n < N, zero beyond (up to K32 x
// N64): per 64-column group, kt = K32 / 32 rows of 4 VNNI tiles. In 32-bit units a tile is 16 x
// 16 pairs: (k, n) is the low half of pair (k / 2 % 16, n % 16) of tile ((n / 64 kt + k / 32) 4 +
// n % 64 / 16). The floats must hold bf16 values (they are truncated, exactly).
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u >> 16;
}
inline int64_t vnni_pair(int64_t kt, int64_t k2, int64_t n) {  // k2 = k / 2
  return (((n >> 6) * kt + (k2 >> 4)) * 4 + ((n >> 4) & 3)) * 256 + (k2 & 15) * 16 + (n & 15);
}
// From a matrix with element strides (sk, sn): B[k, n] = x[k sk + n sn].
inline void pack_b(const float* x, int64_t sk, int64_t sn, int64_t K, int64_t N, int64_t K32, int64_t N64, uint16_t* out) {
  const int64_t kt = K32 / 32;
  uint32_t* o = reinterpret_cast<uint32_t*>(out);
  std::memset(o, 0, static_cast<size_t>(K32 * N64 / 2) * 4);
  if (sk == 1) {  // rows of x contiguous along k: read them in order
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k + 1 < K; k += 2) o[vnni_pair(kt, k >> 1, n)] = bits_of(x[k + n * sn]) | bits_of(x[k + 1 + n * sn]) << 16;
  } else {
    for (int64_t k = 0; k + 1 < K; k += 2) {
      const float *x0 = x + k * sk, *x1 = x0 + sk;
      int64_t n = 0;
#ifdef __AVX512F__
      if (sn == 1)  // 16 columns of a row pair are 16 consecutive pairs of a tile row
        for (; n + 16 <= N; n += 16) {
          const __m512i lo = _mm512_srli_epi32(_mm512_castps_si512(_mm512_loadu_ps(x0 + n)), 16);
          const __m512i hi = _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x1 + n)), _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
          _mm512_storeu_si512(o + vnni_pair(kt, k >> 1, n), _mm512_or_si512(lo, hi));
        }
#endif
      for (; n < N; ++n) o[vnni_pair(kt, k >> 1, n)] = bits_of(x0[n * sn]) | bits_of(x1[n * sn]) << 16;
    }
  }
  if (K % 2)
    for (int64_t n = 0; n < N; ++n) o[vnni_pair(kt, (K - 1) >> 1, n)] = bits_of(x[(K - 1) * sk + n * sn]);
}

// A constant [K, N] weight (element strides sk, sn; bf16 values) in gemm_tiles' layout.
struct PackedWeight {
  int64_t K = 0, N = 0, K32 = 0, N64 = 0;
  std::vector<uint16_t> tiles;
};
inline PackedWeight pack_weight(const float* w, int64_t sk, int64_t sn, int64_t K, int64_t N) {
  PackedWeight p;
  p.K = K, p.N = N, p.K32 = (K + 31) / 32 * 32, p.N64 = (N + 63) / 64 * 64;
  p.tiles.resize(static_cast<size_t>(p.K32 * p.N64));
  pack_b(w, sk, sn, K, N, p.K32, p.N64, p.tiles.data());
  return p;
}

// C[M, N] (row stride ldc) = A[M, K] B for A holding bf16 values (float, or the bf16 bits as
// uint16_t; element strides lda_m, lda_k) and B packed, then ep(C + m ldc + n0, m, n0, count) on
// each finished run of a row. A is converted into tile order first; then blocks of 32 x 32 (16 x
// 32 for a last block of 16 rows), the threads splitting the 64-column groups; blocks past the
// bottom or right edge go through a scratch block.
inline uint32_t bits_of(uint16_t b) { return b; }
template <class T, class Ep>
void gemm(const T* A, int64_t lda_m, int64_t lda_k, int64_t M, const PackedWeight& B, float* C, int64_t ldc, Ep&& ep) {
  const int64_t M16 = (M + 15) / 16 * 16, K32 = B.K32, K = B.K, N = B.N, kt = K32 / 32, groups = B.N64 / 64;
  thread_local std::vector<uint16_t> a_buf;  // (the calling thread's: its workers only read it)
  if (a_buf.size() < static_cast<size_t>(M16 * K32)) a_buf.resize(static_cast<size_t>(M16 * K32));
  uint16_t* a16 = a_buf.data();
  // A in bf16, tile after tile: the 16 x 32 tile (m / 16, k / 32) at (m / 16 kt + k / 32) 512.
#pragma omp parallel for schedule(static) if (M * K > 65536)
  for (int64_t m = 0; m < M16; ++m) {
    uint16_t* row = a16 + (m / 16) * 16 * K32 + (m % 16) * 32;
    if (m >= M) {
      for (int64_t t = 0; t < kt; ++t) std::memset(row + t * 512, 0, 64);
      continue;
    }
    const T* am = A + m * lda_m;
    for (int64_t t = 0; t < kt; ++t) {
      uint16_t* dst = row + t * 512;
      const int64_t k0 = t * 32, n = std::min<int64_t>(32, K - k0);
      if (lda_k == 1 && n == 32 && sizeof(T) == 2) {
        std::memcpy(dst, am + k0, 64);
      } else if (lda_k == 1 && n == 32) {
        uint32_t u[32];
        std::memcpy(u, am + k0, sizeof u);
#pragma omp simd
        for (int64_t j = 0; j < 32; ++j) dst[j] = static_cast<uint16_t>(u[j] >> 16);
      } else {
        for (int64_t j = 0; j < 32; ++j) dst[j] = j < n ? static_cast<uint16_t>(bits_of(am[(k0 + j) * lda_k])) : 0;
      }
    }
  }
  // Per 64-column group (the threads split them), every 32-row block of A over the group's two
  // pairs of column tiles; blocks past the bottom or right edge go through a scratch block.
#pragma omp parallel
  {
    configure();
    alignas(64) float scratch[32 * 32];
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t* bg = B.tiles.data() + g * kt * 4 * 512;
      for (int64_t m0 = 0; m0 < M16; m0 += 32) {
        const int64_t rows = std::min<int64_t>(32, M - m0), block = std::min<int64_t>(32, M16 - m0);
        for (int64_t half = 0; half < 2; ++half) {
          const int64_t n0 = g * 64 + half * 32, cols = std::min<int64_t>(32, N - n0);
          if (cols <= 0) break;
          const bool inside = rows == block && cols == 32;
          float* c = inside ? C + m0 * ldc + n0 : scratch;
          if (block == 32)
            block_2x2(a16 + m0 * K32, 16 * K32, bg + half * 2 * 512, 4 * 512, kt, c, inside ? ldc : 32);
          else
            block_1x2(a16 + m0 * K32, bg + half * 2 * 512, 4 * 512, kt, c, inside ? ldc : 32);
          if (!inside)
            for (int64_t r = 0; r < rows; ++r) std::memcpy(C + (m0 + r) * ldc + n0, scratch + r * 32, static_cast<size_t>(cols) * 4);
          for (int64_t r = 0; r < rows; ++r) ep(C + (m0 + r) * ldc + n0, m0 + r, n0, cols);
        }
      }
    }
    release();
  }
}

}  // namespace amx
}  // namespace ptc_rt
