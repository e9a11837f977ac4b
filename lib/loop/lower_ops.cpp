// Argument access and the per-node dispatch to the op families' lowerings.
#include <cmath>

#include "lower_internal.h"

namespace ptc::loop {

const Arg& Args::raw(const char* name) const {
  const Arg* a = n.arg(name);
  PTC_CHECK(a, "op ", n.op_name(), " has no argument ", name);
  return *a;
}

bool Args::is_none(const char* name) const { return std::holds_alternative<std::monostate>(raw(name)); }

TensorRef Args::tensor(const char* name) const {
  const Arg& a = raw(name);
  const auto* val = std::get_if<Value*>(&a);
  const bool sym_value = val && *val && ((*val)->type.kind == Type::Kind::SymInt || (*val)->type.kind == Type::Kind::SymFloat ||
                                         (*val)->type.kind == Type::Kind::SymBool);
  if (val && *val && !sym_value) return L.ref(*val);
  if (std::holds_alternative<int64_t>(a) || std::holds_alternative<double>(a) || std::holds_alternative<bool>(a) ||
      std::holds_alternative<sym::Expr>(a) || sym_value) {
    // A Python number or a symbolic size in a Tensor slot: a 0-d tensor of the node's result dtype.
    ExprRef v = scalar(name, out_dtype());
    return L.pointwise(v->dtype, {}, [v](const Index&) { return v; });
  }
  L.fail("argument '", name, "' must be a tensor");
}

std::vector<TensorRef> Args::tensors(const char* name) const {
  const Arg& a = raw(name);
  auto vs = std::get_if<std::vector<Value*>>(&a);
  if (!vs) L.fail("argument '", name, "' must be a list of tensors");
  std::vector<TensorRef> out;
  for (const Value* v : *vs) {
    if (!v) L.fail("argument '", name, "' holds None");
    out.push_back(L.ref(v));
  }
  return out;
}

int64_t Args::i(const char* name) const {
  const Arg& a = raw(name);
  if (auto v = std::get_if<int64_t>(&a)) return *v;
  if (auto v = std::get_if<bool>(&a)) return *v;
  if (auto v = std::get_if<sym::Expr>(&a))
    if (auto c = v->as_const()) return *c;
  L.fail("argument '", name, "' must be a constant integer, got ", arg_str(a));
}

double Args::f(const char* name) const {
  const Arg& a = raw(name);
  if (auto v = std::get_if<double>(&a)) return *v;
  if (auto v = std::get_if<int64_t>(&a)) return static_cast<double>(*v);
  if (auto v = std::get_if<bool>(&a)) return *v;
  L.fail("argument '", name, "' must be a number, got ", arg_str(a));
}

bool Args::b(const char* name) const {
  const Arg& a = raw(name);
  if (auto v = std::get_if<bool>(&a)) return *v;
  if (std::holds_alternative<std::monostate>(a)) return false;
  L.fail("argument '", name, "' must be a bool, got ", arg_str(a));
}

std::string Args::s(const char* name) const {
  const Arg& a = raw(name);
  if (auto v = std::get_if<std::string>(&a)) return *v;
  L.fail("argument '", name, "' must be a string, got ", arg_str(a));
}

Index Args::syms(const char* name) const {
  const Arg& a = raw(name);
  if (auto v = std::get_if<std::vector<sym::Expr>>(&a)) return *v;
  if (auto v = std::get_if<std::vector<int64_t>>(&a)) return Index(v->begin(), v->end());
  if (auto v = std::get_if<int64_t>(&a)) return Index{*v};
  if (auto v = std::get_if<sym::Expr>(&a)) return Index{*v};
  L.fail("argument '", name, "' must be a list of sizes, got ", arg_str(a));
}

std::vector<int64_t> Args::ints(const char* name) const {
  std::vector<int64_t> out;
  for (const auto& e : syms(name)) {
    auto c = e.as_const();
    if (!c) L.fail("argument '", name, "' must hold constant integers, got ", e.str());
    out.push_back(*c);
  }
  return out;
}

ExprRef Args::scalar(const char* name, DType dt) const {
  const Arg& a = raw(name);
  if (auto v = std::get_if<double>(&a)) return constant(*v, dt);
  if (auto v = std::get_if<int64_t>(&a)) return constant(static_cast<double>(*v), dt);
  if (auto v = std::get_if<bool>(&a)) return constant(*v ? 1 : 0, dt);
  if (auto v = std::get_if<sym::Expr>(&a)) return cast(index_value(*v), dt);
  if (auto v = std::get_if<Value*>(&a); v && *v && (*v)->type.value) return cast(index_value(*(*v)->type.value), dt);
  L.fail("argument '", name, "' must be a number, got ", arg_str(a));
}

std::optional<DType> Args::dtype(const char* name) const {
  const Arg* a = n.arg(name);
  if (!a) return std::nullopt;
  if (auto d = std::get_if<DType>(a)) return *d;
  return std::nullopt;
}

DType Args::out_dtype(size_t i) const {
  PTC_CHECK(i < n.outputs.size(), "output ", i, " of ", n.name);
  const Type& t = n.outputs[i]->type;
  if (!t.is_tensor()) L.fail("output ", i, " has no known type (run shape propagation first)");
  return t.dtype;
}

Index Args::out_sizes(size_t i) const {
  PTC_CHECK(i < n.outputs.size(), "output ", i, " of ", n.name);
  const Type& t = n.outputs[i]->type;
  if (!t.is_tensor()) L.fail("output ", i, " has no known type (run shape propagation first)");
  return t.sizes;
}

TensorRef map1(Lowering& L, const TensorRef& x, DType dt, const std::function<ExprRef(ExprRef)>& f) {
  TensorRef src = x;
  auto fn = f;
  return L.pointwise(dt, x.sizes, [src, fn](const Index& idx) { return fn(src.at(idx)); });
}

TensorRef map2(Lowering& L, const TensorRef& x, const TensorRef& y, DType dt,
               const std::function<ExprRef(ExprRef, ExprRef)>& f) {
  auto shape = broadcast_shapes(x.sizes, y.sizes);
  if (!shape) L.fail("cannot broadcast shapes of ranks ", x.rank(), " and ", y.rank());
  TensorRef a = L.broadcast_to(x, *shape), b = L.broadcast_to(y, *shape);
  auto fn = f;
  return L.pointwise(dt, *shape, [a, b, fn](const Index& idx) { return fn(a.at(idx), b.at(idx)); });
}

std::vector<TensorRef> lower_node(Lowering& L, const Node& n) {
  Args a{L, n};
  auto lower = [&]() -> std::vector<TensorRef> {
    for (auto family : {lower_pointwise, lower_view, lower_reduction, lower_extern, lower_index})
      if (Lowered r = family(L, n, a)) return std::move(*r);
    L.fail("ptc cannot lower this operator yet");
  };
  if (!L.refused) return lower();
  try {
    return lower();
  } catch (const UserError& e) {  // find_unlowerable: note it, and go on with zeros of the outputs' types
    L.refused->push_back({&n, e.what()});
    std::vector<TensorRef> zeros;
    for (const Value* o : n.outputs) {
      if (!o->type.is_tensor()) throw;
      const DType dt = o->type.dtype;
      zeros.push_back(L.pointwise(dt, o->type.sizes, [dt](const Index&) { return constant(0, dt); }));
    }
    return zeros;
  }
}

}  // namespace ptc::loop
