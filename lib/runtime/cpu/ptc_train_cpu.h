// ptc_train_cpu.h — a CPU training library's memory and loops (see ptc_train.h): host memory,
// 64-byte aligned, and OpenMP loops. Included by the generated model.cpp before ptc_train.h.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "ptc_train_math.h"

namespace ptc_train::dev {

inline void* alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (p) std::memset(p, 0, bytes);
  return p;
}
inline void release(void* p) { std::free(p); }

// Saved activations come and go every step with the same sizes: freed ones are kept (up to
// kKeep bytes) for the next forward call, as the CUDA side's stream-ordered allocator does. Fresh
// memory would cost a page fault and the kernel's zeroing per page on every step.
struct Pool {
  static constexpr size_t kKeep = size_t(16) << 30;
  std::mutex mu;
  std::multimap<size_t, void*> blocks;  // by rounded size
  size_t bytes = 0;
  ~Pool() {
    for (auto& [n, p] : blocks) std::free(p);
  }
};
inline Pool& pool() {
  static Pool p;
  return p;
}
inline size_t rounded(size_t bytes) { return (bytes + 63) / 64 * 64 + 64; }
inline void* take(size_t bytes) {
  const size_t n = rounded(bytes);
  {
    std::lock_guard<std::mutex> lock(pool().mu);
    auto it = pool().blocks.find(n);
    if (it != pool().blocks.end()) {
      void* p = it->second;
      pool().blocks.erase(it);
      pool().bytes -= n;
      return p;
    }
  }
  return std::aligned_alloc(64, n);
}
inline void give(void* p, size_t bytes) {
  if (!p) return;
  const size_t n = rounded(bytes);
  {
    std::lock_guard<std::mutex> lock(pool().mu);
    if (pool().bytes + n <= Pool::kKeep) {
      pool().blocks.emplace(n, p);
      pool().bytes += n;
      return;
    }
  }
  std::free(p);
}
inline void trim() {  // when a model closes
  std::lock_guard<std::mutex> lock(pool().mu);
  for (auto& [n, p] : pool().blocks) std::free(p);
  pool().blocks.clear();
  pool().bytes = 0;
}
inline bool device_memory(const void*) { return true; }
inline const char* memory_kind() { return "host memory"; }
inline bool upload(void* dst, const void* host, size_t bytes) {
  std::memcpy(dst, host, bytes);
  return true;
}
inline bool zero(void* p, size_t bytes) {
  std::memset(p, 0, bytes);
  return true;
}
inline bool add(float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  return true;
}
inline bool sgd(const SgdArgs& a) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < a.n; ++i) sgd_element(a, i);
  return true;
}
inline bool unscale(float* g, int64_t n, float inv_scale, bool* found_inf) {
  int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) {
    const float v = g[i] * inv_scale;
    bad |= !(v - v == 0.f);  // inf - inf and NaN - NaN are NaN
    g[i] = v;
  }
  *found_inf = bad != 0;
  return true;
}
inline bool adamw(const AdamArgs& a) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < a.n; ++i) adamw_element(a, i);
  return true;
}
inline const char* error() { return "out of host memory"; }

}  // namespace ptc_train::dev
