// ptc_conv.h — 2-D convolution (NCHW) for generated CPU code.
//
// Grouped and dense convolutions are implicit GEMMs: per image and group,
//   out[Og, OH*OW] = W[Og, Cg*KH*KW] x col[Cg*KH*KW, OH*OW]
// where col (im2col) is never materialized: the GEMM's B-panel packer (ConvPackB) gathers each
// KC x NC panel of col straight from the input into the packed format, so the gathered columns
// are written once to a cache-resident panel instead of a K x OH*OW buffer in memory that the
// GEMM would then read and pack again. 1x1 stride-1 unpadded convolutions read the input as B
// directly. All images and groups are one batched GEMM (the threads take whole images when
// there are enough of them). The bias and the user's epilogue run on each finished tile row.
// Depthwise convolutions (one input channel per group) run per channel plane over a zero-padded
// copy of it (conv2d_depthwise).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ptc_gemm.h"
#include "ptc_rt.h"  // Conv2dArgs

namespace ptc_rt {
namespace conv_detail {

// Output columns [lo, hi) of kernel column kw whose input column is inside [0, W).
inline void valid_cols(const Conv2dArgs& a, int64_t kw, int64_t* lo, int64_t* hi) {
  const int64_t off = kw * a.dw - a.pw;  // iw = ow * sw + off
  const int64_t l = off >= 0 ? 0 : (-off + a.sw - 1) / a.sw;
  const int64_t h = a.W - off <= 0 ? 0 : (a.W - off + a.sw - 1) / a.sw;
  *lo = std::min(l, a.OW);
  *hi = std::max(*lo, std::min(h, a.OW));
}

// Row r of im2col (r = (ci * KH + kh) * KW + kw) at columns [p0, p0 + n) into out[0, n).
// x: the image's (and group's) first input channel; lo/hi: valid_cols per kw.
inline void im2col_row(const Conv2dArgs& a, const float* x, int64_t ci, int64_t kh, int64_t kw,
                       const int64_t* lo, const int64_t* hi, int64_t p0, int64_t n, float* out) {
  const float* xin = x + ci * a.xs[1];
  const int64_t off = kw * a.dw - a.pw;
  int64_t oh = p0 / a.OW, ow0 = p0 % a.OW, c = 0;
  while (c < n) {
    const int64_t seg = std::min(a.OW - ow0, n - c);
    const int64_t ow1 = ow0 + seg;
    float* r = out + c - ow0;  // r[ow] is column (oh, ow)
    const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
    if (ih < 0 || ih >= a.H) {
      for (int64_t ow = ow0; ow < ow1; ++ow) r[ow] = 0.f;
    } else {
      const float* irow = xin + ih * a.xs[2];
      const int64_t l = std::max(ow0, std::min(lo[kw], ow1)), h = std::max(l, std::min(hi[kw], ow1));
      for (int64_t ow = ow0; ow < l; ++ow) r[ow] = 0.f;
      if (a.sw == 1 && a.xs[3] == 1) {  // vector copies: segments are short (a row of OW)
        const float* src = irow + off;
        int64_t ow = l;
        for (; ow + kVecWidth <= h; ow += kVecWidth) vstore(r + ow, vload(src + ow));
        for (; ow < h; ++ow) r[ow] = src[ow];
      } else if (a.sw == 2 && a.xs[3] == 1) {  // a constant stride: loads + permutes, not gathers
        const float* src = irow + off;
#pragma omp simd
        for (int64_t ow = l; ow < h; ++ow) r[ow] = src[2 * ow];
      } else {
        const int64_t s = a.sw * a.xs[3];
        const float* src = irow + off * a.xs[3];
        for (int64_t ow = l; ow < h; ++ow) r[ow] = src[ow * s];
      }
      for (int64_t ow = h; ow < ow1; ++ow) r[ow] = 0.f;
    }
    c += seg;
    ++oh;
    ow0 = 0;
  }
}

// The implicit GEMM's B packer: g.B is the image's (and group's) first input channel. With
// `images` set the columns run over the positions of every image (column n OH OW + p), g.B being
// image 0's first channel (conv2d's one GEMM over small planes).
struct ConvPackB {
  static constexpr bool kStrided = false;
  static constexpr double kCost = 64.0;  // a gather with bounds per element (choose_split)
  const Conv2dArgs* a;
  const int64_t* lo;
  const int64_t* hi;
  bool images = false;
  void operator()(const GemmArgs& g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                  float* dst) const {
    using namespace gemm_detail;
    alignas(64) float row[NC];
    const int64_t KHW = a->KH * a->KW, P = a->OH * a->OW;
    int64_t ci = k0 / KHW, kh = (k0 % KHW) / a->KW, kw = k0 % a->KW;
    const int64_t full = nc / NR, rem = nc - full * NR;
    for (int64_t k = 0; k < kc; ++k) {
      if (images) {
        for (int64_t c = 0; c < nc;) {
          const int64_t j = n0 + c, n = j / P, p = j % P, seg = std::min(P - p, nc - c);
          im2col_row(*a, g.B + n * a->xs[0], ci, kh, kw, lo, hi, p, seg, row + c);
          c += seg;
        }
      } else {
        im2col_row(*a, g.B, ci, kh, kw, lo, hi, n0, nc, row);
      }
      float* d = dst + k * NR;
      for (int64_t t = 0; t < full; ++t)
#pragma GCC unroll 8
        for (int j = 0; j < NV; ++j) vstore(d + t * NR * kc + j * W, vload(row + t * NR + j * W));
      if (rem) {
        float* dl = d + full * NR * kc;
        int64_t j = 0;
        for (; j < rem; ++j) dl[j] = row[full * NR + j];
        for (; j < NR; ++j) dl[j] = 0.f;
      }
      if (++kw == a->KW) {
        kw = 0;
        if (++kh == a->KH) kh = 0, ++ci;
      }
    }
  }
};

// The weight gradient's B packer: B[k, j] = im2col(x)[(ci, kh, kw) = j, position k] with the
// positions of every image in a row (k = n OH OW + oh OW + ow), i.e. the columns transposed.
// g.B is the group's first input channel of image 0; images are a->xs[0] apart. Per NR-column
// sliver, each column's run of kc positions is gathered (im2col_row, split at image ends) into a
// column-major scratch panel, which pack_b transposes into the sliver in vector blocks.
struct ConvColsPackB {
  static constexpr bool kStrided = false;
  static constexpr double kCost = 64.0;
  const Conv2dArgs* a;
  const int64_t* lo;
  const int64_t* hi;
  void operator()(const GemmArgs& g, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                  float* dst) const {
    using namespace gemm_detail;
    alignas(64) float cols[NR * KC];
    const int64_t KHW = a->KH * a->KW, P = a->OH * a->OW;
    for (int64_t t0 = 0; t0 < nc; t0 += NR) {
      const int64_t w = std::min<int64_t>(NR, nc - t0);
      for (int64_t j = 0; j < w; ++j) {
        const int64_t col = n0 + t0 + j, ci = col / KHW, kh = (col % KHW) / a->KW, kw = col % a->KW;
        for (int64_t k = 0; k < kc;) {
          const int64_t n = (k0 + k) / P, p = (k0 + k) % P, seg = std::min(P - p, kc - k);
          im2col_row(*a, g.B + n * a->xs[0], ci, kh, kw, lo, hi, p, seg, cols + j * kc + k);
          k += seg;
        }
      }
      pack_b(cols, 1, kc, kc, w, dst + t0 * kc);  // B[k, j] at cols[j * kc + k]
    }
  }
};

// Prefetches two byte ranges (the next plane's operands) into L2 a few cache lines per step(),
// spread over `steps` calls between the current plane's rows: read between the rows' work, not
// in one burst when the next plane starts, they stream at memory speed. write_b: range b is
// about to be written.
struct SpreadPrefetch {
  const char* a;
  int64_t a_bytes;
  const char* b;
  int64_t b_bytes;
  bool write_b;
  int64_t per;
  SpreadPrefetch(const void* pa, int64_t na, const void* pb, int64_t nb, bool wb, int64_t steps)
      : a(static_cast<const char*>(pa)), a_bytes(na), b(static_cast<const char*>(pb)), b_bytes(nb), write_b(wb),
        per(((na + nb) / 64 + std::max<int64_t>(1, steps) - 1) / std::max<int64_t>(1, steps)) {}
  void step() {
    for (int64_t i = 0; i < per; ++i) {
      if (a_bytes > 0) {
        __builtin_prefetch(a, 0, 1);
        a += 64, a_bytes -= 64;
      } else if (b_bytes > 0) {
        if (write_b)
          __builtin_prefetch(b, 1, 1);
        else
          __builtin_prefetch(b, 0, 1);
        b += 64, b_bytes -= 64;
      }
    }
  }
};

// A depthwise K x K weight gradient's taps over column-phase rows (conv2d_weight_grad): per
// vector of output columns, the K K partial sums stay in registers over every output row;
// acc[kh K + kw] gets their lanes' total. ph: the plane's phase rows (row ih, phase p at
// (ih S + p) L); g: dy's rows padded to OWp (a multiple of the vector width) with zeros.
template <int K>
inline void depthwise_wgrad_taps(const Conv2dArgs& a, const float* ph, int64_t L, const int64_t* phase,
                                 const int64_t* shift, const float* g, int64_t OWp, double* acc, SpreadPrefetch& next) {
  for (int64_t c0 = 0; c0 < OWp; c0 += kVecWidth) {
    vfloat t[K * K];
    for (int k = 0; k < K * K; ++k) t[k] = vzero();
    for (int64_t oh = 0; oh < a.OH; ++oh) {
      next.step();
      const vfloat gv = vload(g + oh * OWp + c0);
      for (int kh = 0; kh < K; ++kh) {
        const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
        if (ih < 0 || ih >= a.H) continue;
        const float* row = ph + ih * a.sw * L + c0;
        for (int kw = 0; kw < K; ++kw) t[kh * K + kw] += gv * vload(row + phase[kw] * L + shift[kw]);
      }
    }
    // Lanes past OW (dy zero-padded) multiplied real inputs: leave them out, so that an
    // infinite input no tap reads at a valid column cannot turn the sum NaN.
    const int lanes = static_cast<int>(std::min<int64_t>(kVecWidth, a.OW - c0));
    for (int k = 0; k < K * K; ++k) {
      double s = 0.0;
      for (int v = 0; v < lanes; ++v) s += t[k][v];
      acc[k] += s;
    }
  }
}

}  // namespace conv_detail

// Direct convolution (any weight strides; the depthwise path): per (image, channel) plane, each
// output row accumulates its KH x KW taps over the columns where they are in bounds (no
// per-element bounds checks, so the inner loops vectorize).
inline void conv2d_direct(const Conv2dArgs& a) {
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups;
  std::vector<int64_t> lo(static_cast<size_t>(a.KW)), hi(static_cast<size_t>(a.KW));
  for (int64_t kw = 0; kw < a.KW; ++kw) conv_detail::valid_cols(a, kw, &lo[kw], &hi[kw]);
  const int64_t* plo = lo.data();
  const int64_t* phi = hi.data();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t o = 0; o < a.O; ++o) {
      const int64_t g = o / Og;
      float* out = a.y + (n * a.O + o) * a.OH * a.OW;
      const float b = a.bias ? a.bias[o * a.bias_stride] : 0.f;
      for (int64_t oh = 0; oh < a.OH; ++oh) {
        float* orow = out + oh * a.OW;
        for (int64_t ow = 0; ow < a.OW; ++ow) orow[ow] = b;
        for (int64_t ci = 0; ci < Cg; ++ci) {
          const float* xin = a.x + n * a.xs[0] + (g * Cg + ci) * a.xs[1];
          for (int64_t kh = 0; kh < a.KH; ++kh) {
            const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
            if (ih < 0 || ih >= a.H) continue;
            const float* irow = xin + ih * a.xs[2];
            for (int64_t kw = 0; kw < a.KW; ++kw) {
              const float wv = a.w[o * a.ws[0] + ci * a.ws[1] + kh * a.ws[2] + kw * a.ws[3]];
              const float* src = irow + (kw * a.dw - a.pw) * a.xs[3];
              const int64_t l = plo[kw], h = phi[kw];
              if (a.sw == 1 && a.xs[3] == 1) {
#pragma omp simd
                for (int64_t ow = l; ow < h; ++ow) orow[ow] += wv * src[ow];
              } else if (a.sw == 2 && a.xs[3] == 1) {  // a constant stride: loads + permutes, not gathers
#pragma omp simd
                for (int64_t ow = l; ow < h; ++ow) orow[ow] += wv * src[2 * ow];
              } else {
                const int64_t s = a.sw * a.xs[3];
#pragma omp simd
                for (int64_t ow = l; ow < h; ++ow) orow[ow] += wv * src[ow * s];
              }
            }
          }
        }
      }
      if (a.ep.fn) a.ep.fn(a.ep.obj, out, n, o, 0, a.OH * a.OW);
    }
}

