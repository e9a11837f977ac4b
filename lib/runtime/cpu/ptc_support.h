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

#include "ptc_half.h"
#include "ptc_philox.h"

#ifdef _OPENMP
#include <omp.h>
#endif

// Compiled by nvcc for CUDA libraries too: the element helpers are host and device functions.
#ifdef __CUDACC__
#define PTC_HD __host__ __device__
#else
#define PTC_HD
#endif

namespace ptc_rt {

// Python floor division and modulo on integers.
PTC_HD inline int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
PTC_HD inline int64_t pymod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <class T> PTC_HD inline T fmod_py(T a, T b) { return a - b * std::floor(a / b); }

// A data-dependent index (Op::CheckIndex: embedding ids, gather / index_select / advanced
// indexing indices): `i` when 0 <= i < n, else 0 — a row that exists, so nothing reads outside
// its buffer. CUDA kernels stop there (the bad index reads row 0; not reported yet).
PTC_HD inline int64_t index_in_range(int64_t i, int64_t n) {
  return static_cast<uint64_t>(i) < static_cast<uint64_t>(n) ? i : 0;
}

// An integer that saturates instead of overflowing: the wrappers evaluate every tensor's size
// expression with it to refuse sizes whose products would overflow int64. A value beyond +-2^62
// becomes "huge" (kMax) and stays huge through every operation (but a product with 0), so that
// no difference of two huge terms can look small.
struct SatInt {  // host code (the wrappers; nvcc compiles the CUDA one)
  static constexpr int64_t kMax = int64_t(1) << 62;
  int64_t v;
  SatInt(long long x) : v(clamp(x)) {}  // NOLINT: implicit, so that literals mix in
  static int64_t clamp(__int128 x) { return x >= kMax || x <= -kMax ? kMax : static_cast<int64_t>(x); }
  bool huge() const { return v == kMax; }
  friend SatInt operator+(SatInt a, SatInt b) { return a.huge() || b.huge() ? a.kMax : SatInt(clamp(static_cast<__int128>(a.v) + b.v)); }
  friend SatInt operator-(SatInt a, SatInt b) { return a.huge() || b.huge() ? a.kMax : SatInt(clamp(static_cast<__int128>(a.v) - b.v)); }
  friend SatInt operator*(SatInt a, SatInt b) {
    if (a.v == 0 || b.v == 0) return 0;
    return a.huge() || b.huge() ? a.kMax : SatInt(clamp(static_cast<__int128>(a.v) * b.v));
  }
  friend SatInt operator/(SatInt a, SatInt b) { return a.huge() || b.huge() ? a.kMax : SatInt(b.v ? a.v / b.v : 0); }
  friend SatInt operator%(SatInt a, SatInt b) { return a.huge() || b.huge() ? a.kMax : SatInt(b.v ? a.v % b.v : 0); }
  friend bool operator>(SatInt a, SatInt b) { return a.v > b.v; }
};
inline SatInt floordiv(SatInt a, SatInt b) { return a.huge() || b.huge() ? SatInt::kMax : SatInt(b.v ? floordiv(a.v, b.v) : 0); }
inline SatInt pymod(SatInt a, SatInt b) { return a.huge() || b.huge() ? SatInt::kMax : SatInt(b.v ? pymod(a.v, b.v) : 0); }

#ifndef __CUDACC__
// CPU kernels also record the first bad index of a run, and the run fails with its message.
// One per kernel call, shared by the kernel's OpenMP threads.
class IndexCheck {
 public:
  int64_t operator()(int64_t i, int64_t n, const char* node) {
    if (static_cast<uint64_t>(i) < static_cast<uint64_t>(n)) return i;
    fail(i, n, node);
    return 0;
  }
  // nullptr when every index was in range; else the message (kept per thread until its next run).
  const char* error() const {
    if (!failed_.load(std::memory_order_acquire)) return nullptr;
    thread_local std::string msg;
    msg = std::string("node '") + node_ + "': index " + std::to_string(index_) + " is out of range for a dimension of size " +
          std::to_string(size_);
    return msg.c_str();
  }

