// ptc_runtime_onednn.cpp — forward convolutions over NHWC activations (ptc_rt.h's conv2d_nhwc_*)
// and linear layers' products (matmul_*) on oneDNN; part of a generated CPU library that lays its
// convolutions out channels-last (LowerOptions::channels_last) or runs its linear layers on
// oneDNN (LowerOptions::library_gemm), and the only unit that links libdnnl.
//
// Each call site (a convolution's or a linear layer's kernel) owns a Site, made when the model is
// opened. Per shape it holds one primitive, created on the first call with that shape: the source
// and destination are the caller's buffers as they are, the weights in the layout oneDNN picks
// for the primitive (format `any`), reordered from the model's weight once when the weight is a
// constant (else on every call); primitives that ask for the same layout share that copy. oneDNN
// picks the kernel for the CPU it runs on (AVX2, AVX-512, AMX) when the primitive is created. The
// library's epilogue (bias, residual, activation: sched::LibraryEpilogue) runs as the
// primitive's bias and post-ops on the accumulator.
//
// --precision bf16 (ConvNhwcArgs::bf16_values, MatmulArgs::bf16_values): the operands already
// hold bf16 values, so a primitive on bf16 operands with fp32 accumulation computes what autocast
// does. It is chosen once per process: convolutions where oneDNN finds AMX (conv2d_nhwc_bf16; on
// AVX512-BF16 without AMX its bf16 convolutions measured slower than fp32), products where it
// finds AVX512-BF16 or AMX (matmul_bf16; BERT-base 1x128 on a Zen 4 with AVX512-BF16: 1.37x
// faster than fp32), else fp32; PTC_CPU_BF16=1 / 0 forces either for both (docs/benchmarks.md).
// The source is converted per call (exact: a bf16 value is the upper half of its float), the
// weights once. A convolution whose tensors are stored in bf16 (ConvNhwcArgs::bf16_io) runs on
// them as they are where convolutions run in bf16, else widened per call (conv2d_nhwc_widened).
//
// Threads: oneDNN runs on the same OpenMP runtime as the generated kernels. Several threads may
// run one site at once: the cache is guarded by a mutex, entries are shared and never change
// after creation, and each call brings its own stream, memory objects and scratchpad.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "ptc_amx.h"
#include "ptc_half.h"
#include "ptc_rt.h"
#include "ptc_support.h"

namespace ptc_rt {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// Thread-local float32 scratch of at least n elements, one per `slot`.
float* scratch_f32(int slot, int64_t n) {
  static thread_local std::vector<float> bufs[5];
  std::vector<float>& v = bufs[slot];
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

const uint16_t* bf16_bits(const void* p) { return static_cast<const uint16_t*>(p); }

// n contiguous bf16 values widened into scratch `slot` (exact).
float* widened(int slot, const void* src, int64_t n) {
  float* out = scratch_f32(slot, n);
  const uint16_t* b = bf16_bits(src);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16_bits_to_float(b[i]);
  return out;
}
// n float32 values rounded into bf16 `dst`.
void rounded(void* dst, const float* src, int64_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bfloat16_bits(src[i]);
}
// A bf16 [K, N] matrix (element strides ldk, ldn) widened into dense [K, N] `out` (a weight, or
// a product's A as [M, K]).
void widen_kn(const void* w, int64_t ldk, int64_t ldn, int64_t K, int64_t N, float* out) {
  const uint16_t* b = bf16_bits(w);
#pragma omp parallel for schedule(static) if (K * N > 65536)
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) out[k * N + n] = bfloat16_bits_to_float(b[k * ldk + n * ldn]);
}

// One primitive and what a call needs to run it.
struct Entry {
  std::vector<int64_t> key;  // the shape, strides and epilogue it was made for
  dnnl::primitive prim;
  memory::desc src, wts, dst, bias, residual, scratch;
  memory::desc user_wts;     // the model's weight as it is laid out
  memory weights;            // the constant weight in `wts` (empty: reorder per call)
  bool reorder_weights = false;
  bool bf16 = false;  // the primitive reads bf16 operands, the source converted per call
  bool sum_residual = false;  // the residual is copied into y and added by a sum post-op
};

struct Site {
  std::mutex mu;
  std::vector<std::shared_ptr<const Entry>> entries;  // newest last; at most kMaxEntries
  std::vector<memory> weights;  // reordered copies of the constant weight, one per layout
  static constexpr size_t kMaxEntries = 16;
  // The constant weight in AMX tiles (products on ptc's AMX kernel), made on first use.
  std::shared_ptr<const amx::PackedWeight> amx_weight;
  const void* amx_of = nullptr;
  // A bf16_io call run in float32 (conv2d_nhwc_bf16() / matmul_bf16() false): its constant
  // weight widened once, n elements written by fill(out); nullptr when out of memory.
  std::vector<float> w32;
  const void* w32_of = nullptr;
  template <class Fill>
  const float* widened_weight(const void* w, int64_t n, Fill&& fill) {
    std::lock_guard<std::mutex> lock(mu);
    if (w32_of != w || w32.size() != static_cast<size_t>(n)) {
      try {
        w32.assign(static_cast<size_t>(n), 0.f);
      } catch (const std::bad_alloc&) {
        w32_of = nullptr;
        return nullptr;
      }
      fill(w32.data());
      w32_of = w;
    }
    return w32.data();
  }

