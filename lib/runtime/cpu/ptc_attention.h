// ptc_attention.h — fused scaled-dot-product attention for generated CPU code (flash-style).
//
//   o[b, h, i, :] = sum_j softmax_j(scale * q[b, h, i, :] . k[b, h, j, :] + mask[b, h, i, j]) v[b, h, j, :]
//
// Per (b, h) and block of BQ query rows, the keys are visited in blocks of BK: the BQ x BK score
// block (a serial GEMM), the mask / causal limit, an online softmax (running row maximum m and
// sum l; earlier partial outputs rescaled by exp(m_old - m_new)), and the block's contribution
// P V added into the output rows (a serial GEMM with beta = 1). Memory beyond q, k, v and o is
// one BQ x BK block per thread: no Tq x Tk score matrix, whatever the sequence length. Causal
// attention skips the key blocks wholly above the diagonal, and a bool mask the keys before the
// first and after the last that any row of the query block keeps: a decode step over a static KV
// cache (its mask keeps positions up to the current one) reads only the cache's live part. A row
// whose keys are all masked is zeros (masked_rows_zero: scaled_dot_product_attention) or NaN (the
// fused multi-head attention).
#pragma once

#include <algorithm>
#include <cmath>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include <cstdint>
#include <limits>
#include <vector>

#include "ptc_amx.h"
#include "ptc_gemm.h"
#include "ptc_rt.h"  // AttentionArgs
#include "ptc_support.h"

namespace ptc_rt {
namespace attention_detail {

constexpr int64_t BQ = 64, BK = 256;

// The row's maximum (NaN if it holds one, as maxnan), from `best`.
inline float row_max(const float* row, int64_t n, float best) {
  int64_t c = 0;
#ifdef __AVX512F__
  if (n >= 16) {
    __m512 mv = _mm512_set1_ps(best);
    __mmask16 nan = 0;
    for (; c + 16 <= n; c += 16) {
      const __m512 x = _mm512_loadu_ps(row + c);
      nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      mv = _mm512_max_ps(mv, x);
    }
    if (nan) return std::numeric_limits<float>::quiet_NaN();
    best = maxnan(_mm512_reduce_max_ps(mv), best);
  }
#endif
  for (; c < n; ++c) best = maxnan(row[c], best);
  return best;
}

#ifdef __AVX512F__
// exp_f of 16 lanes (its formula and special cases: 0 below -87.34, infinity above 88.72, NaN
// stays NaN).
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.37626f);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 xc = _mm512_mask_mov_ps(_mm512_min_ps(_mm512_max_ps(x, lo), hi), nan, _mm512_setzero_ps());
  const __m512 nf = _mm512_roundscale_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                         _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fmadd_ps(nf, _mm512_set1_ps(2.12194440e-4f), _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), xc));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(nf), _mm512_set1_epi32(127)), 23);
  __m512 v = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
  v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
  v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283f), _CMP_GT_OQ),
                         _mm512_set1_ps(std::numeric_limits<float>::infinity()));
  return _mm512_mask_mov_ps(v, nan, x);
}
#endif

// row[c] = exp(row[c] - m) (exp_f's formula and special cases), returning their sum.
inline float exp_sum(float* row, int64_t n, float m) {
  int64_t c = 0;
  float sum = 0.f;
#ifdef __AVX512F__
  if (n >= 16) {
    const __m512 mv = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    for (; c + 16 <= n; c += 16) {
      const __m512 v = exp16(_mm512_sub_ps(_mm512_loadu_ps(row + c), mv));
      _mm512_storeu_ps(row + c, v);
      acc = _mm512_add_ps(acc, v);
    }
    sum = _mm512_reduce_add_ps(acc);
  }
#endif
  for (; c < n; ++c) {
    const float p = exp_f(row[c] - m);
    row[c] = p;
    sum += p;
  }
  return sum;
}

