// One node rewritten to compute in another dtype, for the precision passes (autocast.cpp,
// library_ops_f32.cpp): the tensor inputs `input(value, arg index)` picks are read through a
// conversion to `to` (one conversion per value, shared through `cache`), the outputs `output`
// picks are written in `to` as new values NAME + suffix, and each is converted back to its
// recorded dtype by a node that takes the old output's place.
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ptc/node_builder.h"
#include "ptc/rewrite.h"

namespace ptc {

inline void convert_operands(rewrite::GraphRewriter& rw, NodeBuilder& b, const Node& n, DType to,
                             const std::function<bool(const Value*, size_t arg)>& input, const std::function<bool(const Value*)>& output,
                             std::unordered_map<const Value*, Value*>& cache, const std::string& suffix) {
  b.set_origin(&n);
  std::vector<Arg> args;
  for (size_t i = 0; i < n.args.size(); ++i) {
    Arg m = rw.map_arg(n.args[i]);
    if (auto v = std::get_if<Value*>(&m); v && *v && (*v)->type.is_tensor() && input(*v, i)) {
      auto it = cache.find(*v);
      m = it != cache.end() ? it->second : (cache[*v] = b.cast(*v, to));
    }
    args.push_back(std::move(m));
  }
  std::vector<Value*> outs;
  for (const Value* o : n.outputs) {
    Type t = o->type;
    if (t.is_tensor() && output(o)) t.dtype = to;
    outs.push_back(rw.new_value(o->name + suffix, std::move(t)));
  }
  rw.add_node(n, std::move(args), outs);
  for (size_t i = 0; i < outs.size(); ++i) {
    const Value* o = n.outputs[i];
    rw.replace(o, o->type.is_tensor() && output(o) ? b.cast(outs[i], o->type.dtype) : outs[i]);
  }
}

}  // namespace ptc
