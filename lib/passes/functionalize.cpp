// functionalize: in-place updates become functional ops whose results later readers read, and
// updates of buffers become buffer updates (Graph::updated_buffers); see passes.h.
//
// A tensor object (a graph input, or a value some op created) is tracked by its root value. An
// in-place op on a tensor gives it a new version, its output: from then on every read of any
// earlier version (or of a no-op alias of one: alias, detach, `to` to the same dtype) reads that
// output. An update through a view made by slice / select (torch's `m[a:b, c] = v`) becomes, as in
// torch's functionalization, the functional op on the view followed by slice_scatter /
// select_scatter nodes that write the result back into each base up the chain; the last is the
// root's new version (for a buffer, its new contents). A view taken before its base was updated
// and read afterwards, an update through any other view, and updates of parameters and
// constants are refused.
#include <spdlog/spdlog.h>

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "ptc/error.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {

std::optional<OpKind> functional_twin(OpKind k) {
  static const std::pair<OpKind, OpKind> twins[] = {
      {OpKind::ReluInplace, OpKind::Relu},           {OpKind::SiluInplace, OpKind::Silu},
      {OpKind::HardswishInplace, OpKind::Hardswish}, {OpKind::HardtanhInplace, OpKind::Hardtanh},
      {OpKind::AddTensorInplace, OpKind::AddTensor}, {OpKind::SubTensorInplace, OpKind::SubTensor},
      {OpKind::MulTensorInplace, OpKind::MulTensor}, {OpKind::MulScalarInplace, OpKind::MulScalar},
      {OpKind::DivTensorInplace, OpKind::DivTensor}, {OpKind::DivScalarInplace, OpKind::DivScalar},
      {OpKind::SigmoidInplace, OpKind::Sigmoid},     {OpKind::TanhInplace, OpKind::Tanh},
      {OpKind::GeluInplace, OpKind::Gelu},           {OpKind::HardsigmoidInplace, OpKind::Hardsigmoid},
      {OpKind::ClampInplace, OpKind::Clamp},         {OpKind::MaskedFillScalarInplace, OpKind::MaskedFillScalar},
      {OpKind::MaskedFillTensorInplace, OpKind::MaskedFillTensor},
      {OpKind::DropoutInplace, OpKind::Dropout},     {OpKind::CopyInplace, OpKind::Copy},
      {OpKind::IndexCopyInplace, OpKind::IndexCopy}, {OpKind::IndexPutInplace, OpKind::IndexPut},
      {OpKind::FillScalarInplace, OpKind::FillScalar}, {OpKind::FillTensorInplace, OpKind::FillTensor},
  };
  for (const auto& [inplace, functional] : twins)
    if (k == inplace) return functional;
  return std::nullopt;
}

namespace {

const Value* self_arg(const Node& n) {
  if (n.args.empty() || !std::holds_alternative<Value*>(n.args[0])) return nullptr;
  return std::get<Value*>(n.args[0]);
}

// An op that updates its first argument in place and returns it ("Tensor(a!) self").
bool updates_self(const Node& n) {
  const OpInfo* info = n.op();
  return info && !info->schema.args.empty() && info->schema.args[0].type_text.find('!') != std::string::npos &&
         n.outputs.size() == 1 && self_arg(n) && n.outputs[0]->type.is_tensor();
}

// alias, detach (unless kept for a backward), and `to` that changes nothing: the output is the
// input.
bool is_noop_alias(const Node& n, bool keep_detach) {
  const Value* x = self_arg(n);
  if (!x || n.outputs.size() != 1 || !x->type.is_tensor()) return false;
  const Type& o = n.outputs[0]->type;
  switch (n.kind) {
    case OpKind::Alias: return true;
    case OpKind::Detach: return !keep_detach;
    case OpKind::ToDtype: case OpKind::ToDtypeLayout: case OpKind::ToDevice: {
      const Arg* copy = n.arg("copy");
      if (copy && std::holds_alternative<bool>(*copy) && std::get<bool>(*copy)) return false;
      return o.is_tensor() && o.dtype == x->type.dtype && o.sizes == x->type.sizes && o.strides == x->type.strides;
    }
    default: return false;
  }
}

// An op whose result may share its first argument's memory ("Tensor(a) self" returning
// "Tensor(a)"): views, and contiguous / reshape, which alias when they can.
bool may_alias(const Node& n) {
  const OpInfo* info = n.op();
  if (!info || info->schema.args.empty() || !self_arg(n)) return false;
  const std::string& t = info->schema.args[0].type_text;
  if (t.find("(a") == std::string::npos || t.find('!') != std::string::npos) return false;
  return n.kind != OpKind::ToDtype && n.kind != OpKind::ToDtypeLayout && n.kind != OpKind::ToDevice;  // (not no-ops: copies)
}

struct Tracker {
  const Graph& g;
  std::unordered_map<const Value*, const Value*> root;               // value -> the tensor object it is a version of
  std::unordered_map<const Value*, std::vector<const Value*>> versions;  // root -> its versions and aliases, in order
  std::unordered_map<const Value*, int> version;                      // root -> how many updates so far
  std::unordered_map<const Value*, const Node*> last_update;          // root -> the node that updated it last
  std::unordered_map<const Value*, std::pair<const Value*, int>> view_of;  // view -> (root of its base, base version then)
  std::unordered_map<const Value*, const Node*> view_node;        // view -> the node that made it
  std::unordered_map<const Value*, const Value*> alias_of;         // no-op alias of a view -> the view
  std::map<const Value*, const GraphInput*> inputs;