  std::shared_ptr<const amx::PackedWeight> packed(const MatmulArgs& a) {
    std::lock_guard<std::mutex> lock(mu);
    if (!amx_weight || amx_of != a.w || amx_weight->K != a.K || amx_weight->N != a.N) {
      if (a.bf16_io) {  // (widened first: exact)
        std::vector<float> wk(static_cast<size_t>(a.K * a.N));
        widen_kn(a.w, a.ldw_k, a.ldw_n, a.K, a.N, wk.data());
        amx_weight = std::make_shared<const amx::PackedWeight>(amx::pack_weight(wk.data(), a.N, 1, a.K, a.N));
      } else {
        amx_weight = std::make_shared<const amx::PackedWeight>(amx::pack_weight(static_cast<const float*>(a.w), a.ldw_k, a.ldw_n, a.K, a.N));
      }
      amx_of = a.w;
    }
    return amx_weight;
  }

  // The entry for `key`, made by `make` (under the lock) on first use.
  template <class Make>
  std::shared_ptr<const Entry> find(const std::vector<int64_t>& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : entries)
      if (e->key == key) return e;
    std::shared_ptr<const Entry> e = make();
    if (entries.size() >= kMaxEntries) entries.erase(entries.begin());
    entries.push_back(e);
    return e;
  }
};

// The bias / residual / activation post-ops; e's residual descriptor is its destination's.
dnnl::primitive_attr epilogue_attr(Entry& e, bool residual, dnnl::algorithm act, float alpha, float beta, bool sum = false) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  if (residual) {
    e.residual = e.dst;
    e.sum_residual = sum;
    if (sum)
      po.append_sum(1.f);
    else
      po.append_binary(dnnl::algorithm::binary_add, e.residual);
  }
  if (act != dnnl::algorithm::undef) po.append_eltwise(1.f, act, alpha, beta);
  attr.set_post_ops(po);
  return attr;
}

// Takes the primitive from `pd` and the weights' layout it asks for; a constant weight is
// reordered into it now, or shares the site's copy in that layout.
template <class PrimitiveDesc, class Primitive>
void finish(Entry& e, const PrimitiveDesc& pd, Site& site, bool weight_constant, const void* w) {
  e.wts = pd.weights_desc();
  e.scratch = pd.scratchpad_desc();
  e.prim = Primitive(pd);
  e.reorder_weights = e.wts != e.user_wts;
  if (!e.reorder_weights || !weight_constant) return;
  for (const memory& m : site.weights)
    if (m.get_desc() == e.wts) e.weights = m;
  if (e.weights) return;
  e.weights = memory(e.wts, cpu_engine());
  memory user(e.user_wts, cpu_engine(), const_cast<void*>(w));
  dnnl::stream s(cpu_engine());
  dnnl::reorder(user, e.weights).execute(s, user, e.weights);
  s.wait();
  site.weights.push_back(e.weights);
}

