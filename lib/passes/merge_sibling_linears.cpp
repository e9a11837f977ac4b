// Sibling linear layers: aten::linear nodes that read the same input with constant weights of
// one dtype and inner size (BERT's query, key and value projections) become one linear over the
// weights stacked by rows (and the biases concatenated), whose output each old node reads as a
// slice of the last dimension. One GEMM of N = sum N_i reads the input once and is one kernel (on
// a GPU, one launch) instead of several.
#include <map>
#include <unordered_set>
#include <vector>

#include "linear_weights.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {
namespace {

using linear_weights::ConstantLinear;

// Stacked weights are built in double precision at compile time: past this many elements the
// merge is skipped (the copy would cost more compile time and memory than the merge saves).
constexpr int64_t kMaxMergedElements = int64_t{32} << 20;

}  // namespace

std::unique_ptr<Graph> merge_sibling_linears(const Graph& g) {
  const std::unordered_set<std::string> updated(g.updated_buffers.begin(), g.updated_buffers.end());
  // Groups by (input, weight dtype, inner size, with bias), in graph order.
  std::map<std::tuple<const Value*, DType, int64_t, bool>, std::vector<std::pair<const Node*, ConstantLinear>>> groups;
  for (const auto& np : g.nodes()) {
    auto m = linear_weights::constant_linear(g, *np, updated);
    if (!m) continue;
    groups[{m->input, m->weight->type.dtype, m->k, m->bias != nullptr}].emplace_back(np.get(), *m);
  }
  std::map<const Node*, const std::vector<std::pair<const Node*, ConstantLinear>>*> first;  // the group's first node -> the group
  std::unordered_set<const Node*> merged;
  for (auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    int64_t rows = 0;
    for (const auto& m : members) rows += m.second.n;
    if (rows * std::get<2>(key) > kMaxMergedElements) continue;
    first[members.front().first] = &members;
    for (const auto& m : members) merged.insert(m.first);
  }
  if (first.empty()) return clone_graph(g);

  rewrite::GraphRewriter rw(g);
  NodeBuilder b(rw.graph(), &g, "_merged");
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    auto it = first.find(&n);
    if (it == first.end()) {
      if (!merged.count(&n)) rw.copy_node(n);
      continue;  // a later member: its output is a slice made at the first one
    }
    const auto& members = *it->second;
    // The stacked weight [sum N_i, K] and the concatenated bias, in the weights' dtype.
    std::vector<const Value*> ws, bs;
    for (const auto& m : members) {
      ws.push_back(m.second.weight);
      if (m.second.bias) bs.push_back(m.second.bias);
    }
    const ConstantLinear& l0 = members.front().second;
    Value* nw = linear_weights::stacked_rows(rw, g, ws, 0, l0.weight->name + "_merged", linear_weights::target_of(g, l0.weight) + ".merged");
    Arg nb;
    if (!bs.empty()) nb = linear_weights::stacked_rows(rw, g, bs, 0, l0.bias->name + "_merged", linear_weights::target_of(g, l0.bias) + ".merged");
    b.set_origin(&n);
    Value* y = b.op(OpKind::Linear, {{"input", rw.map(l0.input)}, {"weight", nw}, {"bias", nb}});
    int64_t start = 0;
    const int64_t last = static_cast<int64_t>(y->type.rank()) - 1;
    for (const auto& [node, m] : members) {
      b.set_origin(node);
      Value* part = b.op(OpKind::SliceTensor, {{"self", y}, {"dim", last}, {"start", sym::Expr(start)}, {"end", sym::Expr(start + m.n)}});
      rw.replace(node->outputs[0], part);
      start += m.n;
    }
  }
  return rw.finish();
}

}  // namespace ptc
