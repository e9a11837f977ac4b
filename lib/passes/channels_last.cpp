// Channels-last convolution weights (CUDA, or the CPU with oneDNN): each 2-d forward convolution whose
// weight is a graph weight reads it through aten::contiguous(memory_format=channels_last), which
// fold_constants then evaluates into a KRSC constant ([O, C/g, KH, KW] stored O, KH, KW, C/g).
// cuDNN's tensor-core convolutions are NHWC x KRSC kernels: with NCHW weights it transposes each
// filter on every call (0.43 of resnet50's 3.7 ms at batch 32 on an H200, docs/cuda.md).
// The activations' layout is the lowering's business (LowerOptions::channels_last).
#include <algorithm>

#include "ptc/error.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {
namespace {

// A 2-d convolution (not transposed) whose weight is a 4-d tensor.
const Value* conv2d_weight(const Node& n) {
  const Arg* wa = rewrite::is_forward_convolution(n) ? n.arg("weight") : nullptr;
  const Value* w = wa && std::holds_alternative<Value*>(*wa) ? std::get<Value*>(*wa) : nullptr;
  return w && w->type.is_tensor() && w->type.rank() == 4 ? w : nullptr;
}

// Every element of an int-list argument equals v (a missing or None argument: the schema's
// default, which is v for the stride 1 and the padding 0 asked about here).
bool all_equal(const Arg* a, int64_t v) {
  if (!a || std::holds_alternative<std::monostate>(*a)) return true;
  if (const auto* l = std::get_if<std::vector<int64_t>>(a)) return std::all_of(l->begin(), l->end(), [v](int64_t e) { return e == v; });
  if (const auto* l = std::get_if<std::vector<sym::Expr>>(a))
    return std::all_of(l->begin(), l->end(), [v](const sym::Expr& e) { return e.as_const() == std::optional<int64_t>(v); });
  if (const auto* s = std::get_if<std::string>(a)) return v == 0 && *s == "valid";  // conv2d.padding's "valid" / "same"
  return false;
}

// A convolution's groups: 1 when the argument is absent, its value when it is an int or a constant
// SymInt expression (conv2d's schema), else nullopt (a symbolic count counts as grouped).
std::optional<int64_t> groups_of(const Node& n) {
  const Arg* groups = n.arg("groups");
  if (!groups) return 1;
  if (std::holds_alternative<int64_t>(*groups)) return std::get<int64_t>(*groups);
  if (std::holds_alternative<sym::Expr>(*groups)) return std::get<sym::Expr>(*groups).as_const();
  return std::nullopt;
}

// Whether `n` is a depthwise convolution (one input channel per group, as many groups as input
// channels) and `w` its weight.
bool depthwise_weight(const Node& n, const Value& w) {
  const std::optional<int64_t> k = groups_of(n);
  const Arg* in = n.arg("input");
  const Value* x = in && std::holds_alternative<Value*>(*in) ? std::get<Value*>(*in) : nullptr;
  return k && *k > 1 && x && x->type.is_tensor() && x->type.rank() == 4 && x->type.sizes[1] == sym::Expr(*k) && w.type.sizes[1] == sym::Expr(1);
}

}  // namespace

bool channels_last_pays(const Graph& g, bool exact) {
  int total = 0, depthwise_count = 0, cudnn_count = 0;  // exact fp32: where the convolutions would run
  for (const auto& np : g.nodes()) {
    const Value* w = conv2d_weight(*np);
    if (!w) continue;
    ++total;
    if (groups_of(*np) == std::optional<int64_t>(1)) {
      // Ungrouped: a 1x1 stride-1 unpadded one is a cuBLASLt GEMM under channels-last, the rest
      // run cuDNN's NHWC kernels.
      const bool pointwise = w->type.sizes[2] == sym::Expr(1) && w->type.sizes[3] == sym::Expr(1) && all_equal(np->arg("stride"), 1) &&
                             all_equal(np->arg("padding"), 0);
      cudnn_count += pointwise ? 0 : 1;
      continue;
    }
    // A depthwise convolution lowers to ptc's own NHWC kernel; other grouped ones would run
    // cuDNN's slow NHWC kernels.
    if (!depthwise_weight(*np, *w)) return false;
    ++depthwise_count;
  }
  // In exact fp32 cuDNN's NHWC kernels are slower than its NCHW ones (resnet50 b32 on an H200:
  // 16.9 against 12.5 ms), so channels-last pays only where they would run few of the
  // convolutions: a MobileNet-style net, whose depthwise layers become ptc's own NHWC kernels and
  // whose 1x1 layers cuBLASLt GEMMs (mobilenet_v2 b8: 1.44 -> 0.70 ms with graphs, docs/cuda.md).
  if (exact) return depthwise_count > 0 && cudnn_count * 8 <= total;
  return total > 0;
}

std::unique_ptr<Graph> channels_last_weights(const Graph& g, bool depthwise_channels_fastest) {
  rewrite::GraphRewriter rw(g);
  NodeBuilder b(rw.graph(), &g, "_cl");
  std::unordered_map<const Value*, Value*> done;  // source weight -> its channels-last version
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    const Value* w = conv2d_weight(n);
    if (!w || !rewrite::weight_of(g, w)) {
      rw.copy_node(n);
      continue;
    }
    b.set_origin(&n);
    Value*& cl = done[w];
    if (!cl && depthwise_channels_fastest && depthwise_weight(n, *w)) {
      // [C, 1, KH, KW] stored [KH, KW, C]: a tap's weights for consecutive channels are adjacent
      Value* hwc = b.op(OpKind::Contiguous, {{"self", b.op(OpKind::Permute, {{"self", rw.map(w)}, {"dims", std::vector<int64_t>{1, 2, 3, 0}}})}});
      cl = b.op(OpKind::Permute, {{"self", hwc}, {"dims", std::vector<int64_t>{3, 0, 1, 2}}});
    }
    if (!cl) cl = b.op(OpKind::Contiguous, {{"self", rw.map(w)}, {"memory_format", std::string("channels_last")}});
    std::vector<Arg> args;
    const auto& sa = n.op()->schema.args;
    for (size_t i = 0; i < n.args.size(); ++i) args.push_back(sa[i].name == "weight" ? Arg(cl) : rw.map_arg(n.args[i]));
    std::vector<Value*> outs;
    for (const Value* o : n.outputs) outs.push_back(rw.graph().add_value(o->name, o->type));
    rw.add_node(n, std::move(args), outs);
    for (size_t i = 0; i < outs.size(); ++i) rw.replace(n.outputs[i], outs[i]);
  }
  return rw.finish();
}

}  // namespace ptc
