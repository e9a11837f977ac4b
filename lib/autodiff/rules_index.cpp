// Derivatives of data-dependent indexing and of max-type reductions. The gathers (embedding,
// index_select, gather, advanced indexing on leading dimensions) scatter their gradient back with
// scatter_add into zeros (repeated indices accumulate, as torch's index_put with accumulate).
//   amax/amin: the gradient split evenly among the positions equal to the result (torch's rule)
//   max pooling: max_pool2d_with_indices_backward (each window's first maximum gets its gradient)
//   cumsum: the reversed cumulative sum of the gradient
//   sort, topk: the values' gradient scattered back to the positions the indices name
#include <algorithm>

#include "rules.h"

namespace ptc::autodiff {
namespace {

using sym::Expr;

int64_t norm_dim(const GradContext& c, int64_t d, size_t rank) {
  int64_t r = static_cast<int64_t>(std::max<size_t>(rank, 1));
  if (d < -r || d >= r) c.fail("dimension out of range");
  return d < 0 ? d + r : d;
}

Value* scatter_add(Builder& b, Value* self, int64_t dim, Value* index, Value* src) {
  return b.op(OpKind::ScatterAdd, {{"self", self}, {"dim", dim}, {"index", index}, {"src", src}});
}

Expr product(const std::vector<Expr>& s, size_t from = 0, size_t to = SIZE_MAX) {
  Expr p = 1;
  for (size_t i = from; i < std::min(to, s.size()); ++i) p = p * s[i];
  return p;
}

void embedding(GradContext& c) {
  Builder& b = c.b;
  Value *w = c.in("weight"), *ids = c.in("indices"), *g = c.grad();
  if (c.flag("scale_grad_by_freq")) c.fail("--train does not differentiate embedding with scale_grad_by_freq yet");
  const Expr P = product(ids->type.sizes), D = w->type.sizes[1];
  Value* flat = b.reshape(ids, {P});
  Value* g2 = b.reshape(g, {P, D});
  const int64_t pad = c.integer("padding_idx");
  if (pad >= 0) {  // the padding row gets no gradient
    Value* is_pad = b.unsqueeze(b.op(OpKind::EqScalar, {{"self", flat}, {"other", pad}}), 1);
    g2 = b.op(OpKind::WhereScalarSelf, {{"condition", is_pad}, {"self", 0.0}, {"other", g2}});
  }
  Value* idx = b.expand(b.unsqueeze(flat, 1), {P, D});
  c.add_grad(w, scatter_add(b, b.zeros(w->type.sizes, w->type.dtype), 0, idx, g2));
}

void index_select(GradContext& c) {
  Builder& b = c.b;
  Value *x = c.in("self"), *index = c.in("index"), *g = c.grad();
  const size_t r = x->type.rank();
  const int64_t dim = norm_dim(c, c.integer("dim"), r);
  std::vector<Expr> shape(std::max<size_t>(r, 1), Expr(1));
  shape[static_cast<size_t>(dim)] = g->type.rank() ? g->type.sizes[dim] : Expr(1);
  Value* idx = b.expand(b.reshape(index, shape), g->type.sizes);
  c.add_grad(x, scatter_add(b, b.zeros(x->type.sizes, x->type.dtype), dim, idx, g));
}

void gather(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("self");
  const int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  c.add_grad(x, scatter_add(b, b.zeros(x->type.sizes, x->type.dtype), dim, c.in("index"), c.grad()));
}

// sort / topk: values = x gathered at indices along dim (output 1), so their gradient scatters back.
void sorted_values(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("self");
  Value* g = c.grad(0);
  if (!g) return;
  if (x->type.rank() == 0) {
    c.add_grad(x, g);
    return;
  }
  const int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  c.add_grad(x, scatter_add(b, b.zeros(x->type.sizes, x->type.dtype), dim, c.out(1), g));
}

void scatter_add_rule(GradContext& c) {
  Builder& b = c.b;
  Value* g = c.grad();
  c.add_grad(c.in("self"), g);
  if (c.needs(c.in("src")))
    c.add_grad(c.in("src"), b.op(OpKind::Gather, {{"self", g}, {"dim", c.integer("dim")}, {"index", c.in("index")}}));
}

// x[i0, i1, ..., ik-1] with index tensors on the leading dimensions: a row gather from x viewed
// as [S0 * ... * Sk-1, rest], whose gradient scatters back into that view.
void index_tensor(GradContext& c) {
  Builder& b = c.b;
  Value *x = c.in("self"), *g = c.grad();
  const Arg* a = c.n.arg("indices");
  const auto* list = a ? std::get_if<std::vector<Value*>>(a) : nullptr;
  if (!list) c.fail("indices is not a tensor list");
  const size_t k = list->size();
  for (Value* v : *list)
    if (!v) c.fail("--train differentiates advanced indexing with index tensors on the leading dimensions only yet");
  const auto& xs = x->type.sizes;
  Value* lin = nullptr;
  for (size_t i = 0; i < k; ++i) {
    Value* v = (*list)[i];
    // Negative indices count from the end, as in the forward.
    Value* wrapped = b.op(OpKind::WhereSelf, {{"condition", b.op(OpKind::LtScalar, {{"self", v}, {"other", int64_t(0)}})},
                                              {"self", b.op(OpKind::AddScalar, {{"self", v}, {"other", xs[i]}})},
                                              {"other", v}});
    Expr stride = product(xs, i + 1, k);  // a SymInt scalar where the sizes are symbolic
    Value* term = stride == Expr(1) ? wrapped : b.op(OpKind::MulScalar, {{"self", wrapped}, {"other", stride}});
    lin = lin ? b.add(lin, term) : term;
  }
  const size_t nb = g->type.rank() - (x->type.rank() - k);  // the broadcast index shape's rank
  std::vector<Expr> bshape(g->type.sizes.begin(), g->type.sizes.begin() + static_cast<long>(nb));
  const Expr Q = product(bshape), P = product(xs, 0, k), R = product(xs, k);
  lin = b.expand(lin, bshape);
  Value* idx = b.expand(b.unsqueeze(b.reshape(lin, {Q}), 1), {Q, R});
  Value* g2 = b.reshape(g, {Q, R});
  Value* dx = scatter_add(b, b.zeros({P, R}, x->type.dtype), 0, idx, g2);
  c.add_grad(x, b.reshape(dx, xs));
}

void amax_amin(GradContext& c) {
  Builder& b = c.b;
  Value *x = c.in("self"), *y = c.out(), *g = c.grad();
  const size_t r = x->type.rank();
  std::vector<int64_t> dims = c.ints("dim");
  if (dims.empty())
    for (size_t i = 0; i < r; ++i) dims.push_back(static_cast<int64_t>(i));
  for (auto& d : dims) d = norm_dim(c, d, r);
  std::sort(dims.begin(), dims.end());
  if (!c.flag("keepdim") && r > 0)
    for (int64_t d : dims) {
      y = b.unsqueeze(y, d);
      g = b.unsqueeze(g, d);
    }
  Value* mask = b.op(OpKind::EqTensor, {{"self", x}, {"other", y}});
  Value* cnt = b.sum(b.cast(mask, x->type.dtype), dims, true);
  c.add_grad(x, b.op(OpKind::WhereScalarOther, {{"condition", mask}, {"self", b.div(g, cnt)}, {"other", 0.0}}));
}

void max_dim(GradContext& c) {
  Builder& b = c.b;
  Value *x = c.in("self"), *g = c.grad(0), *ix = c.out(1);
  if (!g) return;
  const int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  if (!c.flag("keepdim") && x->type.rank() > 0) {
    g = b.unsqueeze(g, dim);
    ix = b.unsqueeze(ix, dim);
  }
  c.add_grad(x, scatter_add(b, b.zeros(x->type.sizes, x->type.dtype), dim, ix, g));
}

void max_pool2d(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("self");
  if (c.flag("ceil_mode")) c.fail("--train does not differentiate max pooling with ceil_mode yet");
  std::vector<std::pair<std::string, Arg>> args{
      {"kernel_size", c.ints("kernel_size")}, {"stride", c.ints("stride")}, {"padding", c.ints("padding")},
      {"dilation", c.ints("dilation")}, {"ceil_mode", false}};
  // The backward's own max_pool2d_with_indices, also when the forward computed the indices (a
  // core-ATen export): the backward then finds them again from x (as for max_pool2d) instead of
  // saving int64s, which the CPU's MaxPoolGrad extern does without storing them at all.
  auto with = args;
  with.emplace_back("self", x);
  Value* indices = b.emit(OpKind::MaxPool2dWithIndices, with).at(1);
  if (c.n.kind == OpKind::MaxPool2dWithIndices && c.grad(1)) c.fail("max pooling's indices have no gradient");
  args.emplace_back("grad_output", c.grad(0));
  args.emplace_back("self", x);
  args.emplace_back("indices", indices);
  c.add_grad(x, b.op(OpKind::MaxPool2dWithIndicesBackward, args));
}

void cumsum(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("self");
  if (!c.is_none("dtype")) c.fail("--train does not differentiate cumsum with a dtype argument yet");
  const int64_t dim = norm_dim(c, c.integer("dim"), x->type.rank());
  auto n = x->type.rank() ? x->type.sizes[dim].as_const() : std::optional<int64_t>(1);
  if (!n) c.fail("--train needs a static size along cumsum's dimension");
  auto flip = [&](Value* v) {
    if (*n <= 1 || v->type.rank() == 0) return v;
    Value* idx = b.op(OpKind::ArangeStartStep, {{"start", *n - 1}, {"end", int64_t(-1)}, {"step", int64_t(-1)}, {"dtype", DType::Int64}});
    return b.op(OpKind::IndexSelect, {{"self", v}, {"dim", dim}, {"index", idx}});
  };
  c.add_grad(x, flip(b.op(OpKind::Cumsum, {{"self", flip(c.grad())}, {"dim", dim}})));
}

}  // namespace

void register_index_rules(RuleTable& t) {
  set_rule(t, OpKind::Embedding, embedding);
  set_rule(t, OpKind::IndexSelect, index_select);
  set_rule(t, OpKind::Gather, gather);
  set_rule(t, OpKind::ScatterAdd, scatter_add_rule);
  set_rule(t, OpKind::IndexTensor, index_tensor);
  set_rule(t, OpKind::Amax, amax_amin);
  set_rule(t, OpKind::Amin, amax_amin);
  set_rule(t, OpKind::MaxDim, max_dim);
  set_rule(t, OpKind::MaxPool2d, max_pool2d);
  set_rule(t, OpKind::MaxPool2dWithIndices, max_pool2d);
  set_rule(t, OpKind::Cumsum, cumsum);
  for (OpKind k : {OpKind::Sort, OpKind::SortStable, OpKind::Topk}) set_rule(t, k, sorted_values);
}

}  // namespace ptc::autodiff