  explicit Tracker(const Graph& graph) : g(graph) {
    for (const GraphInput& in : g.inputs) inputs[in.value] = &in;
  }
  const Value* root_of(const Value* v) const {
    auto it = root.find(v);
    return it == root.end() ? v : it->second;
  }
  void add_version(const Value* r, const Value* v) {
    root[v] = r;
    auto& vs = versions[r];
    if (vs.empty()) vs.push_back(r);
    vs.push_back(v);
  }
  std::string describe(const Value* r) const {
    auto it = inputs.find(r);
    if (it == inputs.end() || it->second->role == GraphInput::Role::User) return "%" + r->name;
    return std::string(role_name(it->second->role)) + " '" + it->second->target + "'";
  }
};

// An operator ptc does not know whose name says it updates its input in place (aten's trailing
// underscore: fill_, zero_, add_; not dunders like __and__). Dead-code elimination would drop it
// as unused, silently losing the update, so it is refused instead. (ptc inspect lists it too.)
}  // namespace

bool unknown_inplace(const Node& n) {
  if (n.op()) return false;
  std::string t = n.target;
  for (size_t at; (at = t.find("::")) != std::string::npos;) t.replace(at, 2, ".");
  std::vector<std::string> parts;
  for (size_t s = 0, e; s <= t.size(); s = e + 1) {
    e = t.find('.', s);
    if (e == std::string::npos) e = t.size();
    parts.push_back(t.substr(s, e - s));
  }
  size_t i = 0;
  while (i < parts.size() && (parts[i] == "torch" || parts[i] == "ops")) ++i;
  if (i + 1 >= parts.size()) return false;
  const std::string& name = parts[i + 1];  // after the namespace (aten)
  return name.size() > 1 && name.back() == '_' && name.compare(0, 2, "__") != 0;
}

namespace {

[[noreturn]] void refuse(const Node& n, const std::string& what) {
  std::string where = "node '" + n.name + "' (" + n.op_name() + ")";
  std::string frame = n.source.user_frame();
  if (!frame.empty()) where += " at " + frame;
  user_error(where, ": ", what);
}

}  // namespace

