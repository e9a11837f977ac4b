// ptc_runtime_onednn.cpp — forward convolutions over NHWC activations (ptc_rt.h's conv2d_nhwc_*)
// and linear layers' products (matmul_*) on oneDNN; part of a generated CPU library that lays its
// convolutions out channels-last (LowerOptions::channels_last) or runs its linear layers on
// oneDNN (LowerOptions::library_gemm), and the only unit that links libdnnl.
//
// Each call site (a convolution kernel) owns a ConvSite, made when the model is opened. Per input
// shape it holds one primitive, created on the first call with that shape: the source and
// destination are the caller's NHWC buffers as they are, the weights in the layout oneDNN picks
// for the primitive (format `any`), reordered from the model's weight once when the weight is a
// constant (else on every call). oneDNN picks the kernel for the CPU it runs on (AVX2, AVX-512,
// AMX) when the primitive is created. The library's epilogue (bias, residual, ReLU / ReLU6:
// sched::LibraryEpilogue) runs as the primitive's bias and post-ops on the accumulator.
//
// --precision bf16 (ConvNhwcArgs::bf16_values): the operands already hold bf16 values, so a
// primitive on bf16 operands with fp32 accumulation computes what autocast does. It is chosen once
// per process (conv2d_nhwc_bf16): where oneDNN finds AMX, else fp32 (on AVX512-BF16 without AMX
// it measured slower than fp32: docs/benchmarks.md); PTC_CPU_BF16=1 / 0 forces either. The
// source is converted per call (exact: the upper half of each float), the weights once.
//
// Threads: oneDNN runs on the same OpenMP runtime as the generated kernels. Several threads may
// run one site at once: the cache is guarded by a mutex, entries are shared and never change
// after creation, and each call brings its own stream, memory objects and scratchpad.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "ptc_rt.h"

namespace ptc_rt {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

struct ConvEntry {
  // the shape and strides it was made for
  int64_t key[15];
  bool bf16 = false;  // the primitive reads bf16 operands (the source converted per call)
  dnnl::convolution_forward prim;
  memory::desc src, wts, dst, bias, residual, scratch;
  memory weights;  // reordered constant weights (empty: reorder per call)
  bool reorder_weights = false;
  memory::desc user_wts;
};

struct ConvSite {
  std::mutex mu;
  std::vector<std::shared_ptr<const ConvEntry>> entries;  // newest last; at most kMaxEntries
  static constexpr size_t kMaxEntries = 16;
};

memory::dims dims4(int64_t a, int64_t b, int64_t c, int64_t d) { return {a, b, c, d}; }

// bf16 operands for a call: the caller says its operands hold bf16 values, the process runs such
// convolutions in bf16 (conv2d_nhwc_bf16), and the source is densely NHWC (converted per call).
bool runs_bf16(const ConvNhwcArgs& a) {
  return a.bf16_values && conv2d_nhwc_bf16() && a.xs[1] == 1 && a.xs[3] == a.C && a.xs[2] == a.W * a.C && a.xs[0] == a.H * a.W * a.C;
}

void fill_key(const ConvNhwcArgs& a, int64_t* k) {
  const int64_t v[15] = {a.N, a.H, a.W, a.xs[0], a.xs[1], a.xs[2], a.xs[3], a.ws[0], a.ws[1], a.ws[2], a.ws[3],
                         a.bias != nullptr, a.residual != nullptr, a.act, runs_bf16(a)};
  std::memcpy(k, v, sizeof v);
}

// x (dense NHWC float32 holding bf16 values) to bf16: the upper half of each float, exact.
void to_bf16(const float* x, uint16_t* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    y[i] = static_cast<uint16_t>(u >> 16);
  }
}

