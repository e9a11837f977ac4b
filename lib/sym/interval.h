// Private to lib/sym: saturating interval arithmetic used by bounds().
//
// Bounds are __int128 values; kInf stands for "unbounded". After every operation a lower bound
// is kept in {-kInf} U [INT64_MIN, INT64_MAX] and an upper bound in [INT64_MIN, INT64_MAX] U {kInf},
// widening soundly (a lower bound never grows past the true minimum, an upper bound never
// shrinks below the true maximum), so finite products always fit in 128 bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ptc/sym.h"

namespace ptc::sym::iv {

using I128 = __int128;
constexpr I128 kInf = static_cast<I128>(1) << 100;
constexpr I128 kMin = std::numeric_limits<int64_t>::min();
constexpr I128 kMax = std::numeric_limits<int64_t>::max();

struct Iv {
  I128 lo, hi;
};

// Saturate a single value: anything beyond int64 becomes +-kInf (sound for products/sums).
inline I128 sat(I128 v) { return v > kMax ? kInf : (v < kMin ? -kInf : v); }
inline I128 clamp_lo(I128 v) { return v < kMin ? -kInf : (v > kMax ? kMax : v); }
inline I128 clamp_hi(I128 v) { return v > kMax ? kInf : (v < kMin ? kMin : v); }
inline Iv norm(I128 lo, I128 hi) { return {clamp_lo(lo), clamp_hi(hi)}; }
inline bool is_inf(I128 v) { return v == kInf || v == -kInf; }

inline Iv from_range(Range r) {
  return {r.lo == Range::kNegInf ? -kInf : static_cast<I128>(r.lo),
          r.hi == Range::kPosInf ? kInf : static_cast<I128>(r.hi)};
}
inline Range to_range(Iv v) {
  Range r;
  r.lo = v.lo <= kMin ? Range::kNegInf : static_cast<int64_t>(v.lo);
  r.hi = v.hi >= kMax ? Range::kPosInf : static_cast<int64_t>(v.hi);
  return r;
}

// Product of two saturated values (0 * inf = 0: the real values are finite).
inline I128 mul(I128 a, I128 b) {
  if (a == 0 || b == 0) return 0;
  if (is_inf(a) || is_inf(b)) return ((a < 0) != (b < 0)) ? -kInf : kInf;
  return sat(a * b);
}

inline I128 pow(I128 v, int64_t e) {
  if (e == 0) return 1;
  if (v == 0 || v == 1) return v;
  if (v == -1) return (e & 1) ? -1 : 1;
  if (e >= 64 || is_inf(v)) return (v < 0 && (e & 1)) ? -kInf : kInf;
  I128 r = 1;
  for (int64_t i = 0; i < e; ++i) r = mul(r, v);
  return r;
}

inline Iv add(Iv a, Iv b) {
  I128 lo = (a.lo == -kInf || b.lo == -kInf) ? -kInf : a.lo + b.lo;
  I128 hi = (a.hi == kInf || b.hi == kInf) ? kInf : a.hi + b.hi;
  return norm(lo, hi);
}

inline Iv scale(Iv a, int64_t k) {
  if (k >= 0) return norm(mul(a.lo, k), mul(a.hi, k));
  return norm(mul(a.hi, k), mul(a.lo, k));
}

inline Iv mul(Iv a, Iv b) {
  I128 c[4] = {mul(a.lo, b.lo), mul(a.lo, b.hi), mul(a.hi, b.lo), mul(a.hi, b.hi)};
  return norm(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
}

inline Iv pow(Iv a, int64_t e) {
  if (e == 0) return {1, 1};
  if ((e & 1) || a.lo >= 0) return norm(pow(a.lo, e), pow(a.hi, e));
  if (a.hi <= 0) return norm(pow(a.hi, e), pow(a.lo, e));
  return norm(0, std::max(pow(a.lo, e), pow(a.hi, e)));
}

inline Iv neg(Iv a) { return norm(a.hi == kInf ? -kInf : -a.hi, a.lo == -kInf ? kInf : -a.lo); }
inline Iv hull(Iv a, Iv b) { return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)}; }

// Python floor division of x by d >= 1 (either may be infinite).
inline I128 floordiv(I128 x, I128 d) {
  if (x == kInf || x == -kInf) return x;
  if (d == kInf) return x >= 0 ? 0 : -1;
  I128 q = x / d;
  if (x % d != 0 && x < 0) --q;
  return q;
}

// floor(x / d) for d within [dl, dh], dl >= 1: extremes are at the corners (monotone in each).
inline Iv floordiv_pos(Iv x, Iv d) {
  I128 c[4] = {floordiv(x.lo, d.lo), floordiv(x.lo, d.hi), floordiv(x.hi, d.lo), floordiv(x.hi, d.hi)};
  return norm(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
}

// floor(x / d) for d in [d.lo, d.hi] excluding 0 (division by zero raises at run time).
inline Iv floordiv(Iv x, Iv d) {
  bool has_pos = d.hi >= 1, has_neg = d.lo <= -1;
  if (!has_pos && !has_neg) return {-kInf, kInf};
  Iv r{kInf, -kInf};
  if (has_pos) r = hull(r, floordiv_pos(x, {std::max<I128>(d.lo, 1), d.hi}));
  if (has_neg) r = hull(r, floordiv_pos(neg(x), neg({d.lo, std::min<I128>(d.hi, -1)})));
  return norm(r.lo, r.hi);
}

// Python x % d (the result has the sign of d) for d in [d.lo, d.hi] excluding 0.
inline Iv mod(Iv x, Iv d) {
  bool has_pos = d.hi >= 1, has_neg = d.lo <= -1;
  if (!has_pos && !has_neg) return {-kInf, kInf};
  if (has_pos && has_neg) {
    return norm(d.lo == -kInf ? -kInf : d.lo + 1, d.hi == kInf ? kInf : d.hi - 1);
  }
  if (has_neg) {  // x % d == -((-x) % (-d))
    return neg(mod(neg(x), neg(d)));
  }
  I128 dl = std::max<I128>(d.lo, 1), dh = d.hi;
  if (dl == dh && !is_inf(x.lo) && !is_inf(x.hi)) {
    I128 q = floordiv(x.lo, dl);
    if (q == floordiv(x.hi, dl)) return norm(x.lo - q * dl, x.hi - q * dl);
  }
  if (x.lo >= 0 && !is_inf(x.hi) && x.hi < dl) return x;  // x % d == x
  I128 hi = dh == kInf ? kInf : dh - 1;
  if (x.lo >= 0) hi = std::min(hi, x.hi);
  return norm(0, hi);
}

}  // namespace ptc::sym::iv
