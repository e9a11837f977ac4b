// Batch-norm folding: an inference batch norm right after a convolution (or a 2-d linear) whose
// weights are all constants becomes part of that convolution's weight and bias.
//
//   y = (conv(x, w) + b - mean) * gamma / sqrt(var + eps) + beta
//     = conv(x, w * s) + (b - mean) * s + beta,      s = gamma / sqrt(var + eps) per channel
#include <cmath>
#include <unordered_map>

#include "ptc/error.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {
namespace {

const Value* value_arg(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  auto v = a ? std::get_if<Value*>(a) : nullptr;
  return v ? *v : nullptr;
}

bool is_none(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  return !a || std::holds_alternative<std::monostate>(*a) || (std::holds_alternative<Value*>(*a) && !std::get<Value*>(*a));
}

std::optional<double> number_arg(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  if (!a) return std::nullopt;
  if (auto d = std::get_if<double>(a)) return *d;
  if (auto i = std::get_if<int64_t>(a)) return static_cast<double>(*i);
  return std::nullopt;
}

// A convolution (not transposed) or a linear layer: the producers a batch norm folds into.
bool is_foldable_producer(const Node& n) {
  return n.kind == OpKind::Linear || rewrite::is_forward_convolution(n);
}

// An inference batch norm: its input, parameters and eps; nullopt for anything else.
struct BatchNormInfo {
  const Value *input, *weight, *bias, *mean, *var;
  double eps;
};
std::optional<BatchNormInfo> inference_batch_norm(const Node& n, const std::unordered_map<const Value*, int>& uses) {
  switch (n.kind) {
    case OpKind::BatchNorm:
    case OpKind::NativeBatchNorm: {
      const Arg* t = n.arg("training");
      if (!t || !std::holds_alternative<bool>(*t) || std::get<bool>(*t)) return std::nullopt;
      break;
    }
    case OpKind::UnderscoreNativeBatchNormLegitNoTraining: break;
    default: return std::nullopt;
  }
  // Only the normalized output may be read (the others are the saved mean / invstd).
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (uses.count(n.outputs[i])) return std::nullopt;
  auto eps = number_arg(n, "eps");
  if (!eps) return std::nullopt;
  BatchNormInfo bn{value_arg(n, "input"), value_arg(n, "weight"), value_arg(n, "bias"),
                   value_arg(n, "running_mean"), value_arg(n, "running_var"), *eps};
  if (!bn.input || !bn.mean || !bn.var) return std::nullopt;
  if (!is_none(n, "weight") && !bn.weight) return std::nullopt;
  if (!is_none(n, "bias") && !bn.bias) return std::nullopt;
  return bn;
}

// A weight's elements (row-major) when it is a 1-d [channels] float tensor.
std::optional<std::vector<double>> per_channel(const Graph& g, const Value* v, int64_t channels) {
  const TensorData* td = rewrite::weight_of(g, v);
  if (!td || !dtype_is_float(td->type.dtype) || !rewrite::dtype_supported(td->type.dtype)) return std::nullopt;
  auto l = rewrite::static_layout(td->type);
  if (!l || l->sizes != std::vector<int64_t>{channels}) return std::nullopt;
  return rewrite::read_all(*td);
}

// An owned tensor with `like`'s dtype, sizes and strides (contiguous when those are not static),
// at storage offset 0.
TensorData owned_like(const Type& like, const std::vector<double>& values) {
  Type t = like;
  t.requires_grad = false;
  t.storage_offset = 0;
  if (!rewrite::static_layout(t)) t.strides = contiguous_strides(t.sizes);
  return rewrite::owned_tensor(t, values);
}

// "c1.weight" -> "c1.bias", "p_c1_weight" -> "p_c1_bias"; else NAME + "_bias".
std::string bias_name_for(const std::string& weight_name) {
  const std::string w = "weight";
  if (weight_name.size() >= w.size() && weight_name.compare(weight_name.size() - w.size(), w.size(), w) == 0)
    return weight_name.substr(0, weight_name.size() - w.size()) + "bias";
  return weight_name + "_bias";
}

struct Fold {
  const Node* producer;
  const Node* bn;
  TensorData weight, bias;
};

// The folded weight and bias for `producer` followed by `bn`; nullopt when the pattern's
// conditions do not hold.
std::optional<Fold> try_fold(const Graph& g, const Node& producer, const Node& bn_node, const BatchNormInfo& bn) {
  const Value* w = value_arg(producer, "weight");
  const TensorData* wd = rewrite::weight_of(g, w);
  if (!wd || !dtype_is_float(wd->type.dtype) || !rewrite::dtype_supported(wd->type.dtype)) return std::nullopt;
  auto wl = rewrite::static_layout(wd->type);
  if (!wl || wl->sizes.empty()) return std::nullopt;
  const int64_t channels = wl->sizes[0];
  // A batch norm normalizes dim 1: the linear's output features only when its output is 2-d.
  const Value* out = producer.outputs[0];
  if (!out->type.is_tensor() || out->type.rank() < 2) return std::nullopt;
  if (producer.kind == OpKind::Linear && out->type.rank() != 2) return std::nullopt;
  if (out->type.sizes[1].as_const() != channels) return std::nullopt;

  std::vector<double> bias(static_cast<size_t>(channels), 0.0);
  if (!is_none(producer, "bias")) {
    auto b = per_channel(g, value_arg(producer, "bias"), channels);
    if (!b) return std::nullopt;
    bias = *b;
  }
  auto mean = per_channel(g, bn.mean, channels);
  auto var = per_channel(g, bn.var, channels);
  if (!mean || !var) return std::nullopt;
  std::vector<double> gamma(static_cast<size_t>(channels), 1.0), beta(static_cast<size_t>(channels), 0.0);
  if (bn.weight) {
    auto x = per_channel(g, bn.weight, channels);
    if (!x) return std::nullopt;
    gamma = *x;
  }
  if (bn.bias) {
    auto x = per_channel(g, bn.bias, channels);
    if (!x) return std::nullopt;
    beta = *x;
  }

  std::vector<double> wv = rewrite::read_all(*wd);
  const size_t per = wv.size() / static_cast<size_t>(channels);
  for (size_t c = 0; c < static_cast<size_t>(channels); ++c) {
    // torch computes invstd in the tensor's dtype; double here, rounded once at the end.
    double s = gamma[c] / std::sqrt((*var)[c] + bn.eps);
    for (size_t k = 0; k < per; ++k) wv[c * per + k] *= s;
    bias[c] = (bias[c] - (*mean)[c]) * s + beta[c];
  }
  Type wt = w->type.is_tensor() && w->type.dtype == wd->type.dtype && w->type.sizes == wd->type.sizes
                ? w->type : wd->type;
  Fold f{&producer, &bn_node, owned_like(wt, wv), owned_like(Type::tensor(wd->type.dtype, {channels}), bias)};
  return f;
}

}  // namespace