// Depthwise convolution (one input and one output channel per group), stride 1: each (image,
// channel) plane is copied once into a zero-padded scratch plane, so that no tap needs a bounds
// check, and every tap is one multiply-add pass over the flattened plane (output q = oh * Wp + ow
// reads padded element q + kh * dh * Wp + kw * dw; the Wp - OW columns past each row are computed
// and dropped): long contiguous runs that vectorize fully even for 7x7 planes. For dilations and
// kernels other than 3x3 / 5x5 (those take conv2d_depthwise_kxk). (Strided ones take
// conv2d_depthwise_kxk or conv2d_direct: splitting the padded columns into stride phases cost
// more than it saved.)
inline void conv2d_depthwise(const Conv2dArgs& a) {
  const int64_t KH = a.KH, KW = a.KW, OH = a.OH, OW = a.OW;
  const int64_t Hp = std::max(a.H + 2 * a.ph, (OH - 1) + (KH - 1) * a.dh + 1);
  const int64_t Wp = std::max(a.W + 2 * a.pw, (OW - 1) + (KW - 1) * a.dw + 1);
  const int64_t plane = Hp * Wp + Wp;  // one spare row: the flat passes read past the last row
#pragma omp parallel
  {
    std::vector<float> pad_buf(static_cast<size_t>(plane + kVecWidth)), acc_buf(static_cast<size_t>(OH * Wp));
    float* pad = pad_buf.data();
    float* acc = acc_buf.data();
    std::vector<float> taps(static_cast<size_t>(KH * KW));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < a.N; ++n)
      for (int64_t o = 0; o < a.O; ++o) {
        const float* x = a.x + n * a.xs[0] + o * a.xs[1];
        std::fill(pad, pad + plane, 0.f);
        for (int64_t ih = 0; ih < a.H; ++ih) {
          float* prow = pad + (ih + a.ph) * Wp + a.pw;
          const float* xrow = x + ih * a.xs[2];
          if (a.xs[3] == 1) std::memcpy(prow, xrow, static_cast<size_t>(a.W) * sizeof(float));
          else
            for (int64_t iw = 0; iw < a.W; ++iw) prow[iw] = xrow[iw * a.xs[3]];
        }
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) taps[kh * KW + kw] = a.w[o * a.ws[0] + kh * a.ws[2] + kw * a.ws[3]];
        const float b = a.bias ? a.bias[o * a.bias_stride] : 0.f;
        float* out = a.y + (n * a.O + o) * OH * OW;
        const int64_t len = OH * Wp;
        for (int64_t q = 0; q < len; ++q) acc[q] = b;
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const float wv = taps[kh * KW + kw];
            const float* src = pad + kh * a.dh * Wp + kw * a.dw;
#pragma omp simd
            for (int64_t q = 0; q < len; ++q) acc[q] += wv * src[q];
          }
        for (int64_t oh = 0; oh < OH; ++oh) std::memcpy(out + oh * OW, acc + oh * Wp, static_cast<size_t>(OW) * sizeof(float));
        if (a.ep.fn) a.ep.fn(a.ep.obj, out, n, o, 0, OH * OW);
      }
  }
}

