// ptc_train_cuda.cuh — a CUDA training library's memory and loops (see ptc_train.h): device
// memory from the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync: saved activations
// come and go every step, and cudaFree would wait for the whole device) and grid-stride kernels,
// all on the per-thread default stream, which the parts' ptc_run calls use too; each call waits
// for its work, as ptc_run does. Included by the generated model.cu before ptc_train.h.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "ptc_cuda_rt.h"
#include "ptc_train_math.h"

namespace ptc_train::dev {

inline cudaError_t& last() {
  static thread_local cudaError_t e = cudaSuccess;
  return e;
}
inline bool ok(cudaError_t e) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    last() = e;
    return false;
  }
  return true;
}
inline const char* error() { return cudaGetErrorString(last()); }

// All of it comes from one pool that keeps freed memory (the device's default pool would hand
// it back at each step's synchronization and map it again in the next step).
inline cudaMemPool_t pool() {
  static cudaMemPool_t p = [] {
    cudaMemPool_t q = nullptr;
    if (ptc_cuda::pool_create(&q) != cudaSuccess) cudaGetLastError();  // (then the default pool)
    return q;
  }();
  return p;
}
inline void* take(size_t bytes);
inline void* alloc(size_t bytes) {
  void* p = take(bytes);
  if (!p) return nullptr;
  if (!ok(cudaMemsetAsync(p, 0, bytes, cudaStreamPerThread))) {
    cudaFreeAsync(p, cudaStreamPerThread);
    return nullptr;
  }
  return p;
}
inline void release(void* p) {
  if (p) cudaFreeAsync(p, cudaStreamPerThread);
}
// Saved activations: the forward writes all of them, so they are not filled; freed memory goes
// back to the stream-ordered allocator's pool, which keeps it for the next step.
inline void* take(size_t bytes) {
  void* p = nullptr;
  return ok(ptc_cuda::pool_alloc(&p, bytes ? bytes : 1, pool(), cudaStreamPerThread)) ? p : nullptr;
}
inline void give(void* p, size_t) { release(p); }
inline void trim() {  // when a model closes
  if (pool() && cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess) cudaMemPoolTrimTo(pool(), 0);
}
// Whether the caller's `p` is memory kernels can read (a host pointer would fault inside one).
inline bool device_memory(const void* p) {
  bool device = false;
  return ptc_cuda::device_memory(p, &device) == cudaSuccess && device;
}
inline const char* memory_kind() { return "CUDA device memory (this is a CUDA library)"; }
// (From pageable host memory the copy is staged before the call returns: `host` may go away.)
inline bool upload(void* dst, const void* host, size_t bytes) {
  return ok(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
}
inline bool zero(void* p, size_t bytes) {
  return ok(cudaMemsetAsync(p, 0, bytes, cudaStreamPerThread)) && ok(cudaStreamSynchronize(cudaStreamPerThread));
}

__global__ void add_kernel(float* a, const float* b, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    a[i] += b[i];
}
__global__ void sgd_kernel(SgdArgs a) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    sgd_element(a, i);
}
__global__ void adamw_kernel(AdamArgs a) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    adamw_element(a, i);
}

__global__ void unscale_kernel(float* g, int64_t n, float inv_scale, int* found_inf) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = g[i] * inv_scale;
    if (!(v - v == 0.f)) *found_inf = 1;  // inf - inf and NaN - NaN are NaN
    g[i] = v;
  }
}

inline unsigned blocks(int64_t n) {
  int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 1 ? 1 : b > 65535 ? 65535 : b);
}
inline bool finish() { return ok(cudaGetLastError()) && ok(cudaStreamSynchronize(cudaStreamPerThread)); }

inline bool add(float* a, const float* b, int64_t n) {
  add_kernel<<<blocks(n), 256, 0, cudaStreamPerThread>>>(a, b, n);
  return finish();
}
inline bool sgd(const SgdArgs& a) {
  sgd_kernel<<<blocks(a.n), 256, 0, cudaStreamPerThread>>>(a);
  return finish();
}
inline bool unscale(float* g, int64_t n, float inv_scale, bool* found_inf) {
  int* flag = nullptr;
  if (!ok(cudaMallocAsync(reinterpret_cast<void**>(&flag), sizeof(int), cudaStreamPerThread))) return false;
  int host = 0;
  bool good = ok(cudaMemsetAsync(flag, 0, sizeof(int), cudaStreamPerThread));
  if (good) {
    unscale_kernel<<<blocks(n), 256, 0, cudaStreamPerThread>>>(g, n, inv_scale, flag);
    good = ok(cudaGetLastError()) && ok(cudaMemcpyAsync(&host, flag, sizeof(int), cudaMemcpyDeviceToHost, cudaStreamPerThread));
  }
  cudaFreeAsync(flag, cudaStreamPerThread);
  good = good && finish();
  *found_inf = host != 0;
  return good;
}
inline bool adamw(const AdamArgs& a) {
  adamw_kernel<<<blocks(a.n), 256, 0, cudaStreamPerThread>>>(a);
  return finish();
}

}  // namespace ptc_train::dev