// p[c] = exp(row[c] scale - m) rounded to bf16 bits (nearest even) for c < n, where no
// row[c] scale exceeds m (the softmax's exponents), returning the sum of the unrounded values
// (the denominator in float32, as torch's flash attention keeps it). Only the AMX kernel calls
// it, so the vector version may use AVX512-BF16 (every AMX CPU has it): per 16 values the
// exponent's fma, a degree-6 polynomial on x - n ln 2 (relative error about 2e-7), a scalef
// by 2^n and one rounding instruction. -inf gives 0, NaN stays NaN.
#ifdef PTC_AMX
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline float exp_round_sum(const float* row, int64_t n, float scale,
                                                                                          float m, uint16_t* p) {
  const __m512 sv = _mm512_set1_ps(scale), mv = _mm512_set1_ps(-m), lo = _mm512_set1_ps(-104.f);
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f), ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
  const __m512 c[6] = {_mm512_set1_ps(1.f / 720), _mm512_set1_ps(1.f / 120), _mm512_set1_ps(1.f / 24),
                       _mm512_set1_ps(1.f / 6),   _mm512_set1_ps(0.5f),      _mm512_set1_ps(1.f)};
  auto exp16 = [&](__m512 x) {
    x = _mm512_max_ps(lo, x);  // (below -104 the result underflows to 0; a NaN x stays: maxps returns its second operand)
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fnmadd_ps(k, ln2_lo, _mm512_fnmadd_ps(k, ln2_hi, x));
    __m512 y = c[0];
    for (int i = 1; i < 6; ++i) y = _mm512_fmadd_ps(y, r, c[i]);
    return _mm512_scalef_ps(_mm512_fmadd_ps(y, r, c[5]), k);
  };
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = exp16(_mm512_fmadd_ps(_mm512_loadu_ps(row + i), sv, mv));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + i), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
    acc = _mm512_add_ps(acc, v);
  }
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_mov_ps(k, exp16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, row + i), sv, mv)));
    _mm256_mask_storeu_epi16(p + i, k, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
    acc = _mm512_add_ps(acc, v);
  }
  return _mm512_reduce_add_ps(acc);
}
#else
inline float exp_round_sum(const float* row, int64_t n, float scale, float m, uint16_t* p) {
  float sum = 0.f;
  for (int64_t c = 0; c < n; ++c) {
    const float e = exp_f(row[c] * scale - m);
    p[c] = float_to_bfloat16_bits(e);
    sum += e;
  }
  return sum;
}
#endif

// The online softmax's step for one query row and key block: exps(m_new) turns the block's
// scores into exp(score - m_new) (in place, or rounded into P) and returns their sum; the row's
// running maximum m and sum l move on, and its partial output orow (dv values) is rescaled by
// exp(m_old - m_new) (while no key came before, it is zeros and stays so). False, with nothing
// changed, while every key so far is masked (the caller adds nothing for the row).
template <class Exps>
inline bool softmax_step(float block_max, float* m, float* l, float* orow, int64_t dv, Exps&& exps) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const float mnew = maxnan(block_max, *m);
  if (mnew == ninf) return false;
  const float sum = exps(mnew);
  const float corr = *m == ninf ? 0.f : exp_f(*m - mnew);
  if (corr != 1.f && *m != ninf) {
#pragma omp simd
    for (int64_t d = 0; d < dv; ++d) orow[d] *= corr;
  }
  *l = *l * corr + sum;
  *m = mnew;
  return true;
}

// o[r, :] = acc[r, :] / l[r] for nq rows (acc's rows lda apart, o's ldo); a row with l = 0
// (every key masked, or no keys) is `empty`: zeros (SDPA's safe softmax) or NaN (a plain
// softmax).
inline void normalize_rows(const float* acc, int64_t lda, int64_t nq, int64_t dv, const float* l, float empty, float* o, int64_t ldo) {
  for (int64_t r = 0; r < nq; ++r) {
    const float inv = 1.f / l[r];
    const float* arow = acc + r * lda;
#pragma omp simd
    for (int64_t d = 0; d < dv; ++d) o[r * ldo + d] = l[r] == 0.f ? empty : arow[d] * inv;
  }
}