// Depthwise convolution with stride S (1 or 2) and a square K x K kernel (K = 3 or 5; no
// dilation, unit input column stride): per output row, the interior columns (every tap in bounds)
// sum all K x K taps in registers, one vector of outputs at a time (stride-2 reads are loads +
// permutes), and store once; the few edge columns sum their in-bounds taps one by one. Input rows
// above or below the image read a row of zeros instead. (conv2d_direct makes a pass over the
// output row per tap, loading and storing it K x K times: mobilenet_v2's 96@112 stride-2 plane
// 0.33 -> 0.14 ms on 2 threads. Copying the plane padded first, or split into even and odd
// columns, measured slower there; for stride 1 the padded copy (conv2d_depthwise) costs a plane
// copy, a zero fill and per-row copies of the result, which dominate on 14x14 and 7x7 planes.)
template <int K, int S>
inline void conv2d_depthwise_kxk(const Conv2dArgs& a) {
  const int64_t OH = a.OH, OW = a.OW, W = a.W, pw = a.pw;
  int64_t L = 0, R = OW;  // interior columns [L, R)
  for (int64_t kw = 0; kw < K; ++kw) {
    int64_t lo, hi;
    conv_detail::valid_cols(a, kw, &lo, &hi);
    L = std::max(L, lo);
    R = std::min(R, hi);
  }
  if (R < L) R = L;
  const std::vector<float> zeros(static_cast<size_t>(W), 0.f);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t o = 0; o < a.O; ++o) {
      const float* x = a.x + n * a.xs[0] + o * a.xs[1];
      float w[K][K];
      for (int kh = 0; kh < K; ++kh)
        for (int kw = 0; kw < K; ++kw) w[kh][kw] = a.w[o * a.ws[0] + kh * a.ws[2] + kw * a.ws[3]];
      const float b = a.bias ? a.bias[o * a.bias_stride] : 0.f;
      float* out = a.y + (n * a.O + o) * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const float* rows[K];  // input row S oh - ph + kh (zeros outside the image)
        for (int kh = 0; kh < K; ++kh) {
          const int64_t ih = oh * S - a.ph + kh;
          rows[kh] = ih >= 0 && ih < a.H ? x + ih * a.xs[2] : zeros.data();
        }
        float* orow = out + oh * OW;
        auto edge = [&](int64_t ow) {
          float acc = b;
          for (int kh = 0; kh < K; ++kh)
            for (int kw = 0; kw < K; ++kw) {
              const int64_t iw = S * ow + kw - pw;
              if (iw >= 0 && iw < W) acc += w[kh][kw] * rows[kh][iw];
            }
          orow[ow] = acc;
        };
        for (int64_t ow = 0; ow < L; ++ow) edge(ow);
#pragma omp simd
        for (int64_t ow = L; ow < R; ++ow) {
          float acc = b;
#pragma GCC unroll 5
          for (int kh = 0; kh < K; ++kh)
#pragma GCC unroll 5
            for (int kw = 0; kw < K; ++kw) acc += w[kh][kw] * rows[kh][S * ow + kw - pw];
          orow[ow] = acc;
        }
        for (int64_t ow = R; ow < OW; ++ow) edge(ow);
      }
      if (a.ep.fn) a.ep.fn(a.ep.obj, out, n, o, 0, OH * OW);
    }
}

