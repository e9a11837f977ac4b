// ptc_cuda_gemm_tc.cu — ptc's exact-fp32 GEMM on TF32 tensor cores ("3xTF32"); see ptc_cuda_rt.h.
//
// Each fp32 operand x is split into a TF32 "big" part (x rounded to nearest TF32, 10-bit
// mantissa) and the exact rest x - big ("small", whose low 13 bits the tensor core drops), and a
// product a b is taken as a_small b_big + a_big b_small + a_big b_big on the tensor cores; left
// out are a_small b_small and the truncation of the small parts (relative 2^-21 at most, of
// either sign). The tensor cores accumulate in fp32 with truncation, which over a whole K = 3072
// left errors 40x cuBLAS's fp32 GEMM's (biased: they grow with K); so each 32-deep slice of K
// is summed there from zero and added into the result with a rounded fp32 add. Measured against
// a float64 GEMM (scripts/cuda_gemm_bench.cu): relative RMS error 2.6e-7 where cuBLAS's fp32
// kernels have 3.5e-7 (K = 768), 3.2e-7 against 1.2e-6 (K = 4096).
//
// Two kernel families: mma.sync (m16n8k8; any sm_80+), A and B staged by cp.async; and Hopper's
// wgmma (m64nNk8, A's parts in registers, B's in shared memory), warp-specialized: a producer
// warpgroup copies the tiles in and splits B, consumer warpgroups split A and run the wgmmas (an
// sm_90a image only). A is k-contiguous (A[m, k] = A[m * lda + k]); B is k-contiguous
// (B[k, n] = B[n * ldb + k], a Linear weight) or n-contiguous (B[k * ldb + n]). An output the
// split made NaN (an Inf operand, whose small part is Inf - Inf, or one within 2^-11 of FLT_MAX,
// whose big part rounds to Inf) is recomputed in plain fp32, so Inf stays Inf.
#include <algorithm>
#include <cstdint>
#include <string>

#include "ptc_cuda_rt.h"

