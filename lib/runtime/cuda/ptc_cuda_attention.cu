// ptc_cuda_attention.cu — fused scaled-dot-product attention (ptc_cuda::attention, see ptc_cuda_rt.h):
// float32 kernels (CUDA cores, or TF32 tensor cores) and bfloat16 / float16 kernels on the tensor
// cores with float32 accumulation and a float32 softmax.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ptc_cuda_rt.h"

namespace ptc_cuda {
namespace {

thread_local std::string g_error;

const char* cuda_error(const char* what, cudaError_t e) {
  g_error = std::string(what) + ": " + cudaGetErrorString(e);
  return g_error.c_str();
}

// ---- float32 ------------------------------------------------------------------------------------
__device__ inline float maxnan_f(float a, float b) { return (a != a || a > b) ? a : b; }

// Score s (q.k, unscaled) of query i and key j as the softmax sees it: scaled, plus a float mask,
// or -inf where it is out of range (`outside`), after a causal diagonal or dropped by a bool mask.
__device__ inline float masked_score(const Attention& a, float s, int64_t b, int64_t h, int64_t i, int64_t j, bool outside) {
  if (outside || (a.causal && j > i)) return -INFINITY;
  float v = s * a.scale;
  if (a.mask_kind == kMaskNone) return v;
  const int64_t at = b * a.ms[0] + h * a.ms[1] + i * a.ms[2] + j * a.ms[3];
  if (a.mask_kind == kMaskAdd) return v + static_cast<const float*>(a.mask)[at];
  return (static_cast<const unsigned char*>(a.mask)[at] != 0) != (a.mask_kind == kMaskKeep) ? -INFINITY : v;
}

// Stages rows [r0, r0 + n) of a [T, len] operand (row stride rs, element stride es) into smem
// [rows][ld] as cvt(x), zeros elsewhere up to `width` (a multiple of 4); vec: 16-byte loads and
// stores (rows_vec4). T is float (cvt the identity) or uint32_t (TF32 bits).
template <typename T, typename Cvt>
__device__ inline void stage_rows(T* smem, int rows, int ld, int width, const float* base, int64_t r0, int n, int len, int64_t rs,
                                  int64_t es, bool vec, Cvt cvt) {
  using T4 = typename std::conditional<std::is_same<T, float>::value, float4, uint4>::type;
  if (vec) {
    const int w4 = width / 4;
    for (int idx = threadIdx.x; idx < rows * w4; idx += blockDim.x) {
      const int r = idx / w4, d = 4 * (idx - r * w4);
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < n && d < len) x = *reinterpret_cast<const float4*>(base + (r0 + r) * rs + d);
      *reinterpret_cast<T4*>(smem + r * ld + d) = T4{cvt(x.x), cvt(x.y), cvt(x.z), cvt(x.w)};
    }
  } else {
    for (int idx = threadIdx.x; idx < rows * width; idx += blockDim.x) {
      const int r = idx / width, d = idx - r * width;
      smem[r * ld + d] = r < n && d < len ? cvt(base[(r0 + r) * rs + d * es]) : T{0};
    }
  }
}
struct AsF32 {
  __device__ float operator()(float x) const { return x; }
};

// Row i of (b, h)'s output, [B, H, Tq, Dv] or [B, Tq, H, Dv] (o_heads_inner).
template <typename T>
__device__ __forceinline__ T* out_row(const Attention& a, int64_t b, int64_t h, int64_t i) {
  return static_cast<T*>(a.o) + (a.o_heads_inner ? (b * a.Tq + i) * a.H + h : (b * a.H + h) * a.Tq + i) * a.Dv;
}
// What a row without keys holds: zeros for Tk = 0 (an empty matmul); for a row whose every key is
// masked, zeros or NaN (masked_rows_zero).
__device__ __forceinline__ float keyless_row_value(const Attention& a) { return a.Tk == 0 ? 0.f : a.masked_rows_zero ? 0.f : NAN; }

// The (batch, head, block of `rows` query rows) a block of the attention kernels takes, and its
// q, k and v heads (k and v: head h / kv_group).
template <typename T>
struct QueryBlock {
  int64_t b, h, i0;
  int nq;  // rows of the block inside Tq
  const T *q, *k, *v;
};
template <typename T>
__device__ __forceinline__ QueryBlock<T> query_block(const Attention& a, int rows) {
  const int64_t nqb = (a.Tq + rows - 1) / rows;
  int64_t blk = blockIdx.x;
  const int64_t qb = blk % nqb;
  blk /= nqb;
  QueryBlock<T> r;
  r.h = blk % a.H;
  r.b = blk / a.H;
  r.i0 = qb * rows;
  r.nq = static_cast<int>(std::min<int64_t>(rows, a.Tq - r.i0));
  r.q = static_cast<const T*>(a.q) + r.b * a.qs[0] + r.h * a.qs[1];
  r.k = static_cast<const T*>(a.k) + r.b * a.ks[0] + (r.h / a.kv_group) * a.ks[1];
  r.v = static_cast<const T*>(a.v) + r.b * a.vs[0] + (r.h / a.kv_group) * a.vs[1];
  return r;
}

// A register-tiled flash-style kernel for head sizes up to kAttentionMaxHead. One block of 128
// threads per (b, h, tile of 32 query rows), key tiles of 64. Q, each K tile and each V tile are
// staged in shared memory row by row as they lie in memory (16-byte loads and stores where the
// strides allow: no transposes, no bank conflicts), head sizes padded with zeros to a multiple of
// 4. Thread (ty, tx) of the 8 x 16 grid computes the scores of rows 4ty.. and keys tx + 16jj
// (jj < 4: rows 68 words apart, so a quarter-warp's 16-byte loads of K hit distinct banks) from
// 16-byte loads along d (8 loads per 64 FMAs); the 16 threads of a row group, one half-warp, reduce
// the row max and sum with shuffles (online softmax: running max m and sum l, earlier output
// rescaled by exp(m_old - m_new)); the probabilities go through shared memory, and the thread
// accumulates output rows 4ty.. and columns 64c + 4tx.. (c < DVT) from the V tile. (16-row tiles,
// for more blocks where B x H is small, measured slower on the H200 in every case: ViT-S b8 81
// vs 59 us, BERT b8 75 vs 34, with the staging this kernel had then.)
constexpr int kTBQ = 32, kTThreads = 128, kTBK = 64, kTLdp = kTBQ + 4;
template <int DVT>  // Dv <= 64 * DVT
__global__ void __launch_bounds__(kTThreads) attention_tiled_kernel(Attention a, bool qvec, bool kvec, bool vvec) {
  extern __shared__ __align__(16) float tsm[];
  const int D = static_cast<int>(a.D), Dv = static_cast<int>(a.Dv), ldv = 64 * DVT;
  const int Dp = (D + 3) / 4 * 4, ldqk = Dp + 4;  // padded head size; rows 4 words apart mod 32
  float* sq = tsm;                   // [kTBQ][ldqk]  Q
  float* sk = sq + kTBQ * ldqk;      // [kTBK][ldqk]  K tile
  float* sv = sk + kTBK * ldqk;      // [kTBK][ldv]   V tile
  float* sp = sv + kTBK * ldv;       // [kTBK][kTLdp] probabilities, transposed
  const float ninf = -INFINITY;
  const QueryBlock<float> blk = query_block<float>(a, kTBQ);
  const int64_t b = blk.b, h = blk.h, i0 = blk.i0;
  const int nq = blk.nq;
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const float *qbase = blk.q, *kbase = blk.k, *vbase = blk.v;
  stage_rows(sq, kTBQ, ldqk, Dp, qbase, i0, nq, D, a.qs[2], a.qs[3], qvec, AsF32{});
  float m[4], l[4], acc[4][DVT][4];
#pragma unroll
  for (int ii = 0; ii < 4; ++ii) {
    m[ii] = ninf, l[ii] = 0.f;
#pragma unroll
    for (int c = 0; c < DVT; ++c)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) acc[ii][c][jj] = 0.f;
  }
  const int64_t kend = a.causal ? std::min<int64_t>(a.Tk, i0 + nq) : a.Tk;  // causal: later keys add nothing
  for (int64_t j0 = 0; j0 < kend; j0 += kTBK) {
    const int nk = static_cast<int>(std::min<int64_t>(kTBK, kend - j0));
    __syncthreads();  // the previous tile is consumed (and Q is staged)
    stage_rows(sk, kTBK, ldqk, Dp, kbase, j0, nk, D, a.ks[2], a.ks[3], kvec, AsF32{});
    stage_rows(sv, kTBK, ldv, ldv, vbase, j0, nk, Dv, a.vs[2], a.vs[3], vvec, AsF32{});
    __syncthreads();
    float s[4][4] = {};
#pragma unroll 2
    for (int d = 0; d < Dp; d += 4) {
      float4 qv[4], kv[4];
#pragma unroll
      for (int ii = 0; ii < 4; ++ii) qv[ii] = *reinterpret_cast<const float4*>(sq + (4 * ty + ii) * ldqk + d);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) kv[jj] = *reinterpret_cast<const float4*>(sk + (tx + 16 * jj) * ldqk + d);
#pragma unroll
      for (int ii = 0; ii < 4; ++ii)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          float t = fmaf(qv[ii].x, kv[jj].x, s[ii][jj]);
          t = fmaf(qv[ii].y, kv[jj].y, t);
          t = fmaf(qv[ii].z, kv[jj].z, t);
          s[ii][jj] = fmaf(qv[ii].w, kv[jj].w, t);
        }
    }
