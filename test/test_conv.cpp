// Tests for the generated code's fp32 convolutions (lib/runtime/cpu/ptc_conv.h and
// ptc_winograd.h) against a naive double-precision direct convolution: the implicit GEMM
// (strides, padding, dilation, groups, 1x1), the depthwise padded-plane loop, Winograd F(2x2, 3x3)
// (odd and even output sizes, padding 0..2, prepared and per-call weights) and its weight
// gradient F(3x3, 2x2), bias and the per-row epilogue. Passes with and without -fopenmp.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "runtime/cpu/ptc_conv.h"
#include "runtime/cpu/ptc_pool.h"
#include "runtime/cpu/ptc_winograd.h"
// conv2d_call / conv2d_prepare (the one TU of a generated library that compiles them)
#include "runtime/cpu/ptc_runtime_conv.cpp"

namespace {

struct Case {
  int64_t N, C, H, W, O, K, s, p, d, g;
};

struct Conv {
  ptc_rt::Conv2dArgs a{};
  std::vector<float> x, w, bias, y;
};

Conv make(const Case& c, std::mt19937& rng, bool with_bias = true) {
  Conv v;
  ptc_rt::Conv2dArgs& a = v.a;
  a.N = c.N; a.C = c.C; a.H = c.H; a.W = c.W; a.O = c.O; a.KH = a.KW = c.K;
  a.sh = a.sw = c.s; a.ph = a.pw = c.p; a.dh = a.dw = c.d; a.groups = c.g;
  a.OH = (c.H + 2 * c.p - c.d * (c.K - 1) - 1) / c.s + 1;
  a.OW = (c.W + 2 * c.p - c.d * (c.K - 1) - 1) / c.s + 1;
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  v.x.resize(static_cast<size_t>(c.N * c.C * c.H * c.W));
  v.w.resize(static_cast<size_t>(c.O * (c.C / c.g) * c.K * c.K));
  v.bias.resize(static_cast<size_t>(c.O));
  for (auto* buf : {&v.x, &v.w, &v.bias})
    for (auto& e : *buf) e = dist(rng);
  v.y.assign(static_cast<size_t>(c.N * c.O * a.OH * a.OW), std::nanf(""));
  a.x = v.x.data();
  a.xs[3] = 1; a.xs[2] = c.W; a.xs[1] = c.H * c.W; a.xs[0] = c.C * c.H * c.W;
  a.w = v.w.data();
  a.ws[3] = 1; a.ws[2] = c.K; a.ws[1] = c.K * c.K; a.ws[0] = (c.C / c.g) * c.K * c.K;
  a.bias = with_bias ? v.bias.data() : nullptr;
  a.bias_stride = 1;
  a.y = v.y.data();
  return v;
}

// max |y - reference| relative to max |reference|; epi: the reference applies relu
double error(const Conv& v, bool relu = false) {
  const ptc_rt::Conv2dArgs& a = v.a;
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups;
  double worst = 0, scale = 0;
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t o = 0; o < a.O; ++o)
      for (int64_t oh = 0; oh < a.OH; ++oh)
        for (int64_t ow = 0; ow < a.OW; ++ow) {
          double acc = a.bias ? a.bias[o] : 0.0;
          const int64_t g = o / Og;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t kh = 0; kh < a.KH; ++kh)
              for (int64_t kw = 0; kw < a.KW; ++kw) {
                const int64_t ih = oh * a.sh - a.ph + kh * a.dh, iw = ow * a.sw - a.pw + kw * a.dw;
                if (ih < 0 || ih >= a.H || iw < 0 || iw >= a.W) continue;
                acc += double(a.w[o * a.ws[0] + ci * a.ws[1] + kh * a.ws[2] + kw]) *
                       a.x[n * a.xs[0] + (g * Cg + ci) * a.xs[1] + ih * a.xs[2] + iw];
              }
          if (relu) acc = acc > 0 ? acc : 0;
          const double got = a.y[((n * a.O + o) * a.OH + oh) * a.OW + ow];
          if (std::isnan(got)) return INFINITY;  // an output never written
          worst = std::max(worst, std::abs(got - acc));
          scale = std::max(scale, std::abs(acc));
        }
  return worst / std::max(scale, 1e-30);
}

// A per-row epilogue that doubles each row of W elements and counts its calls and the calls that
// were not one whole row (atomics: Catch's macros are not for OpenMP threads).
struct DoubleRows {
  int64_t W;
  mutable std::atomic<int64_t> calls{0}, bad{0};
  void operator()(float* p, int64_t, int64_t, int64_t col0, int64_t n) const {
    ++calls;
    if (col0 % W != 0 || n != W) ++bad;
    for (int64_t i = 0; i < n; ++i) p[i] *= 2.f;
  }
};

}  // namespace

