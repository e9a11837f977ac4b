// The training part of a library built with `ptc compile --train` (included by its model.cpp).
//
// Such a library holds two generated parts, each a complete program with the ABI of runtime.h as
// C++ functions in its own namespace (ptc_part_fwd, ptc_part_bwd):
//   forward:  (user inputs, parameters) -> (model outputs, saved values)
//   backward: (saved values, the parameters it reads, gradients of the outputs)
//             -> (gradients of the parameters, gradients of the inputs that require grad)
// This header holds what sits around them: the parameters (one float block, 64-byte aligned per
// parameter, initialized from the weights blob at ptc_open and updated in place), their
// gradients (accumulated over backward calls until ptc_zero_grad), the optimizer state, the
// saved-activation handles, and the fused optimizer steps (SGD with momentum, AdamW: one pass
// over the whole parameter block per step).
//
// The memory all of this lives in, and the loops over it, are the device's: the includer first
// includes ptc_train_cpu.h (host memory, OpenMP loops) or ptc_train_cuda.cuh (device memory,
// CUDA kernels), which define namespace ptc_train::dev:
//   void* alloc(size_t bytes);                       zero-filled, 64-byte aligned; nullptr: failed
//   void release(void* p);
//   void* take(size_t bytes);  void give(void* p, size_t bytes);  void trim();
//                                                    saved activations: unfilled memory, kept
//                                                    for reuse after give until trim
//   bool device_memory(const void* p);  const char* memory_kind();
//                                                    whether a caller's pointer is the device's
//   bool upload(void* dst, const void* host, size_t bytes);
//   bool zero(void* p, size_t bytes);
//   bool add(float* a, const float* b, int64_t n);   a += b
//   bool sgd(const SgdArgs&);  bool adamw(const AdamArgs&);
//   const char* error();                              what the last failed call hit
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "ptc_support.h"
#include "runtime.h"

