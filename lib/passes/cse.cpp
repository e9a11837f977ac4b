// Common-subexpression elimination: a node equal to an earlier one (same op, same arguments after
// earlier merges, same output types) is dropped and its outputs are read from the earlier node.
#include <cstring>
#include <unordered_map>

#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {
namespace {

bool arg_is_false(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  auto b = a ? std::get_if<bool>(a) : nullptr;
  return b && !*b;
}

bool arg_is_zero(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  if (!a) return true;
  if (auto d = std::get_if<double>(a)) return *d == 0;
  if (auto i = std::get_if<int64_t>(a)) return *i == 0;
  return false;
}

// Whether two nodes with the same op and arguments are guaranteed to compute the same values.
bool is_pure(const Node& n) {
  if (n.kind == OpKind::Unknown) return false;  // ptc cannot know what it does
  const std::string& text = n.op()->schema.text;
  if (text.find('!') != std::string::npos) return false;  // mutates an argument
  const std::string name = n.op()->schema.qualified();
  for (const char* word : {"rand", "bernoulli", "normal", "uniform", "multinomial", "empty"})
    if (name.find(word) != std::string::npos) return false;
  switch (n.kind) {
    case OpKind::Dropout:
    case OpKind::NativeDropout: return arg_is_false(n, "train");
    case OpKind::ScaledDotProductAttention:
    case OpKind::UnderscoreScaledDotProductFlashAttentionForCpu: return arg_is_zero(n, "dropout_p");
    default: return true;
  }
}

// A canonical text for an argument: exact (doubles by their bits), with values named by the id
// of their value in the new graph.
void key_arg(std::string& k, const Arg& a) {
  k += std::to_string(a.index());
  k += ':';
  struct Visitor {
    std::string& k;
    void operator()(std::monostate) const {}
    void operator()(Value* v) const { k += v ? std::to_string(v->id) : "-"; }
    void operator()(const std::vector<Value*>& vs) const {
      for (Value* v : vs) k += (v ? std::to_string(v->id) : "-") + ",";
    }
    void operator()(int64_t i) const { k += std::to_string(i); }
    void operator()(double d) const {
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      k += std::to_string(bits);
    }
    void operator()(bool b) const { k += b ? "1" : "0"; }
    void operator()(const std::string& s) const { k += std::to_string(s.size()) + "'" + s; }
    void operator()(const std::vector<int64_t>& v) const {
      for (int64_t x : v) k += std::to_string(x) + ",";
    }
    void operator()(const std::vector<double>& v) const {
      for (double x : v) (*this)(x), k += ",";
    }
    void operator()(const std::vector<bool>& v) const {
      for (bool x : v) k += x ? "1" : "0";
    }
    void operator()(const sym::Expr& e) const { k += e.str(); }
    void operator()(const std::vector<sym::Expr>& v) const {
      for (const auto& x : v) k += x.str() + ",";
    }
    void operator()(DType t) const { k += std::to_string(static_cast<int>(t)); }
    void operator()(Device d) const { k += d.str(); }
  };
  std::visit(Visitor{k}, a);
  k += ';';
}

}  // namespace

std::unique_ptr<Graph> common_subexpression_elimination(const Graph& g) {
  rewrite::GraphRewriter rw(g);
  std::unordered_map<const Value*, bool> is_output;
  for (const Value* o : g.outputs) is_output[o] = true;
  std::unordered_map<std::string, const Node*> seen;  // key -> the first such node (in g)

  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    if (n.outputs.empty() || !is_pure(n)) {
      rw.copy_node(n);
      continue;
    }
    std::string key = std::to_string(static_cast<int>(n.kind)) + (n.list_output ? "L" : "") + "(";
    for (const Arg& a : n.args) key_arg(key, rw.map_arg(a));
    key += ")->";
    for (const Value* o : n.outputs) key += o->type.str() + "@" + o->type.storage_offset.str() + ",";

    auto it = seen.find(key);
    bool feeds_output = false;
    for (const Value* o : n.outputs) feeds_output = feeds_output || is_output.count(o);
    // A duplicate that is a graph output stays, so that the output keeps its name.
    if (it != seen.end() && !feeds_output) {
      for (size_t i = 0; i < n.outputs.size(); ++i) rw.replace(n.outputs[i], rw.map(it->second->outputs[i]));
      continue;
    }
    rw.copy_node(n);
    if (it == seen.end()) seen.emplace(std::move(key), &n);
  }
  return rw.finish();
}

}  // namespace ptc