TEST_CASE("conv2d as an implicit GEMM matches a direct reference", "[conv]") {
  std::mt19937 rng(1);
  const Case cases[] = {
      {2, 3, 17, 19, 8, 7, 2, 3, 1, 1},    // stem-like: 7x7 stride 2
      {1, 16, 9, 9, 20, 3, 2, 1, 1, 1},    // stride 2
      {2, 8, 12, 10, 16, 3, 1, 2, 2, 1},   // dilated
      {3, 12, 7, 7, 12, 3, 1, 1, 1, 4},    // grouped
      {2, 24, 11, 13, 40, 1, 1, 0, 1, 1},  // 1x1: the input is B itself
      {2, 24, 11, 13, 40, 1, 2, 0, 1, 1},  // 1x1 stride 2
      {1, 5, 40, 3, 3, 5, 1, 2, 1, 1},     // rows narrower than a vector
  };
  for (const Case& c : cases) {
    Conv v = make(c, rng);
    ptc_rt::conv2d(v.a);
    INFO("N C H W O K s p d g = " << c.N << " " << c.C << " " << c.H << " " << c.W << " " << c.O << " " << c.K << " "
                                    << c.s << " " << c.p << " " << c.d << " " << c.g);
    CHECK(error(v) < 1e-5);
  }
}

TEST_CASE("conv2d over small planes as one GEMM across images matches a direct reference", "[conv]") {
  // Planes that fill under 7/8 of the register tiles' columns (7x7, 14x14, ...) with several
  // images run as one GEMM over every image's positions, written back through a scratch C.
  std::mt19937 rng(5);
  const Case cases[] = {
      {3, 16, 7, 7, 20, 3, 1, 1, 1, 1},      // 7x7 planes, O not a multiple of the row tile
      {2, 24, 14, 14, 40, 3, 2, 1, 1, 1},    // stride 2 to 7x7
      {5, 8, 5, 6, 12, 3, 1, 1, 2, 1},       // dilated, 3x4 outputs
      {4, 3, 13, 13, 8, 7, 2, 3, 1, 1},      // stem-like 7x7 stride 2 to 7x7
      {21, 4, 7, 7, 2048, 3, 1, 1, 1, 1},    // images in two GEMMs (the scratch's cap)
  };
  for (const Case& c : cases) {
    INFO("N C H W O K s p d g = " << c.N << " " << c.C << " " << c.H << " " << c.W << " " << c.O << " " << c.K << " "
                                    << c.s << " " << c.p << " " << c.d << " " << c.g);
    Conv v = make(c, rng);
    ptc_rt::conv2d(v.a);
    CHECK(error(v) < 1e-5);
    // with a ReLU epilogue (once per element: a second application would be the same, so count)
    Conv r = make(c, rng);
    std::atomic<int64_t> seen{0};
    auto relu = [&](float* y, int64_t, int64_t, int64_t, int64_t n) {
      seen += n;
      for (int64_t j = 0; j < n; ++j) y[j] = y[j] > 0 ? y[j] : 0;
    };
    r.a.ep = ptc_rt::epilogue_ref(relu);
    ptc_rt::conv2d(r.a);
    CHECK(error(r, true) < 1e-5);
    CHECK(seen.load() == static_cast<int64_t>(r.y.size()));
  }
}