std::shared_ptr<const ConvEntry> make_entry(const ConvNhwcArgs& a, bool bf16) {
  auto e = std::make_shared<ConvEntry>();
  fill_key(a, e->key);
  e->bf16 = bf16;
  const memory::data_type in_t = e->bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const int64_t Cg = a.C / a.groups, Og = a.O / a.groups;
  e->src = e->bf16 ? memory::desc(dims4(a.N, a.C, a.H, a.W), in_t, tag::nhwc)
                   : memory::desc(dims4(a.N, a.C, a.H, a.W), in_t, memory::dims{a.xs[0], a.xs[1], a.xs[2], a.xs[3]});
  e->dst = memory::desc(dims4(a.N, a.O, a.OH, a.OW), memory::data_type::f32, tag::nhwc);
  if (a.groups == 1) {
    e->user_wts = memory::desc(dims4(a.O, a.C, a.KH, a.KW), memory::data_type::f32, memory::dims{a.ws[0], a.ws[1], a.ws[2], a.ws[3]});
    e->wts = memory::desc(dims4(a.O, a.C, a.KH, a.KW), in_t, tag::any);
  } else {
    const memory::dims gd{a.groups, Og, Cg, a.KH, a.KW};
    e->user_wts = memory::desc(gd, memory::data_type::f32, memory::dims{Og * a.ws[0], a.ws[0], a.ws[1], a.ws[2], a.ws[3]});
    e->wts = memory::desc(gd, in_t, tag::any);
  }
  if (a.bias) e->bias = memory::desc({a.O}, memory::data_type::f32, tag::a);
  // oneDNN's right padding: what makes the output size come out as OH x OW
  const int64_t pr_h = (a.OH - 1) * a.sh + (a.KH - 1) * a.dh + 1 - a.H - a.ph;
  const int64_t pr_w = (a.OW - 1) * a.sw + (a.KW - 1) * a.dw + 1 - a.W - a.pw;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  if (a.residual) {
    e->residual = e->dst;
    po.append_binary(dnnl::algorithm::binary_add, e->residual);
  }
  if (a.act == kConvActRelu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  if (a.act == kConvActRelu6) po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, 0.f, 6.f);
  attr.set_post_ops(po);
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, e->src, e->wts,
                                    a.bias ? e->bias : memory::desc(), e->dst, {a.sh, a.sw}, {a.dh - 1, a.dw - 1}, {a.ph, a.pw},
                                    {pr_h, pr_w});
  dnnl::convolution_forward::primitive_desc pd(d, attr, cpu_engine());
  e->wts = pd.weights_desc();
  e->scratch = pd.scratchpad_desc();
  e->prim = dnnl::convolution_forward(pd);
  e->reorder_weights = e->wts != e->user_wts;
  if (e->reorder_weights && a.weight_constant) {
    e->weights = memory(e->wts, cpu_engine());
    memory user(e->user_wts, cpu_engine(), const_cast<float*>(a.w));
    dnnl::stream s(cpu_engine());
    dnnl::reorder(user, e->weights).execute(s, user, e->weights);
    s.wait();
  }
  return e;
}

std::shared_ptr<const ConvEntry> find_entry(ConvSite& site, const ConvNhwcArgs& a) {
  int64_t key[15];
  fill_key(a, key);
  std::lock_guard<std::mutex> lock(site.mu);
  for (const auto& e : site.entries)
    if (std::memcmp(e->key, key, sizeof key) == 0) return e;
  std::shared_ptr<const ConvEntry> e;
  if (runs_bf16(a)) {
    try {
      e = make_entry(a, true);
    } catch (const dnnl::error&) {  // no bf16 kernel for this CPU or shape: fp32 (the same values)
    }
  }
  if (!e) e = make_entry(a, false);
  if (site.entries.size() >= ConvSite::kMaxEntries) site.entries.erase(site.entries.begin());
  site.entries.push_back(e);
  return e;
}

// ---- linear layers: matmul --------------------------------------------------------------------
//
// Per call site: one primitive per (M, A's strides, epilogue), made on first use, and the
// constant weight reordered once per layout oneDNN asks for (primitives for other M share it:
// the copy is the size of the weight, so it is not kept per M).

struct MatmulEntry {
  int64_t key[10];
  dnnl::matmul prim;
  memory::desc a, wts, y, bias, residual, scratch;
  memory weights;  // the constant weight in `wts` (empty: reorder per call)
  bool reorder_weights = false;
  memory::desc user_wts;
};