// The output row (b, h, i)'s offset in o (its elements), and the distance from one query row to
// the next (*ld), for o's three layouts.
inline int64_t o_offset(const AttentionArgs& a, int64_t b, int64_t h, int64_t i, int64_t* ld) {
  if (a.o_heads_inner) {
    *ld = a.H * a.Dv;
    return ((b * a.Tq + i) * a.H + h) * a.Dv;
  }
  if (a.o_time_outer) {
    *ld = a.B * a.H * a.Dv;
    return ((i * a.B + b) * a.H + h) * a.Dv;
  }
  *ld = a.Dv;
  return ((b * a.H + h) * a.Tq + i) * a.Dv;
}

// Scores of one block: scale, mask, causal limit; returns the row maxima into mx.
inline void mask_block(const AttentionArgs& a, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                       float* s, float* mx) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < nq; ++r) {
    float* row = s + r * BK;
    const int64_t i = i0 + r;
    const int64_t jmax = a.causal ? std::min(nk, i - j0 + 1) : nk;  // keys j0 + c with c < jmax are allowed
#pragma omp simd
    for (int64_t c = 0; c < nk; ++c) row[c] *= a.scale;
    if (a.mask_kind != kMaskNone) {
      const int64_t base = b * a.ms[0] + h * a.ms[1] + i * a.ms[2] + j0 * a.ms[3];
      if (a.mask_kind == kMaskAdd) {
        const float* m = static_cast<const float*>(a.mask) + base;
        for (int64_t c = 0; c < nk; ++c) row[c] += m[c * a.ms[3]];
      } else {
        const bool keep_true = a.mask_kind == kMaskKeep;
        const uint8_t* m = static_cast<const uint8_t*>(a.mask) + base;
        for (int64_t c = 0; c < nk; ++c)
          if ((m[c * a.ms[3]] != 0) != keep_true) row[c] = ninf;
      }
    }
    for (int64_t c = std::max<int64_t>(jmax, 0); c < nk; ++c) row[c] = ninf;
    mx[r] = row_max(row, nk, ninf);
  }
}

// Narrows [*beg, *end) to the keys from the first to the last that a bool mask keeps for any of
// rows i0 .. i0 + nq (empty when it keeps none). One row when the mask is the same for every row.
inline void kept_keys(const AttentionArgs& a, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t* beg, int64_t* end) {
  const bool keep_true = a.mask_kind == kMaskKeep;
  int64_t lo = *end, hi = *beg;
  const int64_t rows = a.ms[2] == 0 ? std::min<int64_t>(nq, 1) : nq;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* m = static_cast<const uint8_t*>(a.mask) + b * a.ms[0] + h * a.ms[1] + (i0 + r) * a.ms[2];
    auto kept = [&](int64_t j) { return (m[j * a.ms[3]] != 0) == keep_true; };
    for (int64_t j = *beg; j < std::min(lo, *end); ++j)
      if (kept(j)) {
        lo = j;
        break;
      }
    for (int64_t j = *end; j-- > std::max(hi, *beg);)
      if (kept(j)) {
        hi = j + 1;
        break;
      }
  }
  if (lo >= hi) lo = hi = *beg;
  *beg = lo;
  *end = hi;
}

}  // namespace attention_detail