TEST_CASE("depthwise convolutions (register rows for 3x3 / 5x5, padded planes otherwise) match", "[conv]") {
  std::mt19937 rng(2);
  for (const Case& c : {Case{2, 16, 15, 14, 16, 3, 1, 1, 1, 16}, Case{1, 8, 21, 20, 8, 3, 2, 1, 1, 8},
                        Case{2, 4, 9, 9, 4, 5, 1, 2, 1, 4}, Case{1, 6, 10, 10, 12, 3, 1, 1, 1, 6},
                        Case{3, 5, 7, 7, 5, 3, 1, 1, 1, 5},     // 7x7 planes (mobilenet's last stages)
                        Case{2, 3, 14, 14, 3, 3, 2, 1, 1, 3},   // stride 2, even size
                        Case{1, 4, 13, 11, 4, 3, 1, 2, 2, 4},   // dilated
                        Case{1, 4, 12, 9, 4, 3, 1, 0, 1, 4},    // no padding
                        Case{2, 3, 1, 1, 3, 3, 1, 1, 1, 3},     // 1x1 planes: only the centre tap
                        Case{1, 2, 6, 30, 2, 5, 3, 2, 1, 2},    // stride 3
                        Case{1, 3, 9, 10, 3, 5, 2, 2, 1, 3},    // stride 2, 5x5 (conv2d_depthwise_kxk<5, 2>)
                        Case{2, 3, 14, 14, 3, 5, 1, 2, 1, 3},   // stride 1, 5x5 (conv2d_depthwise_kxk<5, 1>)
                        Case{1, 2, 112, 112, 2, 3, 1, 1, 1, 2}, // stride 1, mobilenet_v2's first depthwise plane
                        Case{1, 3, 10, 11, 3, 7, 1, 3, 1, 3},   // 7x7: padded planes
                        Case{1, 2, 4, 3, 2, 5, 1, 2, 1, 2},     // stride 1, a plane narrower than the kernel
                        Case{1, 2, 11, 12, 2, 3, 2, 0, 1, 2},   // stride 2, no padding
                        Case{2, 2, 3, 3, 2, 5, 2, 2, 1, 2},     // stride 2, a plane narrower than the kernel: no interior
                        Case{1, 2, 112, 112, 2, 3, 2, 1, 1, 2}}) { // stride 2, mobilenet_v2's 112 planes
    Conv v = make(c, rng);
    ptc_rt::conv2d(v.a);
    INFO("C " << c.C << " H " << c.H << " W " << c.W << " K " << c.K << " s " << c.s << " p " << c.p << " d " << c.d
              << " O " << c.O);
    CHECK(error(v) < 1e-5);
  }
  // Through conv2d_call, with a ReLU epilogue, and an input with a column stride of 2 (a view).
  Conv v = make(Case{2, 6, 9, 8, 6, 3, 1, 1, 1, 6}, rng);
  std::vector<float> wide(v.x.size() * 2, std::nanf(""));
  for (size_t i = 0; i < v.x.size(); ++i) wide[2 * i] = v.x[i];
  auto relu = [](float* c, int64_t, int64_t, int64_t, int64_t n) {
    for (int64_t j = 0; j < n; ++j) c[j] = c[j] > 0 ? c[j] : 0;
  };
  v.a.ep = ptc_rt::epilogue_ref(relu);
  ptc_rt::conv2d_call(v.a);
  CHECK(error(v, true) < 1e-5);
  Conv strided = v;
  strided.a.x = wide.data();
  for (int i = 0; i < 4; ++i) strided.a.xs[i] *= 2;
  std::fill(strided.y.begin(), strided.y.end(), std::nanf(""));
  strided.a.y = strided.y.data();
  ptc_rt::conv2d_call(strided.a);
  strided.a.x = v.x.data();  // the reference reads the dense copy
  for (int i = 0; i < 4; ++i) strided.a.xs[i] /= 2;
  CHECK(error(strided, true) < 1e-5);
}

TEST_CASE("Winograd F(2x2, 3x3) matches the direct convolution", "[conv]") {
  std::mt19937 rng(3);
  const Case cases[] = {
      {2, 16, 14, 14, 24, 3, 1, 1, 1, 1},  // even output
      {3, 17, 9, 11, 16, 3, 1, 1, 1, 1},   // odd output rows and columns, odd channels
      {2, 32, 12, 13, 20, 3, 1, 0, 1, 1},  // no padding
      {1, 16, 20, 18, 33, 3, 1, 2, 1, 1},  // padding 2, O not a multiple of the tile rows
      {8, 64, 7, 7, 64, 3, 1, 1, 1, 1},    // small images, many of them (tile rows span images)
  };
  for (const Case& c : cases) {
    for (int prepared = 0; prepared < 2; ++prepared) {
      Conv v = make(c, rng);
      REQUIRE(ptc_rt::winograd_detail::kernel_applies(v.a));
      float* U = prepared ? ptc_rt::winograd_detail::prepare_weights(v.a) : nullptr;
      CHECK(ptc_rt::conv2d_winograd(v.a, U));
      std::free(U);
      INFO("N C H W O p = " << c.N << " " << c.C << " " << c.H << " " << c.W << " " << c.O << " " << c.p << " prepared "
                            << prepared);
      CHECK(error(v) < 1e-5);
    }
  }
  // through the runtime's entry point, with a prepared weight and a ReLU epilogue per row
  Conv v = make({2, 16, 10, 10, 16, 3, 1, 1, 1, 1}, rng);
  void* prep = ptc_rt::conv2d_prepare(v.a);
  REQUIRE(prep != nullptr);
  v.a.prepared = prep;
  auto relu = [](float* c, int64_t, int64_t, int64_t, int64_t n) {
    for (int64_t j = 0; j < n; ++j) c[j] = c[j] > 0.f ? c[j] : 0.f;
  };
  v.a.ep = ptc_rt::epilogue_ref(relu);
  ptc_rt::conv2d_call(v.a);
  ptc_rt::prepared_free(prep);
  CHECK(error(v, true) < 1e-5);
}

