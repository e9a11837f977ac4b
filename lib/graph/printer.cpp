// Text form of the graph IR.
//
//   graph NAME {
//     symbol s0 in [1, 1024]
//     input %x: f32[s0, 64]
//     parameter %p_w: f32[256, 64] = "l1.weight"
//     %y: f32[s0, 256] = aten::linear(%x, %p_w, None)
//     %a, %b = aten::split.Tensor(%y, 128, dim=1)
//     return %y
//   }
//
// A graph that updates buffers ends its return line with
// "  # the last N outputs update buffers: bn.running_mean ...".
//
// Positional arguments are printed up to the last one that differs from its schema default;
// keyword-only arguments only when they differ, as name=value.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "ptc/graph.h"

namespace ptc {
namespace {

std::string fmt_double(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", d);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string range_str(const sym::Range& r) {
  auto b = [](int64_t v, bool lo) {
    if (lo && v == sym::Range::kNegInf) return std::string("-inf");
    if (!lo && v == sym::Range::kPosInf) return std::string("inf");
    return std::to_string(v);
  };
  return "[" + b(r.lo, true) + ", " + b(r.hi, false) + "]";
}

template <class T, class F>
std::string list_str(const std::vector<T>& v, F f) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + f(v[i]);
  return s + "]";
}


std::optional<std::vector<double>> list_of(const Arg& a) {
  std::vector<double> out;
  if (auto v = std::get_if<std::vector<int64_t>>(&a)) {
    for (auto x : *v) out.push_back(static_cast<double>(x));
  } else if (auto v = std::get_if<std::vector<double>>(&a)) {
    out = *v;
  } else if (auto v = std::get_if<std::vector<sym::Expr>>(&a)) {
    for (const auto& x : *v) {
      auto c = x.as_const();
      if (!c) return std::nullopt;
      out.push_back(static_cast<double>(*c));
    }
  } else {
    return std::nullopt;
  }
  return out;
}

bool is_default(const Arg& a, const SchemaArg& sa) {
  if (!sa.has_default) return false;
  const DefaultValue& d = sa.default_value;
  if (std::holds_alternative<std::monostate>(d)) return std::holds_alternative<std::monostate>(a);
  if (auto s = std::get_if<std::string>(&d)) {
    auto as = std::get_if<std::string>(&a);
    return as && *as == *s;
  }
  if (auto b = std::get_if<bool>(&d)) {
    auto ab = std::get_if<bool>(&a);
    return ab && *ab == *b;
  }
  auto want_list = [&]() -> std::optional<std::vector<double>> {
    if (auto v = std::get_if<std::vector<int64_t>>(&d)) {
      std::vector<double> o(v->begin(), v->end());
      return o;
    }
    if (auto v = std::get_if<std::vector<double>>(&d)) return *v;
    return std::nullopt;
  }();
  if (want_list) {
    auto got = list_of(a);
    return got && *got == *want_list;
  }
  double want = std::holds_alternative<int64_t>(d) ? static_cast<double>(std::get<int64_t>(d))
                                                     : std::get<double>(d);
  if (auto got = list_of(a)) {  // "int[2] padding=0": every element equals the scalar
    for (double x : *got)
      if (x != want) return false;
    return true;
  }
  auto got = arg_number(a);
  return got && *got == want;
}

}  // namespace

std::optional<double> arg_number(const Arg& a) {
  if (auto i = std::get_if<int64_t>(&a)) return static_cast<double>(*i);
  if (auto d = std::get_if<double>(&a)) return *d;
  if (auto b = std::get_if<bool>(&a)) return *b ? 1.0 : 0.0;
  if (auto e = std::get_if<sym::Expr>(&a))
    if (auto c = e->as_const()) return static_cast<double>(*c);
  return std::nullopt;
}

std::string arg_str(const Arg& a) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(Value* v) const { return v ? "%" + v->name : "None"; }
    std::string operator()(const std::vector<Value*>& v) const {
      return list_str(v, [](Value* x) { return x ? "%" + x->name : std::string("None"); });
    }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return fmt_double(d); }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(const std::string& s) const { return "\"" + s + "\""; }
    std::string operator()(const std::vector<int64_t>& v) const {
      return list_str(v, [](int64_t x) { return std::to_string(x); });
    }
    std::string operator()(const std::vector<double>& v) const { return list_str(v, fmt_double); }
    std::string operator()(const std::vector<bool>& v) const {
      return list_str(v, [](bool x) { return std::string(x ? "True" : "False"); });
    }
    std::string operator()(const sym::Expr& e) const { return e.str(); }
    std::string operator()(const std::vector<sym::Expr>& v) const {
      return list_str(v, [](const sym::Expr& x) { return x.str(); });
    }
    std::string operator()(DType t) const { return dtype_name(t); }
    std::string operator()(Device d) const { return d.str(); }
  };
  return std::visit(Visitor{}, a);
}

std::string print_graph(const Graph& g) {
  std::ostringstream os;
  os << "graph " << (g.name.empty() ? "main" : g.name) << " {\n";
  for (const auto& [name, range] : g.symbols) os << "  symbol " << name << " in " << range_str(range) << "\n";
  for (const auto& in : g.inputs) {
    os << "  " << role_name(in.role) << " %" << in.value->name << ": " << in.value->type.str();
    if (!in.target.empty()) os << " = \"" << in.target << "\"";
    os << "\n";
  }
  for (const auto& n : g.nodes()) {
    os << "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      const Value* v = n->outputs[i];
      os << (i ? ", " : "") << "%" << v->name << ": " << v->type.str();
    }
    if (n->outputs.empty()) os << "()";
    os << " = " << n->op_name() << "(";
    std::vector<std::string> parts;
    if (const OpInfo* info = n->op()) {
      const auto& sa = info->schema.args;
      size_t last_positional = 0;
      for (size_t i = 0; i < sa.size() && i < n->args.size(); ++i)
        if (!sa[i].kwarg_only && !is_default(n->args[i], sa[i])) last_positional = i + 1;
      for (size_t i = 0; i < sa.size() && i < n->args.size(); ++i) {
        if (!sa[i].kwarg_only) {
          if (i < last_positional) parts.push_back(arg_str(n->args[i]));
        } else if (!is_default(n->args[i], sa[i])) {
          parts.push_back(sa[i].name + "=" + arg_str(n->args[i]));
        }
      }
    } else {
      for (size_t i = 0; i < n->args.size(); ++i) {
        const std::string& an = i < n->arg_names.size() ? n->arg_names[i] : std::string();
        parts.push_back((an.empty() ? "" : an + "=") + arg_str(n->args[i]));
      }
    }
    for (size_t i = 0; i < parts.size(); ++i) os << (i ? ", " : "") << parts[i];
    os << ")\n";
  }
  os << "  return ";
  for (size_t i = 0; i < g.outputs.size(); ++i) os << (i ? ", " : "") << "%" << g.outputs[i]->name;
  if (!g.updated_buffers.empty()) {
    os << "  # the last " << g.updated_buffers.size() << " outputs update buffers:";
    for (const auto& b : g.updated_buffers) os << " " << b;
  }
  os << "\n}\n";
  return os.str();
}

}  // namespace ptc
