// ptc_vec.h — a small portable SIMD vector of floats for generated CPU kernels.
//
// Built on the GCC/Clang vector extension `__attribute__((vector_size(N)))`: the compiler maps
// it to the widest registers the target has (AVX-512: 16 lanes, AVX/AVX2: 8 lanes, SSE/NEON: 4
// lanes) and lowers it to scalar code on targets without SIMD. No intrinsics headers, no
// target-specific builtins. Only the C++17 standard library is needed.
//
// Embedded into generated code (see lib/runtime/ in docs/design.md); everything is inline.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

namespace ptc_rt {

// Width of the native float vector in bytes, from what the compiler targets.
#if defined(PTC_VEC_BYTES)
constexpr int kVecBytes = PTC_VEC_BYTES;
#elif defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else  // SSE2, NEON, AltiVec, or generic (lowered to scalars by the compiler)
constexpr int kVecBytes = 16;
#endif

constexpr int kVecWidth = kVecBytes / static_cast<int>(sizeof(float));  // float lanes

typedef float vfloat __attribute__((vector_size(kVecBytes)));
typedef int32_t vint __attribute__((vector_size(kVecBytes)));

// Unaligned load/store (memcpy compiles to one vector move; no strict-aliasing questions).
inline vfloat vload(const float* p) {
  vfloat v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void vstore(float* p, vfloat v) { std::memcpy(p, &v, sizeof v); }

// Partial load/store of the first n (< kVecWidth) lanes; the other lanes load as 0.
inline vfloat vload_partial(const float* p, int n) {
  vfloat v = vfloat{};
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
inline void vstore_partial(float* p, vfloat v, int n) {
  for (int i = 0; i < n; ++i) p[i] = v[i];
}

inline vfloat vsplat(float x) { return vfloat{} + x; }
inline vfloat vzero() { return vfloat{}; }

// a*b + c. Whether this becomes one fused instruction depends on the compiler's
// floating-point contraction setting; the GEMM kernel enables it locally where it matters.
inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return a * b + c; }

inline vfloat vmax(vfloat a, vfloat b) { return a > b ? a : b; }
inline vfloat vmin(vfloat a, vfloat b) { return a < b ? a : b; }

inline float vreduce_add(vfloat v) {
  float s = 0.f;
  for (int i = 0; i < kVecWidth; ++i) s += v[i];
  return s;
}
inline float vreduce_max(vfloat v) {
  float s = v[0];
  for (int i = 1; i < kVecWidth; ++i) s = v[i] > s ? v[i] : s;
  return s;
}

// ---- in-register transpose of a kVecWidth x kVecWidth block ----------------------------------
// r[i] holds row i; afterwards r[j] holds column j. log2(kVecWidth) stages of two-input
// shuffles (AVX-512: vpermt2ps/vshufps; AVX: vunpck/vperm2f128; NEON: zip/trn).
namespace vec_detail {
template <int H, int... I>
inline void transpose_stage(vfloat* r, std::integer_sequence<int, I...>) {
  for (int i = 0; i < kVecWidth; ++i) {
    if (i & H) continue;
    const vfloat a = r[i], b = r[i + H];
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
    r[i] = __builtin_shufflevector(a, b, ((I % (2 * H)) < H ? I : I - H + kVecWidth)...);
    r[i + H] = __builtin_shufflevector(a, b, ((I % (2 * H)) < H ? I + H : I + kVecWidth)...);
#else
    r[i] = __builtin_shuffle(a, b, vint{((I % (2 * H)) < H ? I : I - H + kVecWidth)...});
    r[i + H] = __builtin_shuffle(a, b, vint{((I % (2 * H)) < H ? I + H : I + kVecWidth)...});
#endif
  }
}
template <int H>
inline void transpose_stages(vfloat* r) {
  transpose_stage<H>(r, std::make_integer_sequence<int, kVecWidth>{});
  if constexpr (2 * H < kVecWidth) transpose_stages<2 * H>(r);
}
}  // namespace vec_detail

inline void vtranspose(vfloat (&r)[kVecWidth]) { vec_detail::transpose_stages<1>(r); }

}  // namespace ptc_rt