TEST_CASE("Winograd is not used where it does not apply or pay", "[conv]") {
  std::mt19937 rng(4);
  CHECK_FALSE(ptc_rt::winograd_detail::applies(make({2, 16, 14, 14, 16, 3, 2, 1, 1, 1}, rng).a));  // stride 2
  CHECK_FALSE(ptc_rt::winograd_detail::applies(make({2, 16, 14, 14, 16, 3, 1, 2, 2, 1}, rng).a));  // dilated
  CHECK_FALSE(ptc_rt::winograd_detail::applies(make({2, 16, 14, 14, 16, 3, 1, 1, 1, 2}, rng).a));  // grouped
  CHECK_FALSE(ptc_rt::winograd_detail::applies(make({1, 16, 6, 6, 16, 3, 1, 1, 1, 1}, rng).a));    // 9 tiles
  // Weights transformed per call (a training step's) need more tiles to pay for the transform.
  Conv few = make({8, 64, 7, 7, 64, 3, 1, 1, 1, 1}, rng);  // 128 tiles
  CHECK_FALSE(ptc_rt::winograd_detail::applies(few.a));
  void* prep = ptc_rt::conv2d_prepare(few.a);
  few.a.prepared = prep;
  CHECK(ptc_rt::winograd_detail::applies(few.a));
  ptc_rt::prepared_free(prep);
  CHECK(ptc_rt::winograd_detail::applies(make({8, 64, 14, 14, 64, 3, 1, 1, 1, 1}, rng).a));  // 392 tiles
  CHECK(ptc_rt::conv2d_prepare(make({1, 16, 14, 14, 16, 5, 1, 2, 1, 1}, rng).a) == nullptr);         // 5x5
}

TEST_CASE("the weight gradient's implicit GEMM matches a direct sum", "[conv]") {
  // dw[o, ci, kh, kw] = sum over n, oh, ow of dy[n, o, oh, ow] x[n, g Cg + ci, ih, iw], with dy
  // regrouped [G, Og, N, OH, OW]; images cross the GEMM's k blocks (N P > the k block).
  std::mt19937 rng(6);
  const Case cases[] = {
      {2, 6, 9, 9, 8, 3, 1, 1, 1, 1},     {3, 8, 11, 10, 6, 3, 2, 1, 1, 2}, {2, 4, 7, 7, 4, 1, 2, 0, 1, 1},
      {1, 3, 12, 12, 5, 7, 2, 3, 1, 1},   {2, 4, 9, 8, 4, 3, 1, 2, 2, 4},   {5, 16, 30, 30, 40, 3, 1, 1, 1, 1},
      {3, 20, 17, 19, 36, 5, 2, 2, 1, 2},  {3, 6, 11, 11, 6, 3, 2, 1, 1, 6},   // depthwise, strided
      {2, 5, 20, 30, 5, 3, 1, 1, 1, 5},                                        // depthwise
      // depthwise over column phases: stride 2 (even and odd sizes, 5x5), stride 3 dilated,
      // stride 1 unpadded, padding wider than the kernel's reach
      {2, 4, 16, 16, 4, 3, 2, 1, 1, 4},   {2, 3, 13, 17, 3, 5, 2, 2, 1, 3}, {2, 4, 15, 14, 4, 3, 3, 1, 2, 4},
      {2, 4, 10, 12, 4, 3, 1, 0, 1, 4},   {1, 2, 9, 11, 2, 3, 2, 3, 1, 2},
  };
  for (const Case& c : cases) {
    Conv v = make(c, rng, false);
    const ptc_rt::Conv2dArgs& a = v.a;
    const int64_t Cg = a.C / a.groups, Og = a.O / a.groups, P = a.OH * a.OW;
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> dy(static_cast<size_t>(a.N * a.O * P)), dyg(dy.size()), dw(static_cast<size_t>(a.O * Cg * a.KH * a.KW), std::nanf(""));
    for (auto& e : dy) e = dist(rng);
    for (int64_t n = 0; n < a.N; ++n)
      for (int64_t o = 0; o < a.O; ++o)
        for (int64_t p = 0; p < P; ++p) dyg[static_cast<size_t>(((o / Og * Og + o % Og) * a.N + n) * P + p)] = dy[static_cast<size_t>((n * a.O + o) * P + p)];
    ptc_rt::conv2d_weight_grad_call(a, dyg.data(), dw.data());
    double worst = 0, scale = 0;
    for (int64_t o = 0; o < a.O; ++o)
      for (int64_t ci = 0; ci < Cg; ++ci)
        for (int64_t kh = 0; kh < a.KH; ++kh)
          for (int64_t kw = 0; kw < a.KW; ++kw) {
            double ref = 0;
            for (int64_t n = 0; n < a.N; ++n)
              for (int64_t oh = 0; oh < a.OH; ++oh)
                for (int64_t ow = 0; ow < a.OW; ++ow) {
                  const int64_t ih = oh * a.sh - a.ph + kh * a.dh, iw = ow * a.sw - a.pw + kw * a.dw;
                  if (ih < 0 || ih >= a.H || iw < 0 || iw >= a.W) continue;
                  ref += static_cast<double>(dy[static_cast<size_t>(((n * a.O + o) * a.OH + oh) * a.OW + ow)]) *
                         v.x[static_cast<size_t>(((n * a.C + o / Og * Cg + ci) * a.H + ih) * a.W + iw)];
                }
            const double got = dw[static_cast<size_t>(((o * Cg + ci) * a.KH + kh) * a.KW + kw)];
            worst = std::max(worst, std::isnan(got) ? INFINITY : std::fabs(got - ref));
            scale = std::max(scale, std::fabs(ref));
          }
    INFO("N C H W O K s p d g = " << c.N << " " << c.C << " " << c.H << " " << c.W << " " << c.O << " " << c.K << " " << c.s << " "
                                  << c.p << " " << c.d << " " << c.g);
    CHECK(worst <= 1e-5 * std::max(1.0, scale));
  }
}

