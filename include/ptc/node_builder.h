// A node builder for passes that write new aten nodes into a graph under construction (the
// derivative rules of lib/autodiff, and graph passes that insert nodes): arguments by schema name
// with the schema's defaults for the rest, output types from the op's shape rule
// (infer_node_types, ptc/passes.h), fresh value names, the source line of the forward node the
// new nodes belong to. Implemented in lib/passes/node_builder.cpp, beside the shape rules it uses.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "ptc/graph.h"

namespace ptc {

class NodeBuilder {
 public:
  // `avoid`: a graph whose value names new values must not take either (the source of a rewrite
  // that copies its values into `g` later). `suffix`: what new node names add to their origin's.
  explicit NodeBuilder(Graph& g, const Graph* avoid = nullptr, std::string suffix = "_bw")
      : g_(g), avoid_(avoid), suffix_(std::move(suffix)) {}
  Graph& graph() { return g_; }

  // The forward node the next nodes belong to: their names start with its name and they carry its
  // source (so an error in a backward node points at the user's line).
  void set_origin(const Node* n) { origin_ = n; }

  // A node of `kind`: `args` by schema name, schema defaults for the others (an InternalError for
  // a required argument left out or a name the schema lacks). Returns its outputs.
  std::vector<Value*> emit(OpKind kind, std::vector<std::pair<std::string, Arg>> args);
  Value* op(OpKind kind, std::vector<std::pair<std::string, Arg>> args) { return emit(kind, std::move(args)).at(0); }

  // Shorthands (aten semantics, broadcasting where aten broadcasts).
  Value* add(Value* a, Value* b);
  Value* sub(Value* a, Value* b);
  Value* mul(Value* a, Value* b);
  Value* div(Value* a, Value* b);
  Value* scale(Value* a, double s);         // a * s
  Value* add_scalar(Value* a, double s);    // a + s
  Value* neg(Value* a);
  Value* exp(Value* a);
  Value* sum(Value* a, std::vector<int64_t> dims, bool keepdim);
  Value* mean(Value* a, std::vector<int64_t> dims, bool keepdim);
  Value* reshape(Value* a, const std::vector<sym::Expr>& sizes);
  Value* expand(Value* a, const std::vector<sym::Expr>& sizes);
  Value* transpose(Value* a, int64_t d0, int64_t d1);
  Value* permute(Value* a, const std::vector<int64_t>& dims);
  Value* unsqueeze(Value* a, int64_t dim);
  Value* matmul(Value* a, Value* b);
  Value* mm(Value* a, Value* b);
  Value* where_zero(Value* cond, Value* a);  // cond ? a : 0
  Value* zeros(const std::vector<sym::Expr>& sizes, DType dt);
  Value* cast(Value* a, DType dt);           // a itself when it has that dtype
  // `g` summed over the dimensions it was broadcast along to reach `sizes` (leading dimensions,
  // and dimensions of size 1 in `sizes`), then given exactly `sizes`.
  Value* sum_to(Value* g, const std::vector<sym::Expr>& sizes);

  std::string fresh_name(const std::string& base);

 private:
  Graph& g_;
  const Graph* avoid_;
  std::string suffix_;
  const Node* origin_ = nullptr;
  int counter_ = 0;
};

}  // namespace ptc