inline void attention(const AttentionArgs& a) {
  using namespace attention_detail;
  const int64_t nqb = (a.Tq + BQ - 1) / BQ;
  const float ninf = -std::numeric_limits<float>::infinity();
  const float *Q = static_cast<const float*>(a.q), *K = static_cast<const float*>(a.k), *V = static_cast<const float*>(a.v);
  float* O = static_cast<float*>(a.o);
#pragma omp parallel
  {
    std::vector<float> s_buf(static_cast<size_t>(BQ * BK)), m_buf(BQ), l_buf(BQ), bm_buf(BQ);
    float *s = s_buf.data(), *m = m_buf.data(), *l = l_buf.data(), *bm = bm_buf.data();
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t h = 0; h < a.H; ++h)
        for (int64_t qb = 0; qb < nqb; ++qb) {
          const int64_t i0 = qb * BQ, nq = std::min(BQ, a.Tq - i0);
          const float* q = Q + b * a.qs[0] + h * a.qs[1] + i0 * a.qs[2];
          int64_t ldo = 0;
          float* o = O + o_offset(a, b, h, i0, &ldo);
          for (int64_t r = 0; r < nq; ++r) std::fill(o + r * ldo, o + r * ldo + a.Dv, 0.f);
          std::fill(m, m + nq, ninf);
          std::fill(l, l + nq, 0.f);
          // Causal: keys past the block's last query row contribute nothing.
          int64_t kbeg = 0, kend = a.causal ? std::min(a.Tk, i0 + nq) : a.Tk;
          if (a.mask_kind == kMaskKeep || a.mask_kind == kMaskDrop) kept_keys(a, b, h, i0, nq, &kbeg, &kend);
          for (int64_t j0 = kbeg; j0 < kend; j0 += BK) {
            const int64_t nk = std::min(BK, kend - j0);
            GemmArgs g{};  // S = Q K^T (K read as the [N, K] weight layout)
            g.M = nq; g.N = nk; g.K = a.D;
            g.A = q; g.lda_m = a.qs[2]; g.lda_k = a.qs[3];
            g.B = K + b * a.ks[0] + (h / a.kv_group) * a.ks[1] + j0 * a.ks[2]; g.ldb_k = a.ks[3]; g.ldb_n = a.ks[2];
            g.C = s; g.ldc_m = BK;
            gemm(g);
            mask_block(a, b, h, i0, nq, j0, nk, s, bm);
            for (int64_t r = 0; r < nq; ++r) {
              float* row = s + r * BK;
              if (!softmax_step(bm[r], m + r, l + r, o + r * ldo, a.Dv, [&](float mnew) { return exp_sum(row, nk, mnew); }))
                std::fill(row, row + nk, 0.f);
            }
            GemmArgs pv{};  // O += P V
            pv.M = nq; pv.N = a.Dv; pv.K = nk;
            pv.A = s; pv.lda_m = BK; pv.lda_k = 1;
            pv.B = V + b * a.vs[0] + (h / a.kv_group) * a.vs[1] + j0 * a.vs[2]; pv.ldb_k = a.vs[2]; pv.ldb_n = a.vs[3];
            pv.C = o; pv.ldc_m = ldo;
            pv.beta = 1.f;
            gemm(pv);
          }
          if (a.Tk == 0) continue;  // no keys at all: zeros, as torch's matmul of empty operands
          normalize_rows(o, ldo, nq, a.Dv, l, a.masked_rows_zero ? 0.f : std::numeric_limits<float>::quiet_NaN(), o, ldo);
        }
  }
}

namespace attention_detail {

inline uint16_t bf16_bits(float x) { return static_cast<uint16_t>(amx::bits_of(x)); }  // (a bf16 value: exact)
inline uint16_t bf16_bits(uint16_t x) { return x; }

// K^T of one key block as gemm_tiles' B operand (pack_b's layout, K32 = D32 rows, nk64 columns,
// zeros beyond): B[d, j] = k[j sj + d sd] for j < nk, d < D. The pair (d, d + 1) of key j is one
// 32-bit word; with bf16 keys contiguous along d (sd = 1), 16 keys' words are one gather.
template <class T>
inline void pack_keys(const T* k, int64_t sj, int64_t sd, int64_t nk, int64_t D, int64_t D32, int64_t nk64, uint16_t* out) {
  const int64_t kt = D32 / 32;
  uint32_t* o = reinterpret_cast<uint32_t*>(out);
  std::memset(o, 0, static_cast<size_t>(D32 * nk64 / 2) * 4);
  int64_t j = 0;
#ifdef __AVX512F__
  if (sizeof(T) == 2 && sd == 1 && sj < (int64_t{1} << 26)) {
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(static_cast<int>(sj)));
    for (; j + 16 <= nk; j += 16)
      for (int64_t d = 0; d + 1 < D; d += 2)  // element offsets, scale 2: bytes
        _mm512_storeu_si512(o + amx::vnni_pair(kt, d >> 1, j),
                            _mm512_i32gather_epi32(rows, static_cast<const void*>(k + j * sj + d), 2));
  }
#endif
  for (; j < nk; ++j)
    for (int64_t d = 0; d + 1 < D; d += 2)
      o[amx::vnni_pair(kt, d >> 1, j)] = bf16_bits(k[j * sj + d * sd]) | static_cast<uint32_t>(bf16_bits(k[j * sj + (d + 1) * sd])) << 16;
  if (D % 2)
    for (j = 0; j < nk; ++j) o[amx::vnni_pair(kt, (D - 1) >> 1, j)] = bf16_bits(k[j * sj + (D - 1) * sd]);
}

