// linear_weights.h's helpers.
#include "linear_weights.h"

namespace ptc {
namespace linear_weights {

namespace {

const Value* value_arg(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  const Value* const* v = a ? std::get_if<Value*>(a) : nullptr;
  return v ? *v : nullptr;
}

}  // namespace

std::optional<ConstantLinear> constant_linear(const Graph& g, const Node& n, const std::unordered_set<std::string>& updated) {
  if (n.kind != OpKind::Linear || n.outputs.size() != 1) return std::nullopt;
  const Value* x = value_arg(n, "input");
  const Value* w = value_arg(n, "weight");
  const Value* b = value_arg(n, "bias");
  const Arg* ba = n.arg("bias");
  if (!x || !w || (ba && !std::holds_alternative<std::monostate>(*ba) && !b)) return std::nullopt;
  for (const Value* v : {w, b}) {
    if (!v) continue;
    const TensorData* td = rewrite::weight_of(g, v);
    if (!td || !rewrite::dtype_supported(td->type.dtype) || !rewrite::static_layout(td->type)) return std::nullopt;
    for (const GraphInput& in : g.inputs)
      if (in.value == v && updated.count(in.target)) return std::nullopt;
  }
  if (w->type.rank() != 2 || (b && b->type.rank() != 1)) return std::nullopt;
  auto rows = w->type.sizes[0].as_const(), cols = w->type.sizes[1].as_const();
  if (!rows || !cols) return std::nullopt;
  if (b && !(b->type.sizes[0] == w->type.sizes[0])) return std::nullopt;
  return ConstantLinear{x, w, b, *rows, *cols};
}

std::string target_of(const Graph& g, const Value* v) {
  for (const GraphInput& in : g.inputs)
    if (in.value == v) return in.target;
  return v->name;
}

Value* stacked_rows(rewrite::GraphRewriter& rw, const Graph& g, const std::vector<const Value*>& parts, int64_t zero_rows,
                    const std::string& name, const std::string& target) {
  std::vector<double> values;
  int64_t rows = zero_rows;
  for (const Value* p : parts) {
    std::vector<double> part = rewrite::read_all(*rewrite::weight_of(g, p));
    values.insert(values.end(), part.begin(), part.end());
    rows += *p->type.sizes[0].as_const();
  }
  Type t = parts.front()->type;
  const int64_t row = t.rank() == 2 ? *t.sizes[1].as_const() : 1;
  values.resize(values.size() + static_cast<size_t>(zero_rows * row), 0.0);
  t.sizes[0] = sym::Expr(rows);
  t.strides = contiguous_strides(t.sizes);
  t.storage_offset = 0;
  t.requires_grad = false;
  return rw.add_constant(name, target, rewrite::owned_tensor(t, values));
}

}  // namespace linear_weights

}  // namespace ptc
