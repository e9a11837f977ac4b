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