TEST_CASE("the weight gradient by Winograd F(3x3, 2x2) matches a direct sum", "[conv]") {
  // Odd and even output sizes (dy's ragged tiles are zeros), padding 0..2, several images per
  // block of tile rows, O and C not multiples of the GEMM tiles; dy as the forward wrote it
  // ([N, O, OH, OW]) and regrouped ([O, N, OH, OW]), directly and through the runtime's entry
  // points (which take it where wgrad_applies).
  std::mt19937 rng(12);
  const Case cases[] = {
      {2, 16, 14, 14, 24, 3, 1, 1, 1, 1}, {3, 17, 9, 11, 16, 3, 1, 1, 1, 1}, {2, 32, 12, 13, 20, 3, 1, 0, 1, 1},
      {1, 16, 20, 18, 33, 3, 1, 2, 1, 1}, {8, 20, 7, 7, 18, 3, 1, 1, 1, 1},  {4, 16, 32, 32, 16, 3, 1, 1, 1, 1},
  };
  for (const Case& c : cases) {
    Conv v = make(c, rng, false);
    const ptc_rt::Conv2dArgs& a = v.a;
    REQUIRE(ptc_rt::winograd_detail::kernel_applies(a));
    const int64_t P = a.OH * a.OW;
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> dy(static_cast<size_t>(a.N * a.O * P)), dyg(dy.size());
    for (auto& e : dy) e = dist(rng);
    for (int64_t n = 0; n < a.N; ++n)
      for (int64_t o = 0; o < a.O; ++o)
        for (int64_t p = 0; p < P; ++p) dyg[static_cast<size_t>((o * a.N + n) * P + p)] = dy[static_cast<size_t>((n * a.O + o) * P + p)];
    std::vector<double> ref(static_cast<size_t>(a.O * a.C * 9), 0.0);
    double scale = 0;
    for (int64_t o = 0; o < a.O; ++o)
      for (int64_t ci = 0; ci < a.C; ++ci)
        for (int64_t kh = 0; kh < 3; ++kh)
          for (int64_t kw = 0; kw < 3; ++kw) {
            double r = 0;
            for (int64_t n = 0; n < a.N; ++n)
              for (int64_t oh = 0; oh < a.OH; ++oh)
                for (int64_t ow = 0; ow < a.OW; ++ow) {
                  const int64_t ih = oh - a.ph + kh, iw = ow - a.pw + kw;
                  if (ih < 0 || ih >= a.H || iw < 0 || iw >= a.W) continue;
                  r += static_cast<double>(dy[static_cast<size_t>(((n * a.O + o) * a.OH + oh) * a.OW + ow)]) *
                       v.x[static_cast<size_t>(((n * a.C + ci) * a.H + ih) * a.W + iw)];
                }
            ref[static_cast<size_t>(((o * a.C + ci) * 3 + kh) * 3 + kw)] = r;
            scale = std::max(scale, std::fabs(r));
          }
    auto err = [&](const std::vector<float>& dw) {
      double worst = 0;
      for (size_t i = 0; i < dw.size(); ++i) worst = std::max(worst, std::isnan(dw[i]) ? INFINITY : std::fabs(dw[i] - ref[i]));
      return worst / std::max(1.0, scale);
    };
    INFO("N C H W O p = " << c.N << " " << c.C << " " << c.H << " " << c.W << " " << c.O << " " << c.p);
    std::vector<float> dw(ref.size(), std::nanf(""));
    REQUIRE(ptc_rt::conv2d_weight_grad_winograd(a, dy.data(), a.O * P, P, dw.data()));
    CHECK(err(dw) < 1e-5);
    std::fill(dw.begin(), dw.end(), std::nanf(""));
    REQUIRE(ptc_rt::conv2d_weight_grad_winograd(a, dyg.data(), P, a.N * P, dw.data()));
    CHECK(err(dw) < 1e-5);
    std::fill(dw.begin(), dw.end(), std::nanf(""));
    ptc_rt::conv2d_weight_grad_nchw_call(a, dy.data(), dw.data());
    CHECK(err(dw) < 1e-5);
    std::fill(dw.begin(), dw.end(), std::nanf(""));
    ptc_rt::conv2d_weight_grad_call(a, dyg.data(), dw.data());
    CHECK(err(dw) < 1e-5);
  }
  // where it applies: enough tiles, at most 128 x 128 channels, the forward's 3x3 stride-1 kernels
  CHECK(ptc_rt::winograd_detail::wgrad_applies(make({4, 16, 32, 32, 16, 3, 1, 1, 1, 1}, rng).a));     // 1024 tiles
  CHECK(ptc_rt::winograd_detail::wgrad_applies(make({8, 128, 28, 28, 128, 3, 1, 1, 1, 1}, rng).a));
  CHECK_FALSE(ptc_rt::winograd_detail::wgrad_applies(make({8, 16, 7, 7, 16, 3, 1, 1, 1, 1}, rng).a));  // 128 tiles
  CHECK_FALSE(ptc_rt::winograd_detail::wgrad_applies(make({8, 256, 14, 14, 256, 3, 1, 1, 1, 1}, rng).a));
  CHECK_FALSE(ptc_rt::winograd_detail::wgrad_applies(make({4, 16, 32, 32, 16, 3, 2, 1, 1, 1}, rng).a));  // stride 2
}