#pragma unroll
    for (int ii = 0; ii < 4; ++ii) {
      const int64_t i = i0 + 4 * ty + ii;
      float best = ninf;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int c = tx + 16 * jj;
        const float v = masked_score(a, s[ii][jj], b, h, i, j0 + c, c >= nk || i >= a.Tq);
        s[ii][jj] = v;
        best = maxnan_f(best, v);
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) best = maxnan_f(best, __shfl_xor_sync(0xffffffffu, best, off));
      const float mnew = maxnan_f(best, m[ii]);
      // Every key so far masked: probabilities 0, nothing to rescale (uniform over the row group).
      const float base = mnew == ninf ? 0.f : mnew;
      float sum = 0.f;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const float p = expf(s[ii][jj] - base);
        sp[(tx + 16 * jj) * kTLdp + 4 * ty + ii] = p;
        sum += p;
      }
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      const float corr = m[ii] == ninf ? 0.f : expf(m[ii] - mnew);
      l[ii] = l[ii] * corr + sum;
      m[ii] = mnew;
#pragma unroll
      for (int c = 0; c < DVT; ++c)
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) acc[ii][c][jj] *= corr;
    }
    __syncthreads();  // the probabilities are in shared memory
#pragma unroll 4
    for (int kk = 0; kk < nk; ++kk) {
      const float4 pv = *reinterpret_cast<const float4*>(sp + kk * kTLdp + 4 * ty);
      const float pa[4] = {pv.x, pv.y, pv.z, pv.w};
#pragma unroll
      for (int c = 0; c < DVT; ++c) {
        const float4 vv = *reinterpret_cast<const float4*>(sv + kk * ldv + 64 * c + 4 * tx);
        const float va[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
        for (int ii = 0; ii < 4; ++ii)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) acc[ii][c][jj] = fmaf(pa[ii], va[jj], acc[ii][c][jj]);
      }
    }
  }
#pragma unroll
  for (int ii = 0; ii < 4; ++ii) {
    const int r = 4 * ty + ii;
    if (r >= nq) continue;
    float* orow = out_row<float>(a, b, h, i0 + r);
    const float fill = keyless_row_value(a);
#pragma unroll
    for (int c = 0; c < DVT; ++c)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int d = 64 * c + 4 * tx + jj;
        if (d < Dv) orow[d] = (a.Tk == 0 || l[ii] == 0.f) ? fill : acc[ii][c][jj] / l[ii];
      }
  }
}

