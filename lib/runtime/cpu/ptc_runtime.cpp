// ptc_runtime.cpp — the translation unit of a generated CPU library that compiles the GEMM
// (ptc_gemm.h) behind ptc_rt.h's non-template entry points. Convolution and attention have
// translation units of their own (ptc_runtime_conv.cpp, ptc_runtime_attention.cpp), built only
// into libraries that use them and in parallel with this one.
#include "ptc_gemm.h"
#include "ptc_rt.h"

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

}  // namespace ptc_rt