std::unique_ptr<Graph> functionalize(const Graph& g, bool keep_detach) {
  rewrite::GraphRewriter rw(g);
  Tracker t(g);
  std::vector<const Value*> updated;  // buffer inputs updated in place, in order of their first update
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    if (unknown_inplace(n)) refuse(n, "ptc does not know this in-place operator yet (an update it would lose if it dropped the node)");
    for (const Value* u : n.inputs()) {
      auto v = t.view_of.find(u);
      if (v != t.view_of.end() && t.version[v->second.first] != v->second.second)
        refuse(n, "reads %" + u->name + ", a view of " + t.describe(v->second.first) + " taken before node '" +
                      t.last_update[v->second.first]->name + "' updated it in place; ptc does not follow in-place updates through views");
    }
    if (is_noop_alias(n, keep_detach) && std::find(g.outputs.begin(), g.outputs.end(), n.outputs[0]) == g.outputs.end()) {
      const Value* x = self_arg(n);
      rw.replace(n.outputs[0], rw.map(x));
      t.add_version(t.root_of(x), n.outputs[0]);
      if (auto v = t.view_of.find(x); v != t.view_of.end()) {
        t.view_of[n.outputs[0]] = v->second;
        t.alias_of[n.outputs[0]] = x;
      }
      continue;
    }
    if (!updates_self(n)) {
      rw.copy_node(n);
      if (may_alias(n)) {
        const Value* x = self_arg(n);
        auto v = t.view_of.find(x);
        const Value* base = v != t.view_of.end() ? v->second.first : t.root_of(x);
        for (const Value* o : n.outputs) {
          t.view_of[o] = {base, t.version[base]};
          t.view_node[o] = &n;
        }
      }
      continue;
    }
    // An in-place update of `self`: the functional twin (when there is one) computes the new version.
    const Value* self = self_arg(n);
    Node* copy = rw.copy_node(n);
    if (auto twin = functional_twin(n.kind)) {
      copy->kind = *twin;
      copy->target = op_info(*twin).schema.qualified();
    }
    const Value* out = n.outputs[0];
    auto v = t.view_of.find(self);
    const Value* r = v != t.view_of.end() ? v->second.first : t.root_of(self);
    auto in = t.inputs.find(r);
    const GraphInput::Role role = in == t.inputs.end() ? GraphInput::Role::User : in->second->role;
    const bool weight = in != t.inputs.end() && role != GraphInput::Role::User;
    if (v != t.view_of.end()) {  // part of r changes: scatter the view's new contents back up to r
      if (weight && role != GraphInput::Role::Buffer)
        refuse(n, "updates part of " + t.describe(r) + " in place; the library holds parameters and constants fixed (only buffers are state)");
      std::vector<const Node*> chain;  // the view ops from self up to r, innermost first
      for (const Value* cur = self; t.view_of.count(cur);) {
        if (auto al = t.alias_of.find(cur); al != t.alias_of.end()) {
          cur = al->second;
          continue;
        }
        const Node* vn = t.view_node.at(cur);
        if (vn->kind != OpKind::SliceTensor && vn->kind != OpKind::SelectInt)
          refuse(n, "updates %" + self->name + " in place, a view of " + t.describe(r) + " made by node '" + vn->name + "' (" +
                        vn->op_name() + "); ptc follows in-place updates through slice and select views only");
        chain.push_back(vn);
        cur = self_arg(*vn);
      }
      NodeBuilder b(rw.graph(), &g, "_scatter");
      b.set_origin(&n);
      Value* val = rw.map(out);
      for (const Node* vn : chain) {
        std::vector<std::pair<std::string, Arg>> args{{"self", rw.map(self_arg(*vn))}, {"src", val}};
        for (const char* name : {"dim", "start", "end", "step", "index"})
          if (const Arg* x = vn->arg(name)) args.emplace_back(name, rw.map_arg(*x));
        val = b.op(vn->kind == OpKind::SliceTensor ? OpKind::SliceScatter : OpKind::SelectScatter, std::move(args));
      }
      if (role == GraphInput::Role::Buffer && std::find(updated.begin(), updated.end(), r) == updated.end()) updated.push_back(r);
      t.version[r]++;
      t.last_update[r] = &n;
      if (t.versions[r].empty()) t.versions[r].push_back(r);
      for (const Value* s : t.versions[r]) rw.replace(s, val);
      // The updated view itself reads the op's result from now on.
      for (const Value* s : t.versions[t.root_of(self)]) rw.replace(s, rw.map(out));
      rw.replace(self, rw.map(out));
      t.add_version(t.root_of(self), out);
      t.view_of[self] = t.view_of[out] = {r, t.version[r]};
      continue;
    }
    if (weight && role != GraphInput::Role::Buffer)
      refuse(n, "updates " + t.describe(r) + " in place; the library holds parameters and constants fixed (only buffers are state)");
    if (in != t.inputs.end() && role == GraphInput::Role::User)
      spdlog::warn("{}: node '{}' updates the user input %{} in place; the library leaves its inputs unchanged", g.name, n.name, r->name);
    if (role == GraphInput::Role::Buffer && std::find(updated.begin(), updated.end(), r) == updated.end()) updated.push_back(r);
    t.version[r]++;
    t.last_update[r] = &n;
    if (t.versions[r].empty()) t.versions[r].push_back(r);
    for (const Value* s : t.versions[r]) rw.replace(s, rw.map(out));
    t.add_version(r, out);
  }
  std::unique_ptr<Graph> res = rw.finish();
  for (const Value* r : updated) {
    const std::string& target = t.inputs.at(r)->target;
    for (const auto& b : res->updated_buffers)
      if (b == target) user_error(g.name, ": buffer '", target, "' is updated both in place and as a buffer mutation of the export");
    res->outputs.push_back(rw.map(t.versions[r].back()));
    res->updated_buffers.push_back(target);
  }
  return res;
}

}  // namespace ptc
