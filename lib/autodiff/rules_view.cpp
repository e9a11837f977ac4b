// Derivatives of views and data movement: reshapes take the gradient back to the input's sizes;
// permutations apply the inverse permutation; slices, selects and splits scatter the gradient
// into zeros (as a cat), and cat/stack slice it back apart.
#include "rules.h"

namespace ptc::autodiff {
namespace {

int64_t norm_dim(const GradContext& c, int64_t d, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (d < -r || d >= (r ? r : 1)) c.fail("dimension out of range");
  return d < 0 ? d + r : d;
}

void reshape_back(GradContext& c) {
  Value* x = c.in("self");
  c.add_grad(x, c.b.cast(c.b.reshape(c.grad(), x->type.sizes), x->type.dtype));
}

void permute(GradContext& c) {
  std::vector<int64_t> dims = c.ints("dims");
  size_t r = dims.size();
  std::vector<int64_t> inv(r);
  for (size_t i = 0; i < r; ++i) inv[norm_dim(c, dims[i], r)] = static_cast<int64_t>(i);
  c.add_grad(c.in("self"), c.b.permute(c.grad(), inv));
}
// repeat: the gradient summed over every tile ([.., r_d * s_d, ..] viewed as [.., r_d, s_d, ..]).
void repeat(GradContext& c) {
  Value* x = c.in("self");
  const std::vector<sym::Expr> rep = c.sym_ints("repeats");
  const size_t rank = x->type.rank();
  if (rep.size() < rank) c.fail("repeat: fewer repeats than the input's dimensions");
  const size_t lead = rep.size() - rank;
  std::vector<sym::Expr> split;
  std::vector<int64_t> tiles;
  for (size_t i = 0; i < rep.size(); ++i) {
    tiles.push_back(static_cast<int64_t>(split.size()));
    split.push_back(rep[i]);
    if (i >= lead) split.push_back(x->type.sizes[i - lead]);
  }
  Value* g = c.b.sum(c.b.reshape(c.grad(), split), tiles, false);
  c.add_grad(x, c.b.cast(g, x->type.dtype));
}
// The scales an upsampling maps positions by, as its lowering reads them (the default overloads:
// scales_h / scales_w; .vec: its scale_factors when no output_size is given), for the backward op.
std::pair<Arg, Arg> upsample_scales(const GradContext& c) {
  const bool vec = c.n.kind == OpKind::UpsampleNearest2dVec || c.n.kind == OpKind::UpsampleBilinear2dVec;
  if (!vec) {
    auto scale = [&](const char* name) { return c.is_none(name) ? Arg{} : Arg{c.number(name)}; };
    return {scale("scales_h"), scale("scales_w")};
  }
  const Arg* sf = c.n.arg("scale_factors");
  const auto* v = sf ? std::get_if<std::vector<double>>(sf) : nullptr;
  if (!c.is_none("output_size") || !v || v->empty()) return {Arg{}, Arg{}};
  return {Arg{(*v)[0]}, Arg{(*v)[std::min<size_t>(1, v->size() - 1)]}};
}

// upsample_nearest2d / upsample_bilinear2d: upsample_*2d_backward, each input element's gradient
// gathering the output elements that read it, times their weights (lib/loop/lower_index.cpp). For
// nearest upsampling whose output dims are the input's (factor 1) or twice them (factor 2: torch
// reads row i / 2), which may be symbolic: the gradient viewed [.., H, f_h, W, f_w] and summed
// over the factors.
void upsample(GradContext& c) {
  const bool vec = c.n.kind == OpKind::UpsampleNearest2dVec || c.n.kind == OpKind::UpsampleBilinear2dVec;
  const bool bilinear = c.n.kind == OpKind::UpsampleBilinear2dVec || c.n.kind == OpKind::UpsampleBilinear2d;
  Value* x = c.in(vec ? "input" : "self");
  const auto &in = x->type.sizes, &out = c.out()->type.sizes;
  if (in.size() != 4) c.fail("--train differentiates 4-d upsampling only");
  if (!bilinear) {
    std::vector<sym::Expr> split{in[0], in[1]};
    std::vector<int64_t> factors;
    bool by_1_or_2 = true;
    for (size_t d = 2; d < 4; ++d) {
      split.push_back(in[d]);
      if (!(out[d] == in[d]) && out[d] == in[d] * 2) {
        factors.push_back(static_cast<int64_t>(split.size()));
        split.push_back(sym::Expr(2));
      } else if (!(out[d] == in[d])) {
        by_1_or_2 = false;
      }
    }
    if (by_1_or_2) {
      Value* g = c.b.reshape(c.grad(), split);
      if (!factors.empty()) g = c.b.sum(g, factors, false);
      c.add_grad(x, c.b.cast(g, x->type.dtype));
      return;
    }
  }
  auto [sh, sw] = upsample_scales(c);
  std::vector<std::pair<std::string, Arg>> args{{"grad_output", c.grad()},
                                                {"output_size", std::vector<sym::Expr>{out[2], out[3]}},
                                                {"input_size", std::vector<sym::Expr>(in.begin(), in.end())}};
  if (bilinear) args.emplace_back("align_corners", c.flag("align_corners"));
  args.emplace_back("scales_h", sh);
  args.emplace_back("scales_w", sw);
  Value* g = c.b.op(bilinear ? OpKind::UpsampleBilinear2dBackward : OpKind::UpsampleNearest2dBackward, args);
  c.add_grad(x, c.b.cast(g, x->type.dtype));
}

// roll: the gradient rolled back (each shift negated; no dims: the flattened roll's inverse).
void roll(GradContext& c) {
  std::vector<sym::Expr> back;
  for (const sym::Expr& s : c.sym_ints("shifts")) back.push_back(sym::Expr(0) - s);
  c.add_grad(c.in("self"), c.b.op(OpKind::Roll, {{"self", c.grad()}, {"shifts", back}, {"dims", c.ints("dims")}}));
}
void flip(GradContext& c) { c.add_grad(c.in("self"), c.b.op(OpKind::Flip, {{"self", c.grad()}, {"dims", c.ints("dims")}})); }
void transpose(GradContext& c) { c.add_grad(c.in("self"), c.b.transpose(c.grad(), c.integer("dim0"), c.integer("dim1"))); }
void t(GradContext& c) {
  Value* x = c.in("self");
  c.add_grad(x, x->type.rank() < 2 ? c.grad() : c.b.op(OpKind::T, {{"self", c.grad()}}));
}
void expand(GradContext& c) { c.add_grad_to(c.in("self"), c.grad()); }

// `g` placed at [start, start + g's size) along `dim` of a zero tensor with `size` there.
Value* pad_into(GradContext& c, Value* g, int64_t dim, const sym::Expr& start, const sym::Expr& size) {
  Builder& b = c.b;
  std::vector<Value*> parts;
  auto zeros_of = [&](const sym::Expr& n) {
    std::vector<sym::Expr> s = g->type.sizes;
    s[dim] = n;
    return b.zeros(s, g->type.dtype);
  };
  sym::Expr after = size - start - g->type.sizes[dim];
  if (start.as_const() != std::optional<int64_t>(0)) parts.push_back(zeros_of(start));
  parts.push_back(g);
  if (after.as_const() != std::optional<int64_t>(0)) parts.push_back(zeros_of(after));
  if (parts.size() == 1) return g;
  return b.op(OpKind::Cat, {{"tensors", parts}, {"dim", dim}});
}

std::optional<sym::Expr> sym_arg(const GradContext& c, const char* name) {
  const Arg* a = c.n.arg(name);
  if (!a || std::holds_alternative<std::monostate>(*a)) return std::nullopt;
  if (auto e = std::get_if<sym::Expr>(a)) return *e;
  if (auto i = std::get_if<int64_t>(a)) return sym::Expr(*i);
  c.fail(std::string("argument '") + name + "' is not a size");
}

void slice(GradContext& c) {
  Value* x = c.in("self");
  int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  if (c.integer("step") != 1) {  // the gradient scattered into zeros at every step-th position
    std::vector<std::pair<std::string, Arg>> args{{"self", c.b.zeros(x->type.sizes, c.grad()->type.dtype)}, {"src", c.grad()}};
    for (const char* name : {"dim", "start", "end", "step"})
      if (const Arg* a = c.n.arg(name)) args.emplace_back(name, *a);
    c.add_grad(x, c.b.cast(c.b.op(OpKind::SliceScatter, std::move(args)), x->type.dtype));
    return;
  }
  const sym::Expr n = x->type.sizes[dim];
  sym::Expr start = sym_arg(c, "start").value_or(sym::Expr(0));
  if (auto k = start.as_const()) {
    int64_t s = *k;
    if (s < 0) {
      auto nc = n.as_const();
      if (!nc) c.fail("--train needs a non-negative slice start on a symbolic dimension");
      s = std::max<int64_t>(0, s + *nc);
    }
    if (auto nc = n.as_const()) s = std::min(s, *nc);
    start = s;
  }
  c.add_grad(x, pad_into(c, c.grad(), dim, start, n));
}
void narrow(GradContext& c) {
  Value* x = c.in("self");
  int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  sym::Expr start = *sym_arg(c, "start");
  if (auto k = start.as_const(); k && *k < 0) start = x->type.sizes[dim] + start;
  c.add_grad(x, pad_into(c, c.grad(), dim, start, x->type.sizes[dim]));
}
void select(GradContext& c) {
  Value* x = c.in("self");
  int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  sym::Expr index = *sym_arg(c, "index");
  if (auto k = index.as_const(); k && *k < 0) index = x->type.sizes[dim] + index;
  c.add_grad(x, pad_into(c, c.b.unsqueeze(c.grad(), dim), dim, index, x->type.sizes[dim]));
}

// Output i's gradient, or zeros of its sizes.
Value* grad_or_zeros(GradContext& c, size_t i) {
  if (Value* g = c.grad(i)) return g;
  return c.b.zeros(c.out(i)->type.sizes, c.out(i)->type.dtype);
}

void split(GradContext& c) {  // split.Tensor, split_with_sizes, chunk: the parts concatenate back
  Value* x = c.in("self");
  int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  std::vector<Value*> parts;
  for (size_t i = 0; i < c.n.outputs.size(); ++i) parts.push_back(grad_or_zeros(c, i));
  c.add_grad(x, parts.size() == 1 ? parts[0] : c.b.op(OpKind::Cat, {{"tensors", parts}, {"dim", dim}}));
}
void unbind(GradContext& c) {
  Value* x = c.in("self");
  int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  std::vector<Value*> parts;
  for (size_t i = 0; i < c.n.outputs.size(); ++i) parts.push_back(grad_or_zeros(c, i));
  c.add_grad(x, c.b.op(OpKind::Stack, {{"tensors", parts}, {"dim", dim}}));
}

std::vector<Value*> tensor_list(const GradContext& c, const char* name) {
  const Arg* a = c.n.arg(name);
  auto v = a ? std::get_if<std::vector<Value*>>(a) : nullptr;
  if (!v) c.fail(std::string("argument '") + name + "' is not a tensor list");
  return *v;
}

void cat(GradContext& c) {
  Builder& b = c.b;
  std::vector<Value*> xs = tensor_list(c, "tensors");
  Value* g = c.grad();
  int64_t dim = norm_dim(c, c.integer("dim"), g->type.rank());
  sym::Expr off = 0;
  for (Value* x : xs) {
    if (!x) continue;
    if (x->type.rank() == 1 && x->type.sizes[0].as_const() == std::optional<int64_t>(0) && g->type.rank() != 1) continue;  // legacy empty
    sym::Expr end = off + x->type.sizes[dim];
    if (c.needs(x)) c.add_grad(x, b.op(OpKind::SliceTensor, {{"self", g}, {"dim", dim}, {"start", off}, {"end", end}}));
    off = end;
  }
}
void stack(GradContext& c) {
  std::vector<Value*> xs = tensor_list(c, "tensors");
  Value* g = c.grad();
  int64_t dim = norm_dim(c, c.integer("dim"), g->type.rank());
  for (size_t i = 0; i < xs.size(); ++i)
    if (c.needs(xs[i]))
      c.add_grad(xs[i], c.b.op(OpKind::SelectInt, {{"self", g}, {"dim", dim}, {"index", sym::Expr(static_cast<int64_t>(i))}}));
}
void constant_pad(GradContext& c) {
  Value* x = c.in("self");
  std::vector<int64_t> pad = c.ints("pad");
  Value* g = c.grad();
  size_t r = x->type.rank();
  for (size_t i = 0; i + 1 < pad.size(); i += 2) {
    if (pad[i] < 0 || pad[i + 1] < 0) c.fail("--train does not differentiate negative padding yet");
    int64_t dim = static_cast<int64_t>(r) - 1 - static_cast<int64_t>(i / 2);
    if (pad[i] == 0 && pad[i + 1] == 0) continue;
    g = c.b.op(OpKind::SliceTensor, {{"self", g}, {"dim", dim}, {"start", sym::Expr(pad[i])},
                                     {"end", sym::Expr(pad[i]) + x->type.sizes[dim]}});
  }
  c.add_grad(x, g);
}
void pad(GradContext& c) {
  if (c.str("mode") != "constant") c.fail("--train differentiates only constant padding yet");
  constant_pad(c);
}

// slice_scatter / select_scatter: self's gradient is the gradient with the scattered part zeroed
// (the same scatter, of zeros), src's that part of the gradient (the same slice / select).
void scatter_into(GradContext& c) {
  const bool slice = c.n.kind == OpKind::SliceScatter;
  Value *x = c.in("self"), *src = c.in("src"), *g = c.grad();
  if (!g) return;
  std::vector<std::pair<std::string, Arg>> where;
  for (const char* name : {"dim", "start", "end", "step", "index"})
    if (const Arg* a = c.n.arg(name)) where.emplace_back(name, *a);
  if (c.needs(src)) {
    auto args = where;
    args.emplace_back("self", g);
    c.add_grad(src, c.b.op(slice ? OpKind::SliceTensor : OpKind::SelectInt, std::move(args)));
  }
  if (c.needs(x)) {
    auto args = where;
    args.emplace_back("self", g);
    args.emplace_back("src", c.b.zeros(src->type.sizes, g->type.dtype));
    c.add_grad(x, c.b.op(slice ? OpKind::SliceScatter : OpKind::SelectScatter, std::move(args)));
  }
}
// copy / fill.Tensor: self is overwritten (no gradient); src (fill's 0-d value) gets the
// gradient summed to its sizes (it was broadcast), in its dtype.
void copy(GradContext& c) {
  if (c.grad()) c.add_grad_to(c.in(c.n.kind == OpKind::FillTensor ? "value" : "src"), c.grad());
}

}  // namespace

void register_view_rules(RuleTable& t_) {
  for (OpKind k : {OpKind::View, OpKind::Reshape, OpKind::UnderscoreUnsafeView, OpKind::FlattenUsingInts, OpKind::UnflattenInt,
                   OpKind::Unsqueeze, OpKind::SqueezeDim, OpKind::SqueezeDims, OpKind::Squeeze})
    set_rule(t_, k, reshape_back);
  set_rule(t_, OpKind::Permute, permute);
  set_rule(t_, OpKind::Flip, flip);
  set_rule(t_, OpKind::Roll, roll);
  set_rule(t_, OpKind::Repeat, repeat);
  for (OpKind k : {OpKind::UpsampleNearest2dVec, OpKind::UpsampleNearest2d, OpKind::UpsampleBilinear2dVec, OpKind::UpsampleBilinear2d})
    set_rule(t_, k, upsample);
  set_rule(t_, OpKind::TransposeInt, transpose);
  set_rule(t_, OpKind::T, t);
  set_rule(t_, OpKind::Expand, expand);
  set_rule(t_, OpKind::ExpandAs, expand);
  set_rule(t_, OpKind::SliceTensor, slice);
  set_rule(t_, OpKind::SliceScatter, scatter_into);
  set_rule(t_, OpKind::SelectScatter, scatter_into);
  set_rule(t_, OpKind::FillTensor, copy);
  set_rule(t_, OpKind::Copy, copy);
  set_rule(t_, OpKind::Narrow, narrow);
  set_rule(t_, OpKind::SelectInt, select);
  set_rule(t_, OpKind::SplitTensor, split);
  set_rule(t_, OpKind::SplitWithSizes, split);
  set_rule(t_, OpKind::Chunk, split);
  set_rule(t_, OpKind::UnbindInt, unbind);
  set_rule(t_, OpKind::Cat, cat);
  set_rule(t_, OpKind::Stack, stack);
  set_rule(t_, OpKind::ConstantPadNd, constant_pad);
  set_rule(t_, OpKind::Pad, pad);
}

}  // namespace ptc::autodiff
