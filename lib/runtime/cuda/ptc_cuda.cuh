// ptc_cuda.cuh — device helpers for the CUDA code that `ptc compile --device cuda` generates.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace ptc_cuda {

// Grid for a grid-stride loop over `total` items with `block` threads per block.
inline unsigned grid_for(int64_t total, int block) {
  const int64_t b = (total + block - 1) / block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b));
}

// Reduces `v` over the block with `f` (associative); every thread gets the result. `smem` holds
// 32 values; blockDim.x must be a multiple of 32, and every thread of the block must call it.
template <class T, class F>
__device__ T block_reduce(T v, F f, T* smem) {
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
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
