// Shape rules: elementwise ops (unary, binary, ternary, comparisons, where, masked_fill, clamp,
// dropout, tril/triu). Sizes broadcast; dtypes follow torch's type promotion (Python scalars
// included); strides are torch's elementwise output strides (the inputs' layout is kept).
#include "shape_rules.h"

namespace ptc::shape {
namespace {

std::vector<Type> one(Type t) { return {std::move(t)}; }

// ---- unary

std::vector<Type> unary_same(Ctx& c) {
  const Type& x = c.tensor("self");
  return one(elementwise(c, {&x}, x.dtype));
}

std::vector<Type> unary_float(Ctx& c) {  // integer inputs compute in the default float type
  const Type& x = c.tensor("self");
  return one(elementwise(c, {&x}, to_float(x.dtype)));
}

std::vector<Type> unary_bool(Ctx& c) {
  const Type& x = c.tensor("self");
  return one(elementwise(c, {&x}, DType::Bool));
}

std::vector<Type> inplace(Ctx& c) { return one(c.tensor("self")); }  // returns self itself

std::vector<Type> tril_triu(Ctx& c) {
  const Type& x = c.tensor("self");
  if (x.rank() < 2) c.fail("needs a tensor of rank >= 2, got ", x.str());
  return one(make_contiguous(x, x.dtype, x.sizes));
}

// In eval mode torch.export traces dropout as a copy of its input (clone(preserve_format)).
std::vector<Type> dropout(Ctx& c) {
  const Type& x = c.tensor("input");
  c.bool_("train");
  return one(elementwise(c, {&x}, x.dtype));
}

// ptc::dropout (training-mode dropout with the library's RNG): self's sizes, contiguous.
std::vector<Type> ptc_dropout(Ctx& c) {
  const Type& x = c.tensor("self");
  const Type& seed = c.tensor("seed");
  if (seed.rank() != 0 || seed.dtype != DType::Int64) c.fail("the seed must be a 0-d int64 tensor, got ", seed.str());
  if (!dtype_is_float(x.dtype)) c.fail("dropout needs a float tensor, got ", x.str());
  double p = c.float_("p");
  if (!(p >= 0 && p <= 1)) c.fail("dropout probability must be in [0, 1], got ", p);
  c.int_("stream");
  return one(make_contiguous(x, x.dtype, x.sizes));
}

// diff(n, dim, prepend, append): `dim` shrinks by n after prepend/append are concatenated.
std::vector<Type> diff(Ctx& c) {
  const Type& x = c.tensor("self");
  if (x.rank() == 0) c.fail("needs a tensor of rank >= 1");
  int64_t n = c.int_("n");
  if (n < 0) c.fail("n must be non-negative, got ", n);
  int64_t dim = c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  Exprs sizes = x.sizes;
  for (const char* extra : {"prepend", "append"})
    if (const Type* t = c.opt_tensor(extra)) {
      if (t->rank() != x.rank()) c.fail(extra, " must have self's rank");
      sizes[static_cast<size_t>(dim)] = sizes[static_cast<size_t>(dim)] + t->sizes[static_cast<size_t>(dim)];
    }
  Expr len = sizes[static_cast<size_t>(dim)] - n;
  if (sym::prove_lt(len, 0)) len = 0;
  else if (!sym::prove_ge(len, 0)) c.fail("cannot tell whether diff's dimension ", sizes[static_cast<size_t>(dim)].str(), " exceeds n = ", n);
  sizes[static_cast<size_t>(dim)] = len;
  return one(make_contiguous(x, x.dtype, sizes));
}

std::vector<Type> native_dropout(Ctx& c) {
  const Type& x = c.tensor("input");
  Type out = elementwise(c, {&x}, x.dtype);
  Type mask = out;
  mask.dtype = DType::Bool;
  return {out, mask};
}

// ---- binary with tensors (either may also be a Python number: torch.export writes
// add.Tensor(x, 1))

struct Operands {
  std::vector<const Type*> tensors;  // for type promotion
  std::vector<ScalarArg> scalars;
  std::vector<const Type*> layout;  // for sizes and strides
};

Operands operands(const Ctx& c, std::initializer_list<const char*> names) {
  Operands o;
  for (const char* n : names) {
    ScalarArg s;
    if (const Type* t = c.tensor_or_scalar(n, &s)) {
      o.tensors.push_back(t);
      o.layout.push_back(t);
    } else {
      o.scalars.push_back(s);
      if (s.kind == ScalarArg::Tensor) o.layout.push_back(s.tensor);
    }
  }
  if (o.layout.empty()) c.fail("needs at least one tensor operand");
  return o;
}

Type binary_type(Ctx& c, const char* a, const char* b, bool int_to_float, bool to_bool) {
  Operands o = operands(c, {a, b});
  DType dt = result_type(o.tensors, o.scalars);
  if (int_to_float) dt = to_float(dt);
  if (to_bool) dt = DType::Bool;
  return elementwise(c, o.layout, dt);
}

std::vector<Type> binary(Ctx& c) { return one(binary_type(c, "self", "other", false, false)); }
std::vector<Type> binary_div(Ctx& c) { return one(binary_type(c, "self", "other", true, false)); }

// Floor division of two tensors (floor_divide, div(rounding_mode="floor")): torch's meta
// (the _refs decomposition) lays the result out like `other` alone, so a broadcast or 0-dim
// divisor gives a contiguous result. With a Python number it follows `self`.
std::vector<Type> floor_div(Ctx& c) {
  Type t = binary_type(c, "self", "other", false, false);
  ScalarArg s;
  if (const Type* other = c.tensor_or_scalar("other", &s)) t.strides = elementwise_strides(t.sizes, {other});
  return one(t);
}

std::vector<Type> div_mode(Ctx& c) {
  auto mode = c.opt_str("rounding_mode");
  if (mode && *mode == "floor") return floor_div(c);
  return one(binary_type(c, "self", "other", !mode, false));
}
std::vector<Type> pow_tt(Ctx& c) { return one(binary_type(c, "self", "exponent", false, false)); }
std::vector<Type> compare_tt(Ctx& c) { return one(binary_type(c, "self", "other", false, true)); }

// ---- binary with a Python scalar

// The Scalar's tensor (TorchScript may pass a 0-dim tensor) takes part in the layout too.
std::vector<const Type*> with_scalar(const Type& x, const ScalarArg& s) {
  return s.kind == ScalarArg::Tensor ? std::vector<const Type*>{&x, s.tensor} : std::vector<const Type*>{&x};
}

Type scalar_op(Ctx& c, const char* scalar_name, bool int_to_float) {
  const Type& x = c.tensor("self");
  ScalarArg s = c.scalar(scalar_name);
  DType dt = result_type({&x}, {s});
  if (int_to_float) dt = to_float(dt);
  return elementwise(c, with_scalar(x, s), dt);
}

std::vector<Type> scalar_other(Ctx& c) { return one(scalar_op(c, "other", false)); }
std::vector<Type> div_scalar(Ctx& c) { return one(scalar_op(c, "other", true)); }
std::vector<Type> pow_ts(Ctx& c) { return one(scalar_op(c, "exponent", false)); }
std::vector<Type> clamp_min(Ctx& c) { return one(scalar_op(c, "min", false)); }

std::vector<Type> compare_ts(Ctx& c) {
  const Type& x = c.tensor("self");
  ScalarArg s = c.scalar("other");
  return one(elementwise(c, with_scalar(x, s), DType::Bool));
}

std::vector<Type> clamp(Ctx& c) {
  const Type& x = c.tensor("self");
  std::vector<ScalarArg> scalars;
  std::vector<const Type*> ins{&x};
  for (const char* n : {"min", "max"}) {
    if (auto s = c.opt_scalar(n)) {
      scalars.push_back(*s);
      if (s->kind == ScalarArg::Tensor) ins.push_back(s->tensor);
    }
  }
  return one(elementwise(c, ins, result_type({&x}, scalars)));
}

std::vector<Type> hardtanh(Ctx& c) {  // no type promotion
  const Type& x = c.tensor("self");
  return one(elementwise(c, {&x}, x.dtype));
}

std::vector<Type> logical_binary(Ctx& c) { return one(binary_type(c, "self", "other", false, true)); }

// ---- ternary

std::vector<Type> where(Ctx& c) {  // where.self / .ScalarSelf / .ScalarOther
  const Type& cond = c.tensor("condition");
  Operands o = operands(c, {"self", "other"});
  std::vector<const Type*> layout{&cond};
  layout.insert(layout.end(), o.layout.begin(), o.layout.end());
  return one(elementwise(c, layout, result_type(o.tensors, o.scalars)));
}

// where.Scalar: the condition's shape; two numbers give the default dtype of their kind (float32
// for floats, int64 for ints, bool for bools), as torch.where(cond, 1.0, 2.0).
std::vector<Type> where_scalar(Ctx& c) {
  const Type& cond = c.tensor("condition");
  ScalarArg a = c.scalar("self"), b = c.scalar("other");
  auto rank = [](const ScalarArg& s) { return s.kind == ScalarArg::Float ? 2 : s.kind == ScalarArg::Int ? 1 : 0; };
  const int r = std::max(rank(a), rank(b));
  return one(elementwise(c, {&cond}, r == 2 ? DType::Float32 : r == 1 ? DType::Int64 : DType::Bool));
}

// masked_fill keeps self's dtype; torch allocates a contiguous result.
std::vector<Type> masked_fill(Ctx& c) {
  const Type &x = c.tensor("self"), &mask = c.tensor("mask");
  if (mask.dtype != DType::Bool) c.fail("mask must be a bool tensor, got ", mask.str());
  ScalarArg number;
  if (c.node.kind == OpKind::MaskedFillTensor || c.node.kind == OpKind::MaskedFillTensorInplace)
    if (const Type* v = c.tensor_or_scalar("value", &number); v && v->rank() != 0)
      c.fail("value must be a 0-dim tensor, got ", v->str());
  Exprs shape = broadcast_shapes(c, x.sizes, mask.sizes);
  if (c.node.kind == OpKind::MaskedFillScalarInplace || c.node.kind == OpKind::MaskedFillTensorInplace) {
    if (shape != x.sizes) c.fail("the mask ", mask.str(), " does not broadcast to self ", x.str(), " (an in-place fill keeps self's shape)");
    return one(x);  // returns self itself
  }
  return one(make_contiguous(x, x.dtype, shape));
}

}  // namespace

void add_pointwise_rules(RuleTable& t) {
  using K = OpKind;
  for (K k : {K::Relu, K::Gelu, K::Silu, K::Hardswish, K::Hardsigmoid, K::Mish, K::Elu, K::Selu, K::Celu, K::LeakyRelu, K::Softplus,
              K::Abs, K::Neg, K::Floor, K::Ceil, K::Round, K::Sign, K::BitwiseNot, K::Relu6})
    set_rule(t, k, unary_same);
  for (K k : {K::Sigmoid, K::Tanh, K::Erf, K::Exp, K::Log, K::Log1p, K::Sqrt, K::Rsqrt, K::Reciprocal, K::Sin, K::Cos})
    set_rule(t, k, unary_float);
  for (K k : {K::LogicalNot, K::Isnan, K::Isinf}) set_rule(t, k, unary_bool);
  for (K k : {K::ReluInplace, K::SiluInplace, K::HardswishInplace, K::HardtanhInplace, K::AddTensorInplace,
              K::SubTensorInplace, K::MulTensorInplace, K::MulScalarInplace, K::DivTensorInplace, K::DivScalarInplace,
              K::SigmoidInplace, K::TanhInplace, K::GeluInplace, K::HardsigmoidInplace, K::ClampInplace})
    set_rule(t, k, inplace);
  set_rule(t, K::Hardtanh, hardtanh);
  set_rule(t, K::Tril, tril_triu);
  set_rule(t, K::Triu, tril_triu);
  set_rule(t, K::Dropout, dropout);
  set_rule(t, K::PtcDropout, ptc_dropout);
  set_rule(t, K::DropoutInplace, inplace);
  set_rule(t, K::NativeDropout, native_dropout);

  for (K k : {K::AddTensor, K::SubTensor, K::MulTensor, K::Maximum, K::Minimum, K::MinOther, K::MaxOther, K::BitwiseAndTensor,
              K::UnderscoreAndTensor})
    set_rule(t, k, binary);
  set_rule(t, K::FloorDivide, floor_div);
  set_rule(t, K::DivTensor, binary_div);
  set_rule(t, K::DivTensorMode, div_mode);
  set_rule(t, K::PowTensorTensor, pow_tt);
  for (K k : {K::EqTensor, K::LtTensor, K::GtTensor, K::LeTensor, K::GeTensor, K::NeTensor}) set_rule(t, k, compare_tt);
  set_rule(t, K::Diff, diff);
  for (K k : {K::LogicalAnd, K::LogicalOr}) set_rule(t, k, logical_binary);

  for (K k : {K::AddScalar, K::SubScalar, K::RsubScalar, K::MulScalar, K::RemainderScalar, K::FmodScalar})
    set_rule(t, k, scalar_other);
  set_rule(t, K::DivScalar, div_scalar);
  set_rule(t, K::PowTensorScalar, pow_ts);
  set_rule(t, K::ClampMin, clamp_min);
  set_rule(t, K::Clamp, clamp);
  set_rule(t, K::ClampTensor, clamp);  // min / max as tensors (Tensor? min, Tensor? max)
  for (K k : {K::EqScalar, K::NeScalar, K::LtScalar, K::GtScalar, K::LeScalar, K::GeScalar}) set_rule(t, k, compare_ts);

  for (K k : {K::WhereSelf, K::WhereScalarSelf, K::WhereScalarOther}) set_rule(t, k, where);
  set_rule(t, K::WhereScalar, where_scalar);
  set_rule(t, K::MaskedFillScalar, masked_fill);
  set_rule(t, K::MaskedFillTensor, masked_fill);
  set_rule(t, K::MaskedFillScalarInplace, masked_fill);
  set_rule(t, K::MaskedFillTensorInplace, masked_fill);
}

}  // namespace ptc::shape
