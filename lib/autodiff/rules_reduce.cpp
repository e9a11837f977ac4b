// Derivatives of reductions, normalizations and softmax.
//   sum/mean:    the gradient broadcast back over the reduced dimensions (/ count for mean)
//   var:         dx = g 2 (x - mean) / (N - correction); std: the same with g / (2 std)
//   layer norm:  xhat = (x - mu) rstd;  dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
//                dxhat = dy w, dw = sum(dy xhat), db = sum(dy) over the leading dimensions
//   rms norm:    xhat = x r;  dx = r (dxhat - xhat mean(dxhat xhat))
//   group norm:  layer norm's over each group of channels and positions, the affine per channel
//   softmax:     dx = y (dy - sum(dy y));  log_softmax: dx = dy - exp(y) sum(dy)
#include <algorithm>

#include "rules.h"

namespace ptc::autodiff {
namespace {

std::vector<int64_t> reduced_dims(const GradContext& c, const char* name, size_t rank) {
  std::vector<int64_t> dims = c.ints(name);
  if (dims.empty())
    for (size_t i = 0; i < rank; ++i) dims.push_back(static_cast<int64_t>(i));
  for (auto& d : dims) {
    if (d < -static_cast<int64_t>(rank) || d >= static_cast<int64_t>(std::max<size_t>(rank, 1))) c.fail("dimension out of range");
    if (d < 0) d += static_cast<int64_t>(rank);
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

// g (the reduction's output gradient) back to x's sizes.
Value* broadcast_back(Builder& b, Value* g, Value* x, const std::vector<int64_t>& dims, bool keepdim) {
  if (!keepdim && x->type.rank() > 0)
    for (int64_t d : dims) g = b.unsqueeze(g, d);
  return b.expand(g, x->type.sizes);
}

void sum_dim(GradContext& c) {
  Value* x = c.in("self");
  auto dims = reduced_dims(c, "dim", x->type.rank());
  c.add_grad(x, c.b.cast(broadcast_back(c.b, c.grad(), x, dims, c.flag("keepdim")), x->type.dtype));
}
void sum_all(GradContext& c) {
  Value* x = c.in("self");
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x->type.rank(); ++i) dims.push_back(static_cast<int64_t>(i));
  c.add_grad(x, c.b.cast(broadcast_back(c.b, c.grad(), x, dims, false), x->type.dtype));
}
// g / (the number of elements of x over `dims`): a constant factor, or a division by the size
// expression when a dimension is symbolic (a dynamic batch).
Value* divide_by_count(GradContext& c, Value* g, Value* x, const std::vector<int64_t>& dims) {
  sym::Expr n(1);
  for (int64_t d : dims) n = n * x->type.sizes[static_cast<size_t>(d)];
  if (auto k = n.as_const()) return c.b.scale(g, 1.0 / static_cast<double>(std::max<int64_t>(*k, 1)));
  return c.b.op(OpKind::DivScalar, {{"self", g}, {"other", n}});
}
void mean_dim(GradContext& c) {
  Value* x = c.in("self");
  auto dims = reduced_dims(c, "dim", x->type.rank());
  Value* g = divide_by_count(c, c.grad(), x, dims);
  c.add_grad(x, c.b.cast(broadcast_back(c.b, g, x, dims, c.flag("keepdim")), x->type.dtype));
}
void mean_all(GradContext& c) {
  Value* x = c.in("self");
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x->type.rank(); ++i) dims.push_back(static_cast<int64_t>(i));
  Value* g = divide_by_count(c, c.grad(), x, dims);
  c.add_grad(x, c.b.cast(broadcast_back(c.b, g, x, dims, false), x->type.dtype));
}
// var.correction / var_mean.correction / std.correction: dx = g_var * 2 (x - mean) / (N - correction)
// (+ g_mean / N; std: g_var = g / (2 std)),
// the gradients broadcast back over the reduced dimensions.
void var(GradContext& c) {
  Value* x = c.in("self");
  Builder& b = c.b;
  auto dims = reduced_dims(c, "dim", x->type.rank());
  const bool keep = c.flag("keepdim");
  const OpKind k = c.n.kind;
  const bool dim_form = k == OpKind::VarDim || k == OpKind::VarMeanDim || k == OpKind::StdDim;  // `unbiased`: correction 1 or 0
  const double corr = dim_form ? (c.flag("unbiased") ? 1.0 : 0.0) : c.is_none("correction") ? 1.0 : c.number("correction");
  sym::Expr n(1);
  for (int64_t d : dims) n = n * x->type.sizes[static_cast<size_t>(d)];
  Value* dx = nullptr;
  if (Value* gv = c.grad(0)) {
    // std = sqrt(var): its gradient is var's with g / (2 std).
    if (k == OpKind::StdCorrection || k == OpKind::StdDim) gv = b.div(gv, b.scale(c.out(0), 2.0));
    Value* d = b.mul(broadcast_back(b, gv, x, dims, keep), b.sub(x, b.mean(x, dims, true)));
    if (auto k = n.as_const()) {
      d = b.scale(d, 2.0 / (static_cast<double>(*k) - corr));
    } else if (corr == static_cast<double>(static_cast<int64_t>(corr))) {
      d = b.op(OpKind::DivScalar, {{"self", b.scale(d, 2.0)}, {"other", n - static_cast<int64_t>(corr)}});
    } else {
      c.fail("--train differentiates var over symbolic sizes with an integer correction only");
    }
    dx = d;
  }
  if (c.n.outputs.size() > 1)
    if (Value* gm = c.grad(1)) {
      Value* d = broadcast_back(b, divide_by_count(c, gm, x, dims), x, dims, keep);
      dx = dx ? b.add(dx, d) : d;
    }
  if (dx) c.add_grad(x, b.cast(dx, x->type.dtype));
}
// Global pooling (output 1x1, over sizes that may be symbolic): the gradient divided by the count
// and broadcast back. Other sizes: _adaptive_avg_pool2d_backward (a gather over the windows that
// hold each input element; lib/loop/lower_reduce.cpp).
void adaptive_avg_pool2d(GradContext& c) {
  Value* x = c.in("self");
  auto out = c.ints("output_size");
  if (out.size() != 2 || x->type.rank() < 3) c.fail("--train differentiates 2-d adaptive average pooling of 3-d or 4-d inputs only");
  size_t r = x->type.rank();
  if (out[0] == 1 && out[1] == 1) {
    std::vector<int64_t> dims{static_cast<int64_t>(r - 2), static_cast<int64_t>(r - 1)};
    c.add_grad(x, broadcast_back(c.b, divide_by_count(c, c.grad(), x, dims), x, dims, true));
    return;
  }
  Value* g = c.b.op(OpKind::UnderscoreAdaptiveAvgPool2dBackward, {{"grad_output", c.grad()}, {"self", x}});
  c.add_grad(x, c.b.cast(g, x->type.dtype));
}

// avg_pool2d: avg_pool2d_backward with the forward's geometry (a gather; lib/loop/lower_reduce.cpp).
void avg_pool2d(GradContext& c) {
  Value* x = c.in("self");
  std::vector<std::pair<std::string, Arg>> args{{"grad_output", c.grad()}, {"self", x}};
  const std::pair<const char*, Arg> fields[] = {{"kernel_size", Arg{}},
                                                {"stride", Arg{std::vector<int64_t>{}}},
                                                {"padding", Arg{std::vector<int64_t>{0}}},
                                                {"ceil_mode", Arg{false}},
                                                {"count_include_pad", Arg{true}},
                                                {"divisor_override", Arg{}}};
  for (const auto& [name, dflt] : fields) {
    const Arg* v = c.n.arg(name);
    args.emplace_back(name, v ? *v : dflt);
  }
  c.add_grad(x, c.b.cast(c.b.op(OpKind::AvgPool2dBackward, args), x->type.dtype));
}

std::vector<int64_t> last_dims(size_t rank, size_t k) {
  std::vector<int64_t> d;
  for (size_t i = rank - k; i < rank; ++i) d.push_back(static_cast<int64_t>(i));
  return d;
}

// The shared part of layer norm's and rms norm's backward.
void norm_backward(GradContext& c, Value* x, Value* xhat, Value* rstd, Value* w, Value* bias, const std::vector<int64_t>& dims,
                   bool center) {
  Builder& b = c.b;
  Value* g = c.grad();
  if (c.needs(w)) c.add_grad_to(w, b.mul(g, xhat));
  if (bias && c.needs(bias)) c.add_grad_to(bias, g);
  if (!c.needs(x)) return;
  Value* gx = w ? b.mul(g, w) : g;
  Value* inner = b.mul(xhat, b.mean(b.mul(gx, xhat), dims, true));
  Value* d = center ? b.sub(b.sub(gx, b.mean(gx, dims, true)), inner) : b.sub(gx, inner);
  c.add_grad(x, b.mul(rstd, d));
}

void layer_norm(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("input");
  size_t k = c.sym_ints("normalized_shape").size();
  auto dims = last_dims(x->type.rank(), k);
  Value *mu, *rstd;
  if (c.n.kind == OpKind::NativeLayerNorm) {
    if (c.grad(1) || c.grad(2)) c.fail("--train does not differentiate native_layer_norm's mean and rstd outputs");
    mu = c.out(1);
    rstd = c.out(2);
  } else {
    mu = b.mean(x, dims, true);
    Value* xc = b.sub(x, mu);
    rstd = b.op(OpKind::Rsqrt, {{"self", b.add_scalar(b.mean(b.mul(xc, xc), dims, true), c.number("eps"))}});
  }
  Value* xhat = b.mul(b.sub(x, mu), rstd);
  norm_backward(c, x, xhat, rstd, c.in("weight"), c.in("bias"), dims, true);
}

// group_norm / native_group_norm: layer norm's backward over each group (x viewed as
// [N, G, C / G * HW]), with the affine per channel.
void group_norm(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("input");
  const bool native = c.n.kind == OpKind::NativeGroupNorm;
  if (native && (c.grad(1) || c.grad(2))) c.fail("--train does not differentiate native_group_norm's mean and rstd outputs");
  const int64_t G = c.integer(native ? "group" : "num_groups");
  const std::vector<sym::Expr>& xs = x->type.sizes;
  if (xs.size() < 2) c.fail("group_norm expects an input of rank 2 or more");
  sym::Expr per = sym::floordiv(xs[1], sym::Expr(G));
  std::vector<int64_t> not_channel{0};
  for (size_t d = 2; d < xs.size(); ++d) {
    per = per * xs[d];
    not_channel.push_back(static_cast<int64_t>(d));
  }
  const std::vector<sym::Expr> grouped{xs[0], sym::Expr(G), per};
  std::vector<sym::Expr> per_channel(xs.size(), sym::Expr(1));  // [C, 1, ...] against [N, C, ...]
  per_channel[1] = xs[1];
  per_channel.erase(per_channel.begin());
  Value* xc = b.sub(b.reshape(x, grouped), b.mean(b.reshape(x, grouped), {2}, true));
  Value* rstd = b.op(OpKind::Rsqrt, {{"self", b.add_scalar(b.mean(b.mul(xc, xc), {2}, true), c.number("eps"))}});
  Value* xhat_g = b.mul(xc, rstd);  // [N, G, per]
  Value* xhat = b.reshape(xhat_g, xs);
  Value *g = c.grad(), *w = c.in("weight"), *bias = c.in("bias");
  if (c.needs(w)) c.add_grad(w, b.sum(b.mul(g, xhat), not_channel, false));
  if (bias && c.needs(bias)) c.add_grad(bias, b.sum(g, not_channel, false));
  if (!c.needs(x)) return;
  Value* gx = b.reshape(w ? b.mul(g, b.reshape(w, per_channel)) : g, grouped);
  Value* inner = b.mul(xhat_g, b.mean(b.mul(gx, xhat_g), {2}, true));
  Value* d = b.sub(b.sub(gx, b.mean(gx, {2}, true)), inner);
  c.add_grad(x, b.reshape(b.mul(rstd, d), xs));
}

void rms_norm(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("input");
  auto dims = last_dims(x->type.rank(), c.sym_ints("normalized_shape").size());
  double eps = c.is_none("eps") ? 1.1920928955078125e-07 : c.number("eps");
  Value* r = b.op(OpKind::Rsqrt, {{"self", b.add_scalar(b.mean(b.mul(x, x), dims, true), eps)}});
  norm_backward(c, x, b.mul(x, r), r, c.in("weight"), nullptr, dims, false);
}

void check_softmax_dtype(GradContext& c) {
  if (c.n.kind == OpKind::UnderscoreSoftmax || c.n.kind == OpKind::UnderscoreLogSoftmax) {
    if (c.flag("half_to_float")) c.fail("--train does not differentiate half_to_float softmax yet");
  } else if (!c.is_none("dtype")) {
    c.fail("--train does not differentiate softmax with a dtype argument yet");
  }
}
void softmax(GradContext& c) {
  check_softmax_dtype(c);
  Builder& b = c.b;
  Value *y = c.out(), *g = c.grad();
  int64_t dim = c.integer("dim");
  c.add_grad(c.in("self"), b.mul(y, b.sub(g, b.sum(b.mul(g, y), {dim}, true))));
}
void log_softmax(GradContext& c) {
  check_softmax_dtype(c);
  Builder& b = c.b;
  Value *y = c.out(), *g = c.grad();
  int64_t dim = c.integer("dim");
  c.add_grad(c.in("self"), b.sub(g, b.mul(b.exp(y), b.sum(g, {dim}, true))));
}

}  // namespace

void register_reduce_rules(RuleTable& t) {
  set_rule(t, OpKind::SumDimIntList, sum_dim);
  set_rule(t, OpKind::Sum, sum_all);
  set_rule(t, OpKind::MeanDim, mean_dim);
  set_rule(t, OpKind::Mean, mean_all);
  set_rule(t, OpKind::GroupNorm, group_norm);
  set_rule(t, OpKind::NativeGroupNorm, group_norm);
  set_rule(t, OpKind::VarCorrection, var);
  set_rule(t, OpKind::VarMeanCorrection, var);
  set_rule(t, OpKind::StdCorrection, var);
  set_rule(t, OpKind::VarDim, var);
  set_rule(t, OpKind::VarMeanDim, var);
  set_rule(t, OpKind::StdDim, var);
  set_rule(t, OpKind::AvgPool2d, avg_pool2d);
  set_rule(t, OpKind::AdaptiveAvgPool2d, adaptive_avg_pool2d);
  set_rule(t, OpKind::UnderscoreAdaptiveAvgPool2d, adaptive_avg_pool2d);
  set_rule(t, OpKind::LayerNorm, layer_norm);
  set_rule(t, OpKind::NativeLayerNorm, layer_norm);
  set_rule(t, OpKind::RmsNorm, rms_norm);
  set_rule(t, OpKind::SoftmaxInt, softmax);
  set_rule(t, OpKind::UnderscoreSoftmax, softmax);
  set_rule(t, OpKind::LogSoftmaxInt, log_softmax);
  set_rule(t, OpKind::UnderscoreLogSoftmax, log_softmax);
}

}  // namespace ptc::autodiff