 private:
  __attribute__((noinline, cold)) void fail(int64_t i, int64_t n, const char* node) {
    bool expected = false;
    if (!claimed_.compare_exchange_strong(expected, true)) return;  // the first one is reported
    index_ = i, size_ = n, node_ = node;
    failed_.store(true, std::memory_order_release);
  }
  std::atomic<bool> claimed_{false}, failed_{false};
  int64_t index_ = 0, size_ = 0;
  const char* node_ = "";
};
#endif

// float math the compiler can vectorize (straight-line arithmetic, no libm calls), accurate to
// a few ulp (exp) / ~1e-7 absolute (erf, tanh): the generated kernels use them for float32.
PTC_HD inline float exp_f(float x) {
  // NaN becomes 0 here (the result is x itself, below): the exponent must stay a finite int.
  const float xc = x != x ? 0.0f : (x < -87.33654f ? -87.33654f : (x > 88.37626f ? 88.37626f : x));
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float scale = __builtin_bit_cast(float, static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  const float v = y * scale;
  return x != x ? x : (x < -87.33654f ? 0.0f : (x > 88.72283f ? std::numeric_limits<float>::infinity() : v));
}
PTC_HD inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }
PTC_HD inline float tanh_f(float x) {
  const float a = x < 0 ? -x : x;
  const float e = exp_f(-2.0f * (a > 9.0f ? 9.0f : a));
  const float t = (1.0f - e) / (1.0f + e);
  return x != x ? x : (x < 0 ? -t : t);
}
// erf(x) = x * P(x^2) / Q(x^2) on [-4, 4] (|erf| rounds to 1 in float beyond): a rational
// least-squares fit made for ptc (max abs error 4e-7 in float arithmetic, 4e-8 in exact), one
// division and no exp — ~1.5x the throughput of the exp-based Abramowitz-Stegun form.
PTC_HD inline float erf_f(float x) {
  const float xc = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x);  // NaN passes through
  const float t = xc * xc;
  const float p = ((((2.0403252e-06f * t + 2.8156621e-04f) * t + 3.6850938e-03f) * t + 5.2482200e-02f) * t + 1.8871810e-01f) * t + 1.1283792f;
  const float q = ((((3.7824432e-05f * t + 1.1405182e-03f) * t + 1.4804427e-02f) * t + 1.1337284e-01f) * t + 5.0058014e-01f) * t + 1.0f;
  const float y = xc * p / q;
  return y > 1.0f ? 1.0f : (y < -1.0f ? -1.0f : y);
}

// max/min that propagate NaN like torch.maximum / amax.
template <class T> PTC_HD inline T maxnan(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> PTC_HD inline T minnan(T a, T b) { return (a != a || a < b) ? a : b; }
template <class T> PTC_HD inline T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <class T> PTC_HD inline T relu(T x) { return x > T(0) ? x : (x != x ? x : T(0)); }
template <class T> PTC_HD inline T sign(T x) { return T((x > T(0)) - (x < T(0))); }

// Kernel timing for libraries built with --profile.
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
// The first call of each kernel is kept apart: it pays the page faults of fresh memory and cold
// caches, so the table shows the mean over the later calls when there are any.
struct KernelProfile {
  std::atomic<int64_t> ns{0}, calls{0}, first_ns{0};
  void add(int64_t d) {
    if (calls.fetch_add(1) == 0) first_ns = d;
    else ns += d;
  }
  double mean_ms() const {
    const int64_t c = calls;
    return c > 1 ? ns / 1e6 / static_cast<double>(c - 1) : first_ns / 1e6;
  }
};
inline void print_profile(int n, const char* const* names, const KernelProfile* p) {
  double total = 0;
  for (int i = 0; i < n; ++i) total += p[i].calls ? p[i].mean_ms() : 0.0;
  const int64_t calls = p[0].calls;
  std::fprintf(stderr, "ptc profile: %d kernels, %.3f ms per call (%s)\n", n, total,
               calls > 1 ? "the mean over the calls after the first" : "one call");
  for (int i = 0; i < n; ++i)
    if (p[i].calls)
      std::fprintf(stderr, "  %6.1f%%  %9.3f ms  %s\n", total > 0 ? 100.0 * p[i].mean_ms() / total : 0.0, p[i].mean_ms(), names[i]);
}

// The calling thread's last error (ptc_last_error).
inline std::string& last_error() {
  thread_local std::string msg;
  return msg;
}

}  // namespace ptc_rt
