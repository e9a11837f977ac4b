// Library ops in float32: a GEMM, convolution or attention node that reads or writes float16 /
// bfloat16 tensors, where the backend has no kernel of its class in that dtype (the CPU's GEMM,
// convolution and attention kernels; CUDA's attention for targets before sm_80), gets float32 operands (a dtype
// conversion in front of each such tensor input), computes in float32 and converts its results
// back to their recorded dtype. This is what torch's CPU kernels do for these dtypes too:
// accumulate in float32, round the result once.
//
// The conversions of weights (the usual case: a half-precision model's parameters) are constant
// folded by the next pass, so a GEMM reads a float32 copy of its weight made at compile time. The
// conversions of activations are pointwise nodes that fuse with their producers and consumers.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "ptc/error.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"
#include "convert_operands.h"

namespace ptc {
namespace {

bool touches_half(const Node& n) {
  for (const Value* v : n.inputs())
    if (v->type.is_tensor() && dtype_is_half(v->type.dtype)) return true;
  for (const Value* v : n.outputs)
    if (v->type.is_tensor() && dtype_is_half(v->type.dtype)) return true;
  return false;
}

// Whether the backend computes `n` as it is: its class is native in half precision and every
// floating tensor it reads or writes has one half dtype (an attention's float32 mask aside:
// library_f32_arg).
// A model weight (a parameter, buffer the program does not update, or constant), or autocast's
// conversion of one.
bool constant_weight(const Graph& g, const Value* v) {
  if (v && v->producer && v->producer->kind == OpKind::ToDtype && !v->producer->inputs().empty()) v = v->producer->inputs()[0];
  if (!v || v->producer) return false;
  for (const GraphInput& in : g.inputs)
    if (in.value == v)
      return in.role != GraphInput::Role::User &&
             std::find(g.updated_buffers.begin(), g.updated_buffers.end(), in.target) == g.updated_buffers.end();
  return false;
}

bool native_half(const Graph& g, const Node& n, const HalfLibraryOps& native) {
  if (!native.native(library_class(n.kind))) return false;
  if (library_class(n.kind) == LibraryClass::Gemm && native.gemm_constant_weight) {
    const Arg* w = n.kind == OpKind::Linear ? n.arg("weight") : n.kind == OpKind::Addmm ? n.arg("mat2") : nullptr;
    if (!w || !std::holds_alternative<Value*>(*w) || !constant_weight(g, std::get<Value*>(*w))) return false;
    if (n.kind == OpKind::Addmm) {  // alpha = beta = 1 (GPT-2's Conv1D): the bias is the library's
      for (const char* s : {"alpha", "beta"}) {
        const Arg* x = n.arg(s);
        if (x && !std::holds_alternative<std::monostate>(*x) && arg_number(*x) != std::optional<double>(1.0)) return false;
      }
    }
  }
  // The fused multi-head attention's projections lower as float32 GEMMs (lower_extern.cpp):
  // widened here, its weights convert once, at compile time.
  if (n.kind == OpKind::UnderscoreNativeMultiHeadAttention) return false;
  std::optional<DType> half;
  auto same = [&](const Value* v) {
    if (!v->type.is_tensor() || !dtype_is_float(v->type.dtype)) return true;
    if (!dtype_is_half(v->type.dtype) || (half && *half != v->type.dtype)) return false;
    half = v->type.dtype;
    return true;
  };
  for (size_t i = 0; i < n.args.size(); ++i) {
    std::vector<const Value*> vs;
    if (auto v = std::get_if<Value*>(&n.args[i])) vs.push_back(*v);
    if (auto l = std::get_if<std::vector<Value*>>(&n.args[i])) vs.assign(l->begin(), l->end());
    for (const Value* v : vs) {
      if (!v || (v->type.is_tensor() && v->type.dtype == DType::Float32 && library_f32_arg(n, i))) continue;
      if (!same(v)) return false;
    }
  }
  for (const Value* v : n.outputs)
    if (!same(v)) return false;
  return !(half == DType::Float16 && !native.float16);
}

// The nodes library_ops_f32 converts.
bool converts(const Graph& g, const Node& n, const HalfLibraryOps& native) {
  return library_class(n.kind) != LibraryClass::None && touches_half(n) && !native_half(g, n, native);
}

}  // namespace

std::unique_ptr<Graph> library_ops_f32(const Graph& g, const HalfLibraryOps& native) {
  bool any = false;
  for (const auto& np : g.nodes()) any = any || converts(g, *np, native);
  if (!any) return clone_graph(g);

  rewrite::GraphRewriter rw(g);
  NodeBuilder b(rw.graph(), &g, "_f32");
  std::unordered_map<const Value*, Value*> widened;  // new-graph value -> its float32 conversion
  auto half = [](const Value* v) { return v->type.is_tensor() && dtype_is_half(v->type.dtype); };
  for (const auto& np : g.nodes()) {
    if (converts(g, *np, native))
      convert_operands(rw, b, *np, DType::Float32, [&](const Value* v, size_t) { return half(v); }, half, widened, "_f32");
    else
      rw.copy_node(*np);
  }
  return rw.finish();
}

}  // namespace ptc
