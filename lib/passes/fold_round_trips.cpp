// Conversion round trips: a value converted from a half dtype H to float32 (or float64), taken
// through ops that only rearrange elements (op_rearranges: views, splits, reshapes, copies), and
// converted back to H is those rearrangements of the H value itself. Widening a half value is
// exact, so narrowing it again gives the same bits.
//
// autocast makes this pattern between library operations: a GEMM's half output is widened for
// the float32 graph, split into heads, and narrowed again for the attention that reads it (GPT-2:
// addmm -> to(f32) -> view -> split -> view -> transpose -> to(bf16) -> attention). After this
// pass the attention reads views of the GEMM's half output, the float32 copy is dead unless
// something else reads it, and no kernel exists only to convert.
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {
namespace {

// The tensor a dtype conversion reads (aten::to.dtype, to.dtype_layout, _to_copy), else nullptr.
const Value* conversion_source(const Node& n) {
  if (n.kind != OpKind::ToDtype && n.kind != OpKind::ToDtypeLayout && n.kind != OpKind::UnderscoreToCopy) return nullptr;
  if (n.outputs.size() != 1 || !n.outputs[0]->type.is_tensor()) return nullptr;
  const Arg* self = n.arg("self");
  const Value* const* v = self ? std::get_if<Value*>(self) : nullptr;
  return v && *v && (*v)->type.is_tensor() ? *v : nullptr;
}

// Whether converting `from` to `to` keeps every value exactly.
bool widens_exactly(DType from, DType to) {
  if (dtype_is_half(from)) return to == DType::Float32 || to == DType::Float64;
  return from == DType::Float32 && to == DType::Float64;
}

class Folder {
 public:
  explicit Folder(rewrite::GraphRewriter& rw) : rw_(rw) {}

  // The new graph's value holding the elements of source value `v` in dtype `h`, built from a
  // value of dtype `h` that `v` is an exact widening of (through rearrangements); nullptr when
  // `v` is not that.
  Value* narrowed(const Value* v, DType h) {
    auto key = std::make_pair(v, h);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    Value* out = build(v, h);
    memo_[key] = out;
    return out;
  }

 private:
  Value* build(const Value* v, DType h) {
    const Node* p = v->producer;
    if (!p || !v->type.is_tensor()) return nullptr;
    if (const Value* x = conversion_source(*p))
      return x->type.dtype == h && widens_exactly(h, v->type.dtype) ? rw_.map(x) : nullptr;
    if (!op_rearranges(p->kind) || p->args.empty()) return nullptr;
    const Value* const* src = std::get_if<Value*>(&p->args[0]);
    if (!src || !*src || (*src)->type.dtype != v->type.dtype) return nullptr;
    for (const Value* o : p->outputs)
      if (!o->type.is_tensor() || o->type.dtype != v->type.dtype) return nullptr;
    Value* from = narrowed(*src, h);
    if (!from) return nullptr;
    // The same rearrangement of the half value: one new node for all of p's outputs.
    std::vector<Arg> args;
    for (const Arg& a : p->args) args.push_back(rw_.map_arg(a));
    args[0] = from;
    std::vector<Value*> outs;
    for (const Value* o : p->outputs) {
      Type t = o->type;
      t.dtype = h;
      outs.push_back(rw_.new_value(o->name + "_" + dtype_name(h), std::move(t)));
    }
    rw_.add_node(*p, std::move(args), outs);
    Value* mine = nullptr;
    for (size_t i = 0; i < outs.size(); ++i) {
      memo_[std::make_pair(p->outputs[i], h)] = outs[i];
      if (p->outputs[i] == v) mine = outs[i];
    }
    return mine;
  }

  struct KeyHash {
    size_t operator()(const std::pair<const Value*, DType>& k) const {
      return std::hash<const Value*>()(k.first) * 31 + static_cast<size_t>(k.second);
    }
  };
  rewrite::GraphRewriter& rw_;
  std::unordered_map<std::pair<const Value*, DType>, Value*, KeyHash> memo_;
};

}  // namespace

std::unique_ptr<Graph> fold_round_trips(const Graph& g) {
  rewrite::GraphRewriter rw(g);
  Folder f(rw);
  std::unordered_set<const Value*> outputs(g.outputs.begin(), g.outputs.end());  // (their layout is the model's)
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    const Value* x = conversion_source(n);
    const DType to = n.outputs.empty() ? DType::Float32 : n.outputs[0]->type.dtype;
    if (x && dtype_is_half(to) && x->type.dtype != to && !outputs.count(n.outputs[0])) {
      if (Value* v = f.narrowed(x, to); v && v->type.sizes.size() == n.outputs[0]->type.sizes.size()) {
        rw.replace(n.outputs[0], v);
        continue;
      }
    }
    rw.copy_node(n);
  }
  return rw.finish();
}

}  // namespace ptc