// A depthwise convolution (one input and one output channel per group; any weight strides).
inline void conv2d_depthwise_any(const Conv2dArgs& a) {
  const bool kxk = a.dh == 1 && a.dw == 1 && a.xs[3] == 1 && a.KH == a.KW && (a.KH == 3 || a.KH == 5);
  if (kxk && a.sh == 1 && a.sw == 1) return a.KH == 3 ? conv2d_depthwise_kxk<3, 1>(a) : conv2d_depthwise_kxk<5, 1>(a);
  if (kxk && a.sh == 2 && a.sw == 2) return a.KH == 3 ? conv2d_depthwise_kxk<3, 2>(a) : conv2d_depthwise_kxk<5, 2>(a);
  if (a.sh == 1 && a.sw == 1) return conv2d_depthwise(a);
  return conv2d_direct(a);
}

// The weight gradient of a convolution: dw[o, ci, kh, kw] = sum over images and positions of
// dy[n, o, p] im2col(x)[n, (ci, kh, kw), p], per group one GEMM  dw_g [Og, Cg KH KW] =
// dy_g [Og, N P] x cols_g^T [N P, Cg KH KW]  whose B panels are gathered from x (ConvColsPackB),
// so the im2col columns are never stored. dyg: the output gradient laid out [G, Og, N, OH, OW]
// (contiguous); dw: [O, Cg, KH, KW] contiguous. Reads a's input, geometry and groups (not w).
inline void conv2d_weight_grad(const Conv2dArgs& a, const float* dyg, float* dw) {
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups, CKK = Cg * a.KH * a.KW;
  const int64_t NP = a.N * a.OH * a.OW;
  std::vector<int64_t> lo(static_cast<size_t>(a.KW)), hi(static_cast<size_t>(a.KW));
  for (int64_t kw = 0; kw < a.KW; ++kw) conv_detail::valid_cols(a, kw, &lo[kw], &hi[kw]);
  if (Cg == 1 && Og == 1) {
    const int64_t P = a.OH * a.OW, KHW = a.KH * a.KW;
    const int64_t* plo = lo.data();
    const int64_t* phi = hi.data();
    const bool taps = a.KH == a.KW && (a.KH == 3 || a.KH == 5) && a.xs[3] == 1;  // depthwise_wgrad_taps, below
    if (!taps && a.sh == 1 && a.sw == 1 && a.OH == a.H && a.OW == a.W && a.xs[3] == 1 && a.xs[2] == a.W) {
      // Stride 1, "same" size, kernels other than 3x3 / 5x5 (ConvNeXt's 7x7): over a flattened plane,
      // tap (kh, kw) reads x at p + (kh dh - ph) W + kw dw - pw for dy's position p. With dy's
      // columns that read outside the row zeroed (one masked copy of dy per kw), each tap is one
      // dot product over a contiguous range of rows, not one short one per row: 14x14 and 7x7
      // planes spent their time in the per-row reductions. Sums in float over chunks of 4096,
      // the total in double. (A zeroed dy column still multiplies the neighbouring row's edge
      // element of x: an infinite x there makes that tap NaN where torch skips the product.)
      const int64_t W = a.W;
#pragma omp parallel
      {
        std::vector<float> masked(static_cast<size_t>(a.KW * P));
        std::vector<double> acc(static_cast<size_t>(KHW));
#pragma omp for schedule(static)
        for (int64_t c = 0; c < a.C; ++c) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t n = 0; n < a.N; ++n) {
            const float* xp = a.x + n * a.xs[0] + c * a.xs[1];
            const float* gp = dyg + (c * a.N + n) * P;
            for (int64_t kw = 0; kw < a.KW; ++kw) {
              float* m = masked.data() + kw * P;
              for (int64_t oh = 0; oh < a.OH; ++oh) {
                float* row = m + oh * W;
                const float* src = gp + oh * W;
                for (int64_t ow = 0; ow < plo[kw]; ++ow) row[ow] = 0.f;
                std::memcpy(row + plo[kw], src + plo[kw], static_cast<size_t>(phi[kw] - plo[kw]) * sizeof(float));
                for (int64_t ow = phi[kw]; ow < W; ++ow) row[ow] = 0.f;
              }
            }
            for (int64_t kh = 0; kh < a.KH; ++kh) {
              const int64_t dr = kh * a.dh - a.ph;  // ih = oh + dr
              const int64_t oh0 = std::max<int64_t>(0, -dr), oh1 = std::min(a.OH, a.H - dr);
              if (oh0 >= oh1) continue;
              for (int64_t kw = 0; kw < a.KW; ++kw) {
                const int64_t off = dr * W + kw * a.dw - a.pw;
                const int64_t p0 = std::max(oh0 * W, -off), p1 = std::min(oh1 * W, P - off);
                if (p0 >= p1) continue;
                const float* m = masked.data() + kw * P;
                const float* xo = xp + (p0 + off);  // x at p0 + off; m at p0
                double total = 0.0;
                for (int64_t q = p0; q < p1; q += 4096) {
                  const int64_t e = std::min(p1, q + 4096);
                  float s = 0.f;
#pragma omp simd reduction(+ : s)
                  for (int64_t p = q; p < e; ++p) s += m[p] * xo[p - p0];
                  total += s;
                }
                acc[static_cast<size_t>(kh * a.KW + kw)] += total;
              }
            }
          }
          for (int64_t k = 0; k < KHW; ++k) dw[c * KHW + k] = static_cast<float>(acc[static_cast<size_t>(k)]);
        }
      }
      return;
    }
    if (a.xs[3] == 1) {
      // Other depthwise layers, unit column stride: per plane, each input row is split into its
      // S = sw column phases (phase p holds columns p, p + S, ...) with zero margins, so that
      // tap (kh, kw) of output row oh reads one phase row at a fixed shift, contiguously and
      // with no bounds checks. 3x3 and 5x5 kernels keep each tap's partial sums for a vector of
      // columns in registers over all rows (depthwise_wgrad_taps); others accumulate dy x
      // elementwise into a row of partial sums per tap. Either way no reduction per row; the
      // partial sums are reduced once per image, in double. (One dot product per row and tap,
      // with strided loads, spent its time in gathers and horizontal sums: mobilenet_v2's
      // depthwise weight gradients 20 -> 6.6 ms for its strided layers, 15 -> 7.7 for the
      // others, against the flattened-plane dot products above.)
      const int64_t S = a.sw, OW = a.OW, OWp = (OW + kVecWidth - 1) / kVecWidth * kVecWidth;
      const int64_t M = (a.pw + S - 1) / S;                               // left margin of a phase row
      const int64_t L = OWp + M + ((a.KW - 1) * a.dw + S - 1) / S + 1;   // phase row length
#pragma omp parallel
      {
        std::vector<float> ph(static_cast<size_t>(a.H * S * L));
        std::vector<float> part(static_cast<size_t>(taps ? 0 : KHW * OW));
        std::vector<float> gpad(static_cast<size_t>(taps ? a.OH * OWp : 0));
        std::vector<int64_t> phase(static_cast<size_t>(a.KW)), shift(static_cast<size_t>(a.KW)), cols(static_cast<size_t>(S));
        for (int64_t p = 0; p < S; ++p) cols[p] = std::min((a.W - p + S - 1) / S, L - M);  // columns p, p + S, ... < W
        for (int64_t kw = 0; kw < a.KW; ++kw) {
          const int64_t d = kw * a.dw - a.pw;  // iw = ow S + d
          const int64_t q = d >= 0 ? d / S : -((-d + S - 1) / S);  // floor(d / S)
          phase[kw] = d - q * S;
          shift[kw] = q + M;
        }
#pragma omp for schedule(static)
        for (int64_t c = 0; c < a.C; ++c) {
          std::vector<double> acc(static_cast<size_t>(KHW), 0.0);
          for (int64_t n = 0; n < a.N; ++n) {
            const float* xp = a.x + n * a.xs[0] + c * a.xs[1];
            const float* gp = dyg + (c * a.N + n) * P;
            for (int64_t ih = 0; ih < a.H; ++ih) {  // the margins stay zero
              const float* xr = xp + ih * a.xs[2];
              for (int64_t p = 0; p < S; ++p) {
                float* pr = ph.data() + (ih * S + p) * L + M;
                const int64_t count = cols[p];
                if (S == 1) {
                  std::memcpy(pr, xr, static_cast<size_t>(count) * sizeof(float));
                } else if (S == 2) {
                  for (int64_t j = 0; j < count; ++j) pr[j] = xr[2 * j + p];
                } else {
                  for (int64_t j = 0; j < count; ++j) pr[j] = xr[j * S + p];
                }
              }
            }
            if (taps) {
              for (int64_t oh = 0; oh < a.OH; ++oh) {
                std::memcpy(gpad.data() + oh * OWp, gp + oh * OW, static_cast<size_t>(OW) * sizeof(float));
                std::fill(gpad.data() + oh * OWp + OW, gpad.data() + (oh + 1) * OWp, 0.f);
              }
              // the plane after this one (its channel's next image, else the next channel's first)
              const float* next = n + 1 < a.N ? xp + a.xs[0] : a.x + (c + 1) * a.xs[1];
              // Its input and output gradient (dy's planes are [C, N] in order) are prefetched
              // during this one's rows (mobilenet_v2's 112x112 planes: 2x).
              const bool more = c + 1 < a.C || n + 1 < a.N;
              conv_detail::SpreadPrefetch pf(next, more ? ((a.H - 1) * a.xs[2] + a.W) * 4 : 0, gp + P, more ? P * 4 : 0, false,
                                             (OWp / kVecWidth) * a.OH);
              if (a.KH == 3)
                conv_detail::depthwise_wgrad_taps<3>(a, ph.data(), L, phase.data(), shift.data(), gpad.data(), OWp, acc.data(), pf);
              else
                conv_detail::depthwise_wgrad_taps<5>(a, ph.data(), L, phase.data(), shift.data(), gpad.data(), OWp, acc.data(), pf);
              continue;
            }
            std::fill(part.begin(), part.end(), 0.f);
            for (int64_t oh = 0; oh < a.OH; ++oh) {
              const float* g = gp + oh * OW;
              for (int64_t kh = 0; kh < a.KH; ++kh) {
                const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
                if (ih < 0 || ih >= a.H) continue;
                for (int64_t kw = 0; kw < a.KW; ++kw) {
                  const float* xr = ph.data() + (ih * S + phase[kw]) * L + shift[kw];
                  float* pt = part.data() + (kh * a.KW + kw) * OW;
#pragma omp simd
                  for (int64_t ow = 0; ow < OW; ++ow) pt[ow] += g[ow] * xr[ow];
                }
              }
            }
            for (int64_t k = 0; k < KHW; ++k) {
              double t = 0.0;
              for (int64_t ow = 0; ow < OW; ++ow) t += part[static_cast<size_t>(k * OW + ow)];
              acc[static_cast<size_t>(k)] += t;
            }
          }
          for (int64_t k = 0; k < KHW; ++k) dw[c * KHW + k] = static_cast<float>(acc[static_cast<size_t>(k)]);
        }
      }
      return;
    }
    // Depthwise, any column stride (a GEMM of one row): per channel, each tap's dot product of
    // dy with the input over the in-bounds columns of every row; a row's sum in float, the
    // total in double.
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < a.C; ++c) {
      std::vector<double> acc(static_cast<size_t>(KHW), 0.0);
      for (int64_t n = 0; n < a.N; ++n) {
        const float* xp = a.x + n * a.xs[0] + c * a.xs[1];
        const float* gp = dyg + (c * a.N + n) * P;
        for (int64_t oh = 0; oh < a.OH; ++oh) {
          const float* grow = gp + oh * a.OW;
          for (int64_t kh = 0; kh < a.KH; ++kh) {
            const int64_t ih = oh * a.sh - a.ph + kh * a.dh;
            if (ih < 0 || ih >= a.H) continue;
            const float* xrow = xp + ih * a.xs[2];
            for (int64_t kw = 0; kw < a.KW; ++kw) {
              const float* src = xrow + (kw * a.dw - a.pw) * a.xs[3];
              const int64_t step = a.sw * a.xs[3];
              float sum = 0.f;
              if (step == 1) {
#pragma omp simd reduction(+ : sum)
                for (int64_t ow = plo[kw]; ow < phi[kw]; ++ow) sum += grow[ow] * src[ow];
              } else {
#pragma omp simd reduction(+ : sum)
                for (int64_t ow = plo[kw]; ow < phi[kw]; ++ow) sum += grow[ow] * src[ow * step];
              }
              acc[static_cast<size_t>(kh * a.KW + kw)] += sum;
            }
          }
        }
      }
      for (int64_t k = 0; k < KHW; ++k) dw[c * KHW + k] = static_cast<float>(acc[static_cast<size_t>(k)]);
    }
    return;
  }
  const conv_detail::ConvColsPackB pack{&a, lo.data(), hi.data()};
  GemmArgs ga{};
  ga.M = Og;
  ga.N = CKK;
  ga.K = NP;
  ga.A = dyg;
  ga.lda_m = NP;
  ga.lda_k = 1;
  ga.B = a.x;
  ga.C = dw;
  ga.ldc_m = CKK;
  const int64_t groups = a.groups;
  auto off = [&](int64_t g, int64_t* oa, int64_t* ob, int64_t* oc) {
    *oa = g * Og * NP;
    *ob = g * Cg * a.xs[1];
    *oc = g * Og * CKK;
  };
  auto ep = [](float*, int64_t, int64_t, int64_t, int64_t) {};
  if (NP == 0) {
    std::fill(dw, dw + a.O * CKK, 0.f);
    return;
  }
  gemm_detail::gemm_run(ga, groups, off, ep, nullptr, 0, pack);
}


