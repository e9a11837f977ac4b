// ptc_cuda.cuh — device helpers for the CUDA code that `ptc compile --device cuda` generates.
#pragma once

#include <cstdint>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace ptc_cuda {

// Grid for a grid-stride loop over `total` items with `block` threads per block.
inline unsigned grid_for(int64_t total, int block) {
  const int64_t b = (total + block - 1) / block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b));
}

// One element of a buffer, where a generated kernel reads it under a `where` branch: through
// the read-only cache (__ldg) for a const (read-only, __restrict__) buffer, as a plain load for
// one the kernel may write. Spelling the two apart keeps nvcc from folding `c ? p[i] : q[j]` into
// one non-coherent load from a selected address (which read q stale after this kernel wrote it).
template <typename T>
__device__ __forceinline__ T ldg(T* p) {
  return *p;
}
template <typename T>
__device__ __forceinline__ T ldg(const T* p) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "ldg: an element of 1, 2, 4 or 8 bytes");
  T v;
  if constexpr (sizeof(T) == 1) {
    const unsigned char u = __ldg(reinterpret_cast<const unsigned char*>(p));
    memcpy(&v, &u, 1);
  } else if constexpr (sizeof(T) == 2) {
    const unsigned short u = __ldg(reinterpret_cast<const unsigned short*>(p));
    memcpy(&v, &u, 2);
  } else if constexpr (sizeof(T) == 4) {
    const unsigned int u = __ldg(reinterpret_cast<const unsigned int*>(p));
    memcpy(&v, &u, 4);
  } else {
    const unsigned long long u = __ldg(reinterpret_cast<const unsigned long long*>(p));
    memcpy(&v, &u, 8);
  }
  return v;
}

// Four consecutive elements, read as float / written from float in one access: 16 bytes of
// float32, 8 of float16 or bfloat16 (the vectorized pointwise kernels; p aligned to that size).
// A store rounds to nearest even, as a scalar store of the element type does.
__device__ inline float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline float4 load4(const __nv_bfloat16* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ inline float4 load4(const __half* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
__device__ inline void store4(float* p, float a, float b, float c, float d) { *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d); }
__device__ inline void store4(__nv_bfloat16* p, float a, float b, float c, float d) {
  uint2 u;
  *reinterpret_cast<__nv_bfloat162*>(&u.x) = __floats2bfloat162_rn(a, b);
  *reinterpret_cast<__nv_bfloat162*>(&u.y) = __floats2bfloat162_rn(c, d);
  *reinterpret_cast<uint2*>(p) = u;
}
__device__ inline void store4(__half* p, float a, float b, float c, float d) {
  uint2 u;
  *reinterpret_cast<__half2*>(&u.x) = __floats2half2_rn(a, b);
  *reinterpret_cast<__half2*>(&u.y) = __floats2half2_rn(c, d);
  *reinterpret_cast<uint2*>(p) = u;
}

// Reduces `v` over the warp with `f` (associative); every lane gets the result. Every lane of the
// warp must call it.
template <class T, class F>
__device__ T warp_reduce(T v, F f) {
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduces `v` over the block with `f` (associative); every thread gets the result. `smem` holds
// 32 values; blockDim.x must be a multiple of 32, and every thread of the block must call it.
template <class T, class F>
__device__ T block_reduce(T v, F f, T* smem) {
  v = warp_reduce(v, f);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // smem may still be read from the previous reduction
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T r = smem[0];
    for (int w = 1; w < warps; ++w) r = f(r, smem[w]);
    smem[0] = r;
  }
  __syncthreads();
  return smem[0];
}

}  // namespace ptc_cuda
