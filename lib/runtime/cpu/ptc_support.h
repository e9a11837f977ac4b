// ptc_support.h — helpers for the C++ that `ptc compile` generates (embedded into ptc and
// written next to the generated sources). C++17 and (optional) OpenMP only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ptc_rt {

// Python floor division and modulo on integers.
inline int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int64_t pymod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <class T> inline T fmod_py(T a, T b) { return a - b * std::floor(a / b); }

// max/min that propagate NaN like torch.maximum / amax.
template <class T> inline T maxnan(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> inline T minnan(T a, T b) { return (a != a || a < b) ? a : b; }
template <class T> inline T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <class T> inline T relu(T x) { return x > T(0) ? x : (x != x ? x : T(0)); }
template <class T> inline T sign(T x) { return T((x > T(0)) - (x < T(0))); }

// Direct NCHW convolution (reference-quality; the GEMM-based one replaces it).
inline void conv2d_nchw(const float* x, const int64_t* xs, const float* w, const int64_t* ws, const float* bias,
                        int64_t bias_stride, float* y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                        int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t ph,
                        int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  const int64_t Cg = C / groups, Og = O / groups;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const int64_t g = o / Og;
      float* out = y + (n * O + o) * OH * OW;
      const float b = bias ? bias[o * bias_stride] : 0.f;
      for (int64_t i = 0; i < OH * OW; ++i) out[i] = b;
      for (int64_t ci = 0; ci < Cg; ++ci)
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const float wv = w[o * ws[0] + ci * ws[1] + kh * ws[2] + kw * ws[3]];
            const float* xin = x + n * xs[0] + (g * Cg + ci) * xs[1];
            for (int64_t oh = 0; oh < OH; ++oh) {
              const int64_t ih = oh * sh - ph + kh * dh;
              if (ih < 0 || ih >= H) continue;
              for (int64_t ow = 0; ow < OW; ++ow) {
                const int64_t iw = ow * sw - pw + kw * dw;
                if (iw < 0 || iw >= W) continue;
                out[oh * OW + ow] += wv * xin[ih * xs[2] + iw * xs[3]];
              }
            }
          }
    }
}

// The calling thread's last error (ptc_last_error).
inline std::string& last_error() {
  thread_local std::string msg;
  return msg;
}

}  // namespace ptc_rt