// The input gradient of a depthwise convolution (one input and one output channel per group):
// dx[n, c, ih, iw] = sum over the taps with ih = oh sh - ph + kh dh and iw = ow sw - pw + kw dw of
// dy[n, c, oh, ow] w[c, 0, kh, kw]. a: the forward convolution's geometry, except a.x / a.xs:
// dy [N, C, OH, OW] with its strides; a.y: dx [N, C, H, W], contiguous.
// Per plane, each dy row is first spread along W into a row of the input's width (dy[ow] at
// column ow sw, zeros between, margins for the taps; a few KB, in cache). Then an output row ih
// sums, over the kernel rows whose ih + ph - kh dh divides by sh and the kernel columns, w times
// the spread row shifted by the column's offset: one contiguous simd loop per row with a
// register accumulator, every output written once. At stride 2 half of those multiply-adds are
// on zeros (along W; the rows that do not divide are skipped), which costs less than the
// residue classes' short loops and strided stores did (3x slower at 112x112). a.ep runs on each
// finished row (p0 = ih W, W elements).
inline void conv2d_depthwise_input_grad(const Conv2dArgs& a) {
  const int64_t H = a.H, W = a.W, sh = a.sh, sw = a.sw, KH = a.KH, KW = a.KW;
  const int64_t margin = (KW - 1) * a.dw;  // spread column of t = iw + pw - kw dw is t + margin
  const int64_t L = W + a.pw + margin;
#pragma omp parallel
  {
    std::vector<float> spread(static_cast<size_t>(std::max<int64_t>(1, a.OH * L)));
    std::vector<const float*> src(static_cast<size_t>(KH * KW));
    std::vector<float> wt(static_cast<size_t>(KH * KW));
#pragma omp for collapse(2) schedule(static)
    for (int64_t n = 0; n < a.N; ++n)
      for (int64_t c = 0; c < a.C; ++c) {
        const float* dy = a.x + n * a.xs[0] + c * a.xs[1];
        const float* wc = a.w + c * a.ws[0];
        float* dx = a.y + (n * a.C + c) * H * W;
        for (int64_t oh = 0; oh < a.OH; ++oh) {
          float* s = spread.data() + oh * L;
          const float* drow = dy + oh * a.xs[2];
          std::fill(s, s + margin, 0.f);
          int64_t end = margin;  // columns [margin, end) written
          if (sw == 2 && a.xs[3] == 1) {  // interleaved with zeros: vector shuffles, not scattered stores
            const int64_t pairs = std::min(a.OW, (L - margin) / 2);
            float* __restrict q = s + margin;
#pragma omp simd
            for (int64_t ow = 0; ow < pairs; ++ow) {
              q[2 * ow] = drow[ow];
              q[2 * ow + 1] = 0.f;
            }
            end += 2 * pairs;
            if (pairs < a.OW && end < L) s[end++] = drow[pairs];
          } else {
            std::fill(s + margin, s + L, 0.f);
            for (int64_t ow = 0; ow < a.OW && ow * sw + margin < L; ++ow) s[ow * sw + margin] = drow[ow * a.xs[3]];
            end = L;
          }
          std::fill(s + end, s + L, 0.f);
        }
        // The next plane's dy and dx lines are prefetched a few per row (between the rows'
        // work, not in one burst when it starts), and the epilogue runs on each row while it is in
        // L1 (mobilenet_v2's 112x112 stride-2 layer with its ReLU6 mask: 8.0 -> 6.5 ms).
        const bool more = c + 1 < a.C || n + 1 < a.N;
        const int64_t nn = c + 1 < a.C ? n : n + 1, nc = c + 1 < a.C ? c + 1 : 0;
        conv_detail::SpreadPrefetch pf(a.x + nn * a.xs[0] + nc * a.xs[1], more ? ((a.OH - 1) * a.xs[2] + (a.OW - 1) * a.xs[3] + 1) * 4 : 0,
                                       a.y + (nn * a.C + nc) * H * W, more ? H * W * 4 : 0, true, H);
        for (int64_t ih = 0; ih < H; ++ih) {
          pf.step();
          int64_t taps = 0;
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t th = ih + a.ph - kh * a.dh;  // oh sh
            if (th < 0 || th % sh != 0 || th / sh >= a.OH) continue;
            const float* s = spread.data() + (th / sh) * L + a.pw + margin;
            for (int64_t kw = 0; kw < KW; ++kw) {
              src[taps] = s - kw * a.dw;
              wt[taps++] = wc[kh * a.ws[2] + kw * a.ws[3]];
            }
          }
          float* __restrict row = dx + ih * W;
          if (taps == 0) std::fill(row, row + W, 0.f);
          for (int64_t t = 0; t < taps; ++t) {
            const float* __restrict sp = src[t];
            const float wv = wt[t];
            if (t == 0) {
#pragma omp simd
              for (int64_t iw = 0; iw < W; ++iw) row[iw] = wv * sp[iw];
            } else {
#pragma omp simd
              for (int64_t iw = 0; iw < W; ++iw) row[iw] += wv * sp[iw];
            }
          }
          if (a.ep.fn) a.ep.fn(a.ep.obj, row, n, c, ih * W, W);  // while the row is in L1
        }
      }
  }
}