// 16-byte loads of an operand's rows: unit element stride, 4-aligned row, batch and head
// strides and length, a 16-byte aligned base.
bool rows_vec4(const void* p, const int64_t (&s)[4], int64_t len) {
  return s[3] == 1 && len % 4 == 0 && s[0] % 4 == 0 && s[1] % 4 == 0 && s[2] % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <int DVT>
const char* attention_tiled_launch(const Attention& a, cudaStream_t stream) {
  const int64_t blocks = a.B * a.H * ((a.Tq + kTBQ - 1) / kTBQ);
  if (blocks > 0x7fffffff) return "attention over too many (batch, head, query tile) blocks";
  const int64_t ldqk = (a.D + 3) / 4 * 4 + 4;
  const size_t smem = sizeof(float) * static_cast<size_t>((kTBQ + kTBK) * ldqk + kTBK * 64 * DVT + kTBK * kTLdp);
  if (smem > 48 * 1024) {  // above the default: opt in (up to 227 KiB on Hopper; 171 KiB at D = Dv = 256)
    cudaError_t e = cudaFuncSetAttribute(attention_tiled_kernel<DVT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
    if (e != cudaSuccess) return cuda_error("the attention kernel's shared memory", e);
  }
  attention_tiled_kernel<DVT><<<static_cast<unsigned>(blocks), kTThreads, smem, stream>>>(
      a, rows_vec4(a.q, a.qs, a.D), rows_vec4(a.k, a.ks, a.D), rows_vec4(a.v, a.vs, a.Dv));
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cuda_error("the attention kernel", e);
}

__device__ __forceinline__ float exp2_approx(float x) {  // 2^x, -inf -> 0 (ex2.approx: 2 ulp, as flash kernels use)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
constexpr float kLog2e = 1.4426950408889634f;

// ---- attention on TF32 tensor cores (Attention::tf32) -------------------------------------------
// FlashAttention-2's structure with mma.sync m16n8k8 (TF32 in, fp32 accumulate): one block of
// WARPS warps per (b, h, 16 WARPS query rows); each warp owns 16 rows, holds their Q fragments in registers
// for the whole key loop, and computes its 16 x 64 score tile against each staged key tile (K and
// V tiles in shared memory as TF32 bits, rows padded by 4 words: conflict-free fragment loads).
// The score accumulators are in the mma C layout: thread (g = lane / 4, t = lane % 4) holds rows
// g and g + 8, columns 2t and 2t + 1 of each 8-key group. The online softmax reduces a row over
// its quad (shuffles 1 and 2). For p.v the probabilities stay in registers: the C layout's
// (2t, 2t + 1) pair is the A layout's (t, t + 4) pair once the 8 keys of a group are taken in the
// order 0, 2, 4, 6, 1, 3, 5, 7, and the V fragment is loaded in that same order. Four warps per
// block, even where that leaves multiprocessors idle: 2-warp blocks (twice the blocks, each
// staging the same key tiles for half the rows) measured slower on the H200 (BERT-base b8 43.7
// against 35.8 us, ViT-S b8 54.1 against 40.2, GPT-2 b4 35.2 against 27.5).
// Next: cp.async double buffering of the key / value tiles (the staging is not overlapped).

// One key tile's online-softmax step on a warp's scores in the mma C layout (lane (g, t): rows
// g and g + 8, keys 2t and 2t + 1 of each 8-key group). The softmax runs in base 2: scores are
// scaled by scale * log2(e), and exp2 of (score - running max) is one ex2.approx. `full` says the
// tile needs no masking (no mask, no causal diagonal in it, all kHBK keys in range); otherwise
// each score goes through masked_score. The running max m and sum l of the lane's two rows move
// on, the tile's probabilities replace the scores in s, and corr is the factor by which the
// earlier output of each row is rescaled. Rows past Tq (computed on zero queries, never stored)
// take the fast path too; the masked one treats them as masked (their mask row is not read).
// `keep` (the half kernel under a bool mask, mask_bits): bit 4 nt + e says score s[nt][e] is
// kept by the mask; the mask is then not read here.
template <int NT>
__device__ __forceinline__ void online_softmax_tile(const Attention& a, float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&corr)[2],
                                                    int64_t b, int64_t h, const int64_t (&row)[2], int64_t j0, int nk, int t, bool full,
                                                    bool use_keep = false, uint32_t keep = 0) {
  static_assert(NT * 4 <= 32, "one keep bit per score of the lane");
  const float ninf = -INFINITY;
  float best[2] = {ninf, ninf};
  if (full) {
    const float sl2 = a.scale * kLog2e;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] *= sl2;
        best[e / 2] = maxnan_f(best[e / 2], s[nt][e]);
      }
  } else {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = row[e / 2];
        const int c = nt * 8 + 2 * t + (e & 1);
        const float v = use_keep ? (((keep >> (4 * nt + e)) & 1u) && !(a.causal && j0 + c > i) ? s[nt][e] * a.scale * kLog2e : ninf)
                                 : masked_score(a, s[nt][e], b, h, i, j0 + c, c >= nk || i >= a.Tq) * kLog2e;
        s[nt][e] = v;
        best[e / 2] = maxnan_f(best[e / 2], v);
      }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    best[r] = maxnan_f(best[r], __shfl_xor_sync(0xffffffffu, best[r], 1));
    best[r] = maxnan_f(best[r], __shfl_xor_sync(0xffffffffu, best[r], 2));
    const float mnew = maxnan_f(best[r], m[r]);
    const float base = mnew == ninf ? 0.f : mnew;  // every key so far masked: probabilities 0
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s[nt][2 * r] = exp2_approx(s[nt][2 * r] - base);
      s[nt][2 * r + 1] = exp2_approx(s[nt][2 * r + 1] - base);
      sum += s[nt][2 * r] + s[nt][2 * r + 1];
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    corr[r] = m[r] == ninf ? 0.f : exp2_approx(m[r] - mnew);
    l[r] = l[r] * corr[r] + sum;
    m[r] = mnew;
  }
}

// A bool mask (kMaskKeep / kMaskDrop) over the lane's 2 x 4 NT scores of a key tile in the mma
// C layout (rows row[0], row[1]; keys j0 + 8 nt + 2t and + 1): bit 4 nt + 2 r + e is set where the
// score is kept: its key is inside the tile's nk and its row inside Tq, and the mask keeps it. Two
// bytes at a time where the mask's keys are contiguous and the tile is whole.
template <int NT>
__device__ __forceinline__ uint32_t mask_bits(const Attention& a, int64_t b, int64_t h, const int64_t (&row)[2], int64_t j0, int nk, int t) {
  const unsigned char* base = static_cast<const unsigned char*>(a.mask) + b * a.ms[0] + h * a.ms[1] + j0 * a.ms[3];
  const bool want = a.mask_kind == kMaskKeep;
  uint32_t bits = 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= a.Tq) continue;
    const unsigned char* p = base + row[r] * a.ms[2];
    if (a.ms[3] == 1 && nk == 8 * NT && (reinterpret_cast<uintptr_t>(p) & 1) == 0) {
      const uint16_t* p2 = reinterpret_cast<const uint16_t*>(p);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint16_t u = p2[nt * 4 + t];
        bits |= static_cast<uint32_t>(((u & 0xffu) != 0) == want) << (4 * nt + 2 * r);
        bits |= static_cast<uint32_t>(((u >> 8) != 0) == want) << (4 * nt + 2 * r + 1);
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = nt * 8 + 2 * t + e;
          if (c < nk && (p[c * a.ms[3]] != 0) == want) bits |= 1u << (4 * nt + 2 * r + e);
        }
    }
  }
  return bits;
}