// Runs entry `e` on `src` into y, with the call's weight, bias and residual.
void execute(const Entry& e, dnnl::stream& s, const memory& src, void* y, const void* w, bool weight_constant, const void* bias,
             const void* residual) {
  dnnl::engine& eng = cpu_engine();
  static thread_local std::vector<unsigned char> scratch_bytes;
  if (scratch_bytes.size() < e.scratch.get_size()) scratch_bytes.resize(e.scratch.get_size());
  memory wts;
  if (!e.reorder_weights) {
    wts = memory(e.wts, eng, const_cast<void*>(w));
  } else if (weight_constant) {
    wts = e.weights;
  } else {
    wts = memory(e.wts, eng);
    memory user(e.user_wts, eng, const_cast<void*>(w));
    dnnl::reorder(user, wts).execute(s, user, wts);
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                       {DNNL_ARG_WEIGHTS, wts},
                                       {DNNL_ARG_DST, memory(e.dst, eng, y)},
                                       {DNNL_ARG_SCRATCHPAD, memory(e.scratch, eng, scratch_bytes.data())}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias, eng, const_cast<void*>(bias)));
  if (residual && e.sum_residual) {
    if (residual != y) {
      const size_t bytes = e.dst.get_size();
      const int64_t chunks = static_cast<int64_t>((bytes + 65535) / 65536);
#pragma omp parallel for schedule(static) if (chunks > 4)
      for (int64_t i = 0; i < chunks; ++i) {
        const size_t at = static_cast<size_t>(i) * 65536;
        std::memcpy(static_cast<char*>(y) + at, static_cast<const char*>(residual) + at, std::min<size_t>(65536, bytes - at));
      }
    }
  } else if (residual) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(e.residual, eng, const_cast<void*>(residual)));
  }
  e.prim.execute(s, args);
  s.wait();
}

// The entry make(bf16) builds: on bf16 operands where `bf16` asks for them and oneDNN has a
// kernel for this CPU and shape, else in fp32 (the same values).
template <class Make>
std::shared_ptr<const Entry> bf16_or_f32(bool bf16, Make&& make) {
  if (bf16) {
    try {
      return make(true);
    } catch (const dnnl::error&) {
    }
  }
  return make(false);
}

// f() with oneDNN's failures as one sentence about `what`.
template <class F>
const char* guarded(const char* site, F&& f) {
  static thread_local std::string message;
  try {
    f();
  } catch (const dnnl::error&) {
    message = std::string(site) + " (oneDNN): no primitive for this shape, or oneDNN ran out of memory";
    return message.c_str();
  } catch (const std::bad_alloc&) {
    message = std::string(site) + " (oneDNN): out of memory";
    return message.c_str();
  }
  return nullptr;
}

// A [M, K] (element strides lda_m, lda_k) to dense bf16, rounded to nearest even: exact for the
// bf16 values a bf16_values product holds.
void to_bf16_2d(const float* a, int64_t M, int64_t K, int64_t lda_m, int64_t lda_k, uint16_t* y) {
#pragma omp parallel for schedule(static) if (M * K > 65536)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) y[m * K + k] = float_to_bfloat16_bits(a[m * lda_m + k * lda_k]);
}

// The call's source as entry `e` reads it: x [rows, cols] (element strides ld_row, ld_col) rounded
// into this thread's bf16 scratch for a bf16 entry, else x as it is (e.src describes it).
memory source(const Entry& e, const float* x, int64_t rows, int64_t cols, int64_t ld_row, int64_t ld_col) {
  if (!e.bf16) return memory(e.src, cpu_engine(), const_cast<float*>(x));
  static thread_local std::vector<uint16_t> x16;
  if (x16.size() < static_cast<size_t>(rows * cols)) x16.resize(static_cast<size_t>(rows * cols));
  to_bf16_2d(x, rows, cols, ld_row, ld_col, x16.data());
  return memory(e.src, cpu_engine(), x16.data());
}

// ---- convolutions -------------------------------------------------------------------------------

memory::dims dims4(int64_t a, int64_t b, int64_t c, int64_t d) { return {a, b, c, d}; }

