// ptc_philox.h — the counter-based random numbers of training-mode dropout (Philox-4x32-10,
// Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011). Element `counter` of
// stream `stream` under `key` is a pure function of the three, so the forward and a backward that
// recomputes a dropout mask draw the same numbers, in any order, on any thread, on the CPU and on
// a GPU. Included by ptc_support.h (generated code) and by ptc's loop interpreter.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define PTC_PHILOX_HD __host__ __device__
#else
#define PTC_PHILOX_HD
#endif

namespace ptc_rt {

// A float in [0, 1) with 24 random bits: the first output word of Philox-4x32-10 on the counter
// (counter low, counter high, stream, 0) with the 64-bit key.
PTC_PHILOX_HD inline float philox_uniform(uint64_t key, uint64_t counter, uint32_t stream) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = stream, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return static_cast<float>(c0 >> 8) * (1.0f / 16777216.0f);
}

}  // namespace ptc_rt
