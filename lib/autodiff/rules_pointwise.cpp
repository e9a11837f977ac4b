// Derivatives of elementwise ops. Binary ops broadcast: each operand's gradient is summed back to
// its own sizes (GradContext::add_grad_to). y = f(x) rules use y where that is cheaper than x.
#include <cmath>

#include "ptc/dtype.h"
#include "ptc/error.h"
#include "rules.h"

namespace ptc::autodiff {
namespace {

constexpr double kPi = 3.14159265358979323846;

Value* cmp(Builder& b, OpKind k, Value* x, double s) { return b.op(k, {{"self", x}, {"other", s}}); }

void add_tensor(GradContext& c) {
  Value* g = c.grad();
  c.add_grad_to(c.in("self"), g);
  if (c.needs(c.in("other"))) c.add_grad_to(c.in("other"), c.b.scale(g, c.number("alpha")));
}
void sub_tensor(GradContext& c) {
  Value* g = c.grad();
  c.add_grad_to(c.in("self"), g);
  if (c.needs(c.in("other"))) c.add_grad_to(c.in("other"), c.b.scale(g, -c.number("alpha")));
}
void identity_self(GradContext& c) { c.add_grad_to(c.in("self"), c.grad()); }
void rsub_scalar(GradContext& c) { c.add_grad_to(c.in("self"), c.b.scale(c.grad(), -c.number("alpha"))); }
// A non-tensor "other" operand (a number, or a SymInt value such as a size) as a Scalar argument.
Arg scalar_operand(const GradContext& c, const char* name) {
  const Arg* a = c.n.arg(name);
  if (a) {
    if (auto v = std::get_if<Value*>(a)) {
      if (*v && (*v)->type.kind == Type::Kind::SymInt && (*v)->type.value) return *(*v)->type.value;
    } else if (arg_number(*a) || std::holds_alternative<sym::Expr>(*a)) {
      return *a;
    }
  }
  c.fail(std::string("operand '") + name + "' is neither a tensor nor a number ptc can differentiate with");
}
bool is_tensor(const Value* v) { return v && v->type.is_tensor(); }

void mul_tensor(GradContext& c) {
  Value *a = c.in("self"), *o = c.in("other"), *g = c.grad();
  if (!is_tensor(o)) {
    c.add_grad_to(a, c.b.op(OpKind::MulScalar, {{"self", g}, {"other", scalar_operand(c, "other")}}));
    return;
  }
  if (c.needs(a)) c.add_grad_to(a, c.b.mul(g, o));
  if (c.needs(o)) c.add_grad_to(o, c.b.mul(g, a));
}
void mul_scalar(GradContext& c) { c.add_grad_to(c.in("self"), c.b.scale(c.grad(), c.number("other"))); }
void div_tensor(GradContext& c) {
  Value *a = c.in("self"), *o = c.in("other"), *g = c.grad();
  if (!is_tensor(o)) {
    c.add_grad_to(a, c.b.op(OpKind::DivScalar, {{"self", g}, {"other", scalar_operand(c, "other")}}));
    return;
  }
  if (c.needs(a)) c.add_grad_to(a, c.b.div(g, o));
  if (c.needs(o)) c.add_grad_to(o, c.b.neg(c.b.div(c.b.mul(g, c.out()), o)));  // -g * a / o^2 = -g * y / o
}
void div_scalar(GradContext& c) { c.add_grad_to(c.in("self"), c.b.scale(c.grad(), 1.0 / c.number("other"))); }
void neg(GradContext& c) { c.add_grad_to(c.in("self"), c.b.neg(c.grad())); }

void relu(GradContext& c) {
  Builder& b = c.b;
  c.add_grad_to(c.in("self"), b.where_zero(cmp(b, OpKind::GtScalar, c.out(), 0), c.grad()));
}

// gelu'(x) = Phi(x) + x phi(x) (exact); the tanh form differentiates 0.5 x (1 + tanh(u)),
// u = sqrt(2/pi) (x + 0.044715 x^3).
void gelu(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("self");
  Value* d;
  if (c.str("approximate") == "tanh") {
    const double k = std::sqrt(2.0 / kPi), a = 0.044715;
    Value* x2 = b.mul(x, x);
    Value* u = b.scale(b.mul(x, b.add_scalar(b.scale(x2, a), 1.0)), k);
    Value* t = b.op(OpKind::Tanh, {{"self", u}});
    Value* sech2 = b.add_scalar(b.neg(b.mul(t, t)), 1.0);                  // 1 - t^2
    Value* du = b.scale(b.add_scalar(b.scale(x2, 3 * a), 1.0), k);         // k (1 + 3a x^2)
    d = b.add(b.scale(b.add_scalar(t, 1.0), 0.5), b.mul(b.scale(x, 0.5), b.mul(sech2, du)));
  } else {
    Value* cdf = b.scale(b.add_scalar(b.op(OpKind::Erf, {{"self", b.scale(x, 1.0 / std::sqrt(2.0))}}), 1.0), 0.5);
    Value* pdf = b.scale(b.exp(b.scale(b.mul(x, x), -0.5)), 1.0 / std::sqrt(2 * kPi));
    d = b.add(cdf, b.mul(x, pdf));
  }
  c.add_grad_to(x, b.mul(c.grad(), d));
}

void silu(GradContext& c) {  // s (1 + x (1 - s))
  Builder& b = c.b;
  Value* x = c.in("self");
  Value* s = b.op(OpKind::Sigmoid, {{"self", x}});
  Value* d = b.mul(s, b.add_scalar(b.mul(x, b.add_scalar(b.neg(s), 1.0)), 1.0));
  c.add_grad_to(x, b.mul(c.grad(), d));
}
void sigmoid(GradContext& c) {
  Builder& b = c.b;
  Value* y = c.out();
  c.add_grad_to(c.in("self"), b.mul(c.grad(), b.mul(y, b.add_scalar(b.neg(y), 1.0))));
}
void tanh(GradContext& c) {
  Builder& b = c.b;
  Value* y = c.out();
  c.add_grad_to(c.in("self"), b.mul(c.grad(), b.add_scalar(b.neg(b.mul(y, y)), 1.0)));
}
void exp(GradContext& c) { c.add_grad_to(c.in("self"), c.b.mul(c.grad(), c.out())); }
void log(GradContext& c) { c.add_grad_to(c.in("self"), c.b.div(c.grad(), c.in("self"))); }
void sqrt(GradContext& c) { c.add_grad_to(c.in("self"), c.b.div(c.b.scale(c.grad(), 0.5), c.out())); }
void rsqrt(GradContext& c) {  // -0.5 y^3
  Builder& b = c.b;
  Value* y = c.out();
  c.add_grad_to(c.in("self"), b.mul(c.grad(), b.scale(b.mul(y, b.mul(y, y)), -0.5)));
}
void reciprocal(GradContext& c) {
  Builder& b = c.b;
  c.add_grad_to(c.in("self"), b.neg(b.mul(c.grad(), b.mul(c.out(), c.out()))));
}
void abs(GradContext& c) {
  Builder& b = c.b;
  c.add_grad_to(c.in("self"), b.mul(c.grad(), b.op(OpKind::Sign, {{"self", c.in("self")}})));
}
void erf(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("self");
  c.add_grad_to(x, b.mul(c.grad(), b.scale(b.exp(b.neg(b.mul(x, x))), 2.0 / std::sqrt(kPi))));
}
void pow_scalar(GradContext& c) {
  Builder& b = c.b;
  double e = c.number("exponent");
  Value* x = c.in("self");
  if (e == 0) return;  // x^0 = 1: no gradient (torch's pow_backward gives zeros, not 0 * x^-1)
  Value* d = e == 2 ? b.scale(x, 2.0) : b.scale(b.op(OpKind::PowTensorScalar, {{"self", x}, {"exponent", e - 1}}), e);
  c.add_grad_to(x, b.mul(c.grad(), d));
}
void leaky_relu(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("self");
  Value* pos = cmp(b, OpKind::GtScalar, x, 0);
  Value* g = c.grad();
  c.add_grad_to(x, b.op(OpKind::WhereSelf, {{"condition", pos}, {"self", g}, {"other", b.scale(g, c.number("negative_slope"))}}));
}
// elu (and selu, celu): scale where x > 0, else scale alpha input_scale exp(input_scale x)
// (torch's elu_backward in terms of the input).
void elu(GradContext& c) {
  Builder& b = c.b;
  Value* x = c.in("self");
  const OpKind k = c.n.kind;
  EluConstants given;
  if (k != OpKind::Selu) given.alpha = c.number("alpha");
  if (k == OpKind::Elu) given.scale = c.number("scale"), given.input_scale = c.number("input_scale");
  const EluConstants e = elu_constants(k, given);
  const double alpha = e.alpha, scale = e.scale, in_scale = e.input_scale;
  Value* pos = cmp(b, OpKind::GtScalar, x, 0);
  Value* g = c.grad();
  Value* neg = b.mul(g, b.scale(b.exp(b.scale(x, in_scale)), scale * alpha * in_scale));
  c.add_grad_to(x, b.op(OpKind::WhereSelf, {{"condition", pos}, {"self", b.scale(g, scale)}, {"other", neg}}));
}
// The gradient passes where lo <= x <= hi (clamp, as torch), or lo < x < hi (strict: hardtanh
// and relu6, as torch's hardtanh_backward).
void pass_between(GradContext& c, Value* x, std::optional<double> lo, std::optional<double> hi, bool strict = false) {
  Builder& b = c.b;
  Value* keep = nullptr;
  if (lo) keep = cmp(b, strict ? OpKind::GtScalar : OpKind::GeScalar, x, *lo);
  if (hi) {
    Value* k2 = cmp(b, strict ? OpKind::LtScalar : OpKind::LeScalar, x, *hi);
    keep = keep ? b.op(OpKind::LogicalAnd, {{"self", keep}, {"other", k2}}) : k2;
  }
  c.add_grad_to(x, keep ? b.where_zero(keep, c.grad()) : c.grad());
}
// The strict mask reads the output: y = clamp(x, lo, hi) lies strictly between lo and hi exactly
// where x does (NaN compares false either way; relu6's bounds are exact in every float type),
// and y is usually saved anyway (MobileNet's ReLU6
// feeds a convolution), where x would be recomputed (its batch norm) in the backward.
void pass_between_out(GradContext& c, double lo, double hi) {
  Builder& b = c.b;
  Value* y = c.out();
  Value* keep = b.op(OpKind::LogicalAnd, {{"self", cmp(b, OpKind::GtScalar, y, lo)}, {"other", cmp(b, OpKind::LtScalar, y, hi)}});
  c.add_grad_to(c.in("self"), b.where_zero(keep, c.grad()));
}
void hardtanh(GradContext& c) {
  // In half precision a bound may round when y is stored (0.1 -> 0.09998), and y would then
  // pass the strict test where x was clamped: the input's mask there.
  if (dtype_is_half(c.out()->type.dtype)) return pass_between(c, c.in("self"), c.number("min_val"), c.number("max_val"), true);
  pass_between_out(c, c.number("min_val"), c.number("max_val"));
}
void relu6(GradContext& c) { pass_between_out(c, 0.0, 6.0); }
void clamp(GradContext& c) {
  std::optional<double> lo, hi;
  if (!c.is_none("min")) lo = c.number("min");
  if (!c.is_none("max")) hi = c.number("max");
  pass_between(c, c.in("self"), lo, hi);
}
void clamp_min(GradContext& c) { pass_between(c, c.in("self"), c.number("min"), std::nullopt); }
void hardsigmoid(GradContext& c) {  // 1/6 on (-3, 3)
  Builder& b = c.b;
  Value* x = c.in("self");
  Value* in = b.op(OpKind::LogicalAnd, {{"self", cmp(b, OpKind::GtScalar, x, -3)}, {"other", cmp(b, OpKind::LtScalar, x, 3)}});
  c.add_grad_to(x, b.where_zero(in, b.scale(c.grad(), 1.0 / 6)));
}
void hardswish(GradContext& c) {  // 0 below -3, 1 above 3, (2x + 3)/6 between (torch: x < -3 -> 0, x <= 3 -> ...)
  Builder& b = c.b;
  Value* x = c.in("self");
  Value* g = c.grad();
  Value* mid = b.mul(g, b.add_scalar(b.scale(x, 1.0 / 3), 0.5));
  Value* hi = b.op(OpKind::WhereSelf, {{"condition", cmp(b, OpKind::LeScalar, x, 3)}, {"self", mid}, {"other", g}});
  c.add_grad_to(x, b.where_zero(cmp(b, OpKind::GeScalar, x, -3), hi));
}
void softplus(GradContext& c) {  // sigmoid(beta x), identity above the threshold
  Builder& b = c.b;
  Value* x = c.in("self");
  double beta = c.number("beta"), th = c.number("threshold");
  Value* bx = b.scale(x, beta);
  Value* s = b.op(OpKind::Sigmoid, {{"self", bx}});
  Value* d = b.op(OpKind::WhereScalarSelf, {{"condition", cmp(b, OpKind::GtScalar, bx, th)}, {"self", 1.0}, {"other", s}});
  c.add_grad_to(x, b.mul(c.grad(), d));
}
void mish(GradContext& c) {  // tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x)
  Builder& b = c.b;
  Value* x = c.in("self");
  Value* t = b.op(OpKind::Tanh, {{"self", b.op(OpKind::Softplus, {{"self", x}})}});
  Value* s = b.op(OpKind::Sigmoid, {{"self", x}});
  Value* d = b.add(t, b.mul(b.mul(x, s), b.add_scalar(b.neg(b.mul(t, t)), 1.0)));
  c.add_grad_to(x, b.mul(c.grad(), d));
}
void where_self(GradContext& c) {
  Builder& b = c.b;
  Value *cond = c.in("condition"), *g = c.grad();
  if (c.needs(c.in("self"))) c.add_grad_to(c.in("self"), b.where_zero(cond, g));
  if (c.needs(c.in("other")))
    c.add_grad_to(c.in("other"), b.op(OpKind::WhereScalarSelf, {{"condition", cond}, {"self", 0.0}, {"other", g}}));
}
void where_scalar_self(GradContext& c) {
  c.add_grad_to(c.in("other"), c.b.op(OpKind::WhereScalarSelf, {{"condition", c.in("condition")}, {"self", 0.0}, {"other", c.grad()}}));
}
void where_scalar_other(GradContext& c) { c.add_grad_to(c.in("self"), c.b.where_zero(c.in("condition"), c.grad())); }
void masked_fill(GradContext& c) {
  c.add_grad_to(c.in("self"), c.b.op(OpKind::WhereScalarSelf, {{"condition", c.in("mask")}, {"self", 0.0}, {"other", c.grad()}}));
}
void maximum_minimum(GradContext& c, OpKind pick_self) {  // ties split evenly, as torch does
  Builder& b = c.b;
  Value *a = c.in("self"), *o = c.in("other"), *g = c.grad();
  Value* sel = b.op(pick_self, {{"self", a}, {"other", o}});
  Value* tie = b.op(OpKind::EqTensor, {{"self", a}, {"other", o}});
  Value* half = b.scale(g, 0.5);
  Value* ga = b.op(OpKind::WhereSelf, {{"condition", tie}, {"self", half}, {"other", b.where_zero(sel, g)}});
  Value* go = b.op(OpKind::WhereSelf, {{"condition", tie}, {"self", half},
                                         {"other", b.op(OpKind::WhereScalarSelf, {{"condition", sel}, {"self", 0.0}, {"other", g}})}});
  c.add_grad_to(a, ga);
  c.add_grad_to(o, go);
}
void maximum(GradContext& c) { maximum_minimum(c, OpKind::GtTensor); }
void minimum(GradContext& c) { maximum_minimum(c, OpKind::LtTensor); }
// Eval-mode (or p = 0) dropout is the identity; training-mode dropout became ptc::dropout
// before differentiation (lib/autodiff/dropout.cpp).
void dropout(GradContext& c) {
  PTC_CHECK(!(c.flag("train") && c.number("p") != 0), "autodiff: a training-mode dropout was not rewritten");
  c.add_grad_to(c.in("input") ? c.in("input") : c.in("self"), c.grad());
}
void native_dropout(GradContext& c) {  // eval mode: (x, all-true mask)
  PTC_CHECK(c.is_none("train") || !c.flag("train") || c.number("p") == 0, "autodiff: a training-mode native_dropout was not rewritten");
  if (c.grad(0)) c.add_grad_to(c.in("input"), c.grad(0));
}
// y = mask * x / (1 - p) with the mask a function of (seed, stream): the same op on the gradient.
void ptc_dropout(GradContext& c) {
  Value* g = c.b.op(OpKind::PtcDropout,
                    {{"self", c.grad()}, {"seed", c.in("seed")}, {"p", c.number("p")}, {"stream", c.integer("stream")}});
  c.add_grad_to(c.in("self"), g);
}
void to_copy(GradContext& c) { c.add_grad_to(c.in("self"), c.grad()); }

}  // namespace

void register_pointwise_rules(RuleTable& t) {
  set_rule(t, OpKind::AddTensor, add_tensor);
  set_rule(t, OpKind::AddScalar, identity_self);
  set_rule(t, OpKind::SubTensor, sub_tensor);
  set_rule(t, OpKind::SubScalar, identity_self);
  set_rule(t, OpKind::RsubScalar, rsub_scalar);
  set_rule(t, OpKind::MulTensor, mul_tensor);
  set_rule(t, OpKind::MulScalar, mul_scalar);
  set_rule(t, OpKind::DivTensor, div_tensor);
  set_rule(t, OpKind::DivScalar, div_scalar);
  set_rule(t, OpKind::Neg, neg);
  set_rule(t, OpKind::Relu, relu);
  set_rule(t, OpKind::Gelu, gelu);
  set_rule(t, OpKind::Silu, silu);
  set_rule(t, OpKind::Sigmoid, sigmoid);
  set_rule(t, OpKind::Tanh, tanh);
  set_rule(t, OpKind::Exp, exp);
  set_rule(t, OpKind::Log, log);
  set_rule(t, OpKind::Sqrt, sqrt);
  set_rule(t, OpKind::Rsqrt, rsqrt);
  set_rule(t, OpKind::Reciprocal, reciprocal);
  set_rule(t, OpKind::Abs, abs);
  set_rule(t, OpKind::Erf, erf);
  set_rule(t, OpKind::PowTensorScalar, pow_scalar);
  set_rule(t, OpKind::LeakyRelu, leaky_relu);
  for (OpKind k : {OpKind::Elu, OpKind::Selu, OpKind::Celu}) set_rule(t, k, elu);
  set_rule(t, OpKind::Hardtanh, hardtanh);
  set_rule(t, OpKind::Relu6, relu6);
  set_rule(t, OpKind::Clamp, clamp);
  set_rule(t, OpKind::ClampMin, clamp_min);
  set_rule(t, OpKind::Hardsigmoid, hardsigmoid);
  set_rule(t, OpKind::Hardswish, hardswish);
  set_rule(t, OpKind::Softplus, softplus);
  set_rule(t, OpKind::Mish, mish);
  set_rule(t, OpKind::WhereSelf, where_self);
  set_rule(t, OpKind::WhereScalarSelf, where_scalar_self);
  set_rule(t, OpKind::WhereScalarOther, where_scalar_other);
  set_rule(t, OpKind::MaskedFillScalar, masked_fill);
  set_rule(t, OpKind::Maximum, maximum);
  set_rule(t, OpKind::Minimum, minimum);
  set_rule(t, OpKind::Dropout, dropout);
  set_rule(t, OpKind::PtcDropout, ptc_dropout);
  set_rule(t, OpKind::NativeDropout, native_dropout);
  // In-place variants: the graph IR is functional (lowering checks that no later node reads the
  // overwritten input), so their derivatives are their functional twins'.
  set_rule(t, OpKind::ReluInplace, relu);
  set_rule(t, OpKind::HardtanhInplace, hardtanh);
  set_rule(t, OpKind::AddTensorInplace, add_tensor);
  set_rule(t, OpKind::SubTensorInplace, sub_tensor);
  set_rule(t, OpKind::MulTensorInplace, mul_tensor);
  set_rule(t, OpKind::MulScalarInplace, mul_scalar);
  set_rule(t, OpKind::DivTensorInplace, div_tensor);
  set_rule(t, OpKind::DivScalarInplace, div_scalar);
  set_rule(t, OpKind::SigmoidInplace, sigmoid);
  set_rule(t, OpKind::TanhInplace, tanh);
  set_rule(t, OpKind::GeluInplace, gelu);
  set_rule(t, OpKind::SiluInplace, silu);
  set_rule(t, OpKind::HardswishInplace, hardswish);
  set_rule(t, OpKind::HardsigmoidInplace, hardsigmoid);
  set_rule(t, OpKind::ClampInplace, clamp);
  set_rule(t, OpKind::MaskedFillScalarInplace, masked_fill);
  set_rule(t, OpKind::DropoutInplace, dropout);
  for (OpKind k : {OpKind::Clone, OpKind::Contiguous, OpKind::Alias, OpKind::LiftFreshCopy, OpKind::UnderscoreToCopy,
                   OpKind::ToDtype, OpKind::ToDtypeLayout, OpKind::TypeAs})
    set_rule(t, k, to_copy);
  // Outputs without a gradient: comparisons and logic (bool), rounding and sign (zero
  // derivative almost everywhere), factories and *_like, detach, index arithmetic.
  for (OpKind k : {OpKind::Sign, OpKind::Floor, OpKind::Ceil, OpKind::Round, OpKind::Detach, OpKind::ZerosLike,
                   OpKind::OnesLike, OpKind::FullLike, OpKind::NewZeros, OpKind::NewOnes, OpKind::Full, OpKind::Zeros,
                   OpKind::Ones, OpKind::ArangeStartStep, OpKind::ArangeDefault, OpKind::ArangeStart, OpKind::ScalarTensor,
                   OpKind::EmptyMemoryFormat, OpKind::EqTensor, OpKind::EqScalar, OpKind::NeScalar, OpKind::LtScalar,
                   OpKind::GtScalar, OpKind::LeScalar, OpKind::GeScalar, OpKind::LtTensor, OpKind::GtTensor, OpKind::LeTensor,
                   OpKind::GeTensor, OpKind::NeTensor, OpKind::LogicalNot, OpKind::LogicalAnd, OpKind::LogicalOr,
                   OpKind::BitwiseNot, OpKind::BitwiseAndTensor, OpKind::UnderscoreAndTensor, OpKind::Isnan, OpKind::Isinf,
                   OpKind::AnyDim, OpKind::AnyDims, OpKind::Any, OpKind::AllDim, OpKind::Argmax, OpKind::Argmin, OpKind::FloorDivide,
                   OpKind::UnderscoreAssertTensorMetadata, OpKind::FillScalar, OpKind::Argsort, OpKind::ArgsortStable})
    set_no_gradient(t, k);
}

}  // namespace ptc::autodiff
