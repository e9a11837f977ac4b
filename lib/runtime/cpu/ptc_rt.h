// ptc_rt.h — the compiled-once part of a generated CPU library's runtime, as its kernels see it:
// plain structs and non-template functions. They are defined in ptc_runtime*.cpp, translation
// units of their own, so the GEMM, convolution and attention code is compiled once per library (whatever the
// number of GEMMs and epilogues) and in parallel with the kernels. C++17, no dependencies.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace ptc_rt {

struct GemmArgs {
  int64_t M, N, K;
  const float* A;
  int64_t lda_m, lda_k;  // A[m, k] = A[m * lda_m + k * lda_k]
  const float* B;
  int64_t ldb_k, ldb_n;  // B[k, n] = B[k * ldb_k + n * ldb_n]   (weight W[N,K]: ldb_k=1, ldb_n=K)
  float* C;
  int64_t ldc_m;  // C[m, n] = C[m * ldc_m + n]
  float alpha = 1.f;
  float beta = 0.f;
  // Optional: B already packed by gemm_pack_b (e.g. a constant weight, packed once at model
  // load). When set, B / ldb_* are ignored, and gemm_batched's B offsets apply to B_packed.
  const float* B_packed = nullptr;
  // Optional: A already packed (gemm_detail::packed_a_index gives the layout). When set, A /
  // lda_* are ignored; only the serial gemm_block reads it (batch offsets do not apply).
  const float* A_packed = nullptr;
};


// Non-owning references to a kernel's lambdas (they must outlive the call).
//   offsets(batch, &oa, &ob, &oc): element offsets of A, B and C for problem `batch`
//   epilogue(c, batch, row, col0, ncols): the final ncols floats of C[row, col0...] of `batch`
struct GemmOffsets {
  const void* obj = nullptr;
  void (*fn)(const void*, int64_t, int64_t*, int64_t*, int64_t*) = nullptr;  // nullptr: all zero
};
struct GemmEpilogue {
  const void* obj = nullptr;
  void (*fn)(const void*, float*, int64_t, int64_t, int64_t, int64_t) = nullptr;  // nullptr: none
};
// Fused attention (ptc_attention.h): q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv] and the
// mask [B, H, Tq, Tk] with element strides (0 broadcasts); o [B, H, Tq, Dv] contiguous, or stored
// [B, Tq, H, Dv] (o_heads_inner) or [Tq, B, H, Dv] (o_time_outer). q, k, v and o are float
// buffers, or bfloat16 ones where bf16_io holds; a float mask is always float.
enum { kMaskNone = 0, kMaskKeep = 1, kMaskDrop = 2, kMaskAdd = 3 };  // bool: keep / drop where true; float: added
struct AttentionArgs {
  const void* q; int64_t qs[4];
  const void* k; int64_t ks[4];
  const void* v; int64_t vs[4];
  const void* mask = nullptr; int64_t ms[4] = {0, 0, 0, 0};
  int mask_kind = kMaskNone;
  void* o;
  int64_t B, H, Tq, Tk, D, Dv;
  float scale;
  bool causal = false;
  bool masked_rows_zero = false;  // a row with every key masked: zeros (SDPA) or NaN (fused MHA)
  int64_t kv_group = 1;           // grouped-query attention: head h reads k / v head h / kv_group
  bool o_heads_inner = false, o_time_outer = false;
  // q, k and v hold bf16 values (--precision bf16): on AMX CPUs the products run on bf16 tiles,
  // P rounded to bf16 as torch's CPU flash attention does (ptc_attention.h's attention_amx).
  bool bf16_values = false;
  // q, k, v and o are bfloat16 buffers (--precision bf16; implies bf16_values): AMX CPUs read and
  // write them as they are, other CPUs widen the operands, compute in float32 and round o once.
  bool bf16_io = false;
};
void attention_call(const AttentionArgs& a);