// Whether the key tile [j0, j0 + nk) of a warp's 16 rows from r0 needs no mask (online_softmax_tile).
__device__ __forceinline__ bool tile_unmasked(const Attention& a, int64_t r0, int64_t j0, int nk, int tile) {
  return a.mask_kind == kMaskNone && nk == tile && (!a.causal || j0 + tile - 1 <= r0);
}

constexpr int kMBK = 64;

__device__ inline uint32_t tf32_bits(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
#else
  return __float_as_uint(x);
#endif
}

__device__ inline void mma_tf32(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // attention() launches this kernel only where it was compiled for 8.0+ (tf32_mma_available)
#endif
}

struct AsTf32 {
  __device__ uint32_t operator()(float x) const { return tf32_bits(x); }
};

template <int KD, int KV, int WARPS>  // D <= 8 KD, Dv <= 8 KV
__global__ void __launch_bounds__(32 * WARPS) attention_mma_kernel(Attention a, bool kvec, bool vvec) {
  constexpr int kMBQ = 16 * WARPS;
  extern __shared__ __align__(16) uint32_t msm[];
  constexpr int LDK = 8 * KD + 4, LDV = 8 * KV + 4, NT = kMBK / 8;
  uint32_t* sk = msm;               // [kMBK][LDK]
  uint32_t* sv = sk + kMBK * LDK;   // [kMBK][LDV]
  const float ninf = -INFINITY;
  const int D = static_cast<int>(a.D), Dv = static_cast<int>(a.Dv);
  const QueryBlock<float> blk = query_block<float>(a, kMBQ);
  const int64_t b = blk.b, h = blk.h, i0 = blk.i0;
  const int nq = blk.nq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
  const float *qbase = blk.q, *kbase = blk.k, *vbase = blk.v;
  auto qat = [&](int64_t r, int d) { return r < a.Tq && d < D ? tf32_bits(qbase[r * a.qs[2] + d * a.qs[3]]) : 0u; };
  uint32_t qf[KD][4];
#pragma unroll
  for (int ks = 0; ks < KD; ++ks) {
    qf[ks][0] = qat(row[0], 8 * ks + t);
    qf[ks][1] = qat(row[1], 8 * ks + t);
    qf[ks][2] = qat(row[0], 8 * ks + t + 4);
    qf[ks][3] = qat(row[1], 8 * ks + t + 4);
  }
  float o[KV][4], m[2] = {ninf, ninf}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int nv = 0; nv < KV; ++nv) o[nv][0] = o[nv][1] = o[nv][2] = o[nv][3] = 0.f;
  const int64_t kend = a.causal ? std::min<int64_t>(a.Tk, i0 + nq) : a.Tk;  // causal: later keys add nothing
  for (int64_t j0 = 0; j0 < kend; j0 += kMBK) {
    const int nk = static_cast<int>(std::min<int64_t>(kMBK, kend - j0));
    __syncthreads();  // the previous tiles are consumed
    stage_rows(sk, kMBK, LDK, 8 * KD, kbase, j0, nk, D, a.ks[2], a.ks[3], kvec, AsTf32{});
    stage_rows(sv, kMBK, LDV, 8 * KV, vbase, j0, nk, Dv, a.vs[2], a.vs[3], vvec, AsTf32{});
    __syncthreads();
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      const uint32_t* kr = sk + (nt * 8 + g) * LDK + t;
#pragma unroll
      for (int ks = 0; ks < KD; ++ks) mma_tf32(s[nt], qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], kr[8 * ks], kr[8 * ks + 4]);
    }
    float corr[2];
    online_softmax_tile(a, s, m, l, corr, b, h, row, j0, nk, t, tile_unmasked(a, i0 + warp * 16, j0, nk, kMBK));
#pragma unroll
    for (int nv = 0; nv < KV; ++nv) {
      o[nv][0] *= corr[0], o[nv][1] *= corr[0];
      o[nv][2] *= corr[1], o[nv][3] *= corr[1];
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      // A (16 x 8, keys 2t and 2t + 1 of the group as columns t and t + 4): rows g, g + 8.
      const uint32_t a0 = tf32_bits(s[nt][0]), a1 = tf32_bits(s[nt][2]), a2 = tf32_bits(s[nt][1]), a3 = tf32_bits(s[nt][3]);
      const uint32_t* vr = sv + (nt * 8 + 2 * t) * LDV + g;
#pragma unroll
      for (int nv = 0; nv < KV; ++nv) mma_tf32(o[nv], a0, a1, a2, a3, vr[8 * nv], vr[LDV + 8 * nv]);
    }
  }
  const float fill = keyless_row_value(a);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row[r];
    if (i >= a.Tq) continue;
    float* orow = out_row<float>(a, b, h, i);
#pragma unroll
    for (int nv = 0; nv < KV; ++nv)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int d = 8 * nv + 2 * t + e;
        if (d < Dv) orow[d] = (a.Tk == 0 || l[r] == 0.f) ? fill : o[nv][2 * r + e] / l[r];
      }
  }
}

