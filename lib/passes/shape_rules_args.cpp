// Shape rules: the per-node context (typed access to a node's arguments, dims, error messages)
// and tensor type construction.
#include <algorithm>
#include <cmath>

#include "shape_rules.h"

namespace ptc::shape {

// ---------------------------------------------------------------- Ctx

std::string Ctx::where() const {
  std::string s = "node '" + node.name + "' (" + node.op_name() + ")";
  std::string frame = node.source.user_frame();
  if (!frame.empty()) s += " at " + frame;
  return s;
}

const Arg& Ctx::arg(const char* name) const {
  const OpInfo* info = node.op();
  PTC_CHECK(info, "shape rule for an unknown op asked for argument ", name);
  const auto& sa = info->schema.args;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].name != name) continue;
    if (i >= node.args.size()) fail("has ", node.args.size(), " arguments; argument '", name, "' is missing");
    return node.args[i];
  }
  throw InternalError(cat("shape rule for ", info->schema.qualified(), " asked for argument '", name,
                          "', which its schema does not have"));
}

bool Ctx::is_none(const char* name) const {
  const Arg& a = arg(name);
  if (std::holds_alternative<std::monostate>(a)) return true;
  if (auto v = std::get_if<Value*>(&a)) return *v == nullptr;
  return false;
}

namespace {

const char* arg_kind_name(const Arg& a) {
  switch (a.index()) {
    case 0: return "None";
    case 1: return "a value";
    case 2: return "a tensor list";
    case 3: return "an int";
    case 4: return "a float";
    case 5: return "a bool";
    case 6: return "a string";
    case 7: return "an int list";
    case 8: return "a float list";
    case 9: return "a bool list";
    case 10: return "a SymInt";
    case 11: return "a SymInt list";
    case 12: return "a dtype";
    case 13: return "a device";
  }
  return "?";
}

const Type& value_tensor(const Ctx& c, const Value* v, const char* name) {
  if (v->type.kind == Type::Kind::Unknown) throw UnknownInput{};
  if (!v->type.is_tensor())
    c.fail("argument '", name, "' (%", v->name, ") must be a tensor, but it is ", v->type.str());
  return v->type;
}

}  // namespace

const Type& Ctx::tensor(const char* name) const {
  const Arg& a = arg(name);
  auto v = std::get_if<Value*>(&a);
  if (!v || !*v) fail("argument '", name, "' must be a tensor, but it is ", arg_kind_name(a));
  return value_tensor(*this, *v, name);
}

const Type* Ctx::opt_tensor(const char* name) const {
  if (is_none(name)) return nullptr;
  return &tensor(name);
}

std::vector<const Type*> Ctx::tensors(const char* name) const {
  const Arg& a = arg(name);
  std::vector<const Type*> out;
  if (auto vs = std::get_if<std::vector<Value*>>(&a)) {
    for (const Value* v : *vs) out.push_back(v ? &value_tensor(*this, v, name) : nullptr);
  } else if (auto v = std::get_if<Value*>(&a); v && *v) {
    out.push_back(&value_tensor(*this, *v, name));
  } else {
    fail("argument '", name, "' must be a list of tensors, but it is ", arg_kind_name(a));
  }
  return out;
}

Expr Ctx::to_expr(const Arg& a, const char* name) const {
  if (auto e = std::get_if<Expr>(&a)) return *e;
  if (auto i = std::get_if<int64_t>(&a)) return *i;
  if (auto b = std::get_if<bool>(&a)) return *b ? 1 : 0;
  if (auto v = std::get_if<Value*>(&a); v && *v) {
    const Type& t = (*v)->type;
    if (t.kind == Type::Kind::SymInt) {
      if (!t.value) throw UnknownInput{};
      return *t.value;
    }
    if (t.kind == Type::Kind::Unknown || t.is_tensor()) throw UnknownInput{};  // e.g. a 0-dim tensor holding a size
  }
  if (auto d = std::get_if<double>(&a); d && std::floor(*d) == *d && std::fabs(*d) < 9.2e18)
    return static_cast<int64_t>(*d);
  fail("argument '", name, "' must be an integer, but it is ", arg_kind_name(a));
}

int64_t Ctx::int_(const char* name) const {
  Expr e = to_expr(arg(name), name);
  auto c = e.as_const();
  if (!c) fail("argument '", name, "' must be a constant integer, but it is ", e.str());
  return *c;
}

std::optional<int64_t> Ctx::opt_int(const char* name) const {
  if (is_none(name)) return std::nullopt;
  return int_(name);
}

