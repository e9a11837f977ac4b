// Graph verifier: structural invariants every stage may rely on.
#include <set>

#include "ptc/error.h"
#include "ptc/graph.h"

namespace ptc {
namespace {

bool arg_matches(const Arg& a, const SchemaArg& sa) {
  if (std::holds_alternative<std::monostate>(a)) return sa.optional || sa.has_default;
  auto is_tensor_value = [](const Arg& x) {
    auto v = std::get_if<Value*>(&x);
    return v && *v && ((*v)->type.kind == Type::Kind::Tensor || (*v)->type.kind == Type::Kind::Unknown);
  };
  auto is_sym_value = [](const Arg& x) {
    auto v = std::get_if<Value*>(&x);
    return v && *v && (*v)->type.kind != Type::Kind::Tensor;
  };
  switch (sa.type) {
    // torch.export writes a Python number or a symbolic size where a Tensor is expected
    // (add.Tensor(x, 1), div.Tensor(x, t.numel())): a wrapped 0-d tensor.
    case ArgType::Tensor:
      return is_tensor_value(a) || std::holds_alternative<int64_t>(a) || std::holds_alternative<double>(a) ||
             std::holds_alternative<bool>(a) || std::holds_alternative<sym::Expr>(a) || is_sym_value(a);
    case ArgType::TensorList:
    case ArgType::OptionalTensorList: return std::holds_alternative<std::vector<Value*>>(a);
    case ArgType::Int: return std::holds_alternative<int64_t>(a);
    case ArgType::SymInt:
      return std::holds_alternative<sym::Expr>(a) || std::holds_alternative<int64_t>(a);
    case ArgType::Ints:
    case ArgType::SymInts:
      return std::holds_alternative<std::vector<int64_t>>(a) ||
             std::holds_alternative<std::vector<sym::Expr>>(a);
    case ArgType::Float:
      return std::holds_alternative<double>(a) || std::holds_alternative<int64_t>(a);
    case ArgType::Floats: return std::holds_alternative<std::vector<double>>(a);
    case ArgType::Bool: return std::holds_alternative<bool>(a);
    case ArgType::Bools: return std::holds_alternative<std::vector<bool>>(a);
    case ArgType::Scalar:
      return std::holds_alternative<int64_t>(a) || std::holds_alternative<double>(a) ||
             std::holds_alternative<bool>(a) || std::holds_alternative<sym::Expr>(a) ||
             is_sym_value(a);
    case ArgType::Str:
    case ArgType::Layout:
    case ArgType::MemoryFormat: return std::holds_alternative<std::string>(a);
    case ArgType::ScalarType: return std::holds_alternative<DType>(a);
    case ArgType::Device: return std::holds_alternative<Device>(a);
    case ArgType::Generator:
    case ArgType::Other: return true;
  }
  return true;
}

void check_type(const Type& t, const Graph& g, const std::string& where, std::vector<std::string>& out) {
  if (t.kind != Type::Kind::Tensor) return;
  if (t.sizes.size() != t.strides.size())
    out.push_back(where + ": " + std::to_string(t.sizes.size()) + " sizes but " +
                  std::to_string(t.strides.size()) + " strides");
  for (const auto& s : t.sizes) {
    for (const auto& sym : sym::free_symbols(s))
      if (!g.symbols.count(sym.name()))
        out.push_back(where + ": size uses symbol " + sym.name() + " that the graph does not declare");
    if (sym::prove_lt(s, 0)) out.push_back(where + ": negative size " + s.str());
  }
}

}  // namespace

std::vector<std::string> verify_graph(const Graph& g) {
  std::vector<std::string> out;
  std::set<const Value*> defined;
  std::set<std::string> names;
  auto define = [&](const Value* v, const std::string& where) {
    if (!names.insert(v->name).second) out.push_back(where + ": value %" + v->name + " defined twice");
    defined.insert(v);
    check_type(v->type, g, "value %" + v->name, out);
  };
  for (const auto& in : g.inputs) {
    define(in.value, "input");
    if (in.role == GraphInput::Role::User) continue;
    auto it = g.weights.find(in.target);
    if (it == g.weights.end()) {
      out.push_back(std::string(role_name(in.role)) + " %" + in.value->name + ": no data for \"" +
                    in.target + "\"");
    } else if (it->second.type.kind == Type::Kind::Tensor && in.value->type.is_tensor() &&
               it->second.type.sizes != in.value->type.sizes) {
      out.push_back(std::string(role_name(in.role)) + " %" + in.value->name + ": data has shape " +
                    it->second.type.str() + " but the graph says " + in.value->type.str());
    }
  }
  for (const auto& n : g.nodes()) {
    const std::string where = "node " + n->name + " (" + n->op_name() + ")";
    for (const Value* v : n->inputs())
      if (!defined.count(v)) out.push_back(where + ": uses %" + v->name + " before it is defined");
    if (const OpInfo* info = n->op()) {
      const auto& sa = info->schema.args;
      if (n->args.size() != sa.size()) {
        out.push_back(where + ": " + std::to_string(n->args.size()) + " arguments, schema has " +
                      std::to_string(sa.size()));
      } else {
        for (size_t i = 0; i < sa.size(); ++i)
          if (!arg_matches(n->args[i], sa[i]))
            out.push_back(where + ": argument " + sa[i].name + " = " + arg_str(n->args[i]) +
                          " does not fit type " + sa[i].type_text);
      }
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      const Value* v = n->outputs[i];
      if (v->producer != n.get() || v->output_index != static_cast<int>(i))
        out.push_back(where + ": output %" + v->name + " does not point back to its node");
      define(v, where);
    }
  }
  for (const Value* v : g.outputs)
    if (!defined.count(v)) out.push_back("graph output %" + v->name + " is never defined");
  if (g.updated_buffers.size() > g.outputs.size()) out.push_back("more updated buffers than graph outputs");
  for (size_t i = 0; i < g.updated_buffers.size() && i < g.outputs.size(); ++i) {
    const std::string& target = g.updated_buffers[i];
    bool found = false;
    for (const auto& in : g.inputs) found = found || (in.role == GraphInput::Role::Buffer && in.target == target);
    if (!found) out.push_back("updated buffer \"" + target + "\" is no buffer input of the graph");
  }
  for (const auto& [name, w] : g.weights) {
    if (w.type.kind != Type::Kind::Tensor) continue;
    // Every element reachable through sizes/strides/offset must lie inside the storage: the
    // lowest at or above 0, the highest below its end (in 128-bit arithmetic, saturated, so that
    // no product of absurd sizes wraps around).
    constexpr __int128 kHuge = __int128(1) << 100;
    __int128 lo = 0, hi = 0;
    bool known = true, empty = false;
    auto off = w.type.storage_offset.as_const();
    if (!off) known = false; else lo = hi = *off;
    for (size_t i = 0; known && i < w.type.sizes.size(); ++i) {
      auto s = w.type.sizes[i].as_const();
      auto st = w.type.strides[i].as_const();
      if (!s || !st) { known = false; break; }
      if (*s == 0) { empty = true; continue; }
      __int128 span = static_cast<__int128>(*s - 1) * *st;
      if (span < 0) lo = std::max(lo + span, -kHuge); else hi = std::min(hi + span, kHuge);
    }
    if (known && !empty && (lo < 0 || (hi + 1) * static_cast<__int128>(dtype_size(w.type.dtype)) > static_cast<__int128>(w.storage_bytes)))
      out.push_back("weight \"" + name + "\": elements reach past its " +
                    std::to_string(w.storage_bytes) + "-byte storage");
  }
  return out;
}

}  // namespace ptc
