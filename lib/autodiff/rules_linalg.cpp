// Derivatives of matrix products and attention.
//   y = x W^T + b:   dx = dy W,  dW = dy^T x (leading dimensions flattened),  db = sum dy
//   C = A B:         dA = dC B^T,  dB = A^T dC (batched: per batch, broadcast batches summed)
//   attention:       recomputes P = softmax(q k^T * scale + mask) in the backward, then
//                    dv = P^T do, dP = do v^T, dS = P (dP - rowsum(dP P)), dq = dS k scale,
//                    dk = dS^T q scale.
#include <cmath>
#include <limits>

#include "rules.h"

namespace ptc::autodiff {
namespace {

// Leading dimensions of `v` folded into one: [..., n] -> [prod, n].
Value* flatten_rows(Builder& b, Value* v) {
  const auto& s = v->type.sizes;
  sym::Expr rows = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) rows = rows * s[i];
  return b.reshape(v, {rows, s.back()});
}

Value* t2(Builder& b, Value* v) { return b.op(OpKind::T, {{"self", v}}); }
Value* mT(Builder& b, Value* v) { return b.transpose(v, -2, -1); }

void linear(GradContext& c) {
  Builder& b = c.b;
  Value *x = c.in("input"), *w = c.in("weight"), *g = c.grad();
  if (x->type.rank() < 1 || w->type.rank() != 2) c.fail("--train needs a 2-d weight and an input of rank >= 1");
  if (c.needs(x)) c.add_grad_to(x, b.matmul(g, w));
  if (c.needs(w)) {
    Value* x2 = x->type.rank() == 1 ? b.unsqueeze(x, 0) : flatten_rows(b, x);
    Value* g2 = g->type.rank() == 1 ? b.unsqueeze(g, 0) : flatten_rows(b, g);
    c.add_grad_to(w, b.mm(t2(b, g2), x2));
  }
  if (!c.is_none("bias")) c.add_grad_to(c.in("bias"), g);
}

void addmm(GradContext& c) {
  Builder& b = c.b;
  Value *m1 = c.in("mat1"), *m2 = c.in("mat2"), *g = c.grad();
  double alpha = c.number("alpha"), beta = c.number("beta");
  if (c.needs(m1)) c.add_grad_to(m1, b.scale(b.mm(g, t2(b, m2)), alpha));
  if (c.needs(m2)) c.add_grad_to(m2, b.scale(b.mm(t2(b, m1), g), alpha));
  if (c.needs(c.in("self"))) c.add_grad_to(c.in("self"), b.scale(g, beta));
}

void mm(GradContext& c) {
  Builder& b = c.b;
  Value *a = c.in("self"), *m = c.in("mat2"), *g = c.grad();
  if (c.needs(a)) c.add_grad_to(a, b.mm(g, t2(b, m)));
  if (c.needs(m)) c.add_grad_to(m, b.mm(t2(b, a), g));
}

Value* bmm_op(Builder& b, Value* x, Value* y) { return b.op(OpKind::Bmm, {{"self", x}, {"mat2", y}}); }

void bmm(GradContext& c) {
  Builder& b = c.b;
  Value *a = c.in("self"), *m = c.in("mat2"), *g = c.grad();
  if (c.needs(a)) c.add_grad_to(a, bmm_op(b, g, mT(b, m)));
  if (c.needs(m)) c.add_grad_to(m, bmm_op(b, mT(b, a), g));
}

void baddbmm(GradContext& c) {
  Builder& b = c.b;
  Value *a = c.in("batch1"), *m = c.in("batch2"), *g = c.grad();
  double alpha = c.number("alpha"), beta = c.number("beta");
  if (c.needs(a)) c.add_grad_to(a, b.scale(bmm_op(b, g, mT(b, m)), alpha));
  if (c.needs(m)) c.add_grad_to(m, b.scale(bmm_op(b, mT(b, a), g), alpha));
  if (c.needs(c.in("self"))) c.add_grad_to(c.in("self"), b.scale(g, beta));
}

void matmul(GradContext& c) {
  Builder& b = c.b;
  Value *a = c.in("self"), *m = c.in("other"), *g = c.grad();
  size_t ra = a->type.rank(), rm = m->type.rank();
  if (ra < 2 || rm < 2) c.fail("--train does not differentiate matmul with a 1-d operand yet");
  if (rm == 2) {
    if (c.needs(a)) c.add_grad_to(a, b.matmul(g, t2(b, m)));
    if (c.needs(m)) c.add_grad_to(m, b.mm(t2(b, flatten_rows(b, a)), flatten_rows(b, g)));
    return;
  }
  if (c.needs(a)) c.add_grad_to(a, b.matmul(g, mT(b, m)));
  if (c.needs(m)) c.add_grad_to(m, b.matmul(mT(b, a), g));
}

void attention(GradContext& c) {
  Builder& b = c.b;
  Value *q = c.in("query"), *k = c.in("key"), *v = c.in("value"), *g = c.grad();
  if (c.number("dropout_p") != 0) c.fail("attention dropout in training mode is not supported by --train yet");
  if (c.n.arg("enable_gqa") && c.flag("enable_gqa")) c.fail("--train does not differentiate grouped-query attention yet");
  if (q->type.rank() < 2) c.fail("attention needs rank >= 2 operands");
  const auto& qs = q->type.sizes;
  const auto& ks = k->type.sizes;
  double scale;
  if (!c.is_none("scale")) scale = c.number("scale");
  else {
    auto d = qs.back().as_const();
    if (!d) c.fail("--train needs a static head size (or an explicit scale)");
    scale = 1.0 / std::sqrt(static_cast<double>(*d));
  }
  const double inf = std::numeric_limits<double>::infinity();
  Value* s = b.scale(b.matmul(q, mT(b, k)), scale);
  bool masked = false;
  if (c.flag("is_causal")) {
    Value* ones = b.op(OpKind::Ones, {{"size", std::vector<sym::Expr>{qs[qs.size() - 2], ks[ks.size() - 2]}}, {"dtype", DType::Bool}});
    Value* keep = b.op(OpKind::Tril, {{"self", ones}});
    s = b.op(OpKind::WhereScalarOther, {{"condition", keep}, {"self", s}, {"other", -inf}});
  }
  Value* mask = c.in("attn_mask");
  if (mask) {
    masked = true;
    if (mask->type.dtype == DType::Bool) s = b.op(OpKind::WhereScalarOther, {{"condition", mask}, {"self", s}, {"other", -inf}});
    else s = b.add(s, mask);
  }
  Value* p = b.op(OpKind::UnderscoreSoftmax, {{"self", s}, {"dim", int64_t(-1)}, {"half_to_float", false}});
  if (masked)  // rows whose keys are all masked: torch's attention gives zeros there, so no gradient
    p = b.op(OpKind::WhereScalarSelf, {{"condition", b.op(OpKind::Isnan, {{"self", p}})}, {"self", 0.0}, {"other", p}});
  if (c.needs(v)) c.add_grad_to(v, b.matmul(mT(b, p), g));
  if (!c.needs(q) && !c.needs(k) && !(mask && c.needs(mask))) return;
  Value* dp = b.matmul(g, mT(b, v));
  Value* ds = b.mul(p, b.sub(dp, b.sum(b.mul(dp, p), {-1}, true)));
  if (mask && c.needs(mask)) c.add_grad_to(mask, ds);
  if (c.needs(q)) c.add_grad_to(q, b.scale(b.matmul(ds, k), scale));
  if (c.needs(k)) c.add_grad_to(k, b.scale(b.matmul(mT(b, ds), q), scale));
}

}  // namespace

void register_linalg_rules(RuleTable& t) {
  set_rule(t, OpKind::Linear, linear);
  set_rule(t, OpKind::Addmm, addmm);
  set_rule(t, OpKind::Mm, mm);
  set_rule(t, OpKind::Bmm, bmm);
  set_rule(t, OpKind::Baddbmm, baddbmm);
  set_rule(t, OpKind::Matmul, matmul);
  set_rule(t, OpKind::ScaledDotProductAttention, attention);
}

}  // namespace ptc::autodiff