namespace ptc_cuda {
namespace {

constexpr int kBK = 16, kStages = 3;

// big: x rounded to TF32 (half an ulp added, the low 13 bits cleared: two integer operations,
// where cvt.rna.tf32.f32 takes four plus an Inf check); small: the exact rest x - big, whose low
// bits the tensor core ignores (truncation of a term of either sign: unbiased). For an Inf, small
// is NaN, and so is every output it reaches: store_pair recomputes those in plain fp32 (an
// Inf check here cost 5-12% of the kernels' time).
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  small = __float_as_uint(x - __uint_as_float(big));
}

__device__ __forceinline__ void mma_tf32(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 16 bytes from global to shared memory, or zeros where !pred.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Rows r0.. (below `rows`) of a k-contiguous operand, k0.. (below K), into a ROWS x KW tile of
// shared memory with row stride LD: 16-byte cp.async chunks, zeros outside the matrix.
template <int ROWS, int KW, int LD, int THREADS>
__device__ __forceinline__ void load_k_rows(float* dst, const float* src, int64_t ld, int64_t r0, int64_t rows, int64_t k0, int64_t K,
                                            int tid) {
#pragma unroll
  for (int c = tid; c < ROWS * KW / 4; c += THREADS) {
    const int r = c / (KW / 4), kc = (c % (KW / 4)) * 4;
    const int64_t row = r0 + r, k = k0 + kc;
    const bool ok = row < rows && k < K;
    cp_async16(dst + r * LD + kc, ok ? src + row * ld + k : src, ok);
  }
}

// A[m, :] . B[:, n] in plain fp32, for an output the split products made NaN: an Inf operand
// times the other's small part 0 (or Inf - Inf among the parts) is NaN where fp32 gives Inf.
__device__ __noinline__ float plain_dot(const TcGemm& g, const float* A, const float* B, int64_t m, int64_t n) {
  float s = 0.f;
  for (int64_t k = 0; k < g.K; ++k) s = fmaf(A[m * g.lda + k], g.b_kmajor ? B[n * g.ldb + k] : B[k * g.ldb + n], s);
  return s;
}

// C[m, n..n+1] = act(v + bias[n..] + residual[m, n..]), within the matrix (a float2 store where
// N is even); A and B are this problem's, for plain_dot.
__device__ __forceinline__ void store_pair(const TcGemm& g, const float* A, const float* B, float* C, const float* R, int64_t m, int64_t n,
                                           float v0, float v1) {
  if (m >= g.M || n >= g.N) return;
  float v[2] = {v0, v1};
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    if (v[e] != v[e] && n + e < g.N) v[e] = plain_dot(g, A, B, m, n + e);
    if (g.bias && n + e < g.N) v[e] += g.bias[g.bias_rows ? m : n + e];
    if (R && n + e < g.N) v[e] += R[m * g.N + n + e];
    v[e] = apply_act(v[e], g.act);
  }
  if (n + 1 < g.N && g.N % 2 == 0) {
    *reinterpret_cast<float2*>(C + m * g.N + n) = make_float2(v[0], v[1]);
  } else {
    C[m * g.N + n] = v[0];
    if (n + 1 < g.N) C[m * g.N + n + 1] = v[1];
  }
}

// Shared memory per stage: A as [BM][16] and a k-contiguous B as [BN][16] (a quarter-warp's
// 16-byte fragment loads cover two rows: every bank once); an n-contiguous B as [16][BN] with
// the columns of row k XOR-ed by ((k / 4) % 4) * 8, so that the four k rows a warp reads at once
// fall in different banks.
template <int BM, int BN>
struct Smem {
  static constexpr int a_stage = BM * kBK, b_stage = BN * kBK;
  static constexpr int bytes = kStages * (a_stage + b_stage) * 4;
};
__device__ __forceinline__ int swz(int k, int n) { return n ^ (((k >> 2) & 3) << 3); }

// mma.sync: a block computes a BM x BN tile of C over K in steps of 16, staged in shared memory
// by cp.async (16-byte chunks, zero-filled outside the matrix) in a 3-deep pipeline; each warp
// owns a WM x WN sub-tile: (WM / 16) x (WN / 8) mma tiles.
// Within a 16-deep k tile, mma step s (of 2) takes k = 4 tq + 2 s as its k = tq and 4 tq + 2 s + 1 as
// its k = tq + 4, so that a thread's A and k-contiguous B fragments are one 16-byte load per row.
// 16 warps per SM (warps of 32 x 32 keep to 128 registers).
template <int BM, int BN, int WM, int WN, bool BKMajor>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 512 / ((BM / WM) * (BN / WN) * 32))
    gemm_3xtf32(TcGemm g) {
  constexpr int kThreads = (BM / WM) * (BN / WN) * 32;
  constexpr int MT = WM / 16, NT = WN / 8;
  using S = Smem<BM, BN>;
  extern __shared__ __align__(16) float smem[];
  float* As = smem;
  float* Bs = smem + kStages * S::a_stage;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / (BN / WN), wn = warp % (BN / WN);
  const int gq = lane >> 2, tq = lane & 3;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t z = blockIdx.z;
  const float* A = g.A + z * g.sa;
  const float* B = g.B + z * g.sb;
  const int64_t ktiles = (g.K + kBK - 1) / kBK;

  auto load = [&](int stage, int64_t kt) {
    const int64_t k0 = kt * kBK;
    float* as = As + stage * S::a_stage;
    float* bs = Bs + stage * S::b_stage;
    load_k_rows<BM, kBK, kBK, kThreads>(as, A, g.lda, m0, g.M, k0, g.K, tid);
    if (BKMajor) {
      load_k_rows<BN, kBK, kBK, kThreads>(bs, B, g.ldb, n0, g.N, k0, g.K, tid);
    } else {
#pragma unroll
      for (int c = tid; c < BN * kBK / 4; c += kThreads) {
        const int r = c / (BN / 4), nc = (c % (BN / 4)) * 4;
        const int64_t k = k0 + r, n = n0 + nc;
        const bool ok = k < g.K && n < g.N;
        cp_async16(bs + r * BN + swz(r, nc), ok ? B + k * g.ldb + n : B, ok);
      }
    }
  };

  // acc: the sum so far; part: this pair of k tiles', on the tensor cores, whose fp32
  // accumulation truncates (on an H200, accumulating a whole K = 3072 there left errors 40x
  // fp32's); added into acc with a rounded add per 32 k.
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
  float part[MT][NT][4];

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load(s, s);
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    {
      const int64_t next = kt + kStages - 1;
      if (next < ktiles) load(static_cast<int>(next % kStages), next);
      cp_async_commit();
    }
    const int stage = static_cast<int>(kt % kStages);
    const float* as = As + stage * S::a_stage + (wm * WM) * kBK;
    const float* bs = Bs + stage * S::b_stage;
    float4 ra[MT][2], rb[NT];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      ra[i][0] = *reinterpret_cast<const float4*>(as + (i * 16 + gq) * kBK + 4 * tq);
      ra[i][1] = *reinterpret_cast<const float4*>(as + (i * 16 + gq + 8) * kBK + 4 * tq);
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int n = wn * WN + j * 8 + gq;
      if (BKMajor) {
        rb[j] = *reinterpret_cast<const float4*>(bs + n * kBK + 4 * tq);
      } else {
        const int k = 4 * tq;
        rb[j] = make_float4(bs[k * BN + swz(k, n)], bs[(k + 1) * BN + swz(k + 1, n)], bs[(k + 2) * BN + swz(k + 2, n)],
                            bs[(k + 3) * BN + swz(k + 3, n)]);
      }
    }
    if ((kt & 1) == 0) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) part[i][j][r] = 0.f;
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      uint32_t ab[MT][4], as_[MT][4], bb[NT][2], bs_[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        split_tf32(s ? ra[i][0].z : ra[i][0].x, ab[i][0], as_[i][0]);
        split_tf32(s ? ra[i][1].z : ra[i][1].x, ab[i][1], as_[i][1]);
        split_tf32(s ? ra[i][0].w : ra[i][0].y, ab[i][2], as_[i][2]);
        split_tf32(s ? ra[i][1].w : ra[i][1].y, ab[i][3], as_[i][3]);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        split_tf32(s ? rb[j].z : rb[j].x, bb[j][0], bs_[j][0]);
        split_tf32(s ? rb[j].w : rb[j].y, bb[j][1], bs_[j][1]);
      }
      // The small products first, each pass over every tile before the next (independent mmas
      // between dependent ones).
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_tf32(part[i][j], as_[i], bb[j]);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_tf32(part[i][j], ab[i], bs_[j]);
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_tf32(part[i][j], ab[i], bb[j]);
    }
    if ((kt & 1) == 1 || kt + 1 == ktiles) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[i][j][r] += part[i][j][r];
    }
  }
  cp_async_wait<0>();

  // Epilogue: thread holds rows gq, gq + 8 and columns 2 tq, 2 tq + 1 of each mma tile.
  float* C = g.C + z * g.sc;
  const float* R = g.residual ? g.residual + z * g.sc : nullptr;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < NT; ++j)
        store_pair(g, A, B, C, R, m0 + wm * WM + i * 16 + gq + h * 8, n0 + wn * WN + j * 8 + 2 * tq, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
}