struct MatmulSite {
  std::mutex mu;
  std::vector<std::shared_ptr<const MatmulEntry>> entries;  // newest last; at most kMaxEntries
  std::vector<memory> weights;  // reordered copies of the constant weight, one per layout
  static constexpr size_t kMaxEntries = 16;
};

void fill_key(const MatmulArgs& a, int64_t* k) {
  const int64_t v[10] = {a.M, a.N, a.K, a.lda_m, a.lda_k, a.ldw_k, a.ldw_n, a.bias != nullptr, a.residual != nullptr, a.act};
  std::memcpy(k, v, sizeof v);
}

std::shared_ptr<const MatmulEntry> make_entry(MatmulSite& site, const MatmulArgs& a) {
  auto e = std::make_shared<MatmulEntry>();
  fill_key(a, e->key);
  const auto f32 = memory::data_type::f32;
  e->a = memory::desc({a.M, a.K}, f32, memory::dims{a.lda_m, a.lda_k});
  e->user_wts = memory::desc({a.K, a.N}, f32, memory::dims{a.ldw_k, a.ldw_n});
  // A constant weight in the layout oneDNN picks (reordered once); another as it is.
  e->wts = a.weight_constant ? memory::desc({a.K, a.N}, f32, tag::any) : e->user_wts;
  e->y = memory::desc({a.M, a.N}, f32, tag::ab);
  if (a.bias) e->bias = memory::desc({1, a.N}, f32, tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  if (a.residual) {
    e->residual = e->y;
    po.append_binary(dnnl::algorithm::binary_add, e->residual);
  }
  switch (a.act) {
    case kMatmulActRelu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f); break;
    case kMatmulActGelu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f); break;
    case kMatmulActGeluTanh: po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f); break;
    case kMatmulActSilu: po.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f); break;
    default: break;
  }
  attr.set_post_ops(po);
  dnnl::matmul::desc d(e->a, e->wts, a.bias ? e->bias : memory::desc(), e->y);
  dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
  e->wts = pd.weights_desc();
  e->scratch = pd.scratchpad_desc();
  e->prim = dnnl::matmul(pd);
  e->reorder_weights = e->wts != e->user_wts;
  if (e->reorder_weights && a.weight_constant) {
    for (const memory& m : site.weights)
      if (m.get_desc() == e->wts) e->weights = m;
    if (!e->weights) {
      e->weights = memory(e->wts, cpu_engine());
      memory user(e->user_wts, cpu_engine(), const_cast<float*>(a.w));
      dnnl::stream s(cpu_engine());
      dnnl::reorder(user, e->weights).execute(s, user, e->weights);
      s.wait();
      site.weights.push_back(e->weights);
    }
  }
  return e;
}