// The weight gradient of an ungrouped convolution from dy as the forward wrote it ([N, O, OH,
// OW], contiguous) instead of regrouped [O, N, OH, OW]: per image one GEMM dw += dy_n [O, P] x
// cols_n^T (beta 1 after the first image), the B panels gathered from x as in
// conv2d_weight_grad. For large planes, where the regrouping copy is a pass over the activation.
inline void conv2d_weight_grad_nchw(const Conv2dArgs& a, const float* dy, float* dw) {
  const int64_t CKK = a.C * a.KH * a.KW, P = a.OH * a.OW;
  if (a.N == 0 || P == 0) {
    std::fill(dw, dw + a.O * CKK, 0.f);
    return;
  }
  std::vector<int64_t> lo(static_cast<size_t>(a.KW)), hi(static_cast<size_t>(a.KW));
  for (int64_t kw = 0; kw < a.KW; ++kw) conv_detail::valid_cols(a, kw, &lo[kw], &hi[kw]);
  Conv2dArgs one = a;
  one.N = 1;
  const conv_detail::ConvColsPackB pack{&one, lo.data(), hi.data()};
  auto off = [](int64_t, int64_t* oa, int64_t* ob, int64_t* oc) { *oa = *ob = *oc = 0; };
  auto ep = [](float*, int64_t, int64_t, int64_t, int64_t) {};
  for (int64_t n = 0; n < a.N; ++n) {
    GemmArgs ga{};
    ga.M = a.O;
    ga.N = CKK;
    ga.K = P;
    ga.A = dy + n * a.O * P;
    ga.lda_m = P;
    ga.lda_k = 1;
    ga.B = a.x + n * a.xs[0];
    ga.C = dw;
    ga.ldc_m = CKK;
    ga.beta = n == 0 ? 0.f : 1.f;
    gemm_detail::gemm_run(ga, 1, off, ep, nullptr, 0, pack);
  }
}

