// Library ops in float32: a GEMM, convolution or attention node that reads or writes float16 /
// bfloat16 tensors, where the backend has no kernel of its class in that dtype (the CPU's GEMM,
// convolution and attention kernels; CUDA's attention so far), gets float32 operands (a dtype
// conversion in front of each such tensor input), computes in float32 and converts its results
// back to their recorded dtype. This is what torch's CPU kernels do for these dtypes too:
// accumulate in float32, round the result once.
//
// The conversions of weights (the usual case: a half-precision model's parameters) are constant
// folded by the next pass, so a GEMM reads a float32 copy of its weight made at compile time. The
// conversions of activations are pointwise nodes that fuse with their producers and consumers.
#include <unordered_map>

#include "ptc/error.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"

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
// floating tensor it reads or writes has one half dtype.
bool native_half(const Node& n, const HalfLibraryOps& native) {
  if (!native.native(library_class(n.kind))) return false;
  std::optional<DType> half;
  auto same = [&](const Value* v) {
    if (!v->type.is_tensor() || !dtype_is_float(v->type.dtype)) return true;
    if (!dtype_is_half(v->type.dtype) || (half && *half != v->type.dtype)) return false;
    half = v->type.dtype;
    return true;
  };
  for (const Value* v : n.inputs())
    if (!same(v)) return false;
  for (const Value* v : n.outputs)
    if (!same(v)) return false;
  return true;
}

// The nodes library_ops_f32 converts.
bool converts(const Node& n, const HalfLibraryOps& native) {
  return library_class(n.kind) != LibraryClass::None && touches_half(n) && !native_half(n, native);
}

}  // namespace

std::unique_ptr<Graph> library_ops_f32(const Graph& g, const HalfLibraryOps& native) {
  bool any = false;
  for (const auto& np : g.nodes()) any = any || converts(*np, native);
  if (!any) return clone_graph(g);

  rewrite::GraphRewriter rw(g);
  NodeBuilder b(rw.graph(), &g, "_f32");
  std::unordered_map<const Value*, Value*> widened;  // new-graph value -> its float32 conversion
  auto widen = [&](Value* v) {
    auto it = widened.find(v);
    if (it != widened.end()) return it->second;
    return widened[v] = b.cast(v, DType::Float32);
  };
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    if (!converts(n, native)) {
      rw.copy_node(n);
      continue;
    }
    b.set_origin(&n);
    std::vector<Arg> args;
    for (const Arg& a : n.args) {
      Arg m = rw.map_arg(a);
      if (auto v = std::get_if<Value*>(&m); v && *v && (*v)->type.is_tensor() && dtype_is_half((*v)->type.dtype)) m = widen(*v);
      args.push_back(std::move(m));
    }
    std::vector<Value*> outs;
    for (const Value* o : n.outputs) {
      Type t = o->type;
      if (t.is_tensor() && dtype_is_half(t.dtype)) t.dtype = DType::Float32;
      outs.push_back(rw.new_value(o->name + "_f32", std::move(t)));
    }
    rw.add_node(n, std::move(args), outs);
    for (size_t i = 0; i < outs.size(); ++i) {
      const Value* o = n.outputs[i];
      rw.replace(o, o->type.is_tensor() && dtype_is_half(o->type.dtype) ? b.cast(outs[i], o->type.dtype) : outs[i]);
    }
  }
  return rw.finish();
}

}  // namespace ptc