// V of one key block as gemm_tiles' B operand (nk32 rows, Dv64 columns, zeros beyond):
// B[j, d] = v[j sj + d sd]. Keys j and j + 1 pair up; 16 columns of a pair are 16 consecutive
// words.
template <class T>
inline void pack_values(const T* v, int64_t sj, int64_t sd, int64_t nk, int64_t Dv, int64_t nk32, int64_t Dv64, uint16_t* out) {
  const int64_t kt = nk32 / 32;
  uint32_t* o = reinterpret_cast<uint32_t*>(out);
  std::memset(o, 0, static_cast<size_t>(nk32 * Dv64 / 2) * 4);
  for (int64_t j = 0; j < nk; j += 2) {
    const T *v0 = v + j * sj, *v1 = v0 + sj;
    const bool pair = j + 1 < nk;
    int64_t d = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    if (sizeof(T) == 2 && sd == 1)
      for (; d + 16 <= Dv; d += 16) {
        const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v0 + d)));
        const __m512i hi = pair ? _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v1 + d))) : _mm512_setzero_si512();
        _mm512_storeu_si512(o + amx::vnni_pair(kt, j >> 1, d), _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
#endif
    for (; d < Dv; ++d)
      o[amx::vnni_pair(kt, j >> 1, d)] = bf16_bits(v0[d * sd]) | (pair ? static_cast<uint32_t>(bf16_bits(v1[d * sd])) << 16 : 0u);
  }
}

inline void store_row(float* o, const float* x, int64_t n, float inv, bool empty, float fill) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) o[d] = empty ? fill : x[d] * inv;
}
inline void store_row(uint16_t* o, const float* x, int64_t n, float inv, bool empty, float fill) {
  for (int64_t d = 0; d < n; ++d) o[d] = float_to_bfloat16_bits(empty ? fill : x[d] * inv);
}

// attention_amx for q, k, v of element type T (float holding bf16 values, or bf16 bits) and o of
// type O (float, or bf16 bits).
template <class T, class O>
void attention_amx(const AttentionArgs& a) {
  auto up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  const T *Q = static_cast<const T*>(a.q), *K = static_cast<const T*>(a.k), *V = static_cast<const T*>(a.v);
  O* out = static_cast<O*>(a.o);
  const int64_t nqb = (a.Tq + BQ - 1) / BQ, nkb = (a.Tk + BK - 1) / BK, D32 = up(a.D, 32), Dv64 = up(a.Dv, 64);
  const int64_t Hk = a.H / a.kv_group, kblock = D32 * BK, vblock = BK * Dv64;
  const float ninf = -std::numeric_limits<float>::infinity();
  // Without a mask, the scale (when positive) multiplies inside the exponent: the row maximum of
  // the raw scores scaled is the maximum of the scaled scores.
  const bool plain = a.mask_kind == kMaskNone && a.scale > 0.f;
  // K^T and V of every (image, k / v head, key block) in tiles, once per call, in the calling
  // thread's buffer (kept between calls: no page faults per call; another thread running the
  // library has its own).
  thread_local std::vector<uint16_t> packed;
  const size_t kbytes = static_cast<size_t>(a.B * Hk * nkb * kblock), vbytes = static_cast<size_t>(a.B * Hk * nkb * vblock);
  if (packed.size() < kbytes + vbytes) packed.resize(kbytes + vbytes);
  uint16_t *kpack = packed.data(), *vpack = packed.data() + kbytes;
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t hk = 0; hk < Hk; ++hk)
      for (int64_t jb = 0; jb < nkb; ++jb) {
        const int64_t j0 = jb * BK, nk = std::min(BK, a.Tk - j0), at = (b * Hk + hk) * nkb + jb;
        pack_keys(K + b * a.ks[0] + hk * a.ks[1] + j0 * a.ks[2], a.ks[2], a.ks[3], nk, a.D, D32, up(nk, 64), kpack + at * kblock);
        pack_values(V + b * a.vs[0] + hk * a.vs[1] + j0 * a.vs[2], a.vs[2], a.vs[3], nk, a.Dv, up(nk, 32), Dv64, vpack + at * vblock);
      }