struct Conv2dArgs {
  const float* x; int64_t xs[4];  // input [N, C, H, W] with strides
  const float* w; int64_t ws[4];  // weight [O, C/groups, KH, KW] with strides
  const float* bias; int64_t bias_stride;  // nullptr: none
  float* y;                       // output [N, O, OH, OW], contiguous
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  // Optional, after the bias: epilogue(y + ..., image, channel, p0, count) on `count` final
  // outputs of row `channel` of `image` from flat position p0 = oh * OW + ow.
  GemmEpilogue ep;
  // Optional: conv2d_prepare's result for this weight (nullptr: transformed per call if needed).
  const void* prepared = nullptr;
};

template <class F>
GemmOffsets offsets_ref(const F& f) {
  return {&f, [](const void* o, int64_t b, int64_t* oa, int64_t* ob, int64_t* oc) { (*static_cast<const F*>(o))(b, oa, ob, oc); }};
}
template <class F>
GemmEpilogue epilogue_ref(const F& f) {
  return {&f, [](const void* o, float* c, int64_t b, int64_t row, int64_t col0, int64_t n) { (*static_cast<const F*>(o))(c, b, row, col0, n); }};
}

// `batch` GEMMs (ptc_gemm.h) with per-problem offsets and a fused epilogue. False only when a
// thread's packing buffer could not be allocated.
bool gemm_call(const GemmArgs& g, int64_t batch, GemmOffsets offsets, GemmEpilogue epilogue);
// A 2-D convolution: Winograd F(2x2, 3x3) for 3x3 stride-1 ones with enough tiles
// (ptc_winograd.h), else an implicit GEMM when the weight's (C, KH, KW) flatten, else direct
// (ptc_conv.h).
void conv2d_call(const Conv2dArgs& a);
// Prepares a constant weight once (when the model is opened): the Winograd-transformed weights
// of a 3x3 stride-1 convolution; nullptr when nothing is worth preparing (or out of memory).
// Reads only the weight-side fields (w, ws, C, O, KH, KW, strides, padding, dilation, groups).
void* conv2d_prepare(const Conv2dArgs& a);
// The weight gradient dw [O, C/groups, KH, KW] (contiguous) of the convolution `a` describes
// (its input x and geometry; w is not read) for the output gradient dyg laid out [groups,
// O/groups, N, OH, OW] (contiguous): per group one implicit GEMM over every image's positions.
void conv2d_weight_grad_call(const Conv2dArgs& a, const float* dyg, float* dw);
// A depthwise convolution's input gradient: a.x / a.xs are dy [N, C, OH, OW] (ptc_conv.h).
void conv2d_depthwise_input_grad_call(const Conv2dArgs& a);
// An ungrouped convolution's weight gradient from dy [N, O, OH, OW] contiguous (ptc_conv.h).
void conv2d_weight_grad_nchw_call(const Conv2dArgs& a, const float* dy, float* dw);
inline void prepared_free(void* p) { std::free(p); }

// A forward convolution over NHWC activations on oneDNN (ptc_runtime_onednn.cpp; the CPU's
// channels-last layout). x [N, C, H, W] and w [O, C/groups, KH, KW] with element strides (x
// NHWC: C fastest; w KRSC or KCRS), y [N, OH, OW, O] contiguous; then y = act(y + bias[o] +
// residual) with the bias [O] and the residual (laid out as y) each optional. The tensors are
// float32, or with bf16_io all bfloat16 (ptc_rt::bfloat16).
enum { kConvActNone = 0, kConvActRelu = 1, kConvActRelu6 = 2 };
struct ConvNhwcArgs {
  const void* x; int64_t xs[4];
  const void* w; int64_t ws[4];
  const void* bias = nullptr;
  const void* residual = nullptr;
  int act = kConvActNone;
  void* y;
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  bool weight_constant = false;  // w is a model weight: its copy in oneDNN's layout is kept
  // x and w hold bfloat16 values (--precision bf16: autocast rounded them): the convolution may
  // run on bf16 operands with fp32 accumulation, the same arithmetic. It does where the CPU has
  // AMX (or PTC_CPU_BF16=1 asks for it; PTC_CPU_BF16=0 never): conv2d_nhwc_bf16().
  bool bf16_values = false;
  // Every tensor is stored in bfloat16 (--precision bf16 where the backend keeps convolutions in
  // bf16). The accumulator is float32 and y rounds once, after the epilogue. Where
  // conv2d_nhwc_bf16() is false the call converts to float32 and runs the float32 primitive.
  bool bf16_io = false;
};
// Whether bf16_values convolutions (where the CPU has AMX) and products (AVX512-BF16 or AMX) run
// in bf16 in this process (decided once; PTC_CPU_BF16=1 / 0 forces both).
bool conv2d_nhwc_bf16();
bool matmul_bf16();
// A call site's state (its primitives per input shape), made when the model is opened.
void* conv2d_nhwc_prepare();
void conv2d_nhwc_release(void* site);
// nullptr, or what went wrong (one sentence).
const char* conv2d_nhwc_call(void* site, const ConvNhwcArgs& a);

