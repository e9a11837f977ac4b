// bench_conv — times ptc_rt::conv2d (lib/runtime/cpu/ptc_conv.h), built by scripts/bench_conv.py
// as a shared library loaded next to torch (same OpenMP pool), so that ptc and
// torch.nn.functional.conv2d are timed in alternating samples on the same buffers.
#include <chrono>
#include <cstdint>
#include <cstdlib>

#include "runtime/cpu/ptc_conv.h"
#include "runtime/cpu/ptc_winograd.h"

// x: [N, C, H, W], w: [O, C/groups, KH, KW], bias: [O] or nullptr, y: [N, O, OH, OW]; all
// contiguous. p: N C H W O KH KW sh sw ph pw dh dw groups. Returns the elapsed seconds.
extern "C" double ptc_bench_conv(const int64_t* p, const float* x, const float* w,
                                 const float* bias, float* y, int64_t reps) {
  ptc_rt::Conv2dArgs a{};
  a.N = p[0]; a.C = p[1]; a.H = p[2]; a.W = p[3]; a.O = p[4]; a.KH = p[5]; a.KW = p[6];
  a.sh = p[7]; a.sw = p[8]; a.ph = p[9]; a.pw = p[10]; a.dh = p[11]; a.dw = p[12]; a.groups = p[13];
  a.OH = (a.H + 2 * a.ph - a.dh * (a.KH - 1) - 1) / a.sh + 1;
  a.OW = (a.W + 2 * a.pw - a.dw * (a.KW - 1) - 1) / a.sw + 1;
  a.x = x;
  a.xs[3] = 1; a.xs[2] = a.W; a.xs[1] = a.H * a.W; a.xs[0] = a.C * a.H * a.W;
  a.w = w;
  a.ws[3] = 1; a.ws[2] = a.KW; a.ws[1] = a.KH * a.KW; a.ws[0] = (a.C / a.groups) * a.KH * a.KW;
  a.bias = bias;
  a.bias_stride = 1;
  a.y = y;
  // as in a model: constant weights are prepared when it is opened (not timed)
  const bool wino = ptc_rt::winograd_detail::applies(a) && !std::getenv("PTC_NO_WINOGRAD");
  float* U = wino ? ptc_rt::winograd_detail::prepare_weights(a) : nullptr;
  const auto t = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < reps; ++r) {
    if (wino)
      ptc_rt::conv2d_winograd(a, U);
    else
      ptc_rt::conv2d(a);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  std::free(U);
  return s;
}