std::shared_ptr<const MatmulEntry> find_entry(MatmulSite& site, const MatmulArgs& a) {
  int64_t key[10];
  fill_key(a, key);
  std::lock_guard<std::mutex> lock(site.mu);
  for (const auto& e : site.entries)
    if (std::memcmp(e->key, key, sizeof key) == 0) return e;
  std::shared_ptr<const MatmulEntry> e = make_entry(site, a);
  if (site.entries.size() >= MatmulSite::kMaxEntries) site.entries.erase(site.entries.begin());
  site.entries.push_back(e);
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

void* matmul_prepare() { return new (std::nothrow) MatmulSite; }
void matmul_release(void* site) { delete static_cast<MatmulSite*>(site); }

const char* matmul_call(void* site_ptr, const MatmulArgs& a) {
  if (!site_ptr) return "linear (oneDNN): the call site was not prepared (out of memory when the model was opened)";
  if (a.M <= 0 || a.N <= 0) return nullptr;
  try {
    std::shared_ptr<const MatmulEntry> e = find_entry(*static_cast<MatmulSite*>(site_ptr), a);
    dnnl::engine& eng = cpu_engine();
    dnnl::stream s(eng);
    static thread_local std::vector<unsigned char> scratch_bytes;
    if (scratch_bytes.size() < e->scratch.get_size()) scratch_bytes.resize(e->scratch.get_size());
    memory wts;
    if (!e->reorder_weights) {
      wts = memory(e->wts, eng, const_cast<float*>(a.w));
    } else if (a.weight_constant) {
      wts = e->weights;
    } else {
      wts = memory(e->wts, eng);
      memory user(e->user_wts, eng, const_cast<float*>(a.w));
      dnnl::reorder(user, wts).execute(s, user, wts);
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(e->a, eng, const_cast<float*>(a.a))},
                                         {DNNL_ARG_WEIGHTS, wts},
                                         {DNNL_ARG_DST, memory(e->y, eng, a.y)},
                                         {DNNL_ARG_SCRATCHPAD, memory(e->scratch, eng, scratch_bytes.data())}};
    if (a.bias) args.emplace(DNNL_ARG_BIAS, memory(e->bias, eng, const_cast<float*>(a.bias)));
    if (a.residual) args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(e->residual, eng, const_cast<float*>(a.residual)));
    e->prim.execute(s, args);
    s.wait();
  } catch (const dnnl::error&) {
    return "linear (oneDNN): no primitive for this shape, or oneDNN ran out of memory";
  } catch (const std::bad_alloc&) {
    return "linear (oneDNN): out of memory";
  }
  return nullptr;
}

bool conv2d_nhwc_bf16() {
  static const bool on = [] {
    if (const char* e = std::getenv("PTC_CPU_BF16"); e && *e) return std::strcmp(e, "0") != 0;
    return dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_amx;
  }();
  return on;
}

void* conv2d_nhwc_prepare() { return new (std::nothrow) ConvSite; }
void conv2d_nhwc_release(void* site) { delete static_cast<ConvSite*>(site); }

const char* conv2d_nhwc_call(void* site_ptr, const ConvNhwcArgs& a) {
  if (!site_ptr) return "convolution (oneDNN): the call site was not prepared (out of memory when the model was opened)";
  try {
    std::shared_ptr<const ConvEntry> e = find_entry(*static_cast<ConvSite*>(site_ptr), a);
    dnnl::engine& eng = cpu_engine();
    dnnl::stream s(eng);
    memory src, dst(e->dst, eng, a.y);
    if (e->bf16) {
      static thread_local std::vector<uint16_t> x16;
      const int64_t n = a.N * a.H * a.W * a.C;
      if (x16.size() < static_cast<size_t>(n)) x16.resize(static_cast<size_t>(n));
      to_bf16(a.x, x16.data(), n);
      src = memory(e->src, eng, x16.data());
    } else {
      src = memory(e->src, eng, const_cast<float*>(a.x));
    }
    static thread_local std::vector<unsigned char> scratch_bytes;
    if (scratch_bytes.size() < e->scratch.get_size()) scratch_bytes.resize(e->scratch.get_size());
    memory scratch(e->scratch, eng, scratch_bytes.data());
    memory wts;
    if (!e->reorder_weights) {
      wts = memory(e->wts, eng, const_cast<float*>(a.w));
    } else if (a.weight_constant) {
      wts = e->weights;
    } else {
      wts = memory(e->wts, eng);
      memory user(e->user_wts, eng, const_cast<float*>(a.w));
      dnnl::reorder(user, wts).execute(s, user, wts);
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratch}};
    if (a.bias) args.emplace(DNNL_ARG_BIAS, memory(e->bias, eng, const_cast<float*>(a.bias)));
    if (a.residual) args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(e->residual, eng, const_cast<float*>(a.residual)));
    e->prim.execute(s, args);
    s.wait();
  } catch (const dnnl::error&) {
    return "convolution (oneDNN): no primitive for this shape, or oneDNN ran out of memory";
  } catch (const std::bad_alloc&) {
    return "convolution (oneDNN): out of memory";
  }
  return nullptr;
}

}  // namespace ptc_rt
