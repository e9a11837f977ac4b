// clone_graph: a deep copy of a Graph (values, nodes, inputs, outputs); weights share their
// owners.
#include <unordered_map>

#include "ptc/error.h"
#include "ptc/passes.h"

namespace ptc {

std::unique_ptr<Graph> clone_graph(const Graph& g) {
  auto out = std::make_unique<Graph>();
  out->name = g.name;
  out->source_format = g.source_format;
  out->weights = g.weights;
  out->symbols = g.symbols;
  out->updated_buffers = g.updated_buffers;

  std::unordered_map<const Value*, Value*> vmap;
  for (const auto& v : g.values()) {
    Value* nv = out->add_value(v->name, v->type);
    PTC_CHECK(nv->id == v->id, "value ids are not dense: ", v->name);
    vmap[v.get()] = nv;
  }
  auto map_value = [&](Value* v) -> Value* {
    if (!v) return nullptr;
    auto it = vmap.find(v);
    PTC_CHECK(it != vmap.end(), "a node uses value '", v->name, "' that the graph does not own");
    return it->second;
  };
  for (const GraphInput& in : g.inputs) out->inputs.push_back(GraphInput{map_value(in.value), in.role, in.target});

  std::unordered_map<const Node*, Node*> nmap;
  for (const auto& n : g.nodes()) {
    auto nn = std::make_unique<Node>();
    nn->kind = n->kind;
    nn->target = n->target;
    nn->name = n->name;
    nn->arg_names = n->arg_names;
    nn->list_output = n->list_output;
    nn->source = n->source;
    for (const Arg& a : n->args) {
      if (auto v = std::get_if<Value*>(&a)) {
        nn->args.emplace_back(map_value(*v));
      } else if (auto vs = std::get_if<std::vector<Value*>>(&a)) {
        std::vector<Value*> m;
        for (Value* x : *vs) m.push_back(map_value(x));
        nn->args.emplace_back(std::move(m));
      } else {
        nn->args.push_back(a);
      }
    }
    for (Value* o : n->outputs) nn->outputs.push_back(map_value(o));
    nmap[n.get()] = out->add_node(std::move(nn));
  }
  // Producers as in the original (also for values a reader left without a node's output slot).
  for (const auto& v : g.values()) {
    Value* nv = vmap[v.get()];
    nv->producer = v->producer ? nmap.at(v->producer) : nullptr;
    nv->output_index = v->output_index;
  }
  for (Value* o : g.outputs) out->outputs.push_back(map_value(o));
  return out;
}

}  // namespace ptc
