// Shape rules: dtype/device copies, tensor factories (full, zeros, arange, *_like, ...) and the
// SymInt ops (sym_size, _operator.add, ...).
#include <cmath>

#include "shape_rules.h"

namespace ptc::shape {
namespace {

// A tensor of `sizes` on the device named by the node's `device` argument (CPU when absent).
Type factory_tensor(Ctx& c, DType dt, const Exprs& sizes, MemoryFormat fmt = MemoryFormat::Contiguous) {
  for (const Expr& s : sizes)
    if (sym::prove_lt(s, 0)) c.fail("size ", sizes_str(sizes), " has a negative entry");
  Type like;
  if (auto d = c.opt_device("device")) like.device = *d;
  return make_tensor(like, dt, sizes, format_strides(sizes, fmt));
}

// ---- copies

Type copy_of(Ctx& c, const Type& x, DType dt, MemoryFormat fmt) {
  Type t = make_tensor(x, dt, x.sizes, empty_like_strides(x, fmt));
  if (auto d = c.opt_device("device")) t.device = *d;
  return t;
}

std::vector<Type> to_copy(Ctx& c) {
  const Type& x = c.tensor("self");
  auto dt = c.opt_dtype("dtype");
  return {copy_of(c, x, dt ? *dt : x.dtype, c.memory_format("memory_format", MemoryFormat::Preserve))};
}

std::vector<Type> to_dtype(Ctx& c) {
  const Type& x = c.tensor("self");
  auto d = c.opt_dtype("dtype");
  if (!d) c.fail("needs a dtype");
  DType dt = *d;
  MemoryFormat fmt = c.memory_format("memory_format", MemoryFormat::Preserve);
  if (dt == x.dtype && !c.bool_("copy") && fmt == MemoryFormat::Preserve) return {x};  // returns self
  return {copy_of(c, x, dt, fmt)};
}

std::vector<Type> type_as(Ctx& c) {
  const Type &x = c.tensor("self"), &o = c.tensor("other");
  if (o.dtype == x.dtype) return {x};
  return {copy_of(c, x, o.dtype, MemoryFormat::Preserve)};
}

std::vector<Type> lift_fresh_copy(Ctx& c) {
  const Type& x = c.tensor("self");
  return {copy_of(c, x, x.dtype, MemoryFormat::Preserve)};
}

// to(dtype=None, ...) keeps self; a dtype converts like to.dtype.
std::vector<Type> to_dtype_layout(Ctx& c) {
  const Type& x = c.tensor("self");
  auto d = c.opt_dtype("dtype");
  MemoryFormat fmt = c.memory_format("memory_format", MemoryFormat::Preserve);
  DType dt = d ? *d : x.dtype;
  if (dt == x.dtype && !c.bool_("copy") && fmt == MemoryFormat::Preserve) return {x};
  return {copy_of(c, x, dt, fmt)};
}

// Checks only (torch.export's metadata assertions); no result.
std::vector<Type> assert_tensor_metadata(Ctx& c) {
  c.tensor("a");
  return {};
}

std::vector<Type> like(Ctx& c) {
  const Type& x = c.tensor("self");
  auto dt = c.opt_dtype("dtype");
  return {copy_of(c, x, dt ? *dt : x.dtype, c.memory_format("memory_format", MemoryFormat::Preserve))};
}

// ---- factories

DType scalar_dtype(const ScalarArg& s) {
  switch (s.kind) {
    case ScalarArg::Bool: return DType::Bool;
    case ScalarArg::Int: return DType::Int64;
    case ScalarArg::Float: return kDefaultFloat;
    case ScalarArg::Tensor: return s.tensor->dtype;
  }
  return kDefaultFloat;
}

std::vector<Type> full(Ctx& c) {
  auto dt = c.opt_dtype("dtype");
  return {factory_tensor(c, dt ? *dt : scalar_dtype(c.scalar("fill_value")), c.syms("size"))};
}

std::vector<Type> zeros(Ctx& c) {  // zeros, ones, empty.memory_format
  auto dt = c.opt_dtype("dtype");
  MemoryFormat fmt = c.memory_format("memory_format", MemoryFormat::Contiguous);
  if (fmt == MemoryFormat::Preserve) fmt = MemoryFormat::Contiguous;
  return {factory_tensor(c, dt ? *dt : kDefaultFloat, c.syms("size"), fmt)};
}

std::vector<Type> new_factory(Ctx& c) {  // new_zeros, new_ones: self's dtype by default
  const Type& x = c.tensor("self");
  auto dt = c.opt_dtype("dtype");
  return {factory_tensor(c, dt ? *dt : x.dtype, c.syms("size"))};
}

std::vector<Type> scalar_tensor(Ctx& c) {
  auto dt = c.opt_dtype("dtype");
  c.scalar("s");
  return {factory_tensor(c, dt ? *dt : kDefaultFloat, {})};
}

std::vector<Type> arange(Ctx& c) {
  ScalarArg start, end = c.scalar("end"), step;
  start.i = Expr(0);
  start.constant = true;
  step.i = Expr(1);
  step.f = 1;
  step.constant = true;
  if (c.node.kind != OpKind::ArangeDefault) start = c.scalar("start");
  if (c.node.kind == OpKind::ArangeStartStep) step = c.scalar("step");
  bool is_float = false;
  for (const ScalarArg* s : {&start, &end, &step}) {
    if (s->kind == ScalarArg::Tensor) throw UnknownInput{};
    is_float = is_float || s->kind == ScalarArg::Float;
  }
  auto dt = c.opt_dtype("dtype");
  DType out_dt = dt ? *dt : (is_float ? kDefaultFloat : DType::Int64);
  Expr len;
  if (start.is_const() && end.is_const() && step.is_const()) {
    double a = start.f, b = end.f, s = step.f;
    if (s == 0) c.fail("step must be nonzero");
    if ((s > 0 && b < a) || (s < 0 && b > a))
      c.fail("the bounds [", a, ", ", b, ") are inconsistent with the step ", s);
    if (is_float) {
      len = static_cast<int64_t>(std::ceil((b - a) / s));
    } else {
      int64_t ia = *start.i->as_const(), ib = *end.i->as_const(), is = *step.i->as_const();
      len = is > 0 ? sym::ceildiv(Expr(ib - ia), Expr(is)) : sym::ceildiv(Expr(ia - ib), Expr(-is));
    }
  } else {
    if (is_float)
      c.fail("has symbolic float bounds: the output size depends on a float computation ptc cannot represent");
    if (!start.i || !end.i) throw UnknownInput{};
    auto s = step.i->as_const();
    if (!s || *s == 0) c.fail("needs a constant nonzero step when its bounds are symbolic, got ", step.i->str());
    len = *s > 0 ? sym::ceildiv(*end.i - *start.i, Expr(*s)) : sym::ceildiv(*start.i - *end.i, Expr(-*s));
  }
  if (sym::prove_lt(len, 0)) c.fail("the bounds are inconsistent with the step (length ", len.str(), ")");
  return {factory_tensor(c, out_dt, {len})};
}

// ---- SymInt ops

std::vector<Type> sym_size(Ctx& c) {  // sym_size.int, size.int
  const Type& x = c.tensor("self");
  if (x.rank() == 0) c.fail("a 0-dim tensor has no sizes");
  return {Type::sym_int(x.sizes[static_cast<size_t>(c.dim_arg("dim", static_cast<int64_t>(x.rank())))])};
}

std::vector<Type> sym_stride(Ctx& c) {
  const Type& x = c.tensor("self");
  if (x.rank() == 0) c.fail("a 0-dim tensor has no strides");
  return {Type::sym_int(x.strides[static_cast<size_t>(c.dim_arg("dim", static_cast<int64_t>(x.rank())))])};
}

std::vector<Type> sym_numel(Ctx& c) { return {Type::sym_int(numel(c.tensor("self").sizes))}; }

// Int.Tensor / ScalarImplicit read a tensor's value: known only to the reader that recorded it.
std::vector<Type> tensor_item(Ctx& c) {
  const Type& x = c.tensor("a");
  if (x.rank() != 0 && !is_one(numel(x.sizes))) c.fail("needs a one-element tensor, got ", x.str());
  Type t = Type::sym_int(std::nullopt);
  if (c.node.kind == OpKind::ScalarImplicit && dtype_is_float(x.dtype)) t.kind = Type::Kind::SymFloat;
  return {t};
}

std::vector<Type> sym_binary(Ctx& c) {
  Expr a = c.sym("a"), b = c.sym("b");
  try {
    switch (c.node.kind) {
      case OpKind::SymAdd: return {Type::sym_int(a + b)};
      case OpKind::SymSub: return {Type::sym_int(a - b)};
      case OpKind::SymMul: return {Type::sym_int(a * b)};
      case OpKind::SymFloorDiv: return {Type::sym_int(sym::floordiv(a, b))};
      case OpKind::SymMod: return {Type::sym_int(sym::mod(a, b))};
      default: break;
    }
  } catch (const std::domain_error&) {
    c.fail("divides ", a.str(), " by zero");
  }
  throw InternalError("sym_binary: unexpected op");
}

std::vector<Type> sym_neg(Ctx& c) { return {Type::sym_int(-c.sym("a"))}; }

}  // namespace

void add_factory_rules(RuleTable& t) {
  using K = OpKind;
  set_rule(t, K::UnderscoreToCopy, to_copy);
  set_rule(t, K::ToDtype, to_dtype);
  set_rule(t, K::ToDtypeLayout, to_dtype_layout);
  set_rule(t, K::ToDevice, to_dtype);  // (ptc ignores devices: the library's device is the compile's)
  set_rule(t, K::UnderscoreAssertTensorMetadata, assert_tensor_metadata);
  for (K k : {K::NewZeros, K::NewOnes}) set_rule(t, k, new_factory);
  set_rule(t, K::TypeAs, type_as);
  set_rule(t, K::LiftFreshCopy, lift_fresh_copy);
  for (K k : {K::ZerosLike, K::OnesLike, K::FullLike}) set_rule(t, k, like);
  set_rule(t, K::Full, full);
  for (K k : {K::Zeros, K::Ones, K::EmptyMemoryFormat}) set_rule(t, k, zeros);
  set_rule(t, K::ScalarTensor, scalar_tensor);
  for (K k : {K::ArangeDefault, K::ArangeStart, K::ArangeStartStep}) set_rule(t, k, arange);
  set_rule(t, K::SymSizeInt, sym_size);
  set_rule(t, K::SizeInt, sym_size);
  set_rule(t, K::SymStrideInt, sym_stride);
  set_rule(t, K::SymNumel, sym_numel);
  set_rule(t, K::IntTensor, tensor_item);
  set_rule(t, K::ScalarImplicit, tensor_item);
  for (K k : {K::SymAdd, K::SymSub, K::SymMul, K::SymFloorDiv, K::SymMod}) set_rule(t, k, sym_binary);
  set_rule(t, K::SymNeg, sym_neg);
}

}  // namespace ptc::shape
