// Shape propagation: runs the shape rule of every node (lib/passes/shape_rules_*.cpp) in
// topological order, filling in (Fill) or checking (Check) each output's Type.
//
// Strides and storage offsets are compared in Check mode for every rule, except where a rule
// sets Ctx::exact_strides = false: view / unflatten of a non-contiguous input whose strides sym
// cannot relate (the contiguous strides are used then). Strides of size-1 dims are never
// compared. How the rules model torch's layouts (checked against torch.export on the fixtures
// and ~45 more exported models):
//   * views (view/reshape/_unsafe_view when viewable, permute, transpose, t, expand, slice,
//     select, narrow, split*, chunk, unbind, (un)squeeze, flatten, unflatten, alias, detach):
//     torch's real strides and storage offsets (computeStride for view/reshape);
//   * elementwise ops: TensorIterator / prims layout (contiguous and channels-last fast paths,
//     then the inputs' stride order); floor division by a tensor follows the divisor only
//     (torch's meta does); dropout (traced as a copy) and in-place ops keep the input layout;
//   * clone/_to_copy/to/type_as/lift_fresh_copy/*_like: memory_format (preserve keeps dense
//     strides, else follows the input's stride order); contiguous returns its input when it is
//     already contiguous;
//   * conv, pooling, upsampling, pad, group_norm: channels-last in, channels-last out;
//     batch_norm keeps the input's layout; cat/stack: the inputs' common memory format;
//   * sdpa: empty_like(query) when torch's CPU flash kernel runs (4-d, equal head dims, no
//     dropout, no mask requiring grad), else contiguous; index.Tensor: TensorIterator's layout;
//   * everything else is contiguous, as torch allocates it (matmul family, layer_norm, rms_norm,
//     softmax, reductions, cumsum, topk, tril/triu, masked_fill, index_select, gather,
//     embedding, repeat, roll, factories).
// requires_grad is propagated (inputs that require grad make float outputs require grad): the
// sdpa rule needs it, and torch.export records it for graph inputs only.
#include <stdexcept>

#include "ptc/passes.h"
#include "shape_rules.h"

namespace ptc {

namespace shape {

const RuleTable& rule_table() {
  static const RuleTable table = [] {
    RuleTable t{};
    add_pointwise_rules(t);
    add_linalg_rules(t);
    add_reduce_rules(t);
    add_view_rules(t);
    add_data_rules(t);
    add_factory_rules(t);
    return t;
  }();
  return table;
}

}  // namespace shape

namespace {

using shape::Ctx;

// The rule's output types; nullopt when an input type is unknown.
std::optional<std::vector<Type>> run_rule(const Node& n, bool* exact_strides) {
  Ctx c(n);
  shape::Rule rule = shape::rule_table()[static_cast<size_t>(n.kind)];
  if (!rule) c.fail("ptc has no shape rule for this op yet");
  try {
    std::vector<Type> out = rule(c);
    if (exact_strides) *exact_strides = c.exact_strides;
    return out;
  } catch (const shape::UnknownInput&) {
    return std::nullopt;
  } catch (const std::overflow_error& e) {
    c.fail("symbolic size arithmetic overflows (", e.what(), ")");
  } catch (const std::length_error& e) {
    c.fail("symbolic sizes grow too large (", e.what(), ")");
  } catch (const std::domain_error& e) {
    c.fail("symbolic sizes divide by zero (", e.what(), ")");
  }
}

bool may_differ(sym::Expr a, sym::Expr b) { return !sym::prove_eq(a, b); }

// Why `recorded` and `inferred` disagree; empty when they agree. Strides and storage offset are
// compared only when `strides`, and never for dimensions of size 1.
std::string disagreement(const Type& recorded, const Type& inferred, bool strides) {
  if (recorded.kind == Type::Kind::Unknown || inferred.kind == Type::Kind::Unknown) return {};
  if (recorded.kind != inferred.kind) return "kind";
  if (recorded.kind == Type::Kind::SymInt) {
    if (recorded.value && inferred.value && may_differ(*recorded.value, *inferred.value)) return "value";
    return {};
  }
  if (!recorded.is_tensor()) return {};
  if (recorded.dtype != inferred.dtype) return "dtype";
  if (recorded.rank() != inferred.rank()) return "rank";
  for (size_t i = 0; i < recorded.rank(); ++i)
    if (may_differ(recorded.sizes[i], inferred.sizes[i])) return "sizes";
  if (recorded.device.type != inferred.device.type) return "device";
  if (!strides) return {};
  bool empty = false;
  for (const auto& s : recorded.sizes) empty = empty || shape::is_zero(s);
  if (empty) return {};
  for (size_t i = 0; i < recorded.rank(); ++i)
    if (!shape::is_one(recorded.sizes[i]) && may_differ(recorded.strides[i], inferred.strides[i])) return "strides";
  if (may_differ(recorded.storage_offset, inferred.storage_offset)) return "storage offset";
  return {};
}

std::string describe(const Type& t) {
  std::string s = t.str();
  if (t.is_tensor() && !shape::is_zero(t.storage_offset)) s += " at storage offset " + t.storage_offset.str();
  return s;
}

}  // namespace

std::vector<Type> infer_node_types(const Node& n) {
  if (n.kind == OpKind::Unknown) return {};
  auto out = run_rule(n, nullptr);
  return out ? *out : std::vector<Type>{};
}

std::unique_ptr<Graph> propagate_shapes(const Graph& g, ShapePropMode mode) {
  std::unique_ptr<Graph> out = clone_graph(g);
  for (const auto& np : out->nodes()) {
    Node& n = *np;
    if (n.kind == OpKind::Unknown) continue;
    // A Tensor[] result that a reader kept as one list value (TorchScript without ListUnpack):
    // its elements have no values to type.
    const auto& returns = n.op()->schema.returns;
    if (!n.list_output && returns.size() == 1 && returns[0].type == ArgType::TensorList) continue;
    bool exact = true;
    std::optional<std::vector<Type>> inferred = run_rule(n, &exact);
    if (!inferred) continue;
    if (inferred->size() != n.outputs.size())
      Ctx(n).fail("has ", n.outputs.size(), " outputs, but ", n.op_name(), " returns ", inferred->size(), " here");
    // requires_grad: torch.export records it for inputs only; rules may depend on it (sdpa).
    bool grad = false;
    if (n.kind != OpKind::Detach)
      for (const Value* in : n.inputs()) grad = grad || (in->type.is_tensor() && in->type.requires_grad);
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      Type& have = n.outputs[i]->type;
      Type got = (*inferred)[i];
      got.requires_grad = grad && got.is_tensor() && (dtype_is_float(got.dtype) || dtype_is_complex(got.dtype));
      if (have.is_tensor()) have.requires_grad = have.requires_grad || got.requires_grad;
      if (got.kind == Type::Kind::Unknown) continue;
      if (mode == ShapePropMode::Check) {
        if (have.kind == Type::Kind::Unknown) {
          have = got;
          continue;
        }
        std::string why = disagreement(have, got, exact);
        if (!why.empty())
          Ctx(n).fail("output ", i, " (%", n.outputs[i]->name, ") is recorded as ", describe(have),
                      " but the shape rule gives ", describe(got), " (", why, " differ)");
        if (have.kind == Type::Kind::SymInt && !have.value) have.value = got.value;
      } else {
        // A SymInt whose value the rule cannot know (Int.Tensor) keeps a value a reader recorded.
        if (!got.is_tensor() && !got.value && have.kind == got.kind && have.value) continue;
        have = std::move(got);
      }
    }
  }
  return out;
}

}  // namespace ptc