// bf16 operands for a call: the caller says its operands hold bf16 values, the process runs such
// convolutions in bf16 (conv2d_nhwc_bf16), and the source is densely NHWC (converted per call).
bool runs_bf16(const ConvNhwcArgs& a) {
  return a.bf16_values && !a.bf16_io && conv2d_nhwc_bf16() && a.xs[1] == 1 && a.xs[3] == a.C && a.xs[2] == a.W * a.C &&
         a.xs[0] == a.H * a.W * a.C;
}

std::vector<int64_t> conv_key(const ConvNhwcArgs& a) {
  return {a.N, a.H, a.W, a.xs[0], a.xs[1], a.xs[2], a.xs[3], a.ws[0], a.ws[1], a.ws[2], a.ws[3], a.bias != nullptr, a.residual != nullptr,
          a.act, runs_bf16(a), a.bf16_io};
}

std::shared_ptr<const Entry> make_conv(Site& site, const ConvNhwcArgs& a, bool bf16) {
  auto e = std::make_shared<Entry>();
  e->key = conv_key(a);
  e->bf16 = bf16 && !a.bf16_io;  // (bf16_io: no conversion, the tensors are bf16 already)
  const memory::data_type f32 = memory::data_type::f32, bf16_t = memory::data_type::bf16;
  const memory::data_type in_t = bf16 ? bf16_t : f32;   // what the primitive computes on
  const memory::data_type io_t = a.bf16_io ? bf16_t : f32;  // what the caller's tensors hold
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups;
  e->src = e->bf16 ? memory::desc(dims4(a.N, a.C, a.H, a.W), in_t, tag::nhwc)
                   : memory::desc(dims4(a.N, a.C, a.H, a.W), in_t, memory::dims{a.xs[0], a.xs[1], a.xs[2], a.xs[3]});
  e->dst = memory::desc(dims4(a.N, a.O, a.OH, a.OW), io_t, tag::nhwc);
  if (a.groups == 1) {
    e->user_wts = memory::desc(dims4(a.O, a.C, a.KH, a.KW), io_t, memory::dims{a.ws[0], a.ws[1], a.ws[2], a.ws[3]});
    e->wts = memory::desc(dims4(a.O, a.C, a.KH, a.KW), in_t, tag::any);
  } else {
    const memory::dims gd{a.groups, Og, Cg, a.KH, a.KW};
    e->user_wts = memory::desc(gd, io_t, memory::dims{Og * a.ws[0], a.ws[0], a.ws[1], a.ws[2], a.ws[3]});
    e->wts = memory::desc(gd, in_t, tag::any);
  }
  if (a.bias) e->bias = memory::desc({a.O}, io_t, tag::a);
  // oneDNN's right padding: what makes the output size come out as OH x OW
  const int64_t pr_h = (a.OH - 1) * a.sh + (a.KH - 1) * a.dh + 1 - a.H - a.ph;
  const int64_t pr_w = (a.OW - 1) * a.sw + (a.KW - 1) * a.dw + 1 - a.W - a.pw;
  const dnnl::algorithm act = a.act == kConvActRelu    ? dnnl::algorithm::eltwise_relu
                              : a.act == kConvActRelu6 ? dnnl::algorithm::eltwise_clip
                                                       : dnnl::algorithm::undef;
  // On bf16 operands the residual is added by a sum post-op (copied into y first): oneDNN 2.6
  // runs a binary post-op on its slower jit_1x1 kernels instead of brgconv (resnet50 bf16 on AMX:
  // 8.3 -> 7.4 ms); in fp32 the copy costs more than it saves.
  const dnnl::primitive_attr attr = epilogue_attr(*e, a.residual != nullptr, act, 0.f, a.act == kConvActRelu6 ? 6.f : 0.f, bf16);
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, e->src, e->wts,
                                    a.bias ? e->bias : memory::desc(), e->dst, {a.sh, a.sw}, {a.dh - 1, a.dw - 1}, {a.ph, a.pw},
                                    {pr_h, pr_w});
  finish<dnnl::convolution_forward::primitive_desc, dnnl::convolution_forward>(
      *e, dnnl::convolution_forward::primitive_desc(d, attr, cpu_engine()), site, a.weight_constant, a.w);
  return e;
}

// ---- linear layers: matmul ----------------------------------------------------------------------
//
// One primitive per (M, A's strides, epilogue): a decode step and a prefill of one model get
// their own, and share the reordered weight.