// A linear layer's product on oneDNN's matmul (ptc_runtime_onednn.cpp; LowerOptions::library_gemm):
// y[m, n] = act(sum_k a[m, k] w[k, n] + bias[n] + residual[m, n]) with a and w given by element
// strides, y [M, N] contiguous, the bias [N] and the residual (laid out as y) each optional. The
// weight's copy in oneDNN's blocked layout is made once per call site when it is a constant.
enum { kMatmulActNone = 0, kMatmulActRelu = 1, kMatmulActGelu = 2, kMatmulActGeluTanh = 3, kMatmulActSilu = 4 };
struct MatmulArgs {
  int64_t M, N, K;
  const void* a; int64_t lda_m, lda_k;
  const void* w; int64_t ldw_k, ldw_n;
  const void* bias = nullptr;
  const void* residual = nullptr;
  int act = kMatmulActNone;
  void* y;
  bool weight_constant = false;
  // a and w hold bfloat16 values (--precision bf16): with a constant weight, the product may run
  // on bf16 operands with fp32 accumulation (matmul_bf16()), as ConvNhwcArgs::bf16_values.
  bool bf16_values = false;
  // The tensors are stored in bfloat16 (a linear layer the backend keeps in bf16; the weight a
  // constant): y rounds once, after the bias, residual and act; y_f32: y is float32 instead (no
  // bias or residual then). Any size runs here (no ptc GEMM fallback); where matmul_bf16() is
  // false the call widens the operands and runs the float32 primitive.
  bool bf16_io = false;
  bool y_f32 = false;
  // Optional, after the bias, residual and act: ep(y + m N, 0, m, 0, N) on each row m, in place
  // (a fused pointwise step that oneDNN's post-ops cannot express, such as autocast's roundings).
  GemmEpilogue ep;
};
// Whether a product of this size runs on oneDNN (else the generated code calls ptc's own GEMM):
// not below 2^18 multiply-adds or at M < 3, where oneDNN's per-call cost (a stream, memory
// objects) outweighs its faster kernel. PTC_CPU_ONEDNN_MATMUL=1 / 0 forces either (decided once).
bool matmul_runs(int64_t M, int64_t N, int64_t K);
// A call site's state (its primitives per M and operand strides), made when the model is opened.
void* matmul_prepare();
void matmul_release(void* site);
// nullptr, or what went wrong (one sentence).
const char* matmul_call(void* site, const MatmulArgs& a);

// Max pooling's input gradient (ptc_pool.h): dx y [N, C, H, W] (contiguous) gets each window's dy
// [N, C, OH, OW] at the window's first maximum of x [N, C, H, W] (the first NaN, if any); x and
// dy with element strides. Optional: ep on each final dx row (p0 = ih W, W elements), as
// Conv2dArgs'. groups is unused.
struct MaxPoolGradArgs {
  const float* x; int64_t xs[4];
  const float* dy; int64_t dys[4];
  float* y;
  int64_t N, C, H, W, OH, OW, KH, KW;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  GemmEpilogue ep;
};
void max_pool2d_backward_call(const MaxPoolGradArgs& a);

}  // namespace ptc_rt
