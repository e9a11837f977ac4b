// ptc_cuda_cudnn_graph.cu — forward convolutions through cuDNN's graph API; see
// ptc_cuda_cudnn_graph.h.
#include "ptc_cuda_cudnn_graph.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace ptc_cuda {
namespace {

thread_local std::string g_graph_error;

// Backend descriptors made while building one plan; the first failure sticks (later calls do
// nothing) and every descriptor is destroyed with the builder unless kept.
struct Builder {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::vector<cudnnBackendDescriptor_t> made;
  bool ok() const { return status == CUDNN_STATUS_SUCCESS; }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t) {
    cudnnBackendDescriptor_t d = nullptr;
    if (ok()) status = cudnnBackendCreateDescriptor(t, &d);
    if (d) made.push_back(d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n, const void* v) {
    if (ok()) status = cudnnBackendSetAttribute(d, name, type, n, v);
  }
  void finalize(cudnnBackendDescriptor_t d) {
    if (ok()) status = cudnnBackendFinalize(d);
  }
  ~Builder() {
    for (auto it = made.rbegin(); it != made.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
};

// Tensor ids in the graph and the variant pack.
enum : int64_t { kX = 1, kW = 2, kY = 3, kBias = 4, kResidual = 5, kVirtual = 10 };

cudnnBackendDescriptor_t tensor(Builder& b, int64_t uid, cudnnDataType_t dt, const int64_t* dims, const int64_t* strides, int64_t align,
                                bool is_virtual) {
  cudnnBackendDescriptor_t d = b.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  b.set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  b.set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  b.set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  b.set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  b.set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (is_virtual) {
    const bool v = true;
    b.set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
  }
  b.finalize(d);
  return d;
}

// out = mode(x[, other]) on float32 math; a ReLU with upper clip `clip` where clip > 0.
cudnnBackendDescriptor_t pointwise(Builder& b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t other,
                                   cudnnBackendDescriptor_t out, float clip = 0.f) {
  cudnnBackendDescriptor_t pw = b.make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  b.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  b.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  if (clip > 0.f) b.set(pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_FLOAT, 1, &clip);
  b.finalize(pw);
  cudnnBackendDescriptor_t op = b.make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  b.set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  b.set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (other) b.set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &other);
  b.set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
  b.finalize(op);
  return op;
}

// Whether an engine's numerics suit: float32 accumulation (no reduced-precision reduction),
// deterministic, and transform-based (FFT, Winograd) only where `transforms`.
bool numerics_ok(Builder& b, cudnnBackendDescriptor_t cfg, bool transforms) {
  cudnnBackendDescriptor_t engine = nullptr;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return false;
  b.made.push_back(engine);
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) != CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                               notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t i = 0; i < n; ++i) {
    const cudnnBackendNumericalNote_t t = notes[i];
    if (t == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION || t == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
    if (!transforms && (t == CUDNN_NUMERICAL_NOTE_FFT || t == CUDNN_NUMERICAL_NOTE_WINOGRAD || t == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 ||
                        t == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 || t == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13))
      return false;
  }
  return true;
}

// One shape's execution plan (and every descriptor it was built from), or none where no engine
// took the shape; and the variant pack of the pointers it last ran with.
struct GraphPlan {
  bool supported = false;
  std::vector<cudnnBackendDescriptor_t> keep;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t ws = 0;
  cudnnBackendDescriptor_t pack = nullptr;
  std::vector<void*> pack_ptrs;
  void release() {
    if (pack) cudnnBackendDestroyDescriptor(pack);
    for (auto it = keep.rbegin(); it != keep.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
    keep.clear();
    pack = nullptr;
  }
};

// The pointers of a call in variant-pack order (x, w, y, then bias and residual where fused), and
// their ids.
void operands(const CudnnConv& a, std::vector<int64_t>& uids, std::vector<void*>& ptrs) {
  uids = {kX, kW, kY};
  ptrs = {a.x, a.w, a.y};
  if (a.bias) {
    uids.push_back(kBias);
    ptrs.push_back(const_cast<void*>(a.bias));
  }
  if (a.bias && a.residual) {
    uids.push_back(kResidual);
    ptrs.push_back(const_cast<void*>(a.residual));
  }
}

cudnnStatus_t make_pack(const CudnnConv& a, void* ws, cudnnBackendDescriptor_t* pack) {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  operands(a, uids, ptrs);
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, pack);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  const int64_t n = static_cast<int64_t>(uids.size());
  s = cudnnBackendSetAttribute(*pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(*pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs.data());
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(*pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(*pack);
  if (s != CUDNN_STATUS_SUCCESS) {
    cudnnBackendDestroyDescriptor(*pack);
    *pack = nullptr;
  }
  return s;
}

// The largest power of two up to 16 that divides every operand's address (operands' order).
int64_t alignment(const std::vector<void*>& ptrs) {
  int64_t align = 16;
  for (void* p : ptrs)
    while (align > 2 && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

constexpr int kRetimed = 4;      // candidates timed on a shape's first call (as the legacy path's pick)
constexpr int kCandidates = 12;  // heuristic results tried for a plan that finalizes

// Builds the plan for `a` into `out`: the graph, cuDNN's heuristics (mode A), the first
// candidates whose numerics suit and that finalize within the workspace limit, the fastest of the
// first kRetimed on the call's buffers unless the stream is being captured.
const char* build(cudnnHandle_t h, const Ctx& ctx, const CudnnConv& a, int64_t align, bool transforms, cudaStream_t stream,
                  GraphPlan& out) {
  Builder b;
  const cudnnDataType_t dt = a.type == kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const int64_t cg = a.C / a.groups;
  const int64_t xd[4] = {a.N, a.C, a.H, a.W}, yd[4] = {a.N, a.O, a.OH, a.OW}, wd[4] = {a.O, cg, a.KH, a.KW};
  const int64_t krsc[4] = {a.KH * a.KW * cg, 1, a.KW * cg, cg}, kcrs[4] = {cg * a.KH * a.KW, a.KH * a.KW, a.KW, 1};
  const int64_t bd[4] = {1, a.O, 1, 1}, bs[4] = {a.O, 1, 1, 1};
  cudnnBackendDescriptor_t x = tensor(b, kX, dt, xd, a.xs, align, false);
  cudnnBackendDescriptor_t w = tensor(b, kW, dt, wd, a.w_nhwc ? krsc : kcrs, align, false);
  cudnnBackendDescriptor_t y = tensor(b, kY, dt, yd, a.ys, align, false);
  // With an epilogue the convolution writes a virtual float32 tensor that the pointwise chain reads.
  int64_t next_virtual = kVirtual;
  auto virt = [&]() { return tensor(b, next_virtual++, f32, yd, a.ys, align, true); };
  cudnnBackendDescriptor_t conv_out = a.bias ? virt() : y;

  cudnnBackendDescriptor_t conv = b.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t dims = 2, dil[2] = {a.dh, a.dw}, str[2] = {a.sh, a.sw}, pad[2] = {a.ph, a.pw};
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  b.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  b.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  b.finalize(conv);
  cudnnBackendDescriptor_t op = b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float one = 1.f, zero = 0.f;
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv_out);
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one);
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero);
  b.finalize(op);
  std::vector<cudnnBackendDescriptor_t> ops{op};
  if (a.bias) {
    // y = act(conv + bias [+ residual]): each step a float32 virtual tensor, the last one y
    cudnnBackendDescriptor_t bias = tensor(b, kBias, dt, bd, bs, align, false);
    const bool act = a.act != kActNone;
    cudnnBackendDescriptor_t t = (a.residual || act) ? virt() : y;
    ops.push_back(pointwise(b, CUDNN_POINTWISE_ADD, conv_out, bias, t));
    if (a.residual) {
      cudnnBackendDescriptor_t r = tensor(b, kResidual, dt, yd, a.ys, align, false);
      cudnnBackendDescriptor_t u = act ? virt() : y;
      ops.push_back(pointwise(b, CUDNN_POINTWISE_ADD, t, r, u));
      t = u;
    }
    if (act) ops.push_back(pointwise(b, CUDNN_POINTWISE_RELU_FWD, t, nullptr, y, a.act == kActRelu6 ? 6.f : 0.f));
  }
  cudnnBackendDescriptor_t graph = b.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data());
  b.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  b.finalize(graph);
  cudnnBackendDescriptor_t heur = b.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  b.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  b.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
  b.finalize(heur);
  int64_t count = 0;
  if (b.ok()) b.status = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  if (!b.ok() || count <= 0) return nullptr;  // unsupported: the graph or its heuristics failed
  std::vector<cudnnBackendDescriptor_t> cfgs(static_cast<size_t>(count), nullptr);
  for (auto& c : cfgs) c = b.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  if (b.ok()) b.status = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data());
  if (!b.ok()) return nullptr;