// A product in bf16: its operands hold bf16 values, the process runs such products in bf16, and
// the weight is a constant (reordered into bf16 once).
// (bf16_io: in bf16 exactly where matmul_bf16(); conv2d... / matmul_call widen the others.)
bool runs_bf16(const MatmulArgs& a) { return (a.bf16_values || a.bf16_io) && a.weight_constant && matmul_bf16(); }

std::vector<int64_t> matmul_key(const MatmulArgs& a) {
  return {a.M,     a.N,  a.K,        a.lda_m,         a.lda_k,   a.ldw_k, a.ldw_n, a.bias != nullptr, a.residual != nullptr, a.act,
          runs_bf16(a), a.bf16_io, a.y_f32, a.ep.fn != nullptr};
}

std::shared_ptr<const Entry> make_matmul(Site& site, const MatmulArgs& a, bool bf16) {
  auto e = std::make_shared<Entry>();
  e->key = matmul_key(a);
  e->bf16 = bf16 && !a.bf16_io;  // (bf16_io: no conversion, the tensors are bf16 already)
  const auto f32 = memory::data_type::f32;
  const auto in_t = bf16 ? memory::data_type::bf16 : f32;
  const auto io_t = a.bf16_io ? memory::data_type::bf16 : f32;
  e->src = e->bf16 ? memory::desc({a.M, a.K}, in_t, tag::ab) : memory::desc({a.M, a.K}, in_t, memory::dims{a.lda_m, a.lda_k});
  e->user_wts = memory::desc({a.K, a.N}, io_t, memory::dims{a.ldw_k, a.ldw_n});
  // A constant weight in the layout oneDNN picks (reordered once); another as it is.
  e->wts = a.weight_constant ? memory::desc({a.K, a.N}, in_t, tag::any) : e->user_wts;
  // (bf16_io: the result in float32 where it is (y_f32) or where the generated epilogue follows)
  e->dst = memory::desc({a.M, a.N}, a.bf16_io && !a.y_f32 && !a.ep.fn ? io_t : f32, tag::ab);
  if (a.bias) e->bias = memory::desc({1, a.N}, io_t, tag::ab);
  dnnl::algorithm act = dnnl::algorithm::undef;
  float alpha = 0.f;
  switch (a.act) {
    case kMatmulActRelu: act = dnnl::algorithm::eltwise_relu; break;
    case kMatmulActGelu: act = dnnl::algorithm::eltwise_gelu_erf; break;
    case kMatmulActGeluTanh: act = dnnl::algorithm::eltwise_gelu_tanh; break;
    case kMatmulActSilu: act = dnnl::algorithm::eltwise_swish, alpha = 1.f; break;  // x sigmoid(alpha x)
    default: break;
  }
  const dnnl::primitive_attr attr = epilogue_attr(*e, a.residual != nullptr, act, alpha, 0.f);
  dnnl::matmul::desc d(e->src, e->wts, a.bias ? e->bias : memory::desc(), e->dst);
  finish<dnnl::matmul::primitive_desc, dnnl::matmul>(*e, dnnl::matmul::primitive_desc(d, attr, cpu_engine()), site, a.weight_constant,
                                                     a.w);
  return e;
}

}  // namespace

bool matmul_runs(int64_t M, int64_t N, int64_t K) {
  static const int forced = [] {
    const char* e = std::getenv("PTC_CPU_ONEDNN_MATMUL");
    return e && *e ? (std::strcmp(e, "0") != 0 ? 1 : 0) : -1;
  }();
  if (forced >= 0) return forced == 1;
  return M >= 3 && M * N * K >= (int64_t{1} << 18);
}

void* matmul_prepare() { return new (std::nothrow) Site; }
void matmul_release(void* site) { delete static_cast<Site*>(site); }