Expr Ctx::sym(const char* name) const { return to_expr(arg(name), name); }

std::optional<Expr> Ctx::opt_sym(const char* name) const {
  if (is_none(name)) return std::nullopt;
  return sym(name);
}

Exprs Ctx::syms(const char* name) const {
  const Arg& a = arg(name);
  if (auto v = std::get_if<std::vector<Expr>>(&a)) return *v;
  if (auto v = std::get_if<std::vector<int64_t>>(&a)) return Exprs(v->begin(), v->end());
  if (auto vs = std::get_if<std::vector<Value*>>(&a)) {
    Exprs out;
    for (Value* v : *vs) out.push_back(to_expr(Arg(v), name));
    return out;
  }
  if (std::holds_alternative<Expr>(a) || std::holds_alternative<int64_t>(a)) return {to_expr(a, name)};
  fail("argument '", name, "' must be a list of integers, but it is ", arg_kind_name(a));
}

std::optional<Exprs> Ctx::opt_syms(const char* name) const {
  if (is_none(name)) return std::nullopt;
  return syms(name);
}

std::vector<int64_t> Ctx::ints(const char* name) const {
  std::vector<int64_t> out;
  for (const Expr& e : syms(name)) {
    auto c = e.as_const();
    if (!c) fail("argument '", name, "' must hold constant integers, but it has ", e.str());
    out.push_back(*c);
  }
  return out;
}

std::optional<std::vector<int64_t>> Ctx::opt_ints(const char* name) const {
  if (is_none(name)) return std::nullopt;
  return ints(name);
}

bool Ctx::bool_(const char* name) const {
  const Arg& a = arg(name);
  if (auto b = std::get_if<bool>(&a)) return *b;
  if (auto i = std::get_if<int64_t>(&a)) return *i != 0;
  if (auto v = std::get_if<Value*>(&a); v && *v) throw UnknownInput{};  // a SymBool
  fail("argument '", name, "' must be a bool, but it is ", arg_kind_name(a));
}

std::optional<bool> Ctx::opt_bool(const char* name) const {
  if (is_none(name)) return std::nullopt;
  return bool_(name);
}

double Ctx::float_(const char* name) const {
  const Arg& a = arg(name);
  if (auto d = std::get_if<double>(&a)) return *d;
  if (auto i = std::get_if<int64_t>(&a)) return static_cast<double>(*i);
  if (auto e = std::get_if<Expr>(&a); e && e->is_const()) return static_cast<double>(*e->as_const());
  if (auto v = std::get_if<Value*>(&a); v && *v) throw UnknownInput{};
  fail("argument '", name, "' must be a float, but it is ", arg_kind_name(a));
}

std::optional<std::vector<double>> Ctx::opt_floats(const char* name) const {
  const Arg& a = arg(name);
  if (std::holds_alternative<std::monostate>(a)) return std::nullopt;
  if (auto v = std::get_if<std::vector<double>>(&a)) return *v;
  if (auto v = std::get_if<std::vector<int64_t>>(&a)) return std::vector<double>(v->begin(), v->end());
  if (auto d = std::get_if<double>(&a)) return std::vector<double>{*d};
  fail("argument '", name, "' must be a list of floats, but it is ", arg_kind_name(a));
}

std::optional<DType> Ctx::opt_dtype(const char* name) const {
  const Arg& a = arg(name);
  if (std::holds_alternative<std::monostate>(a)) return std::nullopt;
  if (auto d = std::get_if<DType>(&a)) return *d;
  if (auto i = std::get_if<int64_t>(&a)) {
    if (auto d = dtype_from_c10(*i)) return *d;
  }
  if (auto s = std::get_if<std::string>(&a)) {
    if (auto d = dtype_from_name(*s)) return *d;
  }
  fail("argument '", name, "' must be a dtype, but it is ", arg_kind_name(a));
}

std::optional<std::string> Ctx::opt_str(const char* name) const {
  const Arg& a = arg(name);
  if (std::holds_alternative<std::monostate>(a)) return std::nullopt;
  if (auto s = std::get_if<std::string>(&a)) return *s;
  fail("argument '", name, "' must be a string, but it is ", arg_kind_name(a));
}