// ---- Hopper: wgmma (sm_90a) -------------------------------------------------------------------
// A warpgroup (4 warps) takes 64 rows of C and BN columns: per 8-deep k step three
// wgmma.m64nBNk8 (tf32) with A's split parts in registers and B's in shared memory, laid out as
// wgmma reads them without swizzling: 8 x 4 "core matrices" of 8 n-rows by 4 k (16 bytes per row,
// 128 contiguous bytes), k-adjacent ones 128 bytes apart (LBO), n-adjacent ones 1024 (SBO).
// Compiled for sm_90a only: wgmma_probe tells the host whether this image has it.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PTC_WGMMA 1
#endif

__global__ void wgmma_probe(int* out) {
#ifdef PTC_WGMMA
  *out = 1;
#else
  *out = 0;
#endif
}

#ifdef PTC_WGMMA
// The accumulator operands of an m64n64 / m64n128 wgmma: 32 / 64 fp32 registers per thread.
#define PTC_D16(o) "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
    "+f"(d[o + 7]), "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]), "+f"(d[o + 13]), "+f"(d[o + 14]), \
    "+f"(d[o + 15])
#define PTC_D32 PTC_D16(0), PTC_D16(16)
#define PTC_D64 PTC_D16(0), PTC_D16(16), PTC_D16(32), PTC_D16(48)
__device__ __forceinline__ void wgmma_n64(float* d, const uint32_t* a, uint64_t desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : PTC_D32
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_n128(float* d, const uint32_t* a, uint64_t desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : PTC_D64
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

// No swizzle; LBO 128 bytes (k-adjacent core matrices), SBO `sbo` (n-adjacent ones).
__device__ __forceinline__ uint64_t smem_desc(const float* p, uint32_t sbo) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return static_cast<uint64_t>((a >> 4) & 0x3FFF) | (static_cast<uint64_t>(128 >> 4) << 16) | (static_cast<uint64_t>(sbo >> 4) << 32);
}
template <int BN>
__device__ __forceinline__ void wgmma_bn(float* d, const uint32_t* a, uint64_t desc, int scale_d) {
  if constexpr (BN == 128) wgmma_n128(d, a, desc, scale_d);
  else wgmma_n64(d, a, desc, scale_d);
}
// mbarriers (shared-memory addresses): init by one thread, arrive by each counted thread, wait
// for the completion of the phase with parity `parity`.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}
#endif

constexpr int kWK = 32;           // k per tile of the wgmma kernels
constexpr int kLdA = kWK + 4;     // raw A rows padded: the fragment loads (8 rows x 4 k) hit 32 banks
#ifdef PTC_WGMMA
// Core-layout offset (floats) of B element (n, k) within a tile.
__device__ constexpr int core_at(int n, int k) { return (((n >> 3) * (kWK / 4) + (k >> 2)) * 8 + (n & 7)) * 4 + (k & 3); }
#endif

#ifdef PTC_WGMMA
__device__ __forceinline__ void keep(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void keep(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
#endif

// ---- Hopper, warp-specialized -----------------------------------------------------------------
// CWG consumer warpgroups (64 rows of C each) and one producer warpgroup, handing tiles (32 k)
// over by mbarriers instead of block-wide barriers. The producer keeps a 4-deep ring of raw A and
// B tiles filled by cp.async, two tiles ahead, and splits each B tile into big / small copies in
// wgmma's core layout (a 2-deep ring); then it marks the tile "full". A consumer loads its A
// fragments from the raw tile and splits them in registers (and marks the raw slot free), issues
// the tile's 12 wgmmas with B's parts from shared memory, waits for them, marks the parts' slot
// free and folds the tile's sums into its own. So the producer's copies and splits overlap the
// consumers' wgmmas, and no block-wide barrier holds the consumer warpgroups in lockstep.
template <int CWG, int BN>
struct WsSmem {
  static constexpr int BM = CWG * 64, kRaw = 4, kParts = 2;
  static constexpr int a_raw = BM * kLdA, raw = a_raw + BN * kWK, parts = 2 * BN * kWK;  // floats per slot
  static constexpr int bytes = (kRaw * raw + kParts * parts) * 4 + (2 * kRaw + kParts) * 8;  // + the mbarriers
};

template <int CWG, int BN, bool BKMajor>
__global__ void __launch_bounds__((CWG + 1) * 128, 1) gemm_3xtf32_ws(TcGemm g) {
#ifdef PTC_WGMMA
  constexpr int BM = CWG * 64, ND = BN / 2, KS = kWK / 8, kAhead = 2;  // tiles copied ahead of the split
  constexpr uint32_t kSbo = (kWK / 4) * 128;
  using S = WsSmem<CWG, BN>;
  extern __shared__ __align__(16) float smem[];
  float* Raw = smem;                         // [kRaw][A: BM x kLdA, B: core layout or [kWK][BN]]
  float* Parts = smem + S::kRaw * S::raw;    // [kParts][B big, B small], core layout
  const uint32_t bars = static_cast<uint32_t>(__cvta_generic_to_shared(Parts + S::kParts * S::parts));
  auto full = [&](int r) { return bars + 8 * r; };                      // raw slot r's tile ready (B split)
  auto raw_free = [&](int r) { return bars + 8 * (S::kRaw + r); };      // consumers have their A fragments
  auto parts_free = [&](int q) { return bars + 8 * (2 * S::kRaw + q); };  // consumers' wgmmas are done

  const int tid = threadIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t z = blockIdx.z;
  const float* A = g.A + z * g.sa;
  const float* B = g.B + z * g.sb;
  const int64_t ktiles = (g.K + kWK - 1) / kWK;

  if (tid == 0) {
    for (int r = 0; r < S::kRaw; ++r) {
      mbar_init(full(r), 128);
      mbar_init(raw_free(r), CWG * 128);
    }
    for (int q = 0; q < S::kParts; ++q) mbar_init(parts_free(q), CWG * 128);
  }
  __syncthreads();

  if (tid >= CWG * 128) {  // ---- producer ----
    const int p = tid - CWG * 128;
    auto load = [&](int r, int64_t kt) {
      const int64_t k0 = kt * kWK;
      float* ra = Raw + r * S::raw;
      float* rb = ra + S::a_raw;
      load_k_rows<BM, kWK, kLdA, 128>(ra, A, g.lda, m0, g.M, k0, g.K, p);
#pragma unroll
      for (int c = p; c < BN * kWK / 4; c += 128) {
        if (BKMajor) {  // straight into the core layout: chunk c is 16 bytes at c * 16
          const int ci = c >> 3, n = ((ci / (kWK / 4)) << 3) + (c & 7), kc = (ci % (kWK / 4)) * 4;
          const bool ok = n0 + n < g.N && k0 + kc < g.K;
          cp_async16(rb + c * 4, ok ? B + (n0 + n) * g.ldb + k0 + kc : B, ok);
        } else {  // [kWK][BN], transposed by the split
          const int r2 = c / (BN / 4), nc = (c % (BN / 4)) * 4;
          const bool ok = k0 + r2 < g.K && n0 + nc < g.N;
          cp_async16(rb + r2 * BN + nc, ok ? B + (k0 + r2) * g.ldb + n0 + nc : B, ok);
        }
      }
    };
    constexpr int kChunks = BN * kWK / 4 / 128;
    auto split_b = [&](int r, int q) {  // all loads first: kChunks independent chains
      const float* rb = Raw + r * S::raw + S::a_raw;
      float* big = Parts + q * S::parts;
      float4 v[kChunks];
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int c = p + 128 * i;
        if (BKMajor) {
          v[i] = *reinterpret_cast<const float4*>(rb + c * 4);
        } else {  // column n = c % BN, k chunk c / BN
          const int n = c % BN, kc = (c / BN) * 4;
          v[i] = make_float4(rb[kc * BN + n], rb[(kc + 1) * BN + n], rb[(kc + 2) * BN + n], rb[(kc + 3) * BN + n]);
        }
      }
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int c = p + 128 * i;
        const int at = BKMajor ? c * 4 : core_at(c % BN, (c / BN) * 4);
        uint32_t hi[4], lo[4];
        split_tf32(v[i].x, hi[0], lo[0]);
        split_tf32(v[i].y, hi[1], lo[1]);
        split_tf32(v[i].z, hi[2], lo[2]);
        split_tf32(v[i].w, hi[3], lo[3]);
        *reinterpret_cast<uint4*>(big + at) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        *reinterpret_cast<uint4*>(big + BN * kWK + at) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to wgmma's reads
    };
#pragma unroll 1
    for (int64_t t = 0; t < kAhead; ++t) {
      if (t < ktiles) load(static_cast<int>(t), t);
      cp_async_commit();
    }
#pragma unroll 1
    for (int64_t kt = 0; kt < ktiles; ++kt) {
      const int64_t nxt = kt + kAhead;
      if (nxt < ktiles) {
        const int r = static_cast<int>(nxt % S::kRaw);
        if (nxt >= S::kRaw) mbar_wait(raw_free(r), static_cast<uint32_t>((nxt / S::kRaw - 1) & 1));
        load(r, nxt);
      }
      cp_async_commit();
      cp_async_wait<kAhead>();
      asm volatile("bar.sync 1, 128;\n" ::: "memory");  // tile kt is in, every producer's copies
      const int q = static_cast<int>(kt % S::kParts);
      if (kt >= S::kParts) mbar_wait(parts_free(q), static_cast<uint32_t>((kt / S::kParts - 1) & 1));
      split_b(static_cast<int>(kt % S::kRaw), q);
      mbar_arrive(full(static_cast<int>(kt % S::kRaw)));
    }
    cp_async_wait<0>();
    return;
  }

  // ---- consumers: warp w takes rows 16 w.. of the block (warpgroup cw) ----
  const int w = tid >> 5, cw = tid >> 7, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
  float acc[ND], part[ND];
#pragma unroll
  for (int i = 0; i < ND; ++i) acc[i] = part[i] = 0.f;
#pragma unroll 1
  for (int64_t kt = 0; kt < ktiles; ++kt) {
    const int r = static_cast<int>(kt % S::kRaw), q = static_cast<int>(kt % S::kParts);
    mbar_wait(full(r), static_cast<uint32_t>((kt / S::kRaw) & 1));
    const float* as = Raw + r * S::raw + (w * 16 + gq) * kLdA + tq;
    uint32_t ab[KS][4], al[KS][4];
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      split_tf32(as[s * 8], ab[s][0], al[s][0]);
      split_tf32(as[8 * kLdA + s * 8], ab[s][1], al[s][1]);
      split_tf32(as[s * 8 + 4], ab[s][2], al[s][2]);
      split_tf32(as[8 * kLdA + s * 8 + 4], ab[s][3], al[s][3]);
    }
    mbar_arrive(raw_free(r));
    const float* big = Parts + q * S::parts;
    const float* small = big + BN * kWK;
    // Two consumer warpgroups take turns issuing (named barriers 2 and 3: warpgroup 1 after 0's
    // tile kt, 0 after 1's tile kt - 1), so that one splits and folds while the other's wgmmas
    // keep the tensor cores busy (1-5% on the H200 over letting them drift).
    if (CWG == 2 && (cw == 1 || kt > 0)) asm volatile("bar.sync %0, 256;\n" ::"r"(2 + cw) : "memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int s = 0; s < KS; ++s) {  // k 8 s..: core matrices 2 s, 2 s + 1
      const uint64_t dbig = smem_desc(big + s * 64, kSbo), dsmall = smem_desc(small + s * 64, kSbo);
      wgmma_bn<BN>(part, al[s], dbig, s == 0 ? 0 : 1);
      wgmma_bn<BN>(part, ab[s], dsmall, 1);
      wgmma_bn<BN>(part, ab[s], dbig, 1);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    if (CWG == 2 && (cw == 0 || kt + 1 < ktiles)) asm volatile("bar.arrive %0, 256;\n" ::"r"(3 - cw) : "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int s = 0; s < KS; ++s)
#pragma unroll
      for (int i = 0; i < 4; ++i) keep(ab[s][i]), keep(al[s][i]);
    mbar_arrive(parts_free(q));
#pragma unroll
    for (int i = 0; i < ND; ++i) {
      keep(part[i]);
      acc[i] += part[i];
    }
  }

  // acc[4 j + 0..3]: rows 16 w + gq (+ 8), columns 8 j + 2 tq (+ 1).
  float* C = g.C + z * g.sc;
  const float* R = g.residual ? g.residual + z * g.sc : nullptr;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      store_pair(g, A, B, C, R, m0 + w * 16 + gq + h * 8, n0 + j * 8 + 2 * tq, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
#endif
}

// Whether this GPU runs the sm_90a image (wgmma): probed once.
bool wgmma_available() {
  static const bool ok = [] {
    int* d = nullptr;
    int h = 0;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return (cudaGetLastError(), false);
    wgmma_probe<<<1, 1>>>(d);
    const bool got = cudaGetLastError() == cudaSuccess && cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(d);
    cudaGetLastError();
    return got && h == 1;
  }();
  return ok;
}

// One launch of Kernel (BM x BN tiles of `threads` threads, `bytes` of shared memory, opted into
// on its first launch: once per kernel, hence the kernel as a template argument) over g's problems.
template <auto Kernel, int BM, int BN>
cudaError_t launch(int threads, int bytes, const TcGemm& g, cudaStream_t stream) {
  static const cudaError_t attr = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>((g.N + BN - 1) / BN), static_cast<unsigned>((g.M + BM - 1) / BM), static_cast<unsigned>(g.batch));
  Kernel<<<grid, threads, bytes, stream>>>(g);
  return cudaGetLastError();
}
template <int BM, int BN, int WM, int WN, bool BKMajor>
cudaError_t launch_mma(const TcGemm& g, cudaStream_t stream) {
  return launch<gemm_3xtf32<BM, BN, WM, WN, BKMajor>, BM, BN>((BM / WM) * (BN / WN) * 32, Smem<BM, BN>::bytes, g, stream);
}
template <int CWG, int BN, bool BKMajor>
cudaError_t launch_ws(const TcGemm& g, cudaStream_t stream) {
  return launch<gemm_3xtf32_ws<CWG, BN, BKMajor>, CWG * 64, BN>((CWG + 1) * 128, WsSmem<CWG, BN>::bytes, g, stream);
}

template <bool BKMajor>
cudaError_t launch_config(const TcGemm& g, int config, cudaStream_t stream) {
  switch (config) {
    case 0: return launch_mma<64, 64, 32, 32, BKMajor>(g, stream);
    case 1: return launch_ws<1, 64, BKMajor>(g, stream);
    case 2: return launch_ws<2, 64, BKMajor>(g, stream);
    default: return launch_ws<2, 128, BKMajor>(g, stream);
  }
}

thread_local std::string g_tc_error;

}  // namespace

bool tc_gemm_fits(const TcGemm& g) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || g.batch <= 0 || g.batch > 65535) return false;
  if ((g.M + 63) / 64 > 65535) return false;
  if (g.K % 4 != 0 || g.lda % 4 != 0 || g.lda < g.K || g.ldb % 4 != 0 || !aligned(g.A) || !aligned(g.B)) return false;
  if (g.b_kmajor ? g.ldb < g.K : (g.ldb < g.N || g.N % 4 != 0)) return false;
  if (g.batch > 1 && (g.sa % 4 != 0 || g.sb % 4 != 0)) return false;
  if (g.N % 2 == 0 && reinterpret_cast<uintptr_t>(g.C) % 8 != 0) return false;
  return true;
}

const char* tc_gemm(const TcGemm& g, int config, cudaStream_t stream) {
  if (config >= kTcGemmMmaConfigs && !wgmma_available()) return "the 3xTF32 GEMM's wgmma kernels need an sm_90a GPU image";
  const cudaError_t e = g.b_kmajor ? launch_config<true>(g, config, stream) : launch_config<false>(g, config, stream);
  if (e == cudaSuccess) return nullptr;
  g_tc_error = std::string("the 3xTF32 GEMM kernel: ") + cudaGetErrorString(e);
  return g_tc_error.c_str();
}

}  // namespace ptc_cuda
