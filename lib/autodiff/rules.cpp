#include "rules.h"

#include <algorithm>

#include "ptc/error.h"

namespace ptc::autodiff {

Value* GradContext::in(const char* name) const {
  const Arg* a = n.arg(name);
  if (!a) return nullptr;
  auto v = std::get_if<Value*>(a);
  return v ? *v : nullptr;
}

bool GradContext::is_none(const char* name) const {
  const Arg* a = n.arg(name);
  return !a || std::holds_alternative<std::monostate>(*a) || (std::holds_alternative<Value*>(*a) && !std::get<Value*>(*a));
}

double GradContext::number(const char* name) const {
  const Arg* a = n.arg(name);
  if (a)
    if (auto d = arg_number(*a)) return *d;
  fail(std::string("argument '") + name + "' is not a number ptc can differentiate with");
}

int64_t GradContext::integer(const char* name) const {
  const Arg* a = n.arg(name);
  if (a) {
    if (auto i = std::get_if<int64_t>(a)) return *i;
    if (auto e = std::get_if<sym::Expr>(a))
      if (auto c = e->as_const()) return *c;
    if (auto b = std::get_if<bool>(a)) return *b;
  }
  fail(std::string("argument '") + name + "' is not a constant integer");
}

bool GradContext::flag(const char* name) const {
  const Arg* a = n.arg(name);
  if (a) {
    if (auto b = std::get_if<bool>(a)) return *b;
    if (std::holds_alternative<std::monostate>(*a)) return false;
  }
  fail(std::string("argument '") + name + "' is not a constant bool");
}

std::vector<int64_t> GradContext::ints(const char* name) const {
  const Arg* a = n.arg(name);
  if (!a || std::holds_alternative<std::monostate>(*a)) return {};
  if (auto v = std::get_if<std::vector<int64_t>>(a)) return *v;
  if (auto i = std::get_if<int64_t>(a)) return {*i};
  if (auto v = std::get_if<std::vector<sym::Expr>>(a)) {
    std::vector<int64_t> out;
    for (const auto& e : *v) {
      auto c = e.as_const();
      if (!c) fail(std::string("argument '") + name + "' is symbolic");
      out.push_back(*c);
    }
    return out;
  }
  fail(std::string("argument '") + name + "' is not an int list");
}

std::vector<sym::Expr> GradContext::sym_ints(const char* name) const {
  const Arg* a = n.arg(name);
  if (a) {
    if (auto v = std::get_if<std::vector<sym::Expr>>(a)) return *v;
    if (auto v = std::get_if<std::vector<int64_t>>(a)) return {v->begin(), v->end()};
  }
  fail(std::string("argument '") + name + "' is not a size list");
}

std::string GradContext::str(const char* name) const {
  const Arg* a = n.arg(name);
  if (a)
    if (auto s = std::get_if<std::string>(a)) return *s;
  return {};
}

void GradContext::add_grad_to(const Value* v, Value* g) const {
  if (!needs(v)) return;
  add_(v, b.cast(b.sum_to(g, v->type.sizes), v->type.dtype));
}

void GradContext::fail(const std::string& what) const {
  std::string where = n.source.user_frame();
  user_error("node '", n.name, "' (", n.op_name(), ")", where.empty() ? "" : " at " + where, ": ", what);
}

const RuleEntry* find_rule(OpKind kind) {
  static const RuleTable table = [] {
    RuleTable t(static_cast<size_t>(OpKind::Unknown) + 1);
    register_pointwise_rules(t);
    register_linalg_rules(t);
    register_view_rules(t);
    register_reduce_rules(t);
    register_conv_rules(t);
    register_index_rules(t);
    return t;
  }();
  const RuleEntry& e = table.at(static_cast<size_t>(kind));
  return e.rule || e.no_gradient ? &e : nullptr;
}

}  // namespace ptc::autodiff