template <int KD, int KV, int WARPS>
const char* attention_mma_launch(const Attention& a, cudaStream_t stream) {
  const int64_t blocks = a.B * a.H * ((a.Tq + 16 * WARPS - 1) / (16 * WARPS));
  if (blocks > 0x7fffffff) return "attention over too many (batch, head, query tile) blocks";
  const size_t smem = sizeof(uint32_t) * static_cast<size_t>(kMBK) * ((8 * KD + 4) + (8 * KV + 4));
  if (smem > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(attention_mma_kernel<KD, KV, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return cuda_error("the attention kernel's shared memory", e);
  }
  attention_mma_kernel<KD, KV, WARPS><<<static_cast<unsigned>(blocks), 32 * WARPS, smem, stream>>>(a, rows_vec4(a.k, a.ks, a.D), rows_vec4(a.v, a.vs, a.Dv));
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cuda_error("the attention kernel", e);
}

// Whether the TF32 kernel runs here: it was compiled for compute capability 8.0 or newer (a
// library built with --cuda-arch sm_75 has PTX 7.5, where mma_tf32 traps) and the device has an
// image of it. Asked once per process (cudaFuncGetAttributes costs microseconds).
bool tf32_mma_available() {
  static const bool ok = [] {
    cudaFuncAttributes fa{};
    return cudaFuncGetAttributes(&fa, attention_mma_kernel<8, 8, 4>) == cudaSuccess && fa.ptxVersion >= 80 && fa.binaryVersion >= 80;
  }();
  return ok;
}

// ---- bfloat16 / float16 on tensor cores (Attention::elem) -------------------------------------
// FlashAttention-2's structure with mma.sync m16n8k16 (half inputs, float32 accumulation): one
// block of WARPS warps per (b, h, 16 WARPS query rows), each warp owning 16 rows. Q, and each tile
// of 64 keys of K and V, are staged in shared memory as they lie in memory (rows padded by 8
// elements: the 32-bit fragment loads of Q and the ldmatrix loads of K and V hit distinct banks).
// A warp skips the math of a tile where none of its rows is inside Tq (the last query block's
// spare warps) or, under a causal mask, where the tile starts after its last row; the key loop
// stops at the last 16 keys in range.
// The key and value tiles are double-buffered with cp.async (16-byte copies, zero-filled past
// the end) where the rows allow 16-byte loads, so the next tile's copy overlaps this tile's math.
// Head sizes up to 128 keep the warp's Q fragments in registers for the whole key loop; larger
// ones read them from shared memory per tile. Scores, the online softmax (running max and sum)
// and the output accumulators are float32, as in the TF32 kernel; the probabilities are rounded
// to the half dtype for p.v, as torch's half-precision flash kernels do. The C layout of two
// consecutive 8-key score tiles is the A layout of one 16-key step of p.v, so the probabilities
// stay in registers; V's B fragments come transposed from ldmatrix.trans.
template <typename T> struct HalfOps;
template <> struct HalfOps<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();  // attention() launches the half kernels only where they were compiled for 8.0+ (half_mma_available)
#endif
  }
};
template <> struct HalfOps<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
  }
};

// 16 bytes global -> shared, asynchronously; `bytes` 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}
// Four 8 x 8 matrices of 16-bit elements: lanes 8m..8m + 7 give the row addresses of matrix m,
// and r[m] holds the lane's pair (row lane / 4, columns 2 (lane % 4)..) of it.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#else
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}
// Four 8 x 8 matrices of 16-bit elements, transposed: lanes 8m..8m + 7 give the row addresses of
// matrix m, and r[m] holds the lane's pair of its transpose.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#else
  r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

// Stages rows [r0, r0 + n) of a [T, len] operand (row stride rs, element stride es) into smem
// [rows][ld], zeros elsewhere up to `width` (a multiple of 8). vec (rows_vec8): 16-byte cp.async
// copies, which the caller commits and waits for; otherwise plain loads and stores.
template <typename T>
__device__ inline void stage_half(T* smem, int rows, int ld, int width, const T* base, int64_t r0, int n, int len, int64_t rs, int64_t es,
                                  bool vec) {
  if (vec) {
    const int w8 = width / 8;
    for (int idx = threadIdx.x; idx < rows * w8; idx += blockDim.x) {
      const int r = idx / w8, d = 8 * (idx - r * w8);
      const bool in = r < n && d < len;
      cp_async16(smem + r * ld + d, in ? base + (r0 + r) * rs + d : base, in ? 16 : 0);
    }
  } else {
    for (int idx = threadIdx.x; idx < rows * width; idx += blockDim.x) {
      const int r = idx / width, d = idx - r * width;
      smem[r * ld + d] = r < n && d < len ? base[(r0 + r) * rs + d * es] : HalfOps<T>::from(0.f);
    }
  }
}

constexpr int kHBK = 64;  // keys per tile
template <int KD, int KV, int WARPS>
constexpr size_t half_smem_bytes() {  // Q, and two buffers each of K and V (2-byte elements)
  return 2 * (static_cast<size_t>(16 * WARPS) * (16 * KD + 8) + 2 * static_cast<size_t>(kHBK) * ((16 * KD + 8) + (16 * KV + 8)));
}

