// Training-mode batch norm for --train: decomposed into the ops it is made of, before the joint
// graph, so that its derivative comes from theirs (as AOTAutograd decomposes it), and its
// running-statistics update becomes buffer updates (Graph::updated_buffers) that the training
// library applies after each forward call.
//
//   mean = mean(x, dims)            dims: every dimension but 1 (the channels), kept
//   xc   = x - mean
//   var  = mean(xc * xc, dims)      biased: the normalization uses it
//   rstd = rsqrt(var + eps)
//   y    = xc * rstd [* weight] [+ bias]     weight, bias as [1, C, 1, ...]
//   running_mean' = running_mean * (1 - momentum) + mean * momentum
//   running_var'  = running_var * (1 - momentum) + var * n / (n - 1) * momentum   (n = numel / C)
//
// torch.export writes it as aten::batch_norm / native_batch_norm / _native_batch_norm_legit with
// training=True (the running statistics updated in place: recorded here as buffer updates) or as
// _native_batch_norm_legit_functional (new statistics as outputs, which the export's buffer
// mutations already name). The training IR also bumps num_batches_tracked with an in-place add_
// on the buffer: that becomes add + a buffer update.
#include <memory>

#include "ptc/autodiff.h"
#include "ptc/error.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {
namespace {

bool is_batch_norm(OpKind k) {
  return k == OpKind::BatchNorm || k == OpKind::NativeBatchNorm || k == OpKind::UnderscoreNativeBatchNormLegit ||
         k == OpKind::UnderscoreNativeBatchNormLegitFunctional;
}

const Value* tensor_arg(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  return a && std::holds_alternative<Value*>(*a) ? std::get<Value*>(*a) : nullptr;
}

double number_arg(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  auto v = a ? arg_number(*a) : std::nullopt;
  PTC_CHECK(v, "batch norm: argument ", name, " is not a number");
  return *v;
}

[[noreturn]] void fail(const Node& n, const std::string& what) {
  std::string where = n.source.user_frame();
  user_error("node '", n.name, "' (", n.op_name(), ")", where.empty() ? "" : " at " + where, ": ", what);
}

// The state-dict name of a Buffer input, or empty.
std::string buffer_target(const Graph& g, const Value* v) {
  for (const GraphInput& in : g.inputs)
    if (in.value == v && in.role == GraphInput::Role::Buffer) return in.target;
  return {};
}

}  // namespace