std::unique_ptr<Graph> fold_batch_norm(const Graph& g) {
  auto uses = rewrite::count_uses(g);
  std::unordered_map<const Value*, bool> is_output;
  for (const Value* o : g.outputs) is_output[o] = true;

  // Find the pairs first: producer -> its fold.
  std::unordered_map<const Node*, Fold> by_producer;
  std::unordered_map<const Node*, const Node*> bn_of;  // batch norm -> its producer
  for (const auto& n : g.nodes()) {
    auto bn = inference_batch_norm(*n, uses);
    if (!bn) continue;
    const Node* p = bn->input->producer;
    if (!p || p->outputs.size() != 1 || !is_foldable_producer(*p)) continue;
    if (uses[bn->input] != 1 || is_output.count(bn->input)) continue;  // the conv output feeds only the bn
    if (p->outputs[0]->type.dtype != n->outputs[0]->type.dtype) continue;
    auto f = try_fold(g, *p, *n, *bn);
    if (!f) continue;
    bn_of[n.get()] = p;
    by_producer.emplace(p, std::move(*f));
  }

  rewrite::GraphRewriter rw(g);
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    if (bn_of.count(&n)) continue;  // replaced by its producer's new output (below)
    auto it = by_producer.find(&n);
    if (it == by_producer.end()) {
      rw.copy_node(n);
      continue;
    }
    Fold& f = it->second;
    const Value* w = value_arg(n, "weight");
    const Value* b = is_none(n, "bias") ? nullptr : value_arg(n, "bias");
    const GraphInput* win = nullptr;
    for (const GraphInput& in : g.inputs) if (in.value == w) win = &in;
    PTC_CHECK(win, "folded weight is not a graph input");
    Value* nw = rw.add_constant(w->name + "_bn_folded", win->target + ".bn_folded", std::move(f.weight));
    std::string bias_name = b ? b->name : bias_name_for(w->name);
    std::string bias_target = bias_name_for(win->target);
    if (b)
      for (const GraphInput& in : g.inputs) if (in.value == b) bias_target = in.target;
    Value* nb = rw.add_constant(bias_name + "_bn_folded", bias_target + ".bn_folded", std::move(f.bias));

    std::vector<Arg> args;
    const auto& sa = n.op()->schema.args;
    for (size_t i = 0; i < n.args.size(); ++i) {
      if (sa[i].name == "weight") args.emplace_back(nw);
      else if (sa[i].name == "bias") args.emplace_back(nb);
      else args.push_back(rw.map_arg(n.args[i]));
    }
    // The fused node keeps the producer's name, source and output name, and takes the batch
    // norm's output type; a batch norm output that is a graph output keeps its name.
    const Value* bn_out = f.bn->outputs[0];
    const std::string& name = is_output.count(bn_out) ? bn_out->name : n.outputs[0]->name;
    Value* out = rw.graph().add_value(name, bn_out->type);
    rw.add_node(n, std::move(args), {out});
    rw.replace(n.outputs[0], out);
    rw.replace(bn_out, out);
  }
  return rw.finish();
}

}  // namespace ptc