template <typename T, int KD, int KV, int WARPS>  // D <= 16 KD, Dv <= 16 KV
__global__ void __launch_bounds__(32 * WARPS) attention_half_kernel(Attention a, bool qvec, bool kvec, bool vvec) {
  using H = HalfOps<T>;
  constexpr int BQ = 16 * WARPS, NT = kHBK / 8, LDK = 16 * KD + 8, LDV = 16 * KV + 8;
  constexpr bool kQInRegisters = KD <= 8;
  extern __shared__ __align__(16) unsigned char hsm[];
  T* sq = reinterpret_cast<T*>(hsm);  // [BQ][LDK]
  T* sk = sq + BQ * LDK;              // [2][kHBK][LDK]
  T* sv = sk + 2 * kHBK * LDK;        // [2][kHBK][LDV]
  const float ninf = -INFINITY;
  const int D = static_cast<int>(a.D), Dv = static_cast<int>(a.Dv);
  const QueryBlock<T> blk = query_block<T>(a, BQ);
  const int64_t b = blk.b, h = blk.h, i0 = blk.i0;
  const int nq = blk.nq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
  const bool active = warp * 16 < nq;
  const T *qbase = blk.q, *kbase = blk.k, *vbase = blk.v;
  const int64_t kend = a.causal ? std::min<int64_t>(a.Tk, i0 + nq) : a.Tk;  // causal: later keys add nothing
  const int64_t ntiles = (kend + kHBK - 1) / kHBK;
  auto stage_tile = [&](int64_t tile, int buf) {
    const int64_t j0 = tile * kHBK;
    const int nk = static_cast<int>(std::min<int64_t>(kHBK, kend - j0));
    stage_half(sk + buf * kHBK * LDK, kHBK, LDK, 16 * KD, kbase, j0, nk, D, a.ks[2], a.ks[3], kvec);
    stage_half(sv + buf * kHBK * LDV, kHBK, LDV, 16 * KV, vbase, j0, nk, Dv, a.vs[2], a.vs[3], vvec);
  };
  stage_half(sq, BQ, LDK, 16 * KD, qbase, i0, nq, D, a.qs[2], a.qs[3], qvec);
  cp_async_commit();
  if (ntiles > 0) stage_tile(0, 0);
  cp_async_commit();
  cp_async_wait<1>();  // Q is here (the first key tile may still be on its way)
  __syncthreads();
  // The warp's A fragment of Q for head-size step ks: rows g and g + 8, columns 2t.. and 2t + 8..
  const T* qw = sq + warp * 16 * LDK + g * LDK + 2 * t;
  auto q_fragment = [&](int ks, uint32_t (&f)[4]) {
    const T* r0 = qw + 16 * ks;
    f[0] = *reinterpret_cast<const uint32_t*>(r0);
    f[1] = *reinterpret_cast<const uint32_t*>(r0 + 8 * LDK);
    f[2] = *reinterpret_cast<const uint32_t*>(r0 + 8);
    f[3] = *reinterpret_cast<const uint32_t*>(r0 + 8 * LDK + 8);
  };
  uint32_t qf[kQInRegisters ? KD : 1][4];
  if (kQInRegisters)
#pragma unroll
    for (int ks = 0; ks < (kQInRegisters ? KD : 1); ++ks) q_fragment(ks, qf[ks]);
  float o[2 * KV][4], m[2] = {ninf, ninf}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int nv = 0; nv < 2 * KV; ++nv) o[nv][0] = o[nv][1] = o[nv][2] = o[nv][3] = 0.f;
  for (int64_t it = 0; it < ntiles; ++it) {
    const int64_t j0 = it * kHBK;
    const int nk = static_cast<int>(std::min<int64_t>(kHBK, kend - j0));
    const int cur = static_cast<int>(it & 1);
    if (it + 1 < ntiles) stage_tile(it + 1, cur ^ 1);  // its buffer was consumed before the last barrier
    cp_async_commit();
    cp_async_wait<1>();  // this tile's copies are done
    __syncthreads();
    // A warp computes only where it has rows inside Tq and, under a causal mask, keys at or
    // before its last row; the others still stage and meet the barriers.
    bool compute = active && (!a.causal || j0 <= i0 + warp * 16 + 15);
    bool full = tile_unmasked(a, i0 + warp * 16, j0, nk, kHBK);
    const bool bool_mask = a.mask_kind == kMaskKeep || a.mask_kind == kMaskDrop;
    uint32_t keep = 0;
    if (compute && bool_mask) {
      // A warp's tile that the mask drops whole is skipped (a causal mask given as a bool
      // tensor); one it keeps whole takes the unmasked path. Rows past Tq count as either.
      keep = mask_bits<NT>(a, b, h, row, j0, nk, t);
      const uint32_t past = (row[0] >= a.Tq ? 0x33333333u : 0u) | (row[1] >= a.Tq ? 0xccccccccu : 0u);
      constexpr uint32_t all = NT * 4 == 32 ? 0xffffffffu : (1u << (NT * 4)) - 1;
      compute = !__all_sync(0xffffffffu, keep == 0);
      full = nk == kHBK && (!a.causal || j0 + kHBK - 1 <= i0 + warp * 16) && __all_sync(0xffffffffu, ((keep | past) & all) == all);
    }
    if (compute) {
      const T* kt = sk + cur * kHBK * LDK;
      const T* vt = sv + cur * kHBK * LDV;
      float s[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      // ldmatrix row addresses for K: lane -> key 8 (lane >> 4) + (lane & 7), columns 8 ((lane >> 3) & 1)..;
      // r[0], r[1] are the B fragments (columns 2t.. and 2t + 8..) of keys 16 np + g, r[2], r[3] of 16 np + 8 + g.
      const T* kl = kt + ((lane >> 4) * 8 + (lane & 7)) * LDK + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int ks = 0; ks < KD; ++ks) {
        uint32_t f[4];
        if (kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e) f[e] = qf[kQInRegisters ? ks : 0][e];
        } else {
          q_fragment(ks, f);
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          if (16 * np >= nk) break;  // keys past the tile's end: masked below
          uint32_t r[4];
          ldmatrix_x4(r, kl + 16 * np * LDK + 16 * ks);
          H::mma(s[2 * np], f, r[0], r[1]);
          H::mma(s[2 * np + 1], f, r[2], r[3]);
        }
      }
      float corr[2];
      online_softmax_tile(a, s, m, l, corr, b, h, row, j0, nk, t, full, bool_mask, keep);
#pragma unroll
      for (int nv = 0; nv < 2 * KV; ++nv) {
        o[nv][0] *= corr[0], o[nv][1] *= corr[0];
        o[nv][2] *= corr[1], o[nv][3] *= corr[1];
      }
      // ldmatrix row addresses for V: lane -> key (lane & 7) + 8 ((lane >> 3) & 1), columns 8 (lane >> 4)..
      const T* vl = vt + ((lane & 7) + ((lane >> 3) & 1) * 8) * LDV + (lane >> 4) * 8;
#pragma unroll
      for (int kk = 0; kk < kHBK / 16; ++kk) {
        if (16 * kk >= nk) break;  // zero probabilities and zero rows of V
        const uint32_t p[4] = {H::pack(s[2 * kk][0], s[2 * kk][1]), H::pack(s[2 * kk][2], s[2 * kk][3]),
                               H::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), H::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int nv = 0; nv < KV; ++nv) {  // 16 columns of V: B fragments of its two 8-column blocks
          uint32_t r[4];
          ldmatrix_x4_trans(r, vl + 16 * kk * LDV + 16 * nv);
          H::mma(o[2 * nv], p, r[0], r[1]);
          H::mma(o[2 * nv + 1], p, r[2], r[3]);
        }
      }
    }
    __syncthreads();  // this tile's buffers are consumed
  }
  const float fill = keyless_row_value(a);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row[r];
    if (i >= a.Tq) continue;
    T* orow = out_row<T>(a, b, h, i);
    const bool empty = a.Tk == 0 || l[r] == 0.f;
    const float inv = empty ? 0.f : 1.f / l[r];