  // The workspace an engine may take (from the model's pool for the timing).
  const size_t limit = conv_workspace_limit(ctx);
  struct Candidate {
    cudnnBackendDescriptor_t plan;
    int64_t ws;
  };
  std::vector<Candidate> found;
  for (int64_t i = 0; i < got && static_cast<int>(found.size()) < kRetimed && i < kCandidates; ++i) {
    if (!numerics_ok(b, cfgs[static_cast<size_t>(i)], transforms)) continue;
    cudnnBackendDescriptor_t plan = nullptr;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) continue;
    b.made.push_back(plan);
    int64_t ws = 0, n = 0;
    if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[static_cast<size_t>(i)]) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
        ws < 0 || static_cast<size_t>(ws) > limit)
      continue;
    found.push_back({plan, ws});
  }
  if (found.empty()) return nullptr;

  size_t best = 0;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool timed = found.size() > 1 && a.residual != a.y && cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
                     capture == cudaStreamCaptureStatusNone;
  if (timed) {
    int64_t most = 0;
    for (const Candidate& c : found) most = std::max(most, c.ws);
    void* ws = ctx.gemm_ws;
    void* own = nullptr;
    if (static_cast<size_t>(most) > ctx.gemm_ws_bytes) {
      if (pool_alloc(&own, static_cast<size_t>(most), ctx.pool, stream) == cudaSuccess) {
        ws = own;
      } else {
        cudaGetLastError();
        most = static_cast<int64_t>(ctx.gemm_ws_bytes);
      }
    }
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
      cudnnBackendDescriptor_t pack = nullptr;
      if (make_pack(a, ws, &pack) == CUDNN_STATUS_SUCCESS) {
        float best_ms = INFINITY;
        for (size_t c = 0; c < found.size(); ++c) {
          if (found[c].ws > most || cudnnBackendExecute(h, found[c].plan, pack) != CUDNN_STATUS_SUCCESS) continue;  // (warm-up)
          cudaEventRecord(e0, stream);
          bool good = true;
          for (int r = 0; r < 3; ++r) good = good && cudnnBackendExecute(h, found[c].plan, pack) == CUDNN_STATUS_SUCCESS;
          cudaEventRecord(e1, stream);
          float ms = 0.f;
          if (good && cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms < best_ms) {
            best_ms = ms;
            best = c;
          }
        }
        cudnnBackendDestroyDescriptor(pack);
      }
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (own) {
      cudaFreeAsync(own, stream);
      if (ctx.pool && cudaStreamSynchronize(stream) == cudaSuccess) cudaMemPoolTrimTo(ctx.pool, 0);
    }
    cudaGetLastError();
  }
  // Keep the chosen plan and what it was built from; the other candidates go.
  for (size_t c = 0; c < found.size(); ++c) {
    if (c == best) continue;
    for (auto& d : b.made)
      if (d == found[c].plan) d = nullptr;
    cudnnBackendDestroyDescriptor(found[c].plan);
  }
  for (cudnnBackendDescriptor_t d : b.made)
    if (d) out.keep.push_back(d);
  b.made.clear();
  out.plan = found[best].plan;
  out.ws = found[best].ws;
  out.supported = true;
  return nullptr;
}

}  // namespace