// The GEMM's k stride when the weight's (ci, kh, kw) dims flatten to one stride, else -1. Dims
// of size 1 take any stride (a 1x1 kernel's; the input-channel dim of a per-group transposed
// weight that a derivative permutes).
inline int64_t conv_weight_k_stride(const Conv2dArgs& a) {
  const int64_t size[3] = {a.C / a.groups, a.KH, a.KW}, stride[3] = {a.ws[1], a.ws[2], a.ws[3]};
  int64_t inner = -1, next = 0;
  for (int d = 2; d >= 0; --d) {
    if (size[d] == 1) continue;
    if (inner < 0) inner = stride[d];
    else if (stride[d] != next) return -1;
    next = stride[d] * size[d];
  }
  return inner < 0 ? 1 : inner;
}

// Convolution as one batched implicit GEMM over (image, group); the weight's (ci, kh, kw) must
// flatten to one stride (conv_weight_k_stride).
inline void conv2d(const Conv2dArgs& a) {
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups;
  if (Cg == 1 && Og == 1) return conv2d_depthwise_any(a);
  const int64_t K = Cg * a.KH * a.KW, P = a.OH * a.OW;
  const bool pointwise = a.KH == 1 && a.KW == 1 && a.sh == 1 && a.sw == 1 && a.ph == 0 && a.pw == 0 &&
                         a.xs[3] == 1 && a.xs[2] == a.W;
  GemmArgs ga{};
  ga.M = Og;
  ga.N = P;
  ga.K = K;
  ga.A = a.w;
  ga.lda_m = a.ws[0];
  ga.lda_k = conv_weight_k_stride(a);
  ga.B = a.x;
  ga.ldb_k = a.xs[1];  // the pointwise case: B[ci, p] = x[ci, p]
  ga.ldb_n = 1;
  ga.C = a.y;
  ga.ldc_m = P;
  const int64_t groups = a.groups;
  auto off = [&](int64_t b, int64_t* oa, int64_t* ob, int64_t* oc) {
    const int64_t n = b / groups, g = b % groups;
    *oa = g * Og * a.ws[0];
    *ob = n * a.xs[0] + g * Cg * a.xs[1];
    *oc = (n * a.O + g * Og) * P;
  };
  auto ep = [&](float* c, int64_t b, int64_t row, int64_t col0, int64_t ncols) {
    const int64_t n = b / groups, o = (b % groups) * Og + row;
    if (a.bias) {
      const float bv = a.bias[o * a.bias_stride];
      for (int64_t j = 0; j < ncols; ++j) c[j] += bv;
    }
    if (a.ep.fn) a.ep.fn(a.ep.obj, c, n, o, col0, ncols);
  };
  if (pointwise) {
    gemm_detail::gemm_run(ga, a.N * groups, off, ep, nullptr, 0);
    return;
  }
  std::vector<int64_t> lo(static_cast<size_t>(a.KW)), hi(static_cast<size_t>(a.KW));
  for (int64_t kw = 0; kw < a.KW; ++kw) conv_detail::valid_cols(a, kw, &lo[kw], &hi[kw]);
  // Small planes whose positions would leave over 1/8 of the register tiles' columns empty per
  // image (7x7: 49 of 64; 14x14: 196 of 224) run as one GEMM over the positions of all images:
  // full tiles, the weight packed once per thread instead of once per image, and the threads
  // split the columns. The result rows go to each image's planes through a scratch C.
  const int64_t NR = gemm_detail::NR;
  if (groups == 1 && a.N > 1 && P > 0 && (gemm_detail::round_up(P, NR) - P) * 8 > P) {
    // Images per GEMM: the scratch C stays within ~8 MB.
    const int64_t per = std::max<int64_t>(1, std::min<int64_t>(a.N, (int64_t{2} << 20) / std::max<int64_t>(1, a.O * P)));
    static thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(a.O * per * P)) scratch.resize(static_cast<size_t>(a.O * per * P));
    Conv2dArgs part = a;
    for (int64_t n0 = 0; n0 < a.N; n0 += per) {
      part.N = std::min(per, a.N - n0);
      part.x = a.x + n0 * a.xs[0];
      const int64_t NP = part.N * P;
      GemmArgs gm = ga;
      gm.N = NP;
      gm.B = part.x;
      gm.C = scratch.data();
      gm.ldc_m = NP;
      auto no_off = [](int64_t, int64_t* oa, int64_t* ob, int64_t* oc) { *oa = *ob = *oc = 0; };
      auto to_planes = [&](float* c, int64_t, int64_t o, int64_t col0, int64_t ncols) {
        for (int64_t j = col0; j < col0 + ncols;) {
          const int64_t n = n0 + j / P, p = j % P, seg = std::min(P - p, col0 + ncols - j);
          float* y = a.y + (n * a.O + o) * P + p;
          std::memcpy(y, c + (j - col0), static_cast<size_t>(seg) * sizeof(float));
          ep(y, n, o, p, seg);
          j += seg;
        }
      };
      const conv_detail::ConvPackB pack{&part, lo.data(), hi.data(), true};
      gemm_detail::gemm_run(gm, 1, no_off, to_planes, nullptr, 0, pack);
    }
    return;
  }
  const conv_detail::ConvPackB pack{&a, lo.data(), hi.data()};
  gemm_detail::gemm_run(ga, a.N * groups, off, ep, nullptr, 0, pack);
}

}  // namespace ptc_rt
