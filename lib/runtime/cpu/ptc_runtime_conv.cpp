// ptc_runtime_conv.cpp — convolutions (ptc_conv.h, ptc_winograd.h) and max pooling's input
// gradient (ptc_pool.h) behind ptc_rt.h's conv2d_call / conv2d_prepare / max_pool2d_backward_call;
// part of a generated CPU library when it has one of them (a Kernel::Kind::Conv kernel).
#include "ptc_conv.h"
#include "ptc_pool.h"
#include "ptc_rt.h"
#include "ptc_winograd.h"

namespace ptc_rt {

void conv2d_call(const Conv2dArgs& a) {
  if (winograd_detail::applies(a) && conv2d_winograd(a, static_cast<const float*>(a.prepared))) return;
  if (a.C == a.groups && a.O == a.groups)
    conv2d_depthwise_any(a);  // any weight strides
  else if (conv_weight_k_stride(a) >= 0)
    conv2d(a);
  else
    conv2d_direct(a);
}

void conv2d_weight_grad_call(const Conv2dArgs& a, const float* dyg, float* dw) {
  const int64_t P = a.OH * a.OW;  // dyg: [O, N, OH, OW] (ungrouped)
  if (winograd_detail::wgrad_applies(a) && conv2d_weight_grad_winograd(a, dyg, P, a.N * P, dw)) return;
  conv2d_weight_grad(a, dyg, dw);
}
void conv2d_depthwise_input_grad_call(const Conv2dArgs& a) { conv2d_depthwise_input_grad(a); }
void conv2d_weight_grad_nchw_call(const Conv2dArgs& a, const float* dy, float* dw) {
  const int64_t P = a.OH * a.OW;  // dy: [N, O, OH, OW]
  if (winograd_detail::wgrad_applies(a) && conv2d_weight_grad_winograd(a, dy, a.O * P, P, dw)) return;
  conv2d_weight_grad_nchw(a, dy, dw);
}
void max_pool2d_backward_call(const MaxPoolGradArgs& a) { max_pool2d_backward(a); }

void* conv2d_prepare(const Conv2dArgs& a) {
  if (!winograd_detail::kernel_applies(a)) return nullptr;
  return winograd_detail::prepare_weights(a);
}

}  // namespace ptc_rt