// A bf16 product on ptc's AMX kernel (ptc_amx.h), with the epilogue per finished row run: bias,
// residual and activation as oneDNN's post-ops would apply them, then the generated step.
// bf16_io: the product in a float32 scratch, each finished run rounded into y.
void matmul_amx(Site& site, const MatmulArgs& a) {
  const std::shared_ptr<const amx::PackedWeight> w = site.packed(a);
  const int64_t N = a.N;
  const bool io = a.bf16_io, y16 = io && !a.y_f32;
  static thread_local std::vector<float> c_buf;
  float* C = static_cast<float*>(a.y);
  if (y16) {
    if (c_buf.size() < static_cast<size_t>(a.M * N)) c_buf.resize(static_cast<size_t>(a.M * N));
    C = c_buf.data();
  }
  auto run = [&](auto* A) { amx::gemm(A, a.lda_m, a.lda_k, a.M, *w, C, N, [&](float* c, int64_t m, int64_t n0, int64_t count) {
    if (a.bias) {
      if (io) {
        const uint16_t* b = static_cast<const uint16_t*>(a.bias) + n0;
        for (int64_t j = 0; j < count; ++j) c[j] += bfloat16_bits_to_float(b[j]);
      } else {
        const float* b = static_cast<const float*>(a.bias) + n0;
        for (int64_t j = 0; j < count; ++j) c[j] += b[j];
      }
    }
    if (a.residual) {
      if (io) {
        const uint16_t* r = static_cast<const uint16_t*>(a.residual) + m * N + n0;
        for (int64_t j = 0; j < count; ++j) c[j] += bfloat16_bits_to_float(r[j]);
      } else {
        const float* r = static_cast<const float*>(a.residual) + m * N + n0;
        for (int64_t j = 0; j < count; ++j) c[j] += r[j];
      }
    }
    switch (a.act) {
      case kMatmulActRelu:
        for (int64_t j = 0; j < count; ++j) c[j] = relu(c[j]);
        break;
      case kMatmulActGelu:
        for (int64_t j = 0; j < count; ++j) c[j] = 0.5f * c[j] * (1.f + erf_f(c[j] * 0.70710678f));
        break;
      case kMatmulActGeluTanh:
        for (int64_t j = 0; j < count; ++j) c[j] = 0.5f * c[j] * (1.f + tanh_f(0.7978845608f * (c[j] + 0.044715f * c[j] * c[j] * c[j])));
        break;
      case kMatmulActSilu:
        for (int64_t j = 0; j < count; ++j) c[j] = c[j] * sigmoid_f(c[j]);
        break;
      default: break;
    }
    if (a.ep.fn) a.ep.fn(a.ep.obj, c, 0, m, n0, count);
    if (y16) {
      uint16_t* y = static_cast<uint16_t*>(a.y) + m * N + n0;
      for (int64_t j = 0; j < count; ++j) y[j] = float_to_bfloat16_bits(c[j]);
    }
  }); };
  if (io)
    run(static_cast<const uint16_t*>(a.a));
  else
    run(static_cast<const float*>(a.a));
}

// Products in bf16 on ptc's AMX kernel where the process may run AMX (ptc_amx.h) and the shape is
// one where it beat oneDNN 2.6's AMX matmul: a deep product (K >= 2048: transformers' second MLP
// layer, 1.3-1.4x at 128 and 197 rows on a Sapphire Rapids VM) of at least 16 rows. At K = 768
// oneDNN is ahead at 197 rows (0.8-0.85x), level at 128. PTC_CPU_AMX=1 / 0: all / none.
bool runs_amx(const MatmulArgs& a) {
  if (!runs_bf16(a) || !amx::ready()) return false;
  return amx::forced() == 1 || (a.K >= 2048 && a.M >= 16);
}

namespace {
// A bf16_io product where this process runs products in float32 (matmul_bf16() false): the
// operands widened (exact), the float32 primitive with its epilogue, the result rounded once.
const char* matmul_widened(Site& site, const MatmulArgs& a);
}  // namespace

