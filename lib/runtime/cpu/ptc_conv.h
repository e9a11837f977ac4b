// ptc_conv.h — 2-D convolution (NCHW) for generated CPU code.
//
// Grouped and dense convolutions run as GEMMs: per image and group, out[Og, OH*OW] =
// W[Og, Cg*KH*KW] x col[Cg*KH*KW, OH*OW], where col is the input itself for 1x1 stride-1
// unpadded convolutions (no copy) and an im2col buffer otherwise; the bias is added in the GEMM
// epilogue. Depthwise convolutions (one input channel per group) take a direct loop.
#pragma once

#include <cstdint>
#include <vector>

#include "ptc_gemm.h"
#include "ptc_rt.h"  // Conv2dArgs

namespace ptc_rt {

inline void conv2d_direct(const Conv2dArgs& a) {
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t o = 0; o < a.O; ++o) {
      const int64_t g = o / Og;
      float* out = a.y + (n * a.O + o) * a.OH * a.OW;
      const float b = a.bias ? a.bias[o * a.bias_stride] : 0.f;
      for (int64_t i = 0; i < a.OH * a.OW; ++i) out[i] = b;
      for (int64_t ci = 0; ci < Cg; ++ci)
        for (int64_t kh = 0; kh < a.KH; ++kh)
          for (int64_t kw = 0; kw < a.KW; ++kw) {
            const float wv = a.w[o * a.ws[0] + ci * a.ws[1] + kh * a.ws[2] + kw * a.ws[3]];
            const float* xin = a.x + n * a.xs[0] + (g * Cg + ci) * a.xs[1];
            for (int64_t oh = 0; oh < a.OH; ++oh) {
              const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
              if (ih < 0 || ih >= a.H) continue;
              float* orow = out + oh * a.OW;
              const float* irow = xin + ih * a.xs[2];
              for (int64_t ow = 0; ow < a.OW; ++ow) {
                const int64_t iw = ow * a.sw - a.pw + kw * a.dw;
                if (iw >= 0 && iw < a.W) orow[ow] += wv * irow[iw * a.xs[3]];
              }
            }
          }
      if (a.ep.fn) a.ep.fn(a.ep.obj, out, n, o, 0, a.OH * a.OW);
    }
}

inline void conv2d(const Conv2dArgs& a) {
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups;
  if (Cg == 1 && Og == 1) return conv2d_direct(a);  // depthwise
  const int64_t K = Cg * a.KH * a.KW, P = a.OH * a.OW;
  const bool pointwise = a.KH == 1 && a.KW == 1 && a.sh == 1 && a.sw == 1 && a.ph == 0 && a.pw == 0 &&
                         a.xs[3] == 1 && a.xs[2] == a.W;
  std::vector<float> col(pointwise ? 0 : static_cast<size_t>(K * P));
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t g = 0; g < a.groups; ++g) {
      const float* xg = a.x + n * a.xs[0] + g * Cg * a.xs[1];
      GemmArgs ga{};
      ga.M = Og;
      ga.N = P;
      ga.K = K;
      ga.A = a.w + g * Og * a.ws[0];
      ga.lda_m = a.ws[0];
      ga.lda_k = a.ws[3];  // valid when (ci, kh, kw) flatten with the weight's strides (contiguous)
      if (pointwise) {
        ga.B = xg;
        ga.ldb_k = a.xs[1];
        ga.ldb_n = 1;
      } else {
        float* c = col.data();
#pragma omp parallel for collapse(2) schedule(static) if (K * P > 32768)
        for (int64_t ci = 0; ci < Cg; ++ci)
          for (int64_t kh = 0; kh < a.KH; ++kh)
            for (int64_t kw = 0; kw < a.KW; ++kw) {
              float* row = c + ((ci * a.KH + kh) * a.KW + kw) * P;
              const float* xin = xg + ci * a.xs[1];
              for (int64_t oh = 0; oh < a.OH; ++oh) {
                const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
                float* r = row + oh * a.OW;
                if (ih < 0 || ih >= a.H) {
                  for (int64_t ow = 0; ow < a.OW; ++ow) r[ow] = 0.f;
                  continue;
                }
                const float* irow = xin + ih * a.xs[2];
                for (int64_t ow = 0; ow < a.OW; ++ow) {
                  const int64_t iw = ow * a.sw - a.pw + kw * a.dw;
                  r[ow] = (iw >= 0 && iw < a.W) ? irow[iw * a.xs[3]] : 0.f;
                }
              }
            }
        ga.B = c;
        ga.ldb_k = P;
        ga.ldb_n = 1;
      }
      ga.C = a.y + (n * a.O + g * Og) * P;
      ga.ldc_m = P;
      const float* bias = a.bias ? a.bias + g * Og * a.bias_stride : nullptr;
      const int64_t bs = a.bias_stride, o0 = g * Og;
      const GemmEpilogue user = a.ep;
      auto ep = [bias, bs, user, n, o0](float* cp, int64_t row, int64_t col0, int64_t ncols) {
        if (bias) {
          const float b = bias[row * bs];
          for (int64_t j = 0; j < ncols; ++j) cp[j] += b;
        }
        if (user.fn) user.fn(user.obj, cp, n, o0 + row, col0, ncols);
      };
      gemm(ga, ep);
    }
}

// Whether the weight's (ci, kh, kw) dims flatten to one stride (the GEMM path's requirement).
inline bool conv_weight_flat(const int64_t* ws, int64_t KH, int64_t KW) {
  return ws[3] * KW == ws[2] && ws[2] * KH == ws[1];
}

}  // namespace ptc_rt
