// ptc_train_cpu.h — a CPU training library's memory and loops (see ptc_train.h): host memory,
// 64-byte aligned, and OpenMP loops. Included by the generated model.cpp before ptc_train.h.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ptc_train_math.h"

namespace ptc_train::dev {

inline void* alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  if (p) std::memset(p, 0, bytes);
  return p;
}
inline void release(void* p) { std::free(p); }
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
inline bool adamw(const AdamArgs& a) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < a.n; ++i) adamw_element(a, i);
  return true;
}
inline const char* error() { return "out of host memory"; }

}  // namespace ptc_train::dev
