// ptc_train_math.h — the per-element arithmetic of a training library's optimizer steps, shared
// by the CPU loops (ptc_train_cpu.h) and the CUDA kernels (ptc_train_cuda.cuh) so that both do
// torch.optim's arithmetic in the same order.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define PTC_TRAIN_HD __host__ __device__
#else
#define PTC_TRAIN_HD
#endif

namespace ptc_train {

struct SgdArgs {
  float* p;
  const float* g;
  float* buf;  // momentum buffers (null without momentum)
  int64_t n;
  float lr, momentum, dampening, weight_decay;
  bool nesterov, first;  // first: the momentum buffer starts as the first step's d
};

struct AdamArgs {
  float* p;
  const float* g;
  float *m, *v;
  int64_t n;
  float step;      // lr / (1 - beta1^t)
  float bc2_sqrt;  // sqrt(1 - beta2^t)
  float decay;     // 1 - lr * weight_decay
  float beta1, beta2, eps;
};

// torch.optim.SGD (foreach or not, the same arithmetic): d = g + wd p; with momentum the buffer
// starts as d and then b = momentum b + (1 - dampening) d; d = nesterov ? d + momentum b : b;
// p -= lr d.
PTC_TRAIN_HD inline void sgd_element(const SgdArgs& a, int64_t i) {
  float d = a.g[i];
  if (a.weight_decay != 0) d = d + a.weight_decay * a.p[i];
  if (a.momentum != 0) {
    float b = a.first ? d : a.momentum * a.buf[i] + (1 - a.dampening) * d;
    a.buf[i] = b;
    d = a.nesterov ? d + a.momentum * b : b;
  }
  a.p[i] = a.p[i] - a.lr * d;
}

// torch.optim.AdamW (amsgrad off): p *= 1 - lr wd; m = lerp(m, g, 1 - beta1); v = beta2 v +
// (1 - beta2) g^2; p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
PTC_TRAIN_HD inline void adamw_element(const AdamArgs& a, int64_t i) {
  float pi = a.p[i] * a.decay;
  float gi = a.g[i];
  float mi = a.m[i] + (1 - a.beta1) * (gi - a.m[i]);
  float vi = a.beta2 * a.v[i] + (1 - a.beta2) * gi * gi;
  a.m[i] = mi;
  a.v[i] = vi;
  a.p[i] = pi - a.step * (mi / (sqrtf(vi) / a.bc2_sqrt + a.eps));
}

}  // namespace ptc_train