const char* matmul_call(void* site_ptr, const MatmulArgs& a) {
  if (!site_ptr) return "linear (oneDNN): the call site was not prepared (out of memory when the model was opened)";
  if (a.M <= 0 || a.N <= 0) return nullptr;
  if (a.bf16_io && !matmul_bf16()) return matmul_widened(*static_cast<Site*>(site_ptr), a);
  if (runs_amx(a)) {
    try {
      matmul_amx(*static_cast<Site*>(site_ptr), a);
    } catch (const std::bad_alloc&) {
      return "linear (AMX): out of memory";
    }
    return nullptr;
  }
  return guarded("linear", [&] {
    Site& site = *static_cast<Site*>(site_ptr);
    std::shared_ptr<const Entry> e = site.find(matmul_key(a), [&] {
      if (a.bf16_io) return make_matmul(site, a, true);
      return bf16_or_f32(runs_bf16(a), [&](bool bf16) { return make_matmul(site, a, bf16); });
    });
    dnnl::stream s(cpu_engine());
    const memory src = a.bf16_io ? memory(e->src, cpu_engine(), const_cast<void*>(a.a))
                                 : source(*e, static_cast<const float*>(a.a), a.M, a.K, a.lda_m, a.lda_k);
    // (a bf16 result the generated epilogue writes: float32 rows first, rounded after it)
    const bool rows16 = a.bf16_io && !a.y_f32 && a.ep.fn;
    const int64_t M = a.M, N = a.N;
    float* y = rows16 ? scratch_f32(3, M * N) : static_cast<float*>(a.y);
    execute(*e, s, src, rows16 ? static_cast<void*>(y) : a.y, a.w, a.weight_constant, a.bias, a.residual);
    if (a.ep.fn) {
#pragma omp parallel for schedule(static) if (M * N > 16384)
      for (int64_t m = 0; m < M; ++m) {
        a.ep.fn(a.ep.obj, y + m * N, 0, m, 0, N);
        if (rows16) {
          uint16_t* y16 = static_cast<uint16_t*>(a.y) + m * N;
          for (int64_t j = 0; j < N; ++j) y16[j] = float_to_bfloat16_bits(y[m * N + j]);
        }
      }
    }
  });
}

// Whether oneDNN's kernels for `isa` run here: its value is a bit set that includes every ISA it
// extends (avx2_vnni's value is larger than AMX's, without its bits).
bool has_isa(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & want) == want;
}

// PTC_CPU_BF16=1 / 0, or -1 where it is not set.
int bf16_forced() {
  static const int forced = [] {
    const char* e = std::getenv("PTC_CPU_BF16");
    return e && *e ? (std::strcmp(e, "0") != 0 ? 1 : 0) : -1;
  }();
  return forced;
}

bool conv2d_nhwc_bf16() {
  static const bool on = bf16_forced() >= 0 ? bf16_forced() == 1 : has_isa(dnnl::cpu_isa::avx512_core_amx);
  return on;
}

bool matmul_bf16() {
  static const bool on = bf16_forced() >= 0 ? bf16_forced() == 1 : has_isa(dnnl::cpu_isa::avx512_core_bf16);
  return on;
}

void* conv2d_nhwc_prepare() { return new (std::nothrow) Site; }
void conv2d_nhwc_release(void* site) { delete static_cast<Site*>(site); }

namespace {

// A bf16_io convolution where this process runs convolutions in float32 (conv2d_nhwc_bf16()
// false: no AMX, or PTC_CPU_BF16=0): the operands widened (exact), the float32 primitive with its
// epilogue, the result rounded once into y. The same arithmetic as the bf16 primitive.
const char* conv2d_nhwc_widened(Site& site, const ConvNhwcArgs& a);

}  // namespace

const char* conv2d_nhwc_call(void* site_ptr, const ConvNhwcArgs& a) {
  if (!site_ptr) return "convolution (oneDNN): the call site was not prepared (out of memory when the model was opened)";
  Site& site = *static_cast<Site*>(site_ptr);
  if (a.bf16_io && !conv2d_nhwc_bf16()) return conv2d_nhwc_widened(site, a);
  return guarded("convolution", [&] {
    std::shared_ptr<const Entry> e = site.find(conv_key(a), [&] {
      if (a.bf16_io) return make_conv(site, a, true);
      return bf16_or_f32(runs_bf16(a), [&](bool bf16) { return make_conv(site, a, bf16); });
    });
    dnnl::stream s(cpu_engine());
    // (a bf16 entry's source is densely NHWC: [N H W, C]; a bf16_io one reads x as it is)
    const memory src = a.bf16_io ? memory(e->src, cpu_engine(), const_cast<void*>(a.x))
                                 : source(*e, static_cast<const float*>(a.x), a.N * a.H * a.W, a.C, a.C, 1);
    execute(*e, s, src, a.y, a.w, a.weight_constant, a.bias, a.residual);
  });
}

