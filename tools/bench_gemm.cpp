// bench_gemm — times ptc_rt::gemm (lib/runtime/cpu/ptc_gemm.h) for scripts/bench_gemm.py.
//   bench_gemm M N K [a_trans b_weight [samples [min_sample_seconds]]]
// Prints one line: "M N K a_trans b_weight median_seconds_per_call gflops".
// Threads: OMP_NUM_THREADS. Each sample repeats the call until it lasts min_sample_seconds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "runtime/cpu/ptc_gemm.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_gemm M N K [a_trans b_weight [samples [min_s]]]\n");
    return 1;
  }
  const int64_t M = std::atoll(argv[1]), N = std::atoll(argv[2]), K = std::atoll(argv[3]);
  const bool at = argc > 4 && std::atoi(argv[4]), bw = argc > 5 && std::atoi(argv[5]);
  const int samples = argc > 6 ? std::atoi(argv[6]) : 7;
  const double min_s = argc > 7 ? std::atof(argv[7]) : 0.05;
  std::vector<float> a(M * K), b(K * N), c(M * N);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : a) x = d(rng);
  for (auto& x : b) x = d(rng);
  ptc_rt::GemmArgs g{M, N, K, a.data(), at ? 1 : K, at ? M : 1, b.data(), bw ? 1 : N, bw ? K : 1,
                     c.data(), N};
  using clk = std::chrono::steady_clock;
  auto run = [&] { ptc_rt::gemm(g, ptc_rt::NoEpilogue{}); };
  // warm-up and calibration
  run();
  auto t0 = clk::now();
  run();
  double one = std::chrono::duration<double>(clk::now() - t0).count();
  const int64_t reps = std::max<int64_t>(1, static_cast<int64_t>(min_s / std::max(one, 1e-7)));
  std::vector<double> ts;
  for (int s = 0; s < samples; ++s) {
    auto t = clk::now();
    for (int64_t r = 0; r < reps; ++r) run();
    ts.push_back(std::chrono::duration<double>(clk::now() - t).count() / reps);
  }
  std::sort(ts.begin(), ts.end());
  const double med = ts[ts.size() / 2];
  std::printf("%lld %lld %lld %d %d %.9g %.3f\n", (long long)M, (long long)N, (long long)K, at, bw,
              med, 2.0 * M * N * K / med * 1e-9);
  return 0;
}