namespace {

ScalarArg scalar_of(const Ctx& c, const Arg& a, const char* name) {
  ScalarArg s;
  if (auto b = std::get_if<bool>(&a)) {
    s.kind = ScalarArg::Bool;
    s.i = Expr(*b ? 1 : 0);
    s.f = *b ? 1 : 0;
  } else if (auto i = std::get_if<int64_t>(&a)) {
    s.kind = ScalarArg::Int;
    s.i = Expr(*i);
    s.f = static_cast<double>(*i);
  } else if (auto e = std::get_if<Expr>(&a)) {
    s.kind = ScalarArg::Int;
    s.i = *e;
    if (auto k = e->as_const()) s.f = static_cast<double>(*k);
  } else if (auto d = std::get_if<double>(&a)) {
    s.kind = ScalarArg::Float;
    s.f = *d;
  } else if (auto v = std::get_if<Value*>(&a); v && *v) {
    const Type& t = (*v)->type;
    switch (t.kind) {
      case Type::Kind::SymInt:
        s.kind = ScalarArg::Int;
        s.i = t.value;
        if (t.value && t.value->is_const()) s.f = static_cast<double>(*t.value->as_const());
        break;
      case Type::Kind::SymFloat: s.kind = ScalarArg::Float; break;
      case Type::Kind::SymBool: s.kind = ScalarArg::Bool; break;
      case Type::Kind::Tensor:
        s.kind = ScalarArg::Tensor;
        s.tensor = &t;
        break;
      case Type::Kind::Unknown: throw UnknownInput{};
    }
  } else {
    c.fail("argument '", name, "' must be a number, but it is ", arg_kind_name(a));
  }
  s.constant = s.kind == ScalarArg::Float ? std::holds_alternative<double>(a) : (s.i && s.i->is_const());
  return s;
}

}  // namespace

ScalarArg Ctx::scalar(const char* name) const { return scalar_of(*this, arg(name), name); }

std::optional<ScalarArg> Ctx::opt_scalar(const char* name) const {
  if (is_none(name)) return std::nullopt;
  return scalar(name);
}

MemoryFormat Ctx::memory_format(const char* name, MemoryFormat none_means) const {
  if (!has_arg(name)) return none_means;
  const Arg& a = arg(name);
  if (std::holds_alternative<std::monostate>(a)) return none_means;
  if (auto s = std::get_if<std::string>(&a)) {
    if (*s == "contiguous_format") return MemoryFormat::Contiguous;
    if (*s == "channels_last") return MemoryFormat::ChannelsLast;
    if (*s == "channels_last_3d") return MemoryFormat::ChannelsLast3d;
    return MemoryFormat::Preserve;  // "preserve_format", and formats a reader could not name
  }
  if (auto i = std::get_if<int64_t>(&a)) {  // c10::MemoryFormat numbering
    switch (*i) {
      case 0: return MemoryFormat::Contiguous;
      case 2: return MemoryFormat::ChannelsLast;
      case 3: return MemoryFormat::ChannelsLast3d;
      default: return MemoryFormat::Preserve;
    }
  }
  fail("argument '", name, "' must be a memory format, but it is ", arg_kind_name(a));
}

bool Ctx::has_arg(const char* name) const {
  const OpInfo* info = node.op();
  if (!info) return false;
  for (const auto& sa : info->schema.args)
    if (sa.name == name) return true;
  return false;
}

const Type* Ctx::tensor_or_scalar(const char* name, ScalarArg* scalar) const {
  const Arg& a = arg(name);
  if (auto v = std::get_if<Value*>(&a); v && *v && (*v)->type.kind != Type::Kind::SymInt &&
                                        (*v)->type.kind != Type::Kind::SymFloat &&
                                        (*v)->type.kind != Type::Kind::SymBool)
    return &tensor(name);
  *scalar = scalar_of(*this, a, name);
  return nullptr;
}

std::optional<Device> Ctx::opt_device(const char* name) const {
  if (!has_arg(name)) return std::nullopt;
  const Arg& a = arg(name);
  if (auto d = std::get_if<Device>(&a)) return *d;
  return std::nullopt;
}

int64_t Ctx::wrap_dim(int64_t d, int64_t rank) const {
  int64_t r = std::max<int64_t>(rank, 1);
  if (d < -r || d >= r)
    fail("dim ", d, " is out of range for a tensor of rank ", rank, " (expected a dim in [", -r, ", ", r - 1, "])");
  return d < 0 ? d + r : d;
}

// ---------------------------------------------------------------- types

Type make_tensor(const Type& like, DType dt, Exprs sizes, Exprs strides, Expr offset) {
  Type t = Type::tensor(dt, std::move(sizes), std::move(strides));
  t.storage_offset = offset;
  t.device = like.device;
  return t;
}

Type make_contiguous(const Type& like, DType dt, Exprs sizes) {
  Exprs st = dense_strides(sizes);
  return make_tensor(like, dt, std::move(sizes), std::move(st));
}

}  // namespace ptc::shape