std::unique_ptr<Graph> decompose_training_batch_norm(const Graph& src) {
  bool any = false;
  for (const auto& n : src.nodes()) {
    const Arg* t = n->arg("training");
    any = any || (is_batch_norm(n->kind) && t && std::holds_alternative<bool>(*t) && std::get<bool>(*t)) ||
          (n->kind == OpKind::AddTensorInplace && !buffer_target(src, tensor_arg(*n, "self")).empty());
  }
  if (!any) return clone_graph(src);

  rewrite::GraphRewriter rw(src);
  Graph& g = rw.graph();
  NodeBuilder b(g, &src, "_bn");
  std::vector<std::pair<std::string, Value*>> updates;  // implicit (in-place) buffer updates
  auto update = [&](const Node& n, const Value* buffer, Value* now) {
    std::string target = buffer_target(src, buffer);
    if (target.empty()) fail(n, "updates a tensor in place that is not a buffer of the model; --train cannot keep it");
    for (const auto& u : updates)
      if (u.first == target) fail(n, "updates buffer '" + target + "' a second time in one forward; --train supports one update");
    updates.emplace_back(target, now);
  };

  for (const auto& np : src.nodes()) {
    const Node& n = *np;
    const Arg* tr = n.arg("training");
    const bool training = is_batch_norm(n.kind) && tr && std::holds_alternative<bool>(*tr) && std::get<bool>(*tr);
    if (n.kind == OpKind::AddTensorInplace && !buffer_target(src, tensor_arg(n, "self")).empty()) {
      b.set_origin(&n);
      Value* now = b.op(OpKind::AddTensor, {{"self", rw.map(tensor_arg(n, "self"))}, {"other", rw.map_arg(*n.arg("other"))},
                                            {"alpha", *n.arg("alpha")}});
      rw.replace(n.outputs.at(0), now);
      update(n, tensor_arg(n, "self"), now);
      continue;
    }
    if (!training) {
      if (n.kind == OpKind::UnderscoreNativeBatchNormLegitFunctional)
        fail(n, "batch norm with training=False in its functional form is not supported; export the model in train() or eval() mode");
      rw.copy_node(n);
      continue;
    }
    b.set_origin(&n);
    Value* x = rw.map(tensor_arg(n, "input"));
    const Type& xt = x->type;
    if (xt.rank() < 2) fail(n, "batch norm needs an input of rank >= 2, got " + xt.str());
    if (!dtype_is_float(xt.dtype) || dtype_size(xt.dtype) < 4)
      fail(n, "training-mode batch norm needs a float32 or float64 input, got " + xt.str());
    std::vector<int64_t> dims{0};
    sym::Expr count(1);
    for (size_t d = 0; d < xt.rank(); ++d)
      if (d != 1) {
        if (d > 0) dims.push_back(static_cast<int64_t>(d));
        count = count * xt.sizes[d];
      }
    if (auto c = count.as_const(); c && *c <= 1)
      fail(n, "batch norm in training mode needs more than one value per channel, got input " + xt.str());
    const sym::Expr C = xt.sizes[1];
    std::vector<sym::Expr> bshape(xt.rank(), sym::Expr(1));
    bshape[1] = C;
    const double eps = number_arg(n, "eps"), momentum = number_arg(n, "momentum");

    Value* mean = b.mean(x, dims, true);
    Value* xc = b.sub(x, mean);
    Value* var = b.mean(b.mul(xc, xc), dims, true);
    Value* rstd = b.op(OpKind::Rsqrt, {{"self", b.add_scalar(var, eps)}});
    Value* y = b.mul(xc, rstd);
    if (const Value* w = tensor_arg(n, "weight")) y = b.mul(y, b.reshape(rw.map(w), bshape));
    if (const Value* bias = tensor_arg(n, "bias")) y = b.add(y, b.reshape(rw.map(bias), bshape));
    rw.replace(n.outputs.at(0), y);
    Value* mean_c = b.reshape(mean, {C});
    Value* var_c = b.reshape(var, {C});
    if (n.outputs.size() >= 3) {
      rw.replace(n.outputs[1], mean_c);
      rw.replace(n.outputs[2], b.reshape(rstd, {C}));
    }

    const Value* rm = tensor_arg(n, "running_mean");
    const Value* rv = tensor_arg(n, "running_var");
    if (!rm && !rv) continue;  // track_running_stats=False
    if (!rm || !rv) fail(n, "batch norm with only one of running_mean / running_var is not supported");
    // Unbiased variance: var * n / (n - 1), n the values per channel (a size expression when the
    // batch is dynamic).
    Value* unbiased;
    if (auto c = count.as_const()) {
      unbiased = b.scale(var_c, static_cast<double>(*c) / static_cast<double>(*c - 1));
    } else {
      unbiased = b.op(OpKind::DivScalar, {{"self", b.op(OpKind::MulScalar, {{"self", var_c}, {"other", count}})},
                                          {"other", count - sym::Expr(1)}});
    }
    Value* rm_in = rw.map(rm);
    Value* rv_in = rw.map(rv);
    if (rm_in->type.dtype != xt.dtype || rv_in->type.dtype != xt.dtype)
      fail(n, "running statistics of another dtype than the input are not supported");
    Value* new_rm = b.add(b.scale(rm_in, 1 - momentum), b.scale(mean_c, momentum));
    Value* new_rv = b.add(b.scale(rv_in, 1 - momentum), b.scale(unbiased, momentum));
    if (n.kind == OpKind::UnderscoreNativeBatchNormLegitFunctional) {
      rw.replace(n.outputs.at(3), new_rm);
      rw.replace(n.outputs.at(4), new_rv);
    } else {
      update(n, rm, new_rm);
      update(n, rv, new_rv);
    }
  }
  std::unique_ptr<Graph> out = rw.finish();
  for (const auto& [target, v] : updates) {
    for (const auto& t : out->updated_buffers)
      if (t == target) user_error("buffer '", target, "' is updated twice in one forward; --train supports one update");
    out->outputs.push_back(v);
    out->updated_buffers.push_back(target);
  }
  return out;
}

}  // namespace ptc