#pragma unroll
    for (int nv = 0; nv < 2 * KV; ++nv) {
      const int d = 8 * nv + 2 * t;
      const float x0 = empty ? fill : o[nv][2 * r] * inv, x1 = empty ? fill : o[nv][2 * r + 1] * inv;
      if (d + 1 < Dv && (Dv & 1) == 0) {
        *reinterpret_cast<uint32_t*>(orow + d) = H::pack(x0, x1);
      } else {
        if (d < Dv) orow[d] = H::from(x0);
        if (d + 1 < Dv) orow[d + 1] = H::from(x1);
      }
    }
  }
}

// 16-byte copies of an operand's rows of 2-byte elements: unit element stride, 8-aligned row,
// batch and head strides and length, a 16-byte aligned base.
bool rows_vec8(const void* p, const int64_t (&s)[4], int64_t len) {
  return s[3] == 1 && len % 8 == 0 && s[0] % 8 == 0 && s[1] % 8 == 0 && s[2] % 8 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <typename T, int KD, int KV, int WARPS>
const char* attention_half_launch(const Attention& a, cudaStream_t stream) {
  const int64_t blocks = a.B * a.H * ((a.Tq + 16 * WARPS - 1) / (16 * WARPS));
  if (blocks > 0x7fffffff) return "attention over too many (batch, head, query tile) blocks";
  constexpr size_t smem = half_smem_bytes<KD, KV, WARPS>();
  if (smem > 48 * 1024) {  // above the default: opt in (165 KiB at head size 256)
    cudaError_t e = cudaFuncSetAttribute(attention_half_kernel<T, KD, KV, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return cuda_error("the attention kernel's shared memory", e);
  }
  attention_half_kernel<T, KD, KV, WARPS><<<static_cast<unsigned>(blocks), 32 * WARPS, smem, stream>>>(
      a, rows_vec8(a.q, a.qs, a.D), rows_vec8(a.k, a.ks, a.D), rows_vec8(a.v, a.vs, a.Dv));
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cuda_error("the attention kernel", e);
}

template <typename T>
const char* attention_half(const Attention& a, cudaStream_t stream) {
  const int64_t head = std::max(a.D, a.Dv);
  // Small heads (a diffusion UNet's: 4 to 32 channels per head) would spend most of a 64-wide
  // kernel's math on zero padding.
  if (head <= 16) return attention_half_launch<T, 1, 1, 4>(a, stream);
  if (head <= 32) return attention_half_launch<T, 2, 2, 4>(a, stream);
  if (head <= 64) return attention_half_launch<T, 4, 4, 4>(a, stream);
  if (head <= 128) return attention_half_launch<T, 8, 8, 4>(a, stream);
  return attention_half_launch<T, 16, 16, 4>(a, stream);
}

// Whether the half kernels run here: compiled for compute capability 8.0 or newer, with an image
// for this device (as tf32_mma_available).
bool half_mma_available() {
  static const bool ok = [] {
    cudaFuncAttributes fa{};
    return cudaFuncGetAttributes(&fa, attention_half_kernel<__nv_bfloat16, 4, 4, 4>) == cudaSuccess && fa.ptxVersion >= 80 &&
           fa.binaryVersion >= 80;
  }();
  return ok;
}

// ---- short query blocks: a decode step ------------------------------------------------------
// With at most kRowMaxTq query rows (one new token against a KV cache), the tiled kernels would
// have B x H blocks, each walking every key alone: 12 blocks on a 132-multiprocessor GPU. Here a
// block of kRWarps warps takes one (b, h, query row), its warps take interleaved groups of 32 keys,
// and each lane one key of a group: the lane's score is a dot product of q (in shared memory,
// broadcast) with its key row (4-element loads where the strides allow). A bool mask is read first,
// so a dropped key (the unfilled part of a static cache) costs no K or V read, and a group with
// every key dropped is skipped. Each warp keeps its own online softmax (running max m and sum l)
// and output row (lane: columns lane + 32 c); p.v broadcasts the live keys' probabilities and
// reads their V rows coalesced. The warps' partial results combine through shared memory at the end.
// Any element type: q, k and v are widened to float32, the math is float32 throughout, and o is
// rounded once to its type.
constexpr int kRWarps = 8, kRowMaxTq = 4;

template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32(float x) { return x; }
template <> __device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32(float x) { return __float2half_rn(x); }

// Four consecutive elements at p (aligned to four elements), widened.
template <typename T> __device__ __forceinline__ float4 load4_f32(const T* p);
template <> __device__ __forceinline__ float4 load4_f32(const float* p) { return *reinterpret_cast<const float4*>(p); }
template <> __device__ __forceinline__ float4 load4_f32(const __nv_bfloat16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
template <> __device__ __forceinline__ float4 load4_f32(const __half* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

template <typename T, int NC>  // Dv <= 32 NC
__global__ void __launch_bounds__(32 * kRWarps) attention_row_kernel(Attention a, bool kvec) {
  __shared__ __align__(16) float sq[kAttentionMaxHead];
  __shared__ float sm[kRWarps], sl[kRWarps], so[kRWarps][32 * NC];
  const float ninf = -INFINITY;
  const int64_t i = blockIdx.x % a.Tq, bh = blockIdx.x / a.Tq, h = bh % a.H, b = bh / a.H;
  const int D = static_cast<int>(a.D), Dv = static_cast<int>(a.Dv), Dp = (D + 3) / 4 * 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* q = static_cast<const T*>(a.q) + b * a.qs[0] + h * a.qs[1] + i * a.qs[2];
  const T* k = static_cast<const T*>(a.k) + b * a.ks[0] + (h / a.kv_group) * a.ks[1];
  const T* v = static_cast<const T*>(a.v) + b * a.vs[0] + (h / a.kv_group) * a.vs[1];
  for (int d = threadIdx.x; d < Dp; d += blockDim.x) sq[d] = d < D ? to_f32(q[d * a.qs[3]]) : 0.f;
  __syncthreads();
  const bool bool_mask = a.mask_kind == kMaskKeep || a.mask_kind == kMaskDrop;
  const unsigned char* mrow =
      bool_mask ? static_cast<const unsigned char*>(a.mask) + b * a.ms[0] + h * a.ms[1] + i * a.ms[2] : nullptr;
  float m = ninf, l = 0.f, acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.f;
  const int64_t kend = a.causal ? std::min<int64_t>(a.Tk, i + 1) : a.Tk;  // causal: later keys add nothing
  for (int64_t j0 = 32 * warp; j0 < kend; j0 += 32 * kRWarps) {
    const int64_t j = j0 + lane;
    bool live = j < kend;
    if (live && bool_mask) live = (mrow[j * a.ms[3]] != 0) == (a.mask_kind == kMaskKeep);
    if (__ballot_sync(0xffffffffu, live) == 0u) continue;  // every key of the group dropped
    float dot = 0.f;
    if (live) {
      const T* kr = k + j * a.ks[2];
      if (kvec) {
#pragma unroll 8
        for (int d = 0; d < Dp; d += 4) {
          const float4 kv = load4_f32(kr + d), qv = *reinterpret_cast<const float4*>(sq + d);
          dot = fmaf(qv.x, kv.x, dot);
          dot = fmaf(qv.y, kv.y, dot);
          dot = fmaf(qv.z, kv.z, dot);
          dot = fmaf(qv.w, kv.w, dot);
        }
      } else {
        for (int d = 0; d < D; ++d) dot = fmaf(sq[d], to_f32(kr[d * a.ks[3]]), dot);
      }
    }
    const float s = masked_score(a, dot, b, h, i, j, !live);
    float best = s;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) best = maxnan_f(best, __shfl_xor_sync(0xffffffffu, best, off));
    if (best == ninf) continue;  // a float mask of -inf everywhere: nothing to add
    const float mnew = maxnan_f(best, m);
    const float p = s == ninf ? 0.f : expf(s - mnew);
    float sum = p;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    const float corr = m == ninf ? 0.f : expf(m - mnew);
    l = l * corr + sum;
    m = mnew;
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] *= corr;
    // p.v, 8 keys at a time: their probabilities broadcast, then all their V rows loaded (each
    // by the whole warp, coalesced; none for a key of probability 0), then the FMAs, so the loads
    // are in flight together. 8-key steps without a live key are skipped.
    const unsigned keys = __ballot_sync(0xffffffffu, p != 0.f);
    for (int t0 = 0; t0 < 32; t0 += 8) {
      if (((keys >> t0) & 0xffu) == 0u) continue;
      float pj[8], vv[8][NC];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        pj[u] = __shfl_sync(0xffffffffu, p, t0 + u);
        const T* vr = v + (j0 + t0 + u) * a.vs[2];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int d = lane + 32 * c;
          vv[u][c] = pj[u] != 0.f && d < Dv ? to_f32(vr[d * a.vs[3]]) : 0.f;
        }
      }
#pragma unroll
      for (int u = 0; u < 8; ++u)
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[c] = fmaf(pj[u], vv[u][c], acc[c]);
    }
  }
  if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
  for (int c = 0; c < NC; ++c) so[warp][lane + 32 * c] = acc[c];
  __syncthreads();
  float mall = ninf;
#pragma unroll
  for (int w = 0; w < kRWarps; ++w) mall = maxnan_f(mall, sm[w]);
  float lall = 0.f, f[kRWarps];
#pragma unroll
  for (int w = 0; w < kRWarps; ++w) {
    f[w] = sm[w] == ninf ? 0.f : expf(sm[w] - mall);  // a warp that saw no live key adds nothing
    lall += sl[w] * f[w];
  }
  const float fill = keyless_row_value(a);
  const bool empty = a.Tk == 0 || lall == 0.f;
  T* orow = out_row<T>(a, b, h, i);
  for (int d = threadIdx.x; d < Dv; d += blockDim.x) {
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kRWarps; ++w) o = fmaf(so[w][d], f[w], o);
    orow[d] = from_f32<T>(empty ? fill : o / lall);
  }
}

