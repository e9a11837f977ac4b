// bench_gemm — times ptc_rt::gemm (lib/runtime/cpu/ptc_gemm.h).
//
// Built by scripts/bench_gemm.py as a shared library (-shared -fPIC -DBENCH_GEMM_LIB) that the
// script loads into the Python process next to torch, so that ptc and torch.mm are timed in
// alternating samples on the same buffers and the same OpenMP thread pool (torch's libgomp.so.1
// satisfies this library's dependency). Built without BENCH_GEMM_LIB it is a standalone driver:
//   bench_gemm M N K [a_trans b_weight [samples [min_sample_seconds]]]
// prints "M N K a_trans b_weight median_seconds_per_call gflops" (threads: OMP_NUM_THREADS).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "runtime/cpu/ptc_gemm.h"

namespace {
// A: M x K (row-major, or column-major when a_trans); B: K x N (row-major, or the weight layout
// W[N, K] when b_weight); C: M x N row-major.
ptc_rt::GemmArgs make_args(int64_t M, int64_t N, int64_t K, int at, int bw, const float* A,
                           const float* B, float* C) {
  return ptc_rt::GemmArgs{M, N, K, A, at ? 1 : K, at ? M : 1, B, bw ? 1 : N, bw ? K : 1, C, N};
}
}  // namespace

// Runs the GEMM `reps` times; returns the elapsed seconds.
extern "C" double ptc_bench_gemm(int64_t M, int64_t N, int64_t K, int at, int bw, const float* A,
                                 const float* B, float* C, int64_t reps) {
  const ptc_rt::GemmArgs g = make_args(M, N, K, at, bw, A, B, C);
  const auto t = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < reps; ++r) ptc_rt::gemm(g, ptc_rt::NoEpilogue{});
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

#ifdef BENCH_GEMM_ONEDNN
// The same product on oneDNN's matmul (built with -DBENCH_GEMM_ONEDNN -ldnnl): B in the layout
// oneDNN picks (format `any`), reordered once as a library would reorder a constant weight; A and
// C as given. The primitive and the reordered B are made on the first call for a shape and kept.
#include <oneapi/dnnl/dnnl.hpp>

#include <memory>

extern "C" double onednn_bench_gemm(int64_t M, int64_t N, int64_t K, int at, int bw, const float* A,
                                    const float* B, float* C, int64_t reps) {
  using dnnl::memory;
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  struct Cached {
    int64_t key[5];
    const float* b;
    dnnl::matmul prim;
    memory::desc a, c;
    memory wts;
  };
  static std::unique_ptr<Cached> cache;
  const int64_t key[5] = {M, N, K, at, bw};
  dnnl::stream s(eng);
  if (!cache || !std::equal(key, key + 5, cache->key) || cache->b != B) {
    cache = std::make_unique<Cached>();
    std::copy(key, key + 5, cache->key);
    cache->b = B;
    cache->a = memory::desc({M, K}, memory::data_type::f32, at ? memory::dims{1, M} : memory::dims{K, 1});
    const memory::desc user_b({K, N}, memory::data_type::f32, bw ? memory::dims{1, K} : memory::dims{N, 1});
    const memory::desc any_b({K, N}, memory::data_type::f32, memory::format_tag::any);
    cache->c = memory::desc({M, N}, memory::data_type::f32, memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(cache->a, any_b, cache->c), eng);
    cache->prim = dnnl::matmul(pd);
    cache->wts = memory(pd.weights_desc(), eng);
    memory ub(user_b, eng, const_cast<float*>(B));
    dnnl::reorder(ub, cache->wts).execute(s, ub, cache->wts);
    s.wait();
  }
  memory a(cache->a, eng, const_cast<float*>(A)), c(cache->c, eng, C);
  const auto t = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < reps; ++r) cache->prim.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, cache->wts}, {DNNL_ARG_DST, c}});
  s.wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
#endif

#ifndef BENCH_GEMM_LIB
int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_gemm M N K [a_trans b_weight [samples [min_s]]]\n");
    return 1;
  }
  const int64_t M = std::atoll(argv[1]), N = std::atoll(argv[2]), K = std::atoll(argv[3]);
  const int at = argc > 4 ? std::atoi(argv[4]) : 0, bw = argc > 5 ? std::atoi(argv[5]) : 0;
  const int samples = argc > 6 ? std::atoi(argv[6]) : 7;
  const double min_s = argc > 7 ? std::atof(argv[7]) : 0.05;
  std::vector<float> a(M * K), b(K * N), c(M * N);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : a) x = d(rng);
  for (auto& x : b) x = d(rng);
  ptc_bench_gemm(M, N, K, at, bw, a.data(), b.data(), c.data(), 1);  // warm-up
  const double one = ptc_bench_gemm(M, N, K, at, bw, a.data(), b.data(), c.data(), 1);
  const int64_t reps = std::max<int64_t>(1, static_cast<int64_t>(min_s / std::max(one, 1e-7)));
  std::vector<double> ts;
  for (int s = 0; s < samples; ++s)
    ts.push_back(ptc_bench_gemm(M, N, K, at, bw, a.data(), b.data(), c.data(), reps) / reps);
  std::sort(ts.begin(), ts.end());
  const double med = ts[ts.size() / 2];
  std::printf("%lld %lld %lld %d %d %.9g %.3f\n", static_cast<long long>(M),
              static_cast<long long>(N), static_cast<long long>(K), at, bw, med,
              2.0 * M * N * K / med * 1e-9);
  return 0;
}
#endif
