// Trains the regressor of export.py from C++ with nothing but the library `ptc compile --train`
// wrote and its header: synthetic data y = sin(x . a), AdamW, the loss printed as it goes down.
//
//   ptc compile train_mlp.pt2 -o train_mlp.so --train
//   c++ -O2 train.cpp -I. -L. -l:train_mlp.so -Wl,-rpath,'$ORIGIN' -o train && ./train
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "train_mlp.h"

int main() {
  ptc_model* m = nullptr;
  if (ptc_open(nullptr, &m) != PTC_OK) {
    std::fprintf(stderr, "ptc_open: %s\n", ptc_last_error());
    return 1;
  }
  std::printf("%d parameters tensors:", ptc_num_params(m));
  for (int i = 0; i < ptc_num_params(m); ++i) {
    ptc_tensor_info info;
    ptc_param_info(m, i, &info);
    std::printf(" %s", info.name);
  }
  std::printf("\n");

  const int B = 64, D = 8;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  std::vector<float> a(D);
  for (float& v : a) v = normal(rng) * 0.5f;
  std::vector<float> x(B * D), y(B);
  int64_t xs[] = {B, D}, ys[] = {B, 1};
  float loss = 0, one = 1;
  ptc_tensor in[] = {{x.data(), PTC_FLOAT32, 2, xs}, {y.data(), PTC_FLOAT32, 2, ys}};
  ptc_tensor out = {&loss, PTC_FLOAT32, 0, nullptr};
  ptc_tensor dloss = {&one, PTC_FLOAT32, 0, nullptr};

  float first = 0, last = 0;
  for (int step = 0; step <= 300; ++step) {
    for (int b = 0; b < B; ++b) {  // a fresh batch of y = sin(x . a)
      float dot = 0;
      for (int d = 0; d < D; ++d) dot += (x[b * D + d] = normal(rng)) * a[d];
      y[b] = std::sin(dot);
    }
    ptc_saved* saved = nullptr;
    if (ptc_zero_grad(m) != PTC_OK || ptc_forward_train(m, 2, in, 1, &out, &saved) != PTC_OK ||
        ptc_backward(m, saved, 1, &dloss, 0, nullptr) != PTC_OK ||
        ptc_adamw_step(m, 3e-3f, 0.9f, 0.999f, 1e-8f, 0.01f) != PTC_OK) {
      std::fprintf(stderr, "step %d: %s\n", step, ptc_last_error());
      return 1;
    }
    ptc_saved_free(saved);
    if (step == 0) first = loss;
    last = loss;
    if (step % 50 == 0) std::printf("step %3d  loss %.4f\n", step, loss);
  }
  ptc_close(m);
  std::printf("loss %.4f -> %.4f\n", first, last);
  return last < first / 4 ? 0 : 1;  // the test's criterion: the loss went down by 4x at least
}
