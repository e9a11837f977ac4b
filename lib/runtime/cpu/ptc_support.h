// ptc_support.h — helpers for the C++ that `ptc compile` generates (embedded into ptc and
// written next to the generated sources). C++17 and (optional) OpenMP only.
#pragma once

#include <atomic>
#include <cmath>
#include <ctime>
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

// Kernel timing for libraries built with --profile.
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
struct KernelProfile {
  std::atomic<int64_t> ns{0}, calls{0};
  void add(int64_t d) {
    ns += d;
    calls += 1;
  }
};
inline void print_profile(int n, const char* const* names, const KernelProfile* p) {
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += p[i].ns;
  std::fprintf(stderr, "ptc profile: %d kernels, %.3f ms per call\n", n, p[0].calls ? total / 1e6 / p[0].calls : 0.0);
  for (int i = 0; i < n; ++i)
    if (p[i].calls)
      std::fprintf(stderr, "  %6.1f%%  %9.3f ms  %s\n", total ? 100.0 * p[i].ns / total : 0.0, p[i].ns / 1e6 / p[i].calls, names[i]);
}

// The calling thread's last error (ptc_last_error).
inline std::string& last_error() {
  thread_local std::string msg;
  return msg;
}

}  // namespace ptc_rt