TEST_CASE("a depthwise weight gradient reads no input column a tap does not reach", "[conv]") {
  // 3x3, stride 2, padding 1 over a 6x6 plane: kernel column 0 reads input columns 1 and 3 only
  // (iw = 2 ow - 1). An infinite input in column 5 (read by kernel column 2) must leave kernel
  // column 0's gradient finite, as torch's is.
  ptc_rt::Conv2dArgs a{};
  std::vector<float> x(36, 1.f), dy(9, 1.f), dw(9, std::nanf(""));
  for (int ih = 0; ih < 6; ++ih) x[static_cast<size_t>(ih * 6 + 5)] = INFINITY;
  a.x = x.data();
  a.xs[0] = 36; a.xs[1] = 36; a.xs[2] = 6; a.xs[3] = 1;
  a.N = 1; a.C = 1; a.O = 1; a.H = 6; a.W = 6; a.KH = 3; a.KW = 3; a.OH = 3; a.OW = 3;
  a.sh = a.sw = 2; a.ph = a.pw = 1; a.dh = a.dw = 1; a.groups = 1;
  ptc_rt::conv2d_weight_grad_call(a, dy.data(), dw.data());
  for (int kh = 0; kh < 3; ++kh) {
    INFO("kh " << kh);
    CHECK(std::isfinite(dw[static_cast<size_t>(kh * 3)]));
    CHECK(std::isfinite(dw[static_cast<size_t>(kh * 3 + 1)]));
    CHECK(std::isinf(dw[static_cast<size_t>(kh * 3 + 2)]));
  }
  CHECK(dw[4] == 9.f);  // the centre tap: 9 outputs, each dy 1 x 1
}