struct GraphConvPlans {
  std::map<std::vector<int64_t>, GraphPlan> plans;
  ~GraphConvPlans() {
    for (auto& [key, p] : plans) p.release();
  }
};

GraphConvPlans* graph_conv_plans_create() { return new (std::nothrow) GraphConvPlans(); }
void graph_conv_plans_destroy(GraphConvPlans* plans) { delete plans; }

const char* graph_conv_forward(GraphConvPlans* plans, cudnnHandle_t h, const Ctx& ctx, const CudnnConv& a, bool transforms,
                               cudaStream_t stream, bool* unsupported) {
  *unsupported = false;
  if (!plans || a.direction != kConvForward || a.type == kF32) {
    *unsupported = true;
    return nullptr;
  }
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  operands(a, uids, ptrs);
  const int64_t align = alignment(ptrs);
  const std::vector<int64_t> key{a.N, a.C, a.H, a.W, a.O, a.KH, a.KW, a.OH, a.OW, a.sh, a.sw, a.ph, a.pw, a.dh, a.dw, a.groups,
                                 a.xs[0], a.xs[1], a.xs[2], a.xs[3], a.ys[0], a.ys[1], a.ys[2], a.ys[3], a.w_nhwc, a.type,
                                 a.bias ? 1 + a.act : 0, a.bias && a.residual ? 1 : 0, align, transforms ? 1 : 0,
                                 static_cast<int64_t>(ctx.gemm_ws_bytes)};
  auto it = plans->plans.find(key);
  if (it == plans->plans.end()) {
    GraphPlan p;
    const char* err = build(h, ctx, a, align, transforms, stream, p);
    if (err) {
      p.release();
      return err;
    }
    it = plans->plans.emplace(key, p).first;
  }
  GraphPlan& p = it->second;
  if (!p.supported) {
    *unsupported = true;
    return nullptr;
  }
  void* ws = ctx.gemm_ws;
  void* own = nullptr;  // a plan that takes more than the run's workspace
  if (static_cast<size_t>(p.ws) > ctx.gemm_ws_bytes) {
    if (pool_alloc(&own, static_cast<size_t>(p.ws), ctx.pool, stream) != cudaSuccess) {
      cudaGetLastError();
      g_graph_error = "cudnn_conv: out of device memory for a " + std::to_string(p.ws >> 20) + " MiB convolution workspace";
      return g_graph_error.c_str();
    }
    ws = own;
  }
  // The variant pack: rebuilt only when a pointer differs from the last call's.
  ptrs.push_back(ws);
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  if (!p.pack || ptrs != p.pack_ptrs) {
    if (p.pack) cudnnBackendDestroyDescriptor(p.pack);
    p.pack = nullptr;
    s = make_pack(a, ws, &p.pack);
    if (s == CUDNN_STATUS_SUCCESS) p.pack_ptrs = ptrs;
  }
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(h, p.plan, p.pack);
  if (own) cudaFreeAsync(own, stream);
  if (s != CUDNN_STATUS_SUCCESS) {
    g_graph_error = std::string("cudnnBackendExecute failed (cuDNN: ") + cudnnGetErrorString(s) + ")";
    return g_graph_error.c_str();
  }
  return nullptr;
}

}  // namespace ptc_cuda
