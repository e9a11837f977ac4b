#include "expr_printer.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "ptc/codegen.h"
#include "ptc/error.h"
#include "wrapper/abi_common.h"

namespace ptc::codegen {

using loop::ExprRef;
using loop::Op;

const char* ctype(DType t) {
  switch (t) {
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Int64:
      return "int64_t";
    case DType::Int32:
      return "int32_t";
    case DType::Int16:
      return "int16_t";
    case DType::Int8:
      return "int8_t";
    case DType::UInt8:
      return "uint8_t";
    case DType::Bool:
      return "bool";
    case DType::Float16:
      return "ptc_rt::half";
    case DType::BFloat16:
      return "ptc_rt::bfloat16";
    default:
      user_error("ptc's code generators do not support dtype ", dtype_name(t), " yet");
  }
}

std::string literal(double v, DType t) {
  t = dtype_compute(t);
  if (t == DType::Bool) return v != 0 ? "true" : "false";
  if (!dtype_is_float(t)) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s(%lldLL)", ctype(t), static_cast<long long>(v));
    return buf;
  }
  if (std::isinf(v)) return std::string(v > 0 ? "" : "-") + "std::numeric_limits<" + ctype(t) + ">::infinity()";
  if (std::isnan(v)) return std::string("std::numeric_limits<") + ctype(t) + ">::quiet_NaN()";
  char buf[48];
  std::snprintf(buf, sizeof buf, t == DType::Float32 ? "%.9g" : "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return t == DType::Float32 ? s + "f" : s;
}

namespace {

// The loads of `e` below a branch of a `where` (and of a `select`, where `selects`): Load nodes,
// and LoadAt nodes where `load_at`.
std::set<const loop::Expr*> branch_loads(const ExprRef& e, bool selects, bool load_at) {
  std::set<const loop::Expr*> out, seen;
  std::function<void(const ExprRef&, bool)> walk = [&](const ExprRef& x, bool under) {
    if (!seen.insert(x.get()).second && !under) return;
    if (under && (x->op == Op::Load || (load_at && x->op == Op::LoadAt))) out.insert(x.get());
    const bool branches = x->op == Op::Where || (selects && x->op == Op::Select);
    for (size_t i = 0; i < x->args.size(); ++i) walk(x->args[i], under || (branches && i > 0));
  };
  walk(e, false);
  return out;
}

}  // namespace

std::string ExprPrinter::print(const ExprRef& e) {
  if (dialect_ == Dialect::Cuda) {
    // Loads under a where's branches read through ptc_cuda::ldg: nvcc folds `c ? p[i] : q[j]`
    // into one load from a selected address, and when p is a read-only (const __restrict__)
    // kernel argument it issued that load through the non-coherent cache even where the other
    // branch's q is a buffer this kernel wrote: a stale read (an in-place slice update on an
    // H100). ldg is __ldg on const pointers and a plain load on the others, so the two branches
    // stay two different loads.
    for (const loop::Expr* l : branch_loads(e, true, true)) arm_loads_.insert(l);
  }
  hoist(e);
  return name(e);
}

bool ExprPrinter::eager_guards(const loop::Program& p, const ExprRef& e) {
  const std::set<const loop::Expr*> guarded = branch_loads(e, false, false);
  std::map<const loop::Expr*, std::string> hi;
  for (const loop::Expr* l : guarded) {
    const loop::Buffer& b = p.buffers[l->buffer];
    sym::Expr last = b.offset;
    for (size_t d = 0; d < b.sizes.size(); ++d) {
      if (!sym::prove_ge(b.sizes[d], 1)) return false;
      last = last + (b.sizes[d] - 1) * b.strides[d];
    }
    hi[l] = cpp_index(last);
  }
  std::function<bool(const ExprRef&)> safe = [&](const ExprRef& x) {
    if ((x->op == Op::FloorDiv || x->op == Op::Mod || x->op == Op::Div) && !dtype_is_float(x->dtype)) return false;
    for (const auto& a : x->args)
      if (!safe(a)) return false;
    return true;
  };
  if (!safe(e)) return false;
  clamp_hi_ = std::move(hi);
  eager_ = true;
  return true;
}

std::string ExprPrinter::clamps_fit_int32() const {
  std::set<std::string> bounds;  // (one condition per distinct bound)
  for (const auto& [load, hi] : clamp_hi_) bounds.insert(hi);
  std::string cond;
  for (const std::string& hi : bounds) cond += (cond.empty() ? "" : " && ") + std::string("(") + hi + ") < 2147483647LL";
  return cond;
}

void ExprPrinter::hoist(const ExprRef& e) {
  if (names_.count(e.get()) || e->op == Op::Const || e->op == Op::IndexVal) return;
  if (e->op == Op::Where && !eager_) {
    hoist(e->args[0]);  // the condition always runs; the branches print inline
  } else {
    for (const auto& a : e->args) hoist(a);
  }
  std::string text = inline_text(e);
  std::string var = prefix_ + "t" + std::to_string(names_.size());
  os_ << indent_ << "const " << ctype(dtype_compute(e->dtype)) << " " << var << " = " << text << ";\n";
  names_[e.get()] = var;
}

std::string ExprPrinter::element(const ExprRef& e, const std::string& index) const {
  const std::string b = "b" + std::to_string(e->buffer);
  if (arm_loads_.count(e.get())) return "ptc_cuda::ldg(" + b + " + (" + index + "))";
  return b + "[" + index + "]";
}

std::string ExprPrinter::name(const ExprRef& e) {
  auto it = names_.find(e.get());
  return it != names_.end() ? it->second : inline_text(e);
}

std::string ExprPrinter::inline_text(const ExprRef& e) {
  const DType cdt = dtype_compute(e->dtype);
  const std::string T = ctype(cdt);
  const bool f32 = cdt == DType::Float32;
  auto a = [&](size_t i) { return name(e->args[i]); };
  // A float16 / bfloat16 element reads as float.
  auto widen = [&](std::string text) { return cdt != e->dtype ? "static_cast<float>(" + text + ")" : text; };
  switch (e->op) {
    case Op::LoadAt:
      return widen(element(e, "std::min<int64_t>(std::max<int64_t>(" + cpp_index(e->index) + " + " + a(0) + ", 0), " + a(1) + ")"));
    case Op::Load: {
      auto it = overrides_.find(e->buffer);
      if (it != overrides_.end()) return it->second;
      if (auto c = clamp_hi_.find(e.get()); c != clamp_hi_.end()) {
        const std::string i = "std::min<int64_t>(std::max<int64_t>(" + cpp_index(e->index) + ", 0), " + c->second + ")";
        return widen(element(e, index32_ ? "static_cast<int32_t>(" + i + ")" : i));
      }
      return widen(element(e, cpp_index(e->index)));
    }
    case Op::Const:
      return literal(e->value, e->dtype);
    case Op::IndexVal:
      return "static_cast<" + T + ">(" + cpp_index(e->index) + ")";
    case Op::Cast:  // to float16 / bfloat16: rounded to that dtype, kept as float
      if (cdt != e->dtype && dialect_ != Dialect::Cuda)  // (one expression: a temporary half object keeps loops scalar)
        return std::string(e->dtype == DType::BFloat16 ? "ptc_rt::round_bfloat16(" : "ptc_rt::round_half(") + "static_cast<float>(" + a(0) + "))";
      if (cdt != e->dtype) return "static_cast<float>(" + std::string(ctype(e->dtype)) + "(static_cast<float>(" + a(0) + ")))";
      return "static_cast<" + T + ">(" + a(0) + ")";
    case Op::Where:
    case Op::Select:
      return "(" + a(0) + " ? " + a(1) + " : " + a(2) + ")";
    case Op::Neg:
      return "(-" + a(0) + ")";
    case Op::Abs:
      return "std::abs(" + a(0) + ")";
    case Op::Exp:
      if (dialect_ == Dialect::Cuda) return (f32 ? "expf(" : "exp(") + a(0) + ")";
      return (f32 ? "ptc_rt::exp_f(" : "std::exp(") + a(0) + ")";
    case Op::Log:
      return "std::log(" + a(0) + ")";
    case Op::Log1p:
      return "std::log1p(" + a(0) + ")";
    case Op::Sqrt:
      return "std::sqrt(" + a(0) + ")";
    case Op::Rsqrt:
      return "(" + T + "(1) / std::sqrt(" + a(0) + "))";
    case Op::Sin:
      return "std::sin(" + a(0) + ")";
    case Op::Cos:
      return "std::cos(" + a(0) + ")";
    case Op::Tanh:
      if (dialect_ == Dialect::Cuda) return (f32 ? "tanhf(" : "tanh(") + a(0) + ")";
      return (f32 ? "ptc_rt::tanh_f(" : "std::tanh(") + a(0) + ")";
    case Op::Erf:
      if (dialect_ == Dialect::Cuda) return (f32 ? "erff(" : "erf(") + a(0) + ")";
      return (f32 ? "ptc_rt::erf_f(" : "std::erf(") + a(0) + ")";
    case Op::Sigmoid:
      if (dialect_ == Dialect::Cuda) return "ptc_rt::sigmoid(" + a(0) + ")";
      return (f32 ? "ptc_rt::sigmoid_f(" : "ptc_rt::sigmoid(") + a(0) + ")";
    case Op::Relu:
      return "ptc_rt::relu(" + a(0) + ")";
    case Op::Floor:
      return "std::floor(" + a(0) + ")";
    case Op::Ceil:
      return "std::ceil(" + a(0) + ")";
    case Op::Round:
      return "std::nearbyint(" + a(0) + ")";
    case Op::Sign:
      return "ptc_rt::sign(" + a(0) + ")";
    case Op::Reciprocal:
      return "(" + T + "(1) / " + a(0) + ")";
    case Op::Not:
      return "(!" + a(0) + ")";
    case Op::IsNan:
      return "std::isnan(" + a(0) + ")";
    case Op::IsInf:
      return "std::isinf(" + a(0) + ")";
    case Op::Add:
      return "(" + a(0) + " + " + a(1) + ")";
    case Op::Sub:
      return "(" + a(0) + " - " + a(1) + ")";
    case Op::Mul:
      return "(" + a(0) + " * " + a(1) + ")";
    case Op::Div:
      return "(" + a(0) + " / " + a(1) + ")";
    case Op::Pow:
      return "static_cast<" + T + ">(std::pow(" + a(0) + ", " + a(1) + "))";
    case Op::Max:
      return "ptc_rt::maxnan(" + a(0) + ", " + a(1) + ")";
    case Op::Min:
      return "ptc_rt::minnan(" + a(0) + ", " + a(1) + ")";
    case Op::FloorDiv:
      return dtype_is_float(e->dtype) ? "std::floor(" + a(0) + " / " + a(1) + ")"
                                      : "static_cast<" + T + ">(ptc_rt::floordiv(" + a(0) + ", " + a(1) + "))";
    case Op::CheckIndex:
      if (dialect_ == Dialect::Cuda) return "ptc_rt::index_in_range(" + a(0) + ", " + a(1) + ")";
      return "ptc_ix(" + a(0) + ", " + a(1) + ", " + wrapper::quote(e->origin) + ")";
    case Op::Rand:
      return "ptc_rt::philox_uniform(static_cast<uint64_t>(" + a(0) + "), static_cast<uint64_t>(" + a(1) + "), " +
             std::to_string(static_cast<uint32_t>(e->value)) + "u)";
    case Op::Mod:
      return dtype_is_float(e->dtype) ? "ptc_rt::fmod_py(" + a(0) + ", " + a(1) + ")"
                                      : "static_cast<" + T + ">(ptc_rt::pymod(" + a(0) + ", " + a(1) + "))";
    case Op::Eq:
      return "(" + a(0) + " == " + a(1) + ")";
    case Op::Ne:
      return "(" + a(0) + " != " + a(1) + ")";
    case Op::Lt:
      return "(" + a(0) + " < " + a(1) + ")";
    case Op::Le:
      return "(" + a(0) + " <= " + a(1) + ")";
    case Op::Gt:
      return "(" + a(0) + " > " + a(1) + ")";
    case Op::Ge:
      return "(" + a(0) + " >= " + a(1) + ")";
    case Op::And:
      return "(" + a(0) + " && " + a(1) + ")";
    case Op::Or:
      return "(" + a(0) + " || " + a(1) + ")";
  }
  throw InternalError(cat("internal error at ", __FILE__, ":", __LINE__, ": unprintable op"));
}

}  // namespace ptc::codegen