namespace {

const char* conv2d_nhwc_widened(Site& site, const ConvNhwcArgs& a) {
  const int64_t Cg = a.C / a.groups, taps = a.KH * a.KW, per_o = taps * Cg;
  ConvNhwcArgs f = a;
  f.bf16_io = false;
  // x: dense NHWC
  float* x = scratch_f32(0, a.N * a.H * a.W * a.C);
  const uint16_t* xb = bf16_bits(a.x);
#pragma omp parallel for collapse(2) schedule(static) if (a.N * a.H * a.W * a.C > 65536)
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t h = 0; h < a.H; ++h)
      for (int64_t w = 0; w < a.W; ++w) {
        const uint16_t* src = xb + n * a.xs[0] + h * a.xs[2] + w * a.xs[3];
        float* dst = x + ((n * a.H + h) * a.W + w) * a.C;
        for (int64_t c = 0; c < a.C; ++c) dst[c] = bfloat16_bits_to_float(src[c * a.xs[1]]);
      }
  f.x = x;
  const int64_t xs[4] = {a.H * a.W * a.C, 1, a.W * a.C, a.C};
  std::memcpy(f.xs, xs, sizeof xs);
  // w: dense KRSC ([O][KH][KW][C/groups]); a constant one once per site
  auto widen_w = [&](float* dst) {
    const uint16_t* wb = bf16_bits(a.w);
    for (int64_t o = 0; o < a.O; ++o)
      for (int64_t kh = 0; kh < a.KH; ++kh)
        for (int64_t kw = 0; kw < a.KW; ++kw)
          for (int64_t c = 0; c < Cg; ++c)
            dst[o * per_o + (kh * a.KW + kw) * Cg + c] = bfloat16_bits_to_float(wb[o * a.ws[0] + c * a.ws[1] + kh * a.ws[2] + kw * a.ws[3]]);
  };
  if (a.weight_constant) {
    f.w = site.widened_weight(a.w, a.O * per_o, widen_w);
    if (!f.w) return "convolution (oneDNN): out of memory";
  } else {
    float* w = scratch_f32(1, a.O * per_o);
    widen_w(w);
    f.w = w;
  }
  const int64_t ws[4] = {per_o, 1, a.KW * Cg, Cg};
  std::memcpy(f.ws, ws, sizeof ws);
  const int64_t ny = a.N * a.OH * a.OW * a.O;
  if (a.bias) f.bias = widened(2, a.bias, a.O);
  if (a.residual) f.residual = widened(4, a.residual, ny);  // (laid out as y)
  float* y = scratch_f32(3, ny);
  f.y = y;
  if (const char* e = conv2d_nhwc_call(&site, f)) return e;
  rounded(a.y, y, ny);
  return nullptr;
}

const char* matmul_widened(Site& site, const MatmulArgs& a) {
  MatmulArgs f = a;
  f.bf16_io = f.y_f32 = false;
  float* x = scratch_f32(0, a.M * a.K);
  widen_kn(a.a, a.lda_m, a.lda_k, a.M, a.K, x);
  f.a = x, f.lda_m = a.K, f.lda_k = 1;
  // the constant weight, dense [K, N], once per site
  f.w = site.widened_weight(a.w, a.K * a.N, [&](float* out) { widen_kn(a.w, a.ldw_k, a.ldw_n, a.K, a.N, out); });
  if (!f.w) return "linear (oneDNN): out of memory";
  f.ldw_k = a.N, f.ldw_n = 1;
  const int64_t ny = a.M * a.N;
  if (a.bias) f.bias = widened(2, a.bias, a.N);
  if (a.residual) f.residual = widened(4, a.residual, ny);
  float* y = a.y_f32 ? static_cast<float*>(a.y) : scratch_f32(3, ny);
  f.y = y;
  if (const char* e = matmul_call(&site, f)) return e;
  if (!a.y_f32) rounded(a.y, y, ny);
  return nullptr;
}

}  // namespace

}  // namespace ptc_rt
