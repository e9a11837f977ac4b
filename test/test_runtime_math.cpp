// The vectorizable float math of generated kernels (lib/runtime/cpu/ptc_support.h) against the C
// library, over dense ranges and the special values.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "runtime/cpu/ptc_support.h"

namespace {

template <class F, class G>
double max_abs_error(F f, G ref, double lo, double hi, int n = 400001) {
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(lo + (hi - lo) * i / (n - 1));
    worst = std::max(worst, std::fabs(static_cast<double>(f(x)) - ref(static_cast<double>(x))));
  }
  return worst;
}

}  // namespace

TEST_CASE("erf_f, exp_f, tanh_f, sigmoid_f match the C library", "[runtime]") {
  CHECK(max_abs_error(ptc_rt::erf_f, [](double x) { return std::erf(x); }, -6, 6) < 5e-7);
  CHECK(max_abs_error(ptc_rt::tanh_f, [](double x) { return std::tanh(x); }, -12, 12) < 5e-7);
  CHECK(max_abs_error(ptc_rt::sigmoid_f, [](double x) { return 1 / (1 + std::exp(-x)); }, -30, 30) < 5e-7);
  // exp: relative error
  double rel = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -80.0f + 160.0f * static_cast<float>(i) / 200000.0f;
    const double want = std::exp(static_cast<double>(x));
    rel = std::max(rel, std::fabs(ptc_rt::exp_f(x) - want) / want);
  }
  CHECK(rel < 5e-7);

  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(ptc_rt::erf_f(nan)));
  CHECK(ptc_rt::erf_f(inf) == 1.0f);
  CHECK(ptc_rt::erf_f(-inf) == -1.0f);
  CHECK(ptc_rt::erf_f(0.0f) == 0.0f);
  CHECK(std::fabs(ptc_rt::erf_f(4.0f)) <= 1.0f);
  CHECK(std::isnan(ptc_rt::tanh_f(nan)));
  CHECK(ptc_rt::tanh_f(inf) == 1.0f);
  CHECK(std::isnan(ptc_rt::exp_f(nan)));
  CHECK(ptc_rt::exp_f(-inf) == 0.0f);
}

TEST_CASE("SatInt: size arithmetic saturates and stays saturated", "[runtime]") {
  using ptc_rt::SatInt;
  const SatInt s(int64_t(1) << 40);
  CHECK((s * s).huge());                               // 2^80
  CHECK((s * s - s * s).huge());                       // a difference of huge terms is not 0
  CHECK((s * s * 0).v == 0);                           // an empty dimension: no elements
  CHECK((s * 3 + 1).v == (int64_t(3) << 40) + 1);      // exact below the limit
  CHECK(ptc_rt::floordiv(s * s, SatInt(2)).huge());
  CHECK((SatInt(7) % SatInt(0)).v == 0);               // no division by zero
  CHECK(SatInt(-5).v == -5);
}

TEST_CASE("float16 / bfloat16 conversions round to nearest even, keep NaN, -0 and subnormals", "[runtime][half]") {
  using namespace ptc_rt;
  auto h = [](float f) { return float_to_half_bits(f); };
  // exact values, signs, zero
  CHECK(h(1.0f) == 0x3c00);
  CHECK(h(-2.0f) == 0xc000);
  CHECK(h(0.0f) == 0x0000);
  CHECK(h(-0.0f) == 0x8000);
  CHECK(h(65504.0f) == 0x7bff);  // the largest half
  // ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 -> 1 (even); 1 + 3 * 2^-11 -> 1 + 2^-9
  CHECK(h(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(h(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(h(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);  // above the tie
  // overflow: 65520 (the midpoint to 2^16) rounds to infinity, just below it to 65504
  CHECK(h(65520.0f) == 0x7c00);
  CHECK(h(65519.0f) == 0x7bff);
  CHECK(h(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(h(-1e10f) == 0xfc00);
  // subnormals: 2^-24 is the smallest; 2^-25 ties to 0 (even), 3 * 2^-25 to 2 * 2^-24; 2^-14 - 2^-25 rounds up to the smallest normal
  CHECK(h(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(h(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(h(3 * std::ldexp(1.0f, -25)) == 0x0002);
  CHECK(h(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);
  CHECK(half_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_bits_to_float(0x83ff) == -1023 * std::ldexp(1.0f, -24));
  CHECK(half_bits_to_float(0x7bff) == 65504.0f);
  CHECK(std::isinf(half_bits_to_float(0xfc00)));
  CHECK(std::isnan(half_bits_to_float(h(std::numeric_limits<float>::quiet_NaN()))));
  // every half value survives a round trip
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = half_bits_to_float(bits);
    if (std::isnan(f)) continue;
    if (h(f) != bits) FAIL("half 0x" << std::hex << b << " does not round-trip");
  }
  // bfloat16: the upper half of a float32, ties to even, NaN stays NaN (quiet)
  auto bf = [](float f) { return float_to_bfloat16_bits(f); };
  CHECK(bf(1.0f) == 0x3f80);
  CHECK(bf(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie -> even
  CHECK(bf(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie -> even (up)
  CHECK(bf(-0.0f) == 0x8000);
  CHECK(bf(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to infinity
  const uint16_t nan = bf(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(bfloat16_bits_to_float(nan)));
  CHECK(bfloat16_bits_to_float(0x3f80) == 1.0f);
  // the storage types convert the same way
  CHECK(static_cast<float>(half(0.1f)) == half_bits_to_float(h(0.1f)));
  CHECK(static_cast<float>(bfloat16(0.1f)) == bfloat16_bits_to_float(bf(0.1f)));
}
