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
#include <cstdint>
#include <limits>
#include <vector>

#include "ptc_gemm.h"
#include "ptc_rt.h"  // AttentionArgs
#include "ptc_support.h"

namespace ptc_rt {
namespace attention_detail {

constexpr int64_t BQ = 64, BK = 256;

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
    float best = ninf;
    for (int64_t c = 0; c < nk; ++c) best = maxnan(row[c], best);
    mx[r] = best;
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
#pragma omp parallel
  {
    std::vector<float> s_buf(static_cast<size_t>(BQ * BK)), m_buf(BQ), l_buf(BQ), bm_buf(BQ);
    float *s = s_buf.data(), *m = m_buf.data(), *l = l_buf.data(), *bm = bm_buf.data();
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t h = 0; h < a.H; ++h)
        for (int64_t qb = 0; qb < nqb; ++qb) {
          const int64_t i0 = qb * BQ, nq = std::min(BQ, a.Tq - i0);
          const float* q = a.q + b * a.qs[0] + h * a.qs[1] + i0 * a.qs[2];
          float* o = a.o + ((b * a.H + h) * a.Tq + i0) * a.Dv;
          std::fill(o, o + nq * a.Dv, 0.f);
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
            g.B = a.k + b * a.ks[0] + (h / a.kv_group) * a.ks[1] + j0 * a.ks[2]; g.ldb_k = a.ks[3]; g.ldb_n = a.ks[2];
            g.C = s; g.ldc_m = BK;
            gemm(g);
            mask_block(a, b, h, i0, nq, j0, nk, s, bm);
            for (int64_t r = 0; r < nq; ++r) {
              float* row = s + r * BK;
              const float mnew = maxnan(bm[r], m[r]);
              if (mnew == ninf) {  // every key so far masked: nothing to add
                std::fill(row, row + nk, 0.f);
                continue;
              }
              float sum = 0.f;
#pragma omp simd reduction(+ : sum)
              for (int64_t c = 0; c < nk; ++c) {
                const float p = exp_f(row[c] - mnew);
                row[c] = p;
                sum += p;
              }
              const float corr = m[r] == ninf ? 0.f : exp_f(m[r] - mnew);
              if (corr != 1.f) {
                float* orow = o + r * a.Dv;
#pragma omp simd
                for (int64_t d = 0; d < a.Dv; ++d) orow[d] *= corr;
              }
              l[r] = l[r] * corr + sum;
              m[r] = mnew;
            }
            GemmArgs pv{};  // O += P V
            pv.M = nq; pv.N = a.Dv; pv.K = nk;
            pv.A = s; pv.lda_m = BK; pv.lda_k = 1;
            pv.B = a.v + b * a.vs[0] + (h / a.kv_group) * a.vs[1] + j0 * a.vs[2]; pv.ldb_k = a.vs[2]; pv.ldb_n = a.vs[3];
            pv.C = o; pv.ldc_m = a.Dv;
            pv.beta = 1.f;
            gemm(pv);
          }
          if (a.Tk == 0) continue;  // no keys at all: zeros, as torch's matmul of empty operands
          for (int64_t r = 0; r < nq; ++r) {
            const float inv = 1.f / l[r];
            float* orow = o + r * a.Dv;
            // l = 0: every key of the row masked: zeros (SDPA's safe softmax) or NaN (a plain softmax).
            const float empty = a.masked_rows_zero ? 0.f : std::numeric_limits<float>::quiet_NaN();
#pragma omp simd
            for (int64_t d = 0; d < a.Dv; ++d) orow[d] = l[r] == 0.f ? empty : orow[d] * inv;
          }
        }
  }
}

}  // namespace ptc_rt