template <typename T, int NC>
const char* attention_row_launch(const Attention& a, cudaStream_t stream) {
  const int64_t blocks = a.B * a.H * a.Tq;
  if (blocks > 0x7fffffff) return "attention over too many (batch, head, query row) blocks";
  const int64_t* s = a.ks;
  const bool kvec = s[3] == 1 && a.D % 4 == 0 && s[0] % 4 == 0 && s[1] % 4 == 0 && s[2] % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(a.k) % (4 * sizeof(T)) == 0;
  attention_row_kernel<T, NC><<<static_cast<unsigned>(blocks), 32 * kRWarps, 0, stream>>>(a, kvec);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cuda_error("the attention kernel", e);
}

template <typename T>
const char* attention_row(const Attention& a, cudaStream_t stream) {
  if (a.Dv <= 64) return attention_row_launch<T, 2>(a, stream);
  if (a.Dv <= 128) return attention_row_launch<T, 4>(a, stream);
  return attention_row_launch<T, 8>(a, stream);
}

}  // namespace

const char* attention(const Attention& a, cudaStream_t stream) {
  if (a.B <= 0 || a.H <= 0 || a.Tq <= 0 || a.Dv <= 0) return nullptr;  // nothing to write
  if (a.D > kAttentionMaxHead || a.Dv > kAttentionMaxHead) {
    g_error = "attention head size " + std::to_string(std::max(a.D, a.Dv)) + " is above the CUDA kernel's " +
              std::to_string(kAttentionMaxHead);
    return g_error.c_str();
  }
  if (a.Tq <= kRowMaxTq) {  // a decode step: one block per query row (attention_row_kernel)
    if (a.elem == kBF16) return attention_row<__nv_bfloat16>(a, stream);
    if (a.elem == kF16) return attention_row<__half>(a, stream);
    return attention_row<float>(a, stream);
  }
  if (a.elem != kF32) {
    if (!half_mma_available())
      return "bfloat16 / float16 attention needs a GPU of compute capability 8.0 or newer and a library built for one (--cuda-arch sm_80 or newer)";
    return a.elem == kBF16 ? attention_half<__nv_bfloat16>(a, stream) : attention_half<__half>(a, stream);
  }
  if (a.tf32 && a.D <= kAttentionMmaHead && a.Dv <= kAttentionMmaHead && tf32_mma_available()) {
    if (a.D <= 64 && a.Dv <= 64) return attention_mma_launch<8, 8, 4>(a, stream);
    return attention_mma_launch<16, 16, 4>(a, stream);
  }
  if (a.Dv <= 64) return attention_tiled_launch<1>(a, stream);
  if (a.Dv <= 128) return attention_tiled_launch<2>(a, stream);
  return attention_tiled_launch<4>(a, stream);
}

}  // namespace ptc_cuda