#pragma omp parallel
  {
    amx::configure();
    std::vector<uint16_t> q_buf(static_cast<size_t>(BQ * D32)), p_buf(static_cast<size_t>(BQ * BK));
    std::vector<float> s_buf(static_cast<size_t>(BQ * BK)), o_buf(static_cast<size_t>(BQ * Dv64)), m_buf(BQ), l_buf(BQ), bm_buf(BQ);
    uint16_t *qt = q_buf.data(), *pt = p_buf.data();
    float *s = s_buf.data(), *ob = o_buf.data(), *m = m_buf.data(), *l = l_buf.data(), *bm = bm_buf.data();
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t h = 0; h < a.H; ++h)
        for (int64_t qb = 0; qb < nqb; ++qb) {
          const int64_t i0 = qb * BQ, nq = std::min(BQ, a.Tq - i0), nq16 = up(nq, 16);
          const T* q = Q + b * a.qs[0] + h * a.qs[1] + i0 * a.qs[2];
          int64_t ldo = 0;
          O* o = out + o_offset(a, b, h, i0, &ldo);
          for (int64_t r = 0; r < nq16; ++r) {
            uint16_t* row = qt + r * D32;
            int64_t d = 0;
            if (r < nq)
              for (; d < a.D; ++d) row[d] = bf16_bits(q[r * a.qs[2] + d * a.qs[3]]);
            std::fill(row + d, row + D32, uint16_t{0});
          }
          std::fill(ob, ob + nq16 * Dv64, 0.f);
          std::fill(m, m + nq, ninf);
          std::fill(l, l + nq, 0.f);
          int64_t kbeg = 0, kend = a.causal ? std::min(a.Tk, i0 + nq) : a.Tk;
          if (a.mask_kind == kMaskKeep || a.mask_kind == kMaskDrop) kept_keys(a, b, h, i0, nq, &kbeg, &kend);
          // Whole key blocks: the causal limit and the mask drop the keys outside [kbeg, kend).
          for (int64_t jb = kbeg / BK; kbeg < kend && jb * BK < kend; ++jb) {
            const int64_t j0 = jb * BK, nk = std::min(BK, a.Tk - j0), nk32 = up(nk, 32), nk64 = up(nk, 64);
            const int64_t at = (b * Hk + h / a.kv_group) * nkb + jb;
            amx::gemm_tiles(qt, D32, kpack + at * kblock, nq16, nk64, D32, s, BK, true);  // S = Q K^T
            if (!plain) mask_block(a, b, h, i0, nq, j0, nk, s, bm);
            for (int64_t r = 0; r < nq16; ++r) {
              const float* row = s + r * BK;
              uint16_t* prow = pt + r * BK;
              int64_t kept = 0;  // P's bf16 values; zeros past them (and for padding rows)
              if (r < nq) {
                // plain: keys past the causal limit are dropped from the row's end
                const int64_t n = plain && a.causal ? std::max<int64_t>(0, std::min(nk, i0 + r - j0 + 1)) : nk;
                const float bmax = plain ? (n ? row_max(row, n, ninf) * a.scale : ninf) : bm[r];
                if (softmax_step(bmax, m + r, l + r, ob + r * Dv64, a.Dv,
                                 [&](float mnew) { return exp_round_sum(row, n, plain ? a.scale : 1.f, mnew, prow); }))
                  kept = n;
              }
              std::fill(prow + kept, prow + nk32, uint16_t{0});
            }
            amx::gemm_tiles(pt, BK, vpack + at * vblock, nq16, Dv64, nk32, ob, Dv64, false);  // O += P V
          }
          const float empty = a.Tk == 0 || a.masked_rows_zero ? 0.f : std::numeric_limits<float>::quiet_NaN();
          for (int64_t r = 0; r < nq; ++r) store_row(o + r * ldo, ob + r * Dv64, a.Dv, 1.f / l[r], l[r] == 0.f, empty);
        }
    amx::release();
  }
}

