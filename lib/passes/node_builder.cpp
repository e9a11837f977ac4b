#include "ptc/node_builder.h"

#include <limits>

#include "ptc/error.h"
#include "ptc/passes.h"

namespace ptc {

std::string NodeBuilder::fresh_name(const std::string& base) {
  for (;;) {
    std::string name = base + "_" + std::to_string(counter_++);
    if (!g_.find_value(name) && !(avoid_ && avoid_->find_value(name))) return name;
  }
}

std::vector<Value*> NodeBuilder::emit(OpKind kind, std::vector<std::pair<std::string, Arg>> given) {
  const OpInfo& info = op_info(kind);
  auto node = std::make_unique<Node>();
  node->kind = kind;
  node->target = info.schema.qualified();
  for (const SchemaArg& sa : info.schema.args) {
    bool found = false;
    for (auto& [name, a] : given)
      if (name == sa.name) {
        node->args.push_back(std::move(a));
        name.clear();
        found = true;
        break;
      }
    if (!found) {
      PTC_CHECK(sa.has_default || sa.optional, "autodiff: ", node->target, " needs argument ", sa.name);
      node->args.push_back(sa.has_default ? schema_default(sa) : Arg{});
    }
  }
  for (const auto& [name, a] : given) PTC_CHECK(name.empty(), "autodiff: ", node->target, " has no argument ", name);
  std::vector<Type> types = infer_node_types(*node);
  PTC_CHECK(!types.empty(), "autodiff: no type for a new ", node->target, " node");
  std::string base = (origin_ ? origin_->name : std::string("grad")) + suffix_;
  node->name = fresh_name(base);
  if (origin_) node->source = origin_->source;
  node->list_output = !info.schema.returns.empty() && info.schema.returns[0].type == ArgType::TensorList;
  for (size_t i = 0; i < types.size(); ++i) {
    Value* v = g_.add_value(i == 0 && !g_.find_value(node->name) && !(avoid_ && avoid_->find_value(node->name)) ? node->name
                                                                                                              : fresh_name(node->name),
                            types[i]);
    node->outputs.push_back(v);
  }
  return g_.add_node(std::move(node))->outputs;
}

Value* NodeBuilder::add(Value* a, Value* b) { return op(OpKind::AddTensor, {{"self", a}, {"other", b}}); }
Value* NodeBuilder::sub(Value* a, Value* b) { return op(OpKind::SubTensor, {{"self", a}, {"other", b}}); }
Value* NodeBuilder::mul(Value* a, Value* b) { return op(OpKind::MulTensor, {{"self", a}, {"other", b}}); }
Value* NodeBuilder::div(Value* a, Value* b) { return op(OpKind::DivTensor, {{"self", a}, {"other", b}}); }
Value* NodeBuilder::scale(Value* a, double s) { return s == 1 ? a : op(OpKind::MulScalar, {{"self", a}, {"other", s}}); }
Value* NodeBuilder::add_scalar(Value* a, double s) { return op(OpKind::AddScalar, {{"self", a}, {"other", s}}); }
Value* NodeBuilder::neg(Value* a) { return op(OpKind::Neg, {{"self", a}}); }
Value* NodeBuilder::exp(Value* a) { return op(OpKind::Exp, {{"self", a}}); }

Value* NodeBuilder::sum(Value* a, std::vector<int64_t> dims, bool keepdim) {
  if (dims.empty()) return a;
  return op(OpKind::SumDimIntList, {{"self", a}, {"dim", std::move(dims)}, {"keepdim", keepdim}});
}

Value* NodeBuilder::mean(Value* a, std::vector<int64_t> dims, bool keepdim) {
  return op(OpKind::MeanDim, {{"self", a}, {"dim", std::move(dims)}, {"keepdim", keepdim}});
}

Value* NodeBuilder::reshape(Value* a, const std::vector<sym::Expr>& sizes) {
  const auto& have = a->type.sizes;
  if (have.size() == sizes.size()) {
    bool same = true;
    for (size_t i = 0; i < sizes.size(); ++i) same = same && have[i] == sizes[i];
    if (same) return a;
  }
  return op(OpKind::Reshape, {{"self", a}, {"shape", sizes}});
}

Value* NodeBuilder::expand(Value* a, const std::vector<sym::Expr>& sizes) {
  return op(OpKind::Expand, {{"self", a}, {"size", sizes}});
}

Value* NodeBuilder::transpose(Value* a, int64_t d0, int64_t d1) {
  return op(OpKind::TransposeInt, {{"self", a}, {"dim0", d0}, {"dim1", d1}});
}

Value* NodeBuilder::permute(Value* a, const std::vector<int64_t>& dims) { return op(OpKind::Permute, {{"self", a}, {"dims", dims}}); }
Value* NodeBuilder::unsqueeze(Value* a, int64_t dim) { return op(OpKind::Unsqueeze, {{"self", a}, {"dim", dim}}); }
Value* NodeBuilder::matmul(Value* a, Value* b) { return op(OpKind::Matmul, {{"self", a}, {"other", b}}); }
Value* NodeBuilder::mm(Value* a, Value* b) { return op(OpKind::Mm, {{"self", a}, {"mat2", b}}); }

Value* NodeBuilder::where_zero(Value* cond, Value* a) {
  return op(OpKind::WhereScalarOther, {{"condition", cond}, {"self", a}, {"other", 0.0}});
}

Value* NodeBuilder::zeros(const std::vector<sym::Expr>& sizes, DType dt) {
  return op(OpKind::Zeros, {{"size", sizes}, {"dtype", dt}});
}

Value* NodeBuilder::cast(Value* a, DType dt) {
  if (a->type.dtype == dt) return a;
  return op(OpKind::ToDtype, {{"self", a}, {"dtype", dt}});
}

Value* NodeBuilder::sum_to(Value* g, const std::vector<sym::Expr>& sizes) {
  const auto& have = g->type.sizes;
  PTC_CHECK(have.size() >= sizes.size(), "autodiff: a gradient of rank ", have.size(), " for a value of rank ", sizes.size());
  size_t lead = have.size() - sizes.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < have.size(); ++i) {
    if (i < lead) {
      dims.push_back(static_cast<int64_t>(i));
      continue;
    }
    const sym::Expr& want = sizes[i - lead];
    if (want.as_const() == std::optional<int64_t>(1) && have[i].as_const() != std::optional<int64_t>(1))
      dims.push_back(static_cast<int64_t>(i));
  }
  Value* s = sum(g, dims, /*keepdim=*/true);
  return reshape(s, sizes);
}

}  // namespace ptc
