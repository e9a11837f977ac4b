// ptc_half.h — float16 and bfloat16 as storage types. Generated kernels load them as float,
// compute in float and round to nearest even when they store (what torch's CPU kernels do for
// these dtypes). The bit conversions are also what ptc itself uses when it reads or writes such
// weights at compile time (constant folding, batch-norm folding). C++17, no dependencies; nvcc
// compiles it too, where the tensors use CUDA's own __half / __nv_bfloat16.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__) && !defined(__CUDACC__)
#include <immintrin.h>
#endif
#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#ifdef __CUDACC__
#define PTC_HALF_HD __host__ __device__
#else
#define PTC_HALF_HD
#endif

namespace ptc_rt {

PTC_HALF_HD inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
PTC_HALF_HD inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16, round to nearest even; NaN stays NaN, overflow gives infinity.
PTC_HALF_HD inline uint16_t float_to_half_bits(float f) {
#if defined(__F16C__) && !defined(__CUDACC__)
  return static_cast<uint16_t>(_cvtss_sh(f, 0));
#else
  uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  if (x < 0x38800000u) {  // below 2^-14: a subnormal half (or zero), in units of 2^-24
    const float scaled = bits_float(x) * 16777216.0f;  // exact: a power of two
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(m);
    if (rest > 0.5f || (rest == 0.5f && (m & 1u))) ++m;  // 0x400 is the smallest normal: right too
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t r = x + 0xfffu + ((x >> 13) & 1u) - 0x38000000u;  // round at bit 13, rebias 127 -> 15
  return static_cast<uint16_t>(sign | (r >> 13));
#endif
}

PTC_HALF_HD inline float half_bits_to_float(uint16_t h) {
#if defined(__F16C__) && !defined(__CUDACC__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
#endif
}

// bfloat16: the upper half of a float32, round to nearest even; NaN stays a (quiet) NaN.
PTC_HALF_HD inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
PTC_HALF_HD inline float bfloat16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

#ifndef __CUDACC__
// A float rounded to float16 / bfloat16 and back (what a store and a load of it give), as one
// expression: generated loops vectorize it (a temporary half object in them would not).
inline float round_half(float f) { return half_bits_to_float(float_to_half_bits(f)); }
inline float round_bfloat16(float f) { return bits_float(static_cast<uint32_t>(float_to_bfloat16_bits(f)) << 16); }

// The element types of float16 / bfloat16 buffers in generated CPU code: two bytes, converted
// to and from float implicitly (a load reads float, a store rounds).
struct half {
  uint16_t bits;
  half() = default;
  half(float f) : bits(float_to_half_bits(f)) {}  // NOLINT: implicit, so that stores round
  half& operator=(float f) {  // a store: the bits in place, no temporary
    bits = float_to_half_bits(f);
    return *this;
  }
  operator float() const { return half_bits_to_float(bits); }
};
struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  bfloat16(float f) : bits(float_to_bfloat16_bits(f)) {}  // NOLINT: implicit, so that stores round
  bfloat16& operator=(float f) {
    bits = float_to_bfloat16_bits(f);
    return *this;
  }
  operator float() const { return bfloat16_bits_to_float(bits); }
};
static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2, "two-byte storage types");
#else
using half = __half;
using bfloat16 = __nv_bfloat16;
#endif

}  // namespace ptc_rt