// attention for bf16 q, k, v and o on a CPU without AMX: q, k and v widened into float32 (exact,
// [B, H, T, D] dense), the float32 kernel, o rounded once.
inline void attention_widened(const AttentionArgs& a) {
  const int64_t Hk = a.H / a.kv_group;
  thread_local std::vector<float> scratch;
  const int64_t nq = a.B * a.H * a.Tq * a.D, nk = a.B * Hk * a.Tk * a.D, nv = a.B * Hk * a.Tk * a.Dv, no = a.B * a.H * a.Tq * a.Dv;
  if (scratch.size() < static_cast<size_t>(nq + nk + nv + no)) scratch.resize(static_cast<size_t>(nq + nk + nv + no));
  float *q = scratch.data(), *k = q + nq, *v = k + nk, *o = v + nv;
  auto widen = [](const void* src, const int64_t* st, int64_t B, int64_t H, int64_t T, int64_t D, float* dst, int64_t* ds) {
    const uint16_t* x = static_cast<const uint16_t*>(src);
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const uint16_t* row = x + b * st[0] + h * st[1] + t * st[2];
          float* d = dst + ((b * H + h) * T + t) * D;
          for (int64_t c = 0; c < D; ++c) d[c] = bfloat16_bits_to_float(row[c * st[3]]);
        }
    ds[0] = H * T * D, ds[1] = T * D, ds[2] = D, ds[3] = 1;
  };
  AttentionArgs w = a;
  widen(a.q, a.qs, a.B, a.H, a.Tq, a.D, q, w.qs);
  widen(a.k, a.ks, a.B, Hk, a.Tk, a.D, k, w.ks);
  widen(a.v, a.vs, a.B, Hk, a.Tk, a.Dv, v, w.vs);
  w.q = q, w.k = k, w.v = v, w.o = o;
  w.bf16_io = false;
  attention(w);
  uint16_t* out = static_cast<uint16_t*>(a.o);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < no; ++i) out[i] = float_to_bfloat16_bits(o[i]);
}

}  // namespace attention_detail

// The same on AMX bf16 tiles (ptc_amx.h), for q, k and v that hold bf16 values
// (AttentionArgs::bf16_values, --precision bf16) or are bf16 buffers (bf16_io): S = Q K^T and
// O += P V on the tiles with fp32 accumulation, the scale, mask and online softmax in fp32 as
// above, and P rounded to bf16 for its product with V, as torch's CPU flash attention does for
// bf16. Per thread: Q's block in bf16, the key block's K^T and V packed into VNNI tiles, and the
// output block in fp32 (zero padding makes every size a whole number of tiles), rounded once
// into a bf16 o.
inline void attention_amx(const AttentionArgs& a) {
  if (a.bf16_io)
    attention_detail::attention_amx<uint16_t, uint16_t>(a);
  else
    attention_detail::attention_amx<float, float>(a);
}

// bf16 q, k, v and o (AttentionArgs::bf16_io) on any CPU: AMX tiles where ready, else float32
// kernels on widened operands.
inline void attention_bf16_io(const AttentionArgs& a) {
  if (amx::ready())
    attention_amx(a);
  else
    attention_detail::attention_widened(a);
}

}  // namespace ptc_rt
