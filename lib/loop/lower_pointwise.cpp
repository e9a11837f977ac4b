// Pointwise lowerings: unary and binary math, comparisons, where/masked_fill/clamp, casts and
// tensor creation. All of them compose into their consumers (no buffer of their own).
#include <cmath>

#include "lower_internal.h"

namespace ptc::loop {
namespace {

ExprRef c(double v, DType dt) { return constant(v, dt); }

ExprRef gelu(ExprRef x, bool tanh_approx) {
  DType dt = x->dtype;
  if (tanh_approx) {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    ExprRef x3 = binary(Op::Mul, binary(Op::Mul, x, x), x);
    ExprRef inner = binary(Op::Mul, c(std::sqrt(2.0 / M_PI), dt), binary(Op::Add, x, binary(Op::Mul, c(0.044715, dt), x3)));
    return binary(Op::Mul, binary(Op::Mul, c(0.5, dt), x), binary(Op::Add, c(1, dt), unary(Op::Tanh, inner)));
  }
  ExprRef e = unary(Op::Erf, binary(Op::Mul, x, c(M_SQRT1_2, dt)));
  return binary(Op::Mul, binary(Op::Mul, c(0.5, dt), x), binary(Op::Add, c(1, dt), e));
}

ExprRef clamp(ExprRef x, ExprRef lo, ExprRef hi) {
  if (lo) x = binary(Op::Max, x, lo);
  if (hi) x = binary(Op::Min, x, hi);
  return x;
}

// x ** e for a constant exponent: the forms torch's own pow kernels take for these exponents
// (x * x, x * x * x, sqrt, 1 / sqrt, 1 / x, 1 / (x * x); Inductor's x^4 as a square of a
// square), since std::pow neither vectorizes nor costs less than a division. nullptr: no
// such form (std::pow, as torch).
ExprRef pow_by_constant(ExprRef x, double e) {
  DType dt = x->dtype;
  const bool fl = dtype_is_float(dt);
  auto sq = [](ExprRef v) { return binary(Op::Mul, v, v); };
  if (e == 1) return x;
  if (e == 2) return sq(x);
  if (e == 3) return binary(Op::Mul, sq(x), x);
  if (e == 4) return sq(sq(x));
  if (!fl) return nullptr;
  if (e == 0.5) return unary(Op::Sqrt, x);
  if (e == -0.5) return unary(Op::Rsqrt, x);
  if (e == -1) return unary(Op::Reciprocal, x);
  if (e == -2) return unary(Op::Reciprocal, sq(x));
  return nullptr;
}

DType promote(DType a, DType b) {
  auto rank = [](DType t) { return t == DType::Bool ? 0 : dtype_is_float(t) ? 2 : 1; };
  if (rank(a) != rank(b)) return rank(a) > rank(b) ? a : b;
  if (a == b) return a;
  if (rank(a) == 2 && dtype_size(a) == 2 && dtype_size(b) == 2) return DType::Float32;  // f16 vs bf16
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

std::optional<Op> simple_unary(OpKind k) {
  switch (k) {
    case OpKind::Relu: case OpKind::ReluInplace: return Op::Relu;
    case OpKind::Sigmoid: case OpKind::SigmoidInplace: return Op::Sigmoid;
    case OpKind::Tanh: case OpKind::TanhInplace: return Op::Tanh;
    case OpKind::Erf: return Op::Erf;
    case OpKind::Exp: return Op::Exp;
    case OpKind::Log: return Op::Log;
    case OpKind::Log1p: return Op::Log1p;
    case OpKind::Sqrt: return Op::Sqrt;
    case OpKind::Rsqrt: return Op::Rsqrt;
    case OpKind::Abs: return Op::Abs;
    case OpKind::Neg: return Op::Neg;
    case OpKind::Reciprocal: return Op::Reciprocal;
    case OpKind::Sin: return Op::Sin;
    case OpKind::Cos: return Op::Cos;
    case OpKind::Floor: return Op::Floor;
    case OpKind::Ceil: return Op::Ceil;
    case OpKind::Round: return Op::Round;
    case OpKind::Sign: return Op::Sign;
    default: return std::nullopt;
  }
}

std::optional<Op> comparison(OpKind k) {
  switch (k) {
    case OpKind::EqTensor: case OpKind::EqScalar: return Op::Eq;
    case OpKind::NeScalar: return Op::Ne;
    case OpKind::NeTensor: return Op::Ne;
    case OpKind::LtScalar: case OpKind::LtTensor: return Op::Lt;
    case OpKind::LeScalar: case OpKind::LeTensor: return Op::Le;
    case OpKind::GtScalar: case OpKind::GtTensor: return Op::Gt;
    case OpKind::GeScalar: case OpKind::GeTensor: return Op::Ge;
    case OpKind::LogicalAnd: return Op::And;
    case OpKind::UnderscoreAndTensor: case OpKind::BitwiseAndTensor: return Op::And;  // bool operands (checked)
    case OpKind::LogicalOr: return Op::Or;
    default: return std::nullopt;
  }
}

// A Scalar argument as a 0-d tensor, so scalar and tensor overloads share one path.
TensorRef scalar_tensor(Lowering& L, ExprRef v) {
  return L.pointwise(v->dtype, {}, [v](const Index&) { return v; });
}

TensorRef full(Lowering& L, const Index& sizes, ExprRef v) {
  return L.pointwise(v->dtype, sizes, [v](const Index&) { return v; });
}

}  // namespace

Lowered lower_pointwise(Lowering& L, const Node& n, const Args& a) {
  const OpKind k = n.kind;
  auto out = [&](TensorRef t) { return Lowered(std::vector<TensorRef>{std::move(t)}); };
  if (auto op = simple_unary(k)) {
    DType dt = a.out_dtype();
    Op o = *op;
    return out(map1(L, a.tensor("self"), dt, [o, dt](ExprRef x) { return unary(o, cast(x, dt)); }));
  }
  switch (k) {
    case OpKind::Gelu: case OpKind::GeluInplace: {
      bool t = a.s("approximate") == "tanh";
      DType dt = a.out_dtype();
      return out(map1(L, a.tensor("self"), dt, [t, dt](ExprRef x) { return gelu(cast(x, dt), t); }));
    }
    case OpKind::Silu: case OpKind::SiluInplace: {
      DType dt = a.out_dtype();
      return out(map1(L, a.tensor("self"), dt, [dt](ExprRef x) {
        x = cast(x, dt);
        return binary(Op::Mul, x, unary(Op::Sigmoid, x));
      }));
    }
    case OpKind::Hardswish: case OpKind::HardswishInplace: case OpKind::Hardsigmoid: case OpKind::HardsigmoidInplace: {
      DType dt = a.out_dtype();
      bool swish = k != OpKind::Hardsigmoid && k != OpKind::HardsigmoidInplace;
      return out(map1(L, a.tensor("self"), dt, [dt, swish](ExprRef x) {
        x = cast(x, dt);
        ExprRef h = binary(Op::Div, clamp(binary(Op::Add, x, c(3, dt)), c(0, dt), c(6, dt)), c(6, dt));
        return swish ? binary(Op::Mul, x, h) : h;
      }));
    }
    case OpKind::Hardtanh: case OpKind::HardtanhInplace: case OpKind::Relu6: {
      DType dt = a.out_dtype();
      ExprRef lo = k == OpKind::Relu6 ? constant(0, dt) : a.scalar("min_val", dt);
      ExprRef hi = k == OpKind::Relu6 ? constant(6, dt) : a.scalar("max_val", dt);
      return out(map1(L, a.tensor("self"), dt, [=](ExprRef x) { return clamp(cast(x, dt), lo, hi); }));
    }
    case OpKind::LeakyRelu: {
      DType dt = a.out_dtype();
      ExprRef slope = a.scalar("negative_slope", dt);
      return out(map1(L, a.tensor("self"), dt, [=](ExprRef x) {
        x = cast(x, dt);
        return select(binary(Op::Gt, x, c(0, dt)), x, binary(Op::Mul, x, slope));
      }));
    }
    case OpKind::Elu: case OpKind::Selu: case OpKind::Celu: {
      // scale x where x > 0, else scale alpha (exp(input_scale x) - 1); selu and celu are elus
      // with fixed constants (elu_constants)
      DType dt = a.out_dtype();
      EluConstants given;
      if (k != OpKind::Selu) given.alpha = a.f("alpha");
      if (k == OpKind::Elu) given.scale = a.f("scale"), given.input_scale = a.f("input_scale");
      const EluConstants e = elu_constants(k, given);
      ExprRef alpha = constant(e.alpha, dt), scale = constant(e.scale, dt), in_scale = constant(e.input_scale, dt);
      return out(map1(L, a.tensor("self"), dt, [=](ExprRef x) {
        x = cast(x, dt);
        ExprRef neg = binary(Op::Mul, binary(Op::Mul, scale, alpha), binary(Op::Sub, unary(Op::Exp, binary(Op::Mul, x, in_scale)), c(1, dt)));
        return select(binary(Op::Gt, x, c(0, dt)), binary(Op::Mul, x, scale), neg);
      }));
    }
    case OpKind::Mish: {
      DType dt = a.out_dtype();
      return out(map1(L, a.tensor("self"), dt, [dt](ExprRef x) {
        x = cast(x, dt);
        ExprRef sp = unary(Op::Log1p, unary(Op::Exp, x));
        return binary(Op::Mul, x, unary(Op::Tanh, sp));
      }));
    }
    case OpKind::Softplus: {  // log1p(exp(beta x)) / beta, x itself where beta x > threshold
      DType dt = a.out_dtype();
      ExprRef beta = a.scalar("beta", dt), th = a.scalar("threshold", dt);
      return out(map1(L, a.tensor("self"), dt, [=](ExprRef x) {
        x = cast(x, dt);
        ExprRef bx = binary(Op::Mul, x, beta);
        return select(binary(Op::Gt, bx, th), x, binary(Op::Div, unary(Op::Log1p, unary(Op::Exp, bx)), beta));
      }));
    }
    case OpKind::LogicalNot: case OpKind::BitwiseNot:
      return out(map1(L, a.tensor("self"), DType::Bool, [](ExprRef x) { return unary(Op::Not, cast(x, DType::Bool)); }));
    case OpKind::Isnan: return out(map1(L, a.tensor("self"), DType::Bool, [](ExprRef x) { return unary(Op::IsNan, x); }));
    case OpKind::Isinf: return out(map1(L, a.tensor("self"), DType::Bool, [](ExprRef x) { return unary(Op::IsInf, x); }));
    default: break;
  }

  // Binary arithmetic: add/sub (with alpha), mul, div, pow, maximum/minimum.
  struct Bin {
    OpKind kind;
    Op op;
    bool scalar_other;
    bool reverse;
  };
  static const Bin kBinary[] = {
      {OpKind::AddTensor, Op::Add, false, false}, {OpKind::AddScalar, Op::Add, true, false},
      {OpKind::AddTensorInplace, Op::Add, false, false}, {OpKind::SubTensorInplace, Op::Sub, false, false},
      {OpKind::MulTensorInplace, Op::Mul, false, false}, {OpKind::MulScalarInplace, Op::Mul, true, false},
      {OpKind::DivTensorInplace, Op::Div, false, false}, {OpKind::DivScalarInplace, Op::Div, true, false},
      {OpKind::SubTensor, Op::Sub, false, false}, {OpKind::SubScalar, Op::Sub, true, false},
      {OpKind::RsubScalar, Op::Sub, true, true},  {OpKind::MulTensor, Op::Mul, false, false},
      {OpKind::MulScalar, Op::Mul, true, false},  {OpKind::DivTensor, Op::Div, false, false},
      {OpKind::DivScalar, Op::Div, true, false},  {OpKind::PowTensorScalar, Op::Pow, true, false},
      {OpKind::PowTensorTensor, Op::Pow, false, false}, {OpKind::Maximum, Op::Max, false, false},
      {OpKind::Minimum, Op::Min, false, false},   {OpKind::FloorDivide, Op::FloorDiv, false, false},
      {OpKind::MinOther, Op::Min, false, false},  {OpKind::MaxOther, Op::Max, false, false},
      {OpKind::RemainderScalar, Op::Mod, true, false},
  };
  if (k == OpKind::FmodScalar) {  // C's fmod (the dividend's sign) from Python's mod (the divisor's)
    DType dt = a.out_dtype();
    TensorRef x = a.tensor("self");
    TensorRef y = scalar_tensor(L, a.scalar("other", dt));
    return out(map2(L, x, y, dt, [=](ExprRef p, ExprRef q) {
      p = cast(p, dt);
      q = cast(q, dt);
      ExprRef r = binary(Op::Mod, p, q), zero = constant(0, dt);
      ExprRef flip = binary(Op::And, binary(Op::Ne, r, zero),
                            binary(Op::Ne, binary(Op::Lt, r, zero), binary(Op::Lt, p, zero)));
      return select(flip, binary(Op::Sub, r, q), r);
    }));
  }
  for (const Bin& bin : kBinary) {
    if (bin.kind != k) continue;
    DType dt = a.out_dtype();
    TensorRef x = a.tensor("self");
    const char* other_name = n.arg("other") ? "other" : "exponent";
    TensorRef y = bin.scalar_other ? scalar_tensor(L, a.scalar(other_name, dt)) : a.tensor(other_name);
    if (bin.op == Op::Add && !bin.scalar_other) y = L.split_library_sum(x, y, n.name);
    ExprRef alpha = n.arg("alpha") ? a.scalar("alpha", dt) : nullptr;
    Op op = bin.op;
    bool rev = bin.reverse;
    return out(map2(L, x, y, dt, [=](ExprRef p, ExprRef q) {
      p = cast(p, dt);
      q = cast(q, dt);
      if (op == Op::Pow && q->op == Op::Const)
        if (ExprRef r = pow_by_constant(p, q->value)) return r;
      if (alpha) (rev ? p : q) = binary(Op::Mul, rev ? p : q, alpha);
      return rev ? binary(op, q, p) : binary(op, p, q);
    }));
  }
  if (k == OpKind::DivTensorMode) {
    DType dt = a.out_dtype();
    std::string mode = a.is_none("rounding_mode") ? "" : a.s("rounding_mode");
    return out(map2(L, a.tensor("self"), a.tensor("other"), dt, [=](ExprRef p, ExprRef q) {
      ExprRef d = binary(Op::Div, cast(p, DType::Float64), cast(q, DType::Float64));
      if (mode == "floor") d = unary(Op::Floor, d);
      else if (mode == "trunc") d = select(binary(Op::Lt, d, c(0, DType::Float64)), unary(Op::Ceil, d), unary(Op::Floor, d));
      return cast(d, dt);
    }));
  }
  if (auto op = comparison(k)) {
    TensorRef x = a.tensor("self");
    if ((k == OpKind::UnderscoreAndTensor || k == OpKind::BitwiseAndTensor) &&
        (x.dtype != DType::Bool || a.tensor("other").dtype != DType::Bool))
      L.fail("bitwise and of integer tensors is not supported yet (bool tensors only)");
    bool scalar = !std::holds_alternative<Value*>(a.raw("other"));
    DType cmp = scalar ? x.dtype : promote(x.dtype, a.tensor("other").dtype);
    if (scalar && x.dtype == DType::Bool) cmp = DType::Float32;
    TensorRef y = scalar ? scalar_tensor(L, a.scalar("other", cmp)) : a.tensor("other");
    Op o = *op;
    bool logical = o == Op::And || o == Op::Or;
    return out(map2(L, x, y, DType::Bool, [=](ExprRef p, ExprRef q) {
      DType t = logical ? DType::Bool : cmp;
      return binary(o, cast(p, t), cast(q, t));
    }));
  }
  switch (k) {
    case OpKind::WhereSelf: case OpKind::WhereScalarSelf: case OpKind::WhereScalarOther: case OpKind::WhereScalar: {
      DType dt = a.out_dtype();
      TensorRef cond = a.tensor("condition");
      const bool scalar_x = k == OpKind::WhereScalarSelf || k == OpKind::WhereScalar;
      const bool scalar_y = k == OpKind::WhereScalarOther || k == OpKind::WhereScalar;
      TensorRef x = scalar_x ? scalar_tensor(L, a.scalar("self", dt)) : a.tensor("self");
      TensorRef y = scalar_y ? scalar_tensor(L, a.scalar("other", dt)) : a.tensor("other");
      auto s1 = broadcast_shapes(cond.sizes, x.sizes);
      auto shape = s1 ? broadcast_shapes(*s1, y.sizes) : std::nullopt;
      if (!shape) L.fail("cannot broadcast the shapes of where's arguments");
      TensorRef bc = L.broadcast_to(cond, *shape), bx = L.broadcast_to(x, *shape), by = L.broadcast_to(y, *shape);
      return out(L.pointwise(dt, *shape, [=](const Index& i) {
        return select(cast(bc.at(i), DType::Bool), cast(bx.at(i), dt), cast(by.at(i), dt));
      }));
    }
    case OpKind::MaskedFillScalar: case OpKind::MaskedFillTensor:
    case OpKind::MaskedFillScalarInplace: case OpKind::MaskedFillTensorInplace: {  // in place: functional (check_inplace)
      DType dt = a.out_dtype();
      TensorRef x = a.tensor("self");
      TensorRef mask = L.broadcast_to(a.tensor("mask"), x.sizes);
      TensorRef v = k == OpKind::MaskedFillScalar || k == OpKind::MaskedFillScalarInplace ? scalar_tensor(L, a.scalar("value", dt)) : a.tensor("value");
      return out(L.pointwise(dt, x.sizes, [=](const Index& i) {
        return select(cast(mask.at(i), DType::Bool), cast(v.at({}), dt), cast(x.at(i), dt));
      }));
    }
    case OpKind::Clamp: case OpKind::ClampMin: case OpKind::ClampInplace: {
      DType dt = a.out_dtype();
      ExprRef lo = a.is_none("min") ? nullptr : a.scalar("min", dt);
      ExprRef hi = k == OpKind::ClampMin || a.is_none("max") ? nullptr : a.scalar("max", dt);
      return out(map1(L, a.tensor("self"), dt, [=](ExprRef x) { return clamp(cast(x, dt), lo, hi); }));
    }
    case OpKind::ClampTensor: {  // min(max(x, lo), hi), lo and hi tensors that broadcast with x
      DType dt = a.out_dtype();
      TensorRef x = a.tensor("self");
      std::vector<TensorRef> bounds;
      Index shape = x.sizes;
      for (const char* name : {"min", "max"}) {
        if (a.is_none(name)) continue;
        bounds.push_back(a.tensor(name));
        auto s = broadcast_shapes(shape, bounds.back().sizes);
        if (!s) L.fail("cannot broadcast the shapes of clamp's arguments");
        shape = *s;
      }
      TensorRef bx = L.broadcast_to(x, shape);
      std::optional<TensorRef> lo, hi;
      size_t j = 0;
      if (!a.is_none("min")) lo = L.broadcast_to(bounds[j++], shape);
      if (!a.is_none("max")) hi = L.broadcast_to(bounds[j++], shape);
      return out(L.pointwise(dt, shape, [=](const Index& i) {
        return clamp(cast(bx.at(i), dt), lo ? cast(lo->at(i), dt) : nullptr, hi ? cast(hi->at(i), dt) : nullptr);
      }));
    }
    case OpKind::UnderscoreToCopy: case OpKind::ToDtype: case OpKind::ToDtypeLayout: case OpKind::ToDevice: case OpKind::TypeAs: {
      DType dt = a.out_dtype();
      const TensorRef x = a.tensor("self");
      if (x.widened_from && x.widened_from->dtype == dt) return out(*x.widened_from);  // the stored half values themselves
      return out(map1(L, x, dt, [dt](ExprRef v) { return cast(v, dt); }));
    }
    case OpKind::Copy: case OpKind::CopyInplace:
    case OpKind::FillTensor: case OpKind::FillTensorInplace: {  // src (fill: the 0-d value) broadcast to self's sizes, in self's dtype
      TensorRef x = a.tensor("self");
      DType dt = x.dtype;
      const bool fill = k == OpKind::FillTensor || k == OpKind::FillTensorInplace;
      return out(map1(L, L.broadcast_to(a.tensor(fill ? "value" : "src"), x.sizes), dt, [dt](ExprRef v) { return cast(v, dt); }));
    }
    case OpKind::FillScalar: case OpKind::FillScalarInplace:
      return out(full(L, a.out_sizes(), a.scalar("value", a.out_dtype())));
    case OpKind::Full: return out(full(L, a.out_sizes(), a.scalar("fill_value", a.out_dtype())));
    case OpKind::FullLike: return out(full(L, a.out_sizes(), a.scalar("fill_value", a.out_dtype())));
    case OpKind::Zeros: case OpKind::ZerosLike: return out(full(L, a.out_sizes(), constant(0, a.out_dtype())));
    case OpKind::Ones: case OpKind::OnesLike: return out(full(L, a.out_sizes(), constant(1, a.out_dtype())));
    case OpKind::NewZeros: return out(full(L, a.out_sizes(), constant(0, a.out_dtype())));
    case OpKind::NewOnes: return out(full(L, a.out_sizes(), constant(1, a.out_dtype())));
    case OpKind::ScalarTensor: return out(full(L, {}, a.scalar("s", a.out_dtype())));
    case OpKind::Tril: case OpKind::Triu: {  // keep (j - i <= diagonal) / (j - i >= diagonal), zeros elsewhere
      DType dt = a.out_dtype();
      TensorRef x = a.tensor("self");
      const size_t r = x.sizes.size();
      if (r < 2) L.fail("tril/triu need a tensor of rank >= 2");
      ExprRef diag = a.scalar("diagonal", DType::Int64);
      const bool lower = k == OpKind::Tril;
      return out(L.pointwise(dt, x.sizes, [=](const Index& i) {
        ExprRef d = binary(Op::Sub, index_value(i[r - 1]), index_value(i[r - 2]));
        ExprRef keep = lower ? binary(Op::Le, d, diag) : binary(Op::Ge, d, diag);
        return select(keep, cast(x.at(i), dt), constant(0, dt));
      }));
    }
    case OpKind::PtcDropout: {  // keep where philox(seed, row-major element index, stream) < 1 - p
      DType dt = a.out_dtype();
      TensorRef x = a.tensor("self"), seed = a.tensor("seed");
      const double p = a.f("p");
      const int64_t stream = a.i("stream");
      if (!(p >= 0 && p <= 1)) L.fail("dropout probability must be in [0, 1], got ", p);
      if (stream < 0 || stream > 0xFFFFFFFFll) L.fail("dropout stream out of range: ", stream);
      if (seed.rank() != 0) L.fail("the dropout seed must be a 0-d tensor");
      // Both constants rounded to the output dtype first, as the generated code holds them.
      if (dt != DType::Float32 && dt != DType::Float64) L.fail("training-mode dropout needs float32 or float64, got ", dtype_name(dt));
      auto as_dt = [dt](double v) { return dt == DType::Float32 ? static_cast<double>(static_cast<float>(v)) : v; };
      const double keep_below = static_cast<double>(static_cast<float>(1 - p)), scale = as_dt(p < 1 ? 1 / (1 - p) : 0);
      Index strides = row_major_strides(x.sizes);
      return out(L.pointwise(dt, x.sizes, [=](const Index& i) {
        ExprRef u = rand_uniform(seed.at({}), index_value(flat_index(i, strides, 0)), static_cast<uint32_t>(stream));
        return select(binary(Op::Lt, u, constant(keep_below, DType::Float32)), binary(Op::Mul, cast(x.at(i), dt), constant(scale, dt)),
                      constant(0, dt));
      }));
    }
    case OpKind::ArangeStartStep: case OpKind::ArangeStart: case OpKind::ArangeDefault: {
      DType dt = a.out_dtype();
      ExprRef start = k == OpKind::ArangeDefault ? constant(0, dt) : a.scalar("start", dt);
      ExprRef step = k == OpKind::ArangeStartStep ? a.scalar("step", dt) : constant(1, dt);
      return out(L.pointwise(dt, a.out_sizes(), [=](const Index& i) {
        return binary(Op::Add, start, binary(Op::Mul, cast(index_value(i[0]), dt), step));
      }));
    }
    default: return std::nullopt;
  }
}

}  // namespace ptc::loop