namespace ptc_train {

// One part's ABI, type-erased (see PTC_TRAIN_PART).
struct Part {
  int (*open)(void** m);
  void (*close)(void* m);
  int (*input_info)(int index, ptc_tensor_info* info);
  int (*output_info)(int index, ptc_tensor_info* info);
  int (*num_symbols)();
  int (*symbol_info)(int index, const char** name, int64_t* min, int64_t* max);
  int (*output_shape)(const void* m, int n, const ptc_tensor* in, int index, int64_t* sizes);
  int (*run)(void* m, int n_in, const ptc_tensor* in, int n_out, ptc_tensor* out);
};

#define PTC_TRAIN_DECLARE_PART(ns)                                                                  \
  namespace ns {                                                                                    \
  struct ptc_model;                                                                                 \
  int ptc_open(const char*, ptc_model**);                                                           \
  void ptc_close(ptc_model*);                                                                       \
  int ptc_input_info(const ptc_model*, int, ptc_tensor_info*);                                      \
  int ptc_output_info(const ptc_model*, int, ptc_tensor_info*);                                     \
  int ptc_num_symbols(const ptc_model*);                                                            \
  int ptc_symbol_info(const ptc_model*, int, const char**, int64_t*, int64_t*);                     \
  int ptc_output_shape(const ptc_model*, int, const ptc_tensor*, int, int64_t*);                    \
  int ptc_run(ptc_model*, int, const ptc_tensor*, int, ptc_tensor*);                                \
  }

#define PTC_TRAIN_PART(ns)                                                                                            \
  ptc_train::Part {                                                                                                   \
    [](void** m) { return ns::ptc_open(nullptr, reinterpret_cast<ns::ptc_model**>(m)); },                            \
        [](void* m) { ns::ptc_close(static_cast<ns::ptc_model*>(m)); },                                               \
        [](int i, ptc_tensor_info* t) { return ns::ptc_input_info(nullptr, i, t); },                                  \
        [](int i, ptc_tensor_info* t) { return ns::ptc_output_info(nullptr, i, t); },                                 \
        []() { return ns::ptc_num_symbols(nullptr); },                                                                \
        [](int i, const char** n, int64_t* lo, int64_t* hi) { return ns::ptc_symbol_info(nullptr, i, n, lo, hi); },   \
        [](const void* m, int n, const ptc_tensor* in, int i, int64_t* s) {                                           \
          return ns::ptc_output_shape(static_cast<const ns::ptc_model*>(m), n, in, i, s);                             \
        },                                                                                                            \
        [](void* m, int ni, const ptc_tensor* in, int no, ptc_tensor* out) {                                          \
          return ns::ptc_run(static_cast<ns::ptc_model*>(m), ni, in, no, out);                                        \
        }                                                                                                             \
  }

// What the generated model.cpp says about the model (ptc_train_layout in the generated code).
struct Layout {
  int num_user_inputs;     // the forward's first inputs
  int num_model_outputs;   // the forward's first outputs
  int num_saved;           // the forward's other outputs = the backward's first inputs
  int num_params;          // the forward's inputs after the user inputs
  const ptc_tensor_info* params;      // name = state-dict name; float32, static sizes
  const uint64_t* param_blob_offset;  // where each parameter's initial values are in the weights blob
  int num_backward_params;
  const int* backward_params;         // the backward's parameter inputs -> parameter index
  int num_grad_outputs;
  const int* grad_output_index;       // the backward's gradient inputs -> model output index
  int num_grad_params;
  const int* grad_param_index;        // backward output i -> parameter index
  int num_grad_inputs;
  const int* grad_input_index;        // backward output num_grad_params + i -> user input index
  int forward_seed;                   // the forward's input after the parameters is the dropout seed
  int backward_seed;                  // the backward's input after its parameters is the seed
  int num_buffers;                    // buffers the forward updates: its inputs after the seed, and
  const ptc_tensor_info* buffers;     // its outputs after the model's (their new contents)
  const uint64_t* buffer_blob_offset;
};

inline int fail(const std::string& m) {
  ptc_rt::last_error() = m;
  return PTC_ERROR;
}

// The caller's tensors must be the device's memory (the parts do not check their tensors).
inline int check_memory(const char* fn, const char* kind, int n, const ptc_tensor* t) {
  for (int i = 0; i < n; ++i) {
    int64_t count = 1;
    for (int d = 0; d < t[i].rank && t[i].sizes; ++d) count *= t[i].sizes[d];
    if (count > 0 && t[i].data && !dev::device_memory(t[i].data))
      return fail(std::string(fn) + ": " + kind + " " + std::to_string(i) + " is not " + dev::memory_kind());
  }
  return PTC_OK;
}

inline int64_t numel(const ptc_tensor_info& t) {
  int64_t n = 1;
  for (int d = 0; d < t.rank; ++d) n *= t.sizes[d];
  return n;
}

inline size_t dtype_bytes(int dtype) {
  return dtype == PTC_FLOAT64 || dtype == PTC_INT64                          ? 8
         : dtype == PTC_BOOL || dtype == PTC_UINT8 || dtype == PTC_INT8     ? 1
         : dtype == PTC_FLOAT16 || dtype == PTC_BFLOAT16 || dtype == PTC_INT16 ? 2
                                                                              : 4;
}

struct Block {  // zero-filled floats of the device
  float* p = nullptr;
  bool alloc(size_t n) {
    dev::release(p);
    p = static_cast<float*>(dev::alloc(n * sizeof(float)));
    return p != nullptr;
  }
  ~Block() { dev::release(p); }
};

struct Model {
  const Layout* L = nullptr;
  Part fwd, bwd;
  void* fm = nullptr;
  void* bm = nullptr;
  std::vector<size_t> off;  // each parameter's offset in the blocks (floats)
  size_t total = 0;         // floats in each block
  Block params, grads, state1, state2;
  bool grads_zero = true;
  bool sgd_started = false;
  int64_t adam_steps = 0;
  int optimizer = 0;  // 0 none yet, 1 SGD, 2 AdamW: the state belongs to one
  uint64_t seed = 0;           // ptc_manual_seed
  uint64_t forward_calls = 0;  // since then: each forward call draws fresh dropout masks
  // The buffers the forward updates (batch-norm running statistics): current contents, and where
  // the next forward call writes (swapped after it succeeds).
  std::vector<void*> buffers, buffers_next;
  void* seed_scratch = nullptr;  // a seed for output_shape calls (sizes do not depend on it)
  ~Model() {
    for (void* b : buffers) dev::release(b);
    for (void* b : buffers_next) dev::release(b);
    dev::release(seed_scratch);
    dev::trim();
  }
};

struct Saved {
  Model* owner = nullptr;
  int64_t* seed = nullptr;  // (device) the dropout key of its forward call: the backward recomputes masks from it
  std::vector<void*> bufs;
  std::vector<size_t> bytes;
  std::vector<std::vector<int64_t>> sizes;           // saved values
  std::vector<std::vector<int64_t>> output_sizes;    // the model outputs
  ~Saved() {
    for (size_t i = 0; i < bufs.size(); ++i) dev::give(bufs[i], bytes[i]);
    dev::release(seed);
  }
};

inline int open(const Layout& L, const Part& fwd, const Part& bwd, const unsigned char* blob, Model** out) {
  Model* m = new (std::nothrow) Model;
  if (!m) return fail("out of memory");
  m->L = &L;
  m->fwd = fwd;
  m->bwd = bwd;
  for (int i = 0; i < L.num_params; ++i) {
    m->off.push_back(m->total);
    m->total += (static_cast<size_t>(numel(L.params[i])) + 15) / 16 * 16;
  }
  if (!m->params.alloc(m->total) || !m->grads.alloc(m->total) || !(m->seed_scratch = dev::alloc(sizeof(int64_t)))) {
    delete m;
    return fail(std::string("out of memory for the parameters: ") + dev::error());
  }
  for (int i = 0; i < L.num_params; ++i)
    if (!dev::upload(m->params.p + m->off[i], blob + L.param_blob_offset[i], static_cast<size_t>(numel(L.params[i])) * sizeof(float))) {
      delete m;
      return fail(std::string("copying the parameters: ") + dev::error());
    }
  for (int i = 0; i < L.num_buffers; ++i) {
    const size_t bytes = static_cast<size_t>(numel(L.buffers[i])) * dtype_bytes(L.buffers[i].dtype);
    void* a = dev::alloc(bytes);
    void* b = dev::alloc(bytes);
    m->buffers.push_back(a);
    m->buffers_next.push_back(b);
    if (!a || !b || !dev::upload(a, blob + L.buffer_blob_offset[i], bytes)) {
      delete m;
      return fail(std::string("allocating the buffers: ") + dev::error());
    }
  }
  if (fwd.open(&m->fm) != PTC_OK) {
    delete m;
    return PTC_ERROR;
  }
  if (bwd.open(&m->bm) != PTC_OK) {
    fwd.close(m->fm);
    delete m;
    return PTC_ERROR;
  }
  *out = m;
  return PTC_OK;
}

inline void close(Model* m) {
  if (!m) return;
  m->fwd.close(m->fm);
  m->bwd.close(m->bm);
  delete m;
}

inline ptc_tensor param_tensor(const Model* m, int i, float* base) {
  const ptc_tensor_info& t = m->L->params[i];
  return ptc_tensor{base + m->off[i], PTC_FLOAT32, t.rank, t.sizes};
}

// The dropout key of the next forward call: splitmix64 of the seed and the call number, so calls
// draw independent masks and the same seed replays them.
inline int64_t next_call_seed(Model* m) {
  uint64_t z = m->seed + 0x9E3779B97F4A7C15ull * ++m->forward_calls;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<int64_t>(z ^ (z >> 31));
}

inline ptc_tensor seed_tensor(void* seed) {
  static const int64_t no_sizes[1] = {0};
  return ptc_tensor{seed, PTC_INT64, 0, no_sizes};
}

// The forward's inputs: the user's, the parameters, then the dropout seed (when it takes one).
inline bool forward_inputs(const Model* m, int n, const ptc_tensor* in, std::vector<ptc_tensor>& all, void* seed) {
  const Layout& L = *m->L;
  if (n != L.num_user_inputs) {
    fail("expected " + std::to_string(L.num_user_inputs) + " inputs, got " + std::to_string(n));
    return false;
  }
  if (n > 0 && !in) {
    fail("the inputs array is null");
    return false;
  }
  all.assign(in, in + n);
  for (int i = 0; i < L.num_params; ++i) all.push_back(param_tensor(m, i, m->params.p));
  if (L.forward_seed) all.push_back(seed_tensor(seed));
  for (int i = 0; i < L.num_buffers; ++i)
    all.push_back(ptc_tensor{m->buffers[static_cast<size_t>(i)], L.buffers[i].dtype, L.buffers[i].rank, L.buffers[i].sizes});
  return true;
}

inline int output_shape(const Model* m, int n, const ptc_tensor* in, int index, int64_t* sizes) {
  if (!m) return fail("ptc_output_shape: model is null");
  if (index < 0 || index >= m->L->num_model_outputs) return fail("ptc_output_shape: output index out of range");
  std::vector<ptc_tensor> all;
  if (!forward_inputs(m, n, in, all, m->seed_scratch)) return PTC_ERROR;
  return m->fwd.output_shape(m->fm, static_cast<int>(all.size()), all.data(), index, sizes);
}

inline int forward_train(Model* m, int n_in, const ptc_tensor* in, int n_out, ptc_tensor* out, Saved** saved) {
  if (!m) return fail("ptc_forward_train: model is null");
  const Layout& L = *m->L;
  Saved* s = new (std::nothrow) Saved;
  if (!s) return fail("out of memory");
  s->owner = m;
  std::vector<ptc_tensor> all;
  if (L.forward_seed && !(s->seed = static_cast<int64_t*>(dev::alloc(sizeof(int64_t))))) {
    delete s;
    return fail(std::string("out of memory: ") + dev::error());
  }
  int rc = !forward_inputs(m, n_in, in, all, s->seed) ? PTC_ERROR
           : n_out != L.num_model_outputs ? fail("expected " + std::to_string(L.num_model_outputs) + " outputs, got " + std::to_string(n_out))
           : n_out > 0 && !out            ? fail("the outputs array is null")
           : check_memory("ptc_forward_train", "input", n_in, in) != PTC_OK   ? PTC_ERROR
           : check_memory("ptc_forward_train", "output", n_out, out) != PTC_OK ? PTC_ERROR
                                          : PTC_OK;
  if (rc != PTC_OK) {
    delete s;
    return rc;
  }
  if (L.forward_seed) {
    const int64_t key = next_call_seed(m);
    if (!dev::upload(s->seed, &key, sizeof key)) {
      delete s;
      return fail(std::string("setting the dropout seed: ") + dev::error());
    }
  }
  std::vector<ptc_tensor> outs(out, out + n_out);
  for (int i = 0; i < L.num_buffers; ++i)
    outs.push_back(ptc_tensor{m->buffers_next[static_cast<size_t>(i)], L.buffers[i].dtype, L.buffers[i].rank, L.buffers[i].sizes});
  const int first_saved = L.num_model_outputs + L.num_buffers;
  // Each saved value gets its own allocation, sized by the forward's output sizes for these inputs.
  s->bufs.reserve(static_cast<size_t>(L.num_saved));
  s->sizes.reserve(static_cast<size_t>(L.num_saved));  // (the tensors below point into these)
  for (int i = 0; i < L.num_saved; ++i) {
    ptc_tensor_info info;
    m->fwd.output_info(first_saved + i, &info);
    std::vector<int64_t> sz(static_cast<size_t>(info.rank) + 1);
    if (m->fwd.output_shape(m->fm, static_cast<int>(all.size()), all.data(), first_saved + i, sz.data()) != PTC_OK) {
      delete s;
      return PTC_ERROR;
    }
    sz.resize(static_cast<size_t>(info.rank));
    size_t bytes = dtype_bytes(info.dtype);
    for (int64_t d : sz) bytes *= static_cast<size_t>(d);
    void* buf = dev::take(bytes);
    if (!buf) {
      delete s;
      return fail("out of memory for the saved activations");
    }
    s->bufs.push_back(buf);
    s->bytes.push_back(bytes);
    s->sizes.push_back(std::move(sz));
    outs.push_back(ptc_tensor{buf, info.dtype, info.rank, s->sizes.back().data()});
  }
  if (m->fwd.run(m->fm, static_cast<int>(all.size()), all.data(), static_cast<int>(outs.size()), outs.data()) != PTC_OK) {
    delete s;
    return PTC_ERROR;
  }
  for (int i = 0; i < n_out; ++i) s->output_sizes.emplace_back(out[i].sizes, out[i].sizes + out[i].rank);
  m->buffers.swap(m->buffers_next);  // the updated buffers become current
  *saved = s;
  return PTC_OK;
}

inline int backward(Model* m, Saved* s, int n_g, const ptc_tensor* g, int n_ig, ptc_tensor* ig) {
  if (!m) return fail("ptc_backward: model is null");
  if (!s || s->owner != m) return fail("ptc_backward: saved is null or belongs to another model handle");
  const Layout& L = *m->L;
  if (n_g != L.num_model_outputs)
    return fail("ptc_backward: expected " + std::to_string(L.num_model_outputs) + " output gradients (one per output), got " +
                std::to_string(n_g));
  if (n_g > 0 && !g) return fail("ptc_backward: the output gradients array is null");
  if (n_ig != L.num_grad_inputs)
    return fail("ptc_backward: expected " + std::to_string(L.num_grad_inputs) + " input gradients, got " + std::to_string(n_ig));
  if (n_ig > 0 && !ig) return fail("ptc_backward: the input gradients array is null");
  if (check_memory("ptc_backward", "output gradient", n_g, g) != PTC_OK ||
      check_memory("ptc_backward", "input gradient", n_ig, ig) != PTC_OK)
    return PTC_ERROR;
  std::vector<ptc_tensor> ins;
  for (int i = 0; i < L.num_saved; ++i) {
    ptc_tensor_info info;
    m->bwd.input_info(i, &info);
    ins.push_back(ptc_tensor{s->bufs[i], info.dtype, info.rank, s->sizes[i].data()});
  }
  for (int i = 0; i < L.num_backward_params; ++i) ins.push_back(param_tensor(m, L.backward_params[i], m->params.p));
  if (L.backward_seed) ins.push_back(seed_tensor(s->seed));
  std::vector<Block> zeros(static_cast<size_t>(L.num_grad_outputs));
  for (int k = 0; k < L.num_grad_outputs; ++k) {
    int oi = L.grad_output_index[k];
    ptc_tensor t = g[oi];
    const std::vector<int64_t>& want = s->output_sizes[static_cast<size_t>(oi)];
    if (!t.data) {  // no gradient given: zeros of the backward's dtype (at most 8 bytes an element)
      ptc_tensor_info info;
      m->bwd.input_info(L.num_saved + L.num_backward_params + L.backward_seed + k, &info);
      size_t n = 1;
      for (int64_t d : want) n *= static_cast<size_t>(d);
      if (!zeros[static_cast<size_t>(k)].alloc(2 * n + 1)) return fail("out of memory");
      t = ptc_tensor{zeros[static_cast<size_t>(k)].p, info.dtype, static_cast<int32_t>(want.size()), want.data()};
    }
    if (t.rank != static_cast<int32_t>(want.size())) return fail("ptc_backward: output gradient " + std::to_string(oi) + " has rank " + std::to_string(t.rank) + ", the output has rank " + std::to_string(want.size()));
    for (int d = 0; d < t.rank; ++d)
      if (!t.sizes || t.sizes[d] != want[static_cast<size_t>(d)])
        return fail("ptc_backward: output gradient " + std::to_string(oi) + " does not have the sizes of the output of the forward it belongs to");
    ins.push_back(t);
  }
  // Parameter gradients go straight into the gradient block after ptc_zero_grad; otherwise into
  // scratch and are added (gradients accumulate, as in torch).
  Block scratch;
  float* dst = m->grads.p;
  if (!m->grads_zero) {
    if (!scratch.alloc(m->total)) return fail("out of memory");
    dst = scratch.p;
  }
  std::vector<ptc_tensor> outs;
  for (int i = 0; i < L.num_grad_params; ++i) outs.push_back(param_tensor(m, L.grad_param_index[i], dst));
  for (int i = 0; i < n_ig; ++i) outs.push_back(ig[i]);
  if (m->bwd.run(m->bm, static_cast<int>(ins.size()), ins.data(), static_cast<int>(outs.size()), outs.data()) != PTC_OK) {
    if (m->grads_zero) dev::zero(m->grads.p, m->total * sizeof(float));  // no partial gradients stay behind
    return PTC_ERROR;
  }
  if (!m->grads_zero && !dev::add(m->grads.p, scratch.p, static_cast<int64_t>(m->total)))
    return fail(std::string("accumulating the gradients: ") + dev::error());
  m->grads_zero = false;
  return PTC_OK;
}

inline int zero_grad(Model* m) {
  if (!m) return fail("ptc_zero_grad: model is null");
  if (!dev::zero(m->grads.p, m->total * sizeof(float))) return fail(std::string("ptc_zero_grad: ") + dev::error());
  m->grads_zero = true;
  return PTC_OK;
}

// torch.optim.SGD's step (the arithmetic: sgd_element in ptc_train_math.h), after its checks.
inline int sgd_step(Model* m, float lr, float momentum, float dampening, float weight_decay, int nesterov) {
  if (!m) return fail("ptc_sgd_step: model is null");
  if (!(lr >= 0) || !(momentum >= 0) || !(weight_decay >= 0) || !(dampening == dampening))
    return fail("ptc_sgd_step: lr, momentum and weight_decay must be >= 0 (as torch.optim.SGD requires)");
  if (m->optimizer == 2) return fail("ptc_sgd_step: this handle's optimizer state is AdamW's");
  if (nesterov && (momentum <= 0 || dampening != 0)) return fail("ptc_sgd_step: Nesterov momentum requires a momentum and zero dampening");
  if (momentum != 0 && !m->state1.p && !m->state1.alloc(m->total)) return fail("out of memory");
  m->optimizer = 1;
  const SgdArgs args{m->params.p, m->grads.p, m->state1.p, static_cast<int64_t>(m->total), lr, momentum, dampening, weight_decay,
                     nesterov != 0, !m->sgd_started};
  if (!dev::sgd(args)) return fail(std::string("ptc_sgd_step: ") + dev::error());
  m->sgd_started = true;
  return PTC_OK;
}

// torch.amp.GradScaler's unscale_: grads *= inv_scale, and whether any is inf or NaN.
inline int unscale_grads(Model* m, float inv_scale, int* found_inf) {
  if (!m || !found_inf) return fail("ptc_unscale_grads: model or found_inf is null");
  if (!(inv_scale > 0) || std::isinf(inv_scale)) return fail("ptc_unscale_grads: inv_scale must be positive and finite");
  bool found = false;
  if (!dev::unscale(m->grads.p, static_cast<int64_t>(m->total), inv_scale, &found))
    return fail(std::string("ptc_unscale_grads: ") + dev::error());
  *found_inf = found ? 1 : 0;
  return PTC_OK;
}

// torch.optim.AdamW's step (the arithmetic: adamw_element in ptc_train_math.h), after its checks.
inline int adamw_step(Model* m, float lr, float beta1, float beta2, float eps, float weight_decay) {
  if (!m) return fail("ptc_adamw_step: model is null");
  if (!(lr >= 0) || !(eps >= 0) || !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(weight_decay >= 0))
    return fail("ptc_adamw_step: need lr >= 0, eps >= 0, 0 <= beta1, beta2 < 1 and weight_decay >= 0 (as torch.optim.AdamW)");
  if (m->optimizer == 1) return fail("ptc_adamw_step: this handle's optimizer state is SGD's");
  if ((!m->state1.p && !m->state1.alloc(m->total)) || (!m->state2.p && !m->state2.alloc(m->total))) return fail("out of memory");
  m->optimizer = 2;
  const int64_t t = ++m->adam_steps;
  const double bc1 = 1 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const float step = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const AdamArgs args{m->params.p, m->grads.p, m->state1.p, m->state2.p, static_cast<int64_t>(m->total), step, bc2_sqrt,
                      1 - lr * weight_decay, beta1, beta2, eps};
  if (!dev::adamw(args)) return fail(std::string("ptc_adamw_step: ") + dev::error());
  return PTC_OK;
}

}  // namespace ptc_train