TEST_CASE("the depthwise input gradient matches a direct sum", "[conv]") {
  // dx[n, c, ih, iw] = sum of dy[n, c, oh, ow] w[c, kh, kw] over ih = oh sh - ph + kh dh,
  // iw = ow sw - pw + kw dw; dy read through strides (a view with a padded row pitch). Widths
  // with W + pw odd and even (the stride-2 spread's last column), dilation, stride 3, and a
  // per-row epilogue (doubling) that must see every finished row once.
  std::mt19937 rng(11);
  const Case cases[] = {
      {2, 3, 9, 11, 3, 3, 2, 0, 1, 3},  {2, 3, 10, 10, 3, 4, 2, 1, 1, 3}, {2, 3, 10, 9, 3, 5, 2, 2, 1, 3},
      {3, 2, 8, 12, 2, 3, 2, 1, 2, 2},  {2, 3, 9, 10, 3, 3, 3, 0, 2, 3}, {1, 4, 7, 7, 4, 3, 1, 1, 1, 4},
      {2, 5, 13, 11, 5, 5, 2, 2, 1, 5}, {2, 4, 16, 16, 4, 3, 2, 1, 1, 4},
  };
  for (const bool ep : {false, true}) {
    for (const Case& c : cases) {
      Conv v = make(c, rng, false);
      ptc_rt::Conv2dArgs a = v.a;
      const int64_t pitch = a.OW + 3;  // dy rows padded: a strided view
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      std::vector<float> dy(static_cast<size_t>(a.N * a.C * a.OH * pitch), std::nanf(""));
      for (int64_t i = 0; i < a.N * a.C * a.OH; ++i)
        for (int64_t ow = 0; ow < a.OW; ++ow) dy[static_cast<size_t>(i * pitch + ow)] = dist(rng);
      std::vector<float> dx(static_cast<size_t>(a.N * a.C * a.H * a.W), std::nanf(""));
      a.x = dy.data();
      a.xs[3] = 1; a.xs[2] = pitch; a.xs[1] = a.OH * pitch; a.xs[0] = a.C * a.OH * pitch;
      a.y = dx.data();
      DoubleRows twice{a.W};
      if (ep) a.ep = ptc_rt::epilogue_ref(twice);
      ptc_rt::conv2d_depthwise_input_grad(a);
      CHECK(twice.calls == (ep ? a.N * a.C * a.H : 0));
      CHECK(twice.bad == 0);
      double worst = 0, scale = 0;
      for (int64_t n = 0; n < a.N; ++n)
        for (int64_t ch = 0; ch < a.C; ++ch)
          for (int64_t ih = 0; ih < a.H; ++ih)
            for (int64_t iw = 0; iw < a.W; ++iw) {
              double ref = 0;
              for (int64_t kh = 0; kh < a.KH; ++kh)
                for (int64_t kw = 0; kw < a.KW; ++kw) {
                  const int64_t th = ih + a.ph - kh * a.dh, tw = iw + a.pw - kw * a.dw;
                  if (th < 0 || tw < 0 || th % a.sh || tw % a.sw || th / a.sh >= a.OH || tw / a.sw >= a.OW) continue;
                  ref += double(dy[static_cast<size_t>(((n * a.C + ch) * a.OH + th / a.sh) * pitch + tw / a.sw)]) *
                         v.w[static_cast<size_t>((ch * a.KH + kh) * a.KW + kw)];
                }
              if (ep) ref *= 2;
              const double got = dx[static_cast<size_t>(((n * a.C + ch) * a.H + ih) * a.W + iw)];
              worst = std::max(worst, std::isnan(got) ? INFINITY : std::fabs(got - ref));
              scale = std::max(scale, std::fabs(ref));
            }
      INFO("N C H W K s p d = " << c.N << " " << c.C << " " << c.H << " " << c.W << " " << c.K << " " << c.s << " " << c.p << " "
                                << c.d << ", epilogue " << ep);
      CHECK(worst <= 1e-5 * std::max(1.0, scale));
    }
  }
}

