// ptc_runtime.cpp — the one translation unit of a generated CPU library that compiles the GEMM
// and convolution code (ptc_gemm.h, ptc_conv.h) behind ptc_rt.h's non-template entry points.
#include <cstdlib>

#include "ptc_conv.h"
#include "ptc_gemm.h"
#include "ptc_rt.h"
#include "ptc_winograd.h"

namespace ptc_rt {

bool gemm_call(const GemmArgs& g, int64_t batch, GemmOffsets offsets, GemmEpilogue epilogue) {
  auto off = [&](int64_t b, int64_t* oa, int64_t* ob, int64_t* oc) {
    if (offsets.fn)
      offsets.fn(offsets.obj, b, oa, ob, oc);
    else
      *oa = *ob = *oc = 0;
  };
  auto ep = [&](float* c, int64_t b, int64_t row, int64_t col0, int64_t n) {
    if (epilogue.fn) epilogue.fn(epilogue.obj, c, b, row, col0, n);
  };
  return gemm_detail::gemm_run(g, batch, off, ep, nullptr, 0);
}

void conv2d_call(const Conv2dArgs& a) {
  if (winograd_detail::applies(a) && conv2d_winograd(a, static_cast<const float*>(a.prepared))) return;
  if (a.C == a.groups && a.O == a.groups && a.sh == 1 && a.sw == 1)
    conv2d_depthwise(a);  // any weight strides
  else if (conv_weight_flat(a.ws, a.KH, a.KW))
    conv2d(a);
  else
    conv2d_direct(a);
}

void* conv2d_prepare(const Conv2dArgs& a) {
  if (!winograd_detail::kernel_applies(a)) return nullptr;
  return winograd_detail::prepare_weights(a);
}

void prepared_free(void* p) { std::free(p); }

}  // namespace ptc_rt
