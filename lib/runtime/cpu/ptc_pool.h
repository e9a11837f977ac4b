// ptc_pool.h — max pooling's input gradient for generated CPU code (ExternKind::MaxPoolGrad).
//
// dx[n, c] gets each window's dy at the window's first maximum of x (the first NaN when the
// window holds one), as max_pool2d_with_indices_backward does with the indices
// max_pool2d_with_indices returns; the indices are found again here instead of being stored.
// Per plane (in cache): dx is zeroed, then for each output row the windows' maxima and their
// positions are found one kernel tap at a time over the row's interior columns (contiguous simd
// loops whose running maximum and position live in two small per-thread rows; the border
// columns, whose windows leave the input, take a scalar loop), and the row's dy is added at the
// positions. The epilogue (a.ep) runs on each dx row once no later window can reach it, while
// it is in cache.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "ptc_rt.h"  // MaxPoolGradArgs

namespace ptc_rt {
namespace pool_detail {

// Output columns [lo, hi) whose windows lie inside [0, W) in every kernel column.
inline void interior_cols(const MaxPoolGradArgs& a, int64_t* lo, int64_t* hi) {
  const int64_t l = (a.pw + a.sw - 1) / a.sw;                 // ow sw - pw >= 0
  const int64_t last = a.W - 1 + a.pw - (a.KW - 1) * a.dw;  // ow sw <= last
  const int64_t h = last < 0 ? 0 : last / a.sw + 1;
  *lo = std::min(l, a.OW);
  *hi = std::max(*lo, std::min(h, a.OW));
}

// The position (ih W + iw) of the first maximum of window (oh, ow) of plane x, checking bounds;
// -1 when the window holds no input element.
template <class I>
I window_argmax(const MaxPoolGradArgs& a, const float* x, int64_t oh, int64_t ow) {
  I best = -1;
  float bv = 0.f;
  for (int64_t kh = 0; kh < a.KH; ++kh) {
    const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
    if (ih < 0 || ih >= a.H) continue;
    for (int64_t kw = 0; kw < a.KW; ++kw) {
      const int64_t iw = ow * a.sw - a.pw + kw * a.dw;
      if (iw < 0 || iw >= a.W) continue;
      const float v = x[ih * a.xs[2] + iw * a.xs[3]];
      if (best < 0 || v > bv || (v != v && bv == bv)) {
        bv = v;
        best = static_cast<I>(ih * a.W + iw);
      }
    }
  }
  return best;
}

// One kernel tap over output columns [lo, hi): v = row[ow step + base] (step: SW when SW > 0) at
// input position at + ow sw; the first tap sets the running maximum b and its position p, later
// ones take v where it is greater or the first NaN. (base may be negative: row stays the row's
// start, every element read is inside it.)
template <class I, int SW>
inline void tap(const float* __restrict row, int64_t base, int64_t step, I at, int64_t lo, int64_t hi, float* __restrict b,
                I* __restrict p, bool first, int64_t sw = SW) {
  if (SW > 0) step = SW;
  if (first) {
#pragma omp simd
    for (int64_t ow = lo; ow < hi; ++ow) {
      b[ow] = row[ow * step + base];
      p[ow] = at + static_cast<I>(ow * sw);
    }
    return;
  }
#pragma omp simd
  for (int64_t ow = lo; ow < hi; ++ow) {
    const float v = row[ow * step + base], bv = b[ow];
    const bool up = v > bv || (v != v && bv == bv);
    b[ow] = up ? v : bv;
    p[ow] = up ? at + static_cast<I>(ow * sw) : p[ow];
  }
}

// I: the position type, int32_t when a plane has fewer than 2^31 elements (GCC vectorizes the
// selects of 32-bit positions next to 32-bit floats, not of 64-bit ones).
template <class I>
void max_pool2d_backward(const MaxPoolGradArgs& a) {
  const int64_t H = a.H, W = a.W, OW = a.OW;
  int64_t lo, hi;
  interior_cols(a, &lo, &hi);
#pragma omp parallel
  {
    std::vector<float> best(static_cast<size_t>(std::max<int64_t>(1, OW)));
    std::vector<I> pos(static_cast<size_t>(std::max<int64_t>(1, OW)));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < a.N; ++n)
      for (int64_t c = 0; c < a.C; ++c) {
        const float* x = a.x + n * a.xs[0] + c * a.xs[1];
        const float* dy = a.dy + n * a.dys[0] + c * a.dys[1];
        float* dx = a.y + (n * a.C + c) * H * W;
        std::fill(dx, dx + H * W, 0.f);
        float* __restrict b = best.data();
        I* __restrict p = pos.data();
        int64_t done = 0;  // dx rows [0, done) are final (their epilogue has run)
        for (int64_t oh = 0; oh < a.OH; ++oh) {
          for (int64_t ow = 0; ow < lo; ++ow) p[ow] = window_argmax<I>(a, x, oh, ow);
          for (int64_t ow = hi; ow < OW; ++ow) p[ow] = window_argmax<I>(a, x, oh, ow);
          bool first = true;
          for (int64_t kh = 0; kh < a.KH && lo < hi; ++kh) {
            const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kw = 0; kw < a.KW; ++kw) {
              const int64_t off = kw * a.dw - a.pw;  // iw = ow sw + off
              const float* row = x + ih * a.xs[2];
              const I at = static_cast<I>(ih * W + off);
              if (a.xs[3] == 1 && a.sw == 2)  // constant strides: loads and permutes, not gathers
                tap<I, 2>(row, off, 1, at, lo, hi, b, p, first);
              else if (a.xs[3] == 1 && a.sw == 1)
                tap<I, 1>(row, off, 1, at, lo, hi, b, p, first);
              else
                tap<I, 0>(row, off * a.xs[3], a.sw * a.xs[3], at, lo, hi, b, p, first, a.sw);
              first = false;
            }
          }
          if (first)  // no kernel row inside the input: no interior window holds an element
            for (int64_t ow = lo; ow < hi; ++ow) p[ow] = -1;
          const float* drow = dy + oh * a.dys[2];
          for (int64_t ow = 0; ow < OW; ++ow)
            if (p[ow] >= 0) dx[p[ow]] += drow[ow * a.dys[3]];
          // Later windows start at row (oh + 1) sh - ph: the rows above are final.
          const int64_t ready = oh + 1 == a.OH ? H : std::min(H, std::max<int64_t>(0, (oh + 1) * a.sh - a.ph));
          for (; done < ready; ++done)
            if (a.ep.fn) a.ep.fn(a.ep.obj, dx + done * W, n, c, done * W, W);
        }
        for (; done < H; ++done)  // (no output rows)
          if (a.ep.fn) a.ep.fn(a.ep.obj, dx + done * W, n, c, done * W, W);
      }
  }
}

}  // namespace pool_detail

inline void max_pool2d_backward(const MaxPoolGradArgs& a) {
  if (a.H * a.W < std::numeric_limits<int32_t>::max())
    pool_detail::max_pool2d_backward<int32_t>(a);
  else
    pool_detail::max_pool2d_backward<int64_t>(a);
}

}  // namespace ptc_rt