TEST_CASE("max pooling's input gradient adds dy at each window's first maximum", "[conv]") {
  // Against a direct scan of each window (first maximum in row-major order, the first NaN when
  // there is one). Small integers make ties; a few NaNs and -infs; x read through strides (a
  // padded row pitch, and a column stride of 2: the generic path); a per-row epilogue that must
  // see every row once, after its last window.
  struct Geo {
    int64_t N, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw;
  };
  const Geo geos[] = {{2, 3, 12, 12, 3, 3, 2, 2, 1, 1, 1, 1}, {2, 2, 9, 11, 3, 3, 2, 2, 1, 1, 1, 1}, {1, 3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1},
                      {2, 2, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1}, {1, 2, 11, 10, 3, 3, 3, 3, 1, 1, 2, 2}, {2, 1, 10, 13, 2, 3, 1, 2, 1, 1, 2, 1},
                      {1, 2, 3, 2, 3, 3, 1, 1, 1, 1, 1, 1}, {1, 1, 6, 20, 5, 5, 2, 3, 2, 2, 1, 1},
                      {2, 2, 2, 6, 2, 1, 1, 1, 1, 0, 3, 1}};  // (the last: a window with no row inside)
  std::mt19937 rng(5);
  for (const int layout : {0, 1, 2})
    for (const bool ep : {false, true})
      for (const Geo& g : geos) {
        ptc_rt::MaxPoolGradArgs a{};
        a.N = g.N; a.C = g.C; a.H = g.H; a.W = g.W; a.KH = g.KH; a.KW = g.KW;
        a.sh = g.sh; a.sw = g.sw; a.ph = g.ph; a.pw = g.pw; a.dh = g.dh; a.dw = g.dw; a.groups = 1;
        a.OH = (g.H + 2 * g.ph - g.dh * (g.KH - 1) - 1) / g.sh + 1;
        a.OW = (g.W + 2 * g.pw - g.dw * (g.KW - 1) - 1) / g.sw + 1;
        // layout 0: dense; 1: rows padded to W + 3; 2: every other column (xs[3] = 2)
        const int64_t cs = layout == 2 ? 2 : 1, pitch = layout == 1 ? g.W + 3 : g.W * cs;
        std::vector<float> x(static_cast<size_t>(g.N * g.C * g.H * pitch), std::nanf(""));
        a.xs[3] = cs; a.xs[2] = pitch; a.xs[1] = g.H * pitch; a.xs[0] = g.C * g.H * pitch;
        std::uniform_int_distribution<int> val(-3, 3), odd(0, 40);
        auto xat = [&](int64_t n, int64_t c, int64_t h, int64_t w) -> float& {
          return x[static_cast<size_t>(n * a.xs[0] + c * a.xs[1] + h * a.xs[2] + w * a.xs[3])];
        };
        for (int64_t n = 0; n < g.N; ++n)
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t h = 0; h < g.H; ++h)
              for (int64_t w = 0; w < g.W; ++w) {
                const int o = odd(rng);
                xat(n, c, h, w) = o == 0 ? std::nanf("") : o == 1 ? -INFINITY : static_cast<float>(val(rng));
              }
        const int64_t dpitch = layout == 1 ? a.OW + 2 : a.OW;  // layout 1: dy rows padded too
        std::vector<float> dy(static_cast<size_t>(g.N * g.C * a.OH * dpitch), std::nanf(""));
        std::uniform_real_distribution<float> dist(-1.f, 1.f);
        for (int64_t r = 0; r < g.N * g.C * a.OH; ++r)
          for (int64_t ow = 0; ow < a.OW; ++ow) dy[static_cast<size_t>(r * dpitch + ow)] = dist(rng);
        a.dys[3] = 1; a.dys[2] = dpitch; a.dys[1] = a.OH * dpitch; a.dys[0] = g.C * a.OH * dpitch;
        std::vector<float> dx(static_cast<size_t>(g.N * g.C * g.H * g.W), std::nanf(""));
        a.x = x.data();
        a.dy = dy.data();
        a.y = dx.data();
        DoubleRows twice{g.W};
        if (ep) a.ep = ptc_rt::epilogue_ref(twice);
        ptc_rt::max_pool2d_backward(a);
        CHECK(twice.calls == (ep ? g.N * g.C * g.H : 0));
        CHECK(twice.bad == 0);
        std::vector<double> ref(dx.size(), 0.0);
        for (int64_t n = 0; n < g.N; ++n)
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t oh = 0; oh < a.OH; ++oh)
              for (int64_t ow = 0; ow < a.OW; ++ow) {
                int64_t best = -1;
                float bv = 0;
                for (int64_t kh = 0; kh < g.KH; ++kh)
                  for (int64_t kw = 0; kw < g.KW; ++kw) {
                    const int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
                    if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                    const float v = xat(n, c, ih, iw);
                    if (best < 0 || v > bv || (std::isnan(v) && !std::isnan(bv))) {
                      best = ih * g.W + iw;
                      bv = v;
                    }
                  }
                if (best >= 0) ref[static_cast<size_t>((n * g.C + c) * g.H * g.W + best)] += dy[static_cast<size_t>(((n * g.C + c) * a.OH + oh) * dpitch + ow)];
              }
        double worst = 0;
        for (size_t i = 0; i < dx.size(); ++i) {
          const double want = ep ? 2 * ref[i] : ref[i];
          worst = std::max(worst, std::isnan(dx[i]) ? INFINITY : std::fabs(dx[i] - want));
        }
        INFO("N C H W = " << g.N << " " << g.C << " " << g.H << " " << g.W << ", K " << g.KH << "x" << g.KW << ", s " << g.sh << " " << g.sw
                          << ", p " << g.ph << " " << g.pw << ", d " << g.dh << " " << g.dw << ", layout " << layout << ", epilogue " << ep);
        CHECK(worst <= 1e-5);
      }
}
