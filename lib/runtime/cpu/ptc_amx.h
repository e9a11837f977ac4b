// ptc_amx.h — Intel AMX bf16 tiles for the CPU runtime, chosen at run time.
//
// ready() says whether this process may run AMX-BF16 tile instructions: the CPU has AMX-TILE and
// AMX-BF16, the OS saves tile state (XCR0 bits 17 and 18), and Linux granted this process the tile
// data (arch_prctl ARCH_REQ_XCOMP_PERM). PTC_CPU_BF16=0 turns AMX off, as it turns off oneDNN's
// bf16 kernels. The functions that use tiles carry their own target attribute, so a library built
// for any x86-64 level still runs, and takes the AMX path only where ready() holds.
//
// Tiles here are always 16 rows of 64 bytes: an A tile is 16 rows x 32 bf16 (row-major), a B tile
// 16 rows of 16 bf16 pairs (VNNI: row r holds B[2r][n], B[2r+1][n] for n = 0..15), a C tile 16 x 16
// fp32. TDPBF16PS adds A B into C with fp32 accumulation of the exact bf16 products.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && !defined(__NVCC__) && (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define PTC_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ptc_rt {
namespace amx {

// A float that holds a bf16 value (or any float: rounded to nearest even) as bf16 bits.
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

#ifdef PTC_AMX
inline bool ready() {
  static const bool ok = [] {
    const char* e = std::getenv("PTC_CPU_BF16");
    if (e && std::strcmp(e, "0") == 0) return false;
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
#else
inline bool ready() { return false; }
inline void configure() {}
inline void release() {}
inline void row_block(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t, bool) {}
#endif

// C[M16 x N64] (+)= A[M16 x K32] B for A row-major bf16 [M16 rows, lda], B packed by pack_b
// (K32 / 32 x N64 / 16 tiles), C fp32 with ldc; M16, N64, K32 multiples of 16, 64, 32.
inline void gemm_tiles(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t M16, int64_t N64, int64_t K32, float* c, int64_t ldc,
                       bool zero) {
  const int64_t kt = K32 / 32;
  for (int64_t n = 0; n < N64; n += 64)
    for (int64_t m = 0; m < M16; m += 16) row_block(a + m * lda, lda, b + (n / 64) * kt * 4 * 512, kt, c + m * ldc + n, ldc, zero);
}

// The B operand of gemm_tiles for B[k, n] = at(k, n), k < K, n < N, zero beyond (up to K32 x
// N64): per 64-column group, kt = K32 / 32 rows of 4 VNNI tiles. In 32-bit units a tile is 16 x
// 16 pairs: (k, n) is the low half of pair (k / 2 % 16, n % 16) of tile ((n / 64 kt + k / 32) 4 +
// n % 64 / 16). at() must return bf16 values (they are truncated, exactly).
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

}  // namespace amx
}  // namespace ptc_rt
