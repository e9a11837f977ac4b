// Derivative rules, one per row of the op table (include/ptc/ops.def) that ptc can differentiate,
// keyed by the same OpKind (DESIGN: per-op functions keyed by the table's enum). A rule reads the
// forward node (its inputs and outputs are values of the joint graph) and the gradients of its
// outputs, and adds the gradient contributions of its inputs as new aten nodes (Builder).
// Internal to lib/autodiff; written from the math (docs/training.md lists the formulas' sources).
#pragma once

#include <functional>
#include <string>

#include "ptc/node_builder.h"

namespace ptc::autodiff {

using Builder = NodeBuilder;  // (ptc/node_builder.h)

class GradContext {
 public:
  GradContext(Builder& b, const Node& n, std::function<Value*(const Value*)> grad_of, std::function<bool(const Value*)> needs,
              std::function<void(const Value*, Value*)> add)
      : b(b), n(n), grad_of_(std::move(grad_of)), needs_(std::move(needs)), add_(std::move(add)) {}

  Builder& b;
  const Node& n;

  // The tensor argument `name` (nullptr when None or absent).
  Value* in(const char* name) const;
  Value* out(size_t i = 0) const { return n.outputs.at(i); }
  // Non-tensor arguments.
  double number(const char* name) const;     // a Scalar/int/float argument
  int64_t integer(const char* name) const;
  bool flag(const char* name) const;
  std::vector<int64_t> ints(const char* name) const;        // int[] (empty for None)
  std::vector<sym::Expr> sym_ints(const char* name) const;  // SymInt[]
  std::string str(const char* name) const;
  bool is_none(const char* name) const;

  // The gradient of output i (nullptr: no gradient flows into it, i.e. zero).
  Value* grad(size_t i = 0) const { return grad_of_(n.outputs.at(i)); }
  // Whether `v` (an input of the node) needs a gradient at all; rules skip work for those that do not.
  bool needs(const Value* v) const { return v && needs_(v); }
  // Adds `g` to the gradient of input `v` (summed with other contributions); ignored when `v`
  // needs none. `g` must have v's sizes (use Builder::sum_to for broadcast operands).
  void add_grad(const Value* v, Value* g) const {
    if (needs(v)) add_(v, g);
  }
  // Adds sum_to(g, v's sizes), cast to v's dtype.
  void add_grad_to(const Value* v, Value* g) const;

  // A one-sentence UserError naming the node, its op and its source line.
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::function<Value*(const Value*)> grad_of_;
  std::function<bool(const Value*)> needs_;
  std::function<void(const Value*, Value*)> add_;
};

using Rule = void (*)(GradContext&);

struct RuleEntry {
  Rule rule = nullptr;
  // The op's outputs never carry a gradient (comparisons, factories, *_like, sign, floor, ...).
  bool no_gradient = false;
};

// nullptr when ptc has no derivative for `kind`.
const RuleEntry* find_rule(OpKind kind);

// Registration, one function per file.
using RuleTable = std::vector<RuleEntry>;  // indexed by OpKind
void register_pointwise_rules(RuleTable& t);  // rules_pointwise.cpp
void register_linalg_rules(RuleTable& t);     // rules_linalg.cpp
void register_view_rules(RuleTable& t);       // rules_view.cpp
void register_reduce_rules(RuleTable& t);     // rules_reduce.cpp (reductions, norms, softmax)
void register_conv_rules(RuleTable& t);       // rules_conv.cpp (convolution, batch norm)
void register_index_rules(RuleTable& t);      // rules_index.cpp (gathers, max reductions, pooling, cumsum)

inline void set_rule(RuleTable& t, OpKind k, Rule r) { t.at(static_cast<size_t>(k)).rule = r; }
inline void set_no_gradient(RuleTable& t, OpKind k) { t.at(static_cast<size_t>(k)).no_gradient = true; }

}  // namespace ptc::autodiff
