// ptc's AMX bf16 kernels (lib/runtime/cpu/ptc_amx.h): the packed product with its row epilogue
// against a double-precision product of the same bf16 values, on shapes that are no whole number
// of tiles (rows, columns and depth), with strided operands; skipped with a warning where the CPU
// or OS offers no AMX.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cpu/ptc_amx.h"

namespace {

float bf16_value(float f) { return ptc_rt::round_bfloat16(f); }

}  // namespace

TEST_CASE("AMX bf16 product with its row epilogue matches a double product of the bf16 values", "[amx]") {
  if (!ptc_rt::amx::ready()) {
    WARN("this CPU (or OS) offers no AMX: the AMX product is not exercised here");
    return;
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  struct Shape {
    int64_t M, N, K;
    bool a_transposed;  // A read with element strides (1, M): a column-major buffer
  };
  for (const Shape& s : {Shape{1, 64, 32, false}, Shape{13, 700, 100, false}, Shape{197, 768, 3072, false}, Shape{40, 96, 47, true},
                         Shape{128, 130, 768, false}, Shape{33, 65, 31, true}}) {
    INFO("M N K = " << s.M << " " << s.N << " " << s.K << ", A transposed " << s.a_transposed);
    std::vector<float> a(static_cast<size_t>(s.M * s.K)), w(static_cast<size_t>(s.N * s.K));
    for (auto& e : a) e = bf16_value(dist(rng));
    for (auto& e : w) e = bf16_value(dist(rng));
    // w as a linear layer's weight [N, K]: B[k, n] = w[n K + k]
    const ptc_rt::amx::PackedWeight packed = ptc_rt::amx::pack_weight(w.data(), 1, s.K, s.K, s.N);
    const int64_t lda_m = s.a_transposed ? 1 : s.K, lda_k = s.a_transposed ? s.M : 1;
    const int64_t ldc = s.N + 3;  // C's rows padded: the product must not touch the padding
    std::vector<float> c(static_cast<size_t>(s.M * ldc), 7.f);
    std::vector<int> seen(static_cast<size_t>(s.M * s.N), 0);
    ptc_rt::amx::gemm(a.data(), lda_m, lda_k, s.M, packed, c.data(), ldc, [&](float* row, int64_t m, int64_t n0, int64_t count) {
      for (int64_t j = 0; j < count; ++j) {
        ++seen[static_cast<size_t>(m * s.N + n0 + j)];
        row[j] = 2.f * row[j] + 1.f;  // the epilogue sees the finished product, in place
      }
    });
    double worst = 0;
    int64_t wrong_visits = 0;
    for (int64_t m = 0; m < s.M; ++m) {
      for (int64_t n = 0; n < s.N; ++n) {
        double ref = 0;
        for (int64_t k = 0; k < s.K; ++k) ref += double(a[static_cast<size_t>(m * lda_m + k * lda_k)]) * w[static_cast<size_t>(n * s.K + k)];
        worst = std::max(worst, std::abs(c[static_cast<size_t>(m * ldc + n)] - (2 * ref + 1)) / (1 + std::abs(ref)));
        wrong_visits += seen[static_cast<size_t>(m * s.N + n)] != 1;
      }
      for (int64_t n = s.N; n < ldc; ++n) CHECK(c[static_cast<size_t>(m * ldc + n)] == 7.f);
    }
    CHECK(wrong_visits == 0);
    CHECK(worst < 1e-6 + 1e-8 * double(s.K));  // fp32 accumulation of exact products
  }
}
