// Dead-code elimination: keeps the nodes from which a graph output is reachable.
//
// Every op in the table is treated as pure, as lowering does (it lowers only the nodes that reach
// an output): an in-place op (relu_) whose result nobody reads is removed like any other.
#include <unordered_set>

#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {

std::unordered_set<const Node*> live_nodes(const Graph& g) {
  std::unordered_set<const Value*> live(g.outputs.begin(), g.outputs.end());
  std::unordered_set<const Node*> keep;
  for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it) {
    const Node* n = it->get();
    bool needed = false;
    for (const Value* o : n->outputs) needed = needed || live.count(o);
    if (!needed) continue;
    keep.insert(n);
    for (const Value* v : n->inputs()) live.insert(v);
  }
  return keep;
}

std::unique_ptr<Graph> dead_code_elimination(const Graph& g) {
  const std::unordered_set<const Node*> keep = live_nodes(g);
  rewrite::GraphRewriter rw(g);
  for (const auto& n : g.nodes())
    if (keep.count(n.get())) rw.copy_node(*n);
  return rw.finish();
}

std::unique_ptr<Graph> prune_unused_weights(const Graph& g) {
  auto uses = rewrite::count_uses(g);
  std::unordered_set<std::string> used_targets;
  for (const GraphInput& in : g.inputs)
    if (in.role == GraphInput::Role::User || uses.count(in.value)) used_targets.insert(in.target);
  used_targets.insert(g.updated_buffers.begin(), g.updated_buffers.end());  // state, read or not
  rewrite::GraphRewriter rw(g, [&](const GraphInput& in) {
    return in.role == GraphInput::Role::User || used_targets.count(in.target) > 0;
  });
  for (const auto& n : g.nodes()) rw.copy_node(*n);
  std::unique_ptr<Graph> out = rw.finish();
  for (auto it = out->weights.begin(); it != out->weights.end();)
    it = used_targets.count(it->first) ? std::next(it) : out->weights.erase(it);
  return out;
}

}  // namespace ptc
