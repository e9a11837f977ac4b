// Higher-order wrappers in a torch.export graph, inlined before the reader builds nodes.
//
// torch.export keeps a region of forward() under torch.no_grad() / torch.enable_grad() as
// `higher_order.wrap_with_set_grad_enabled(enabled, subgraph, *operands)` and one under
// torch.autocast as `higher_order.wrap_with_autocast(device, dtype, enabled, cache, subgraph,
// *operands)`; transformers' models put such regions around rotary embeddings, depending on
// its version. The subgraph's nodes take the wrapper's place: its inputs read the wrapper's
// operands, its own values get names prefixed with the wrapper's (no clash with the outer
// graph's), and each wrapper output is an alias of the subgraph's output, or a detach where
// gradients are off in the region (so that a training library propagates none through it).
// An autocast region that is enabled would change the region's arithmetic; it is refused with
// one sentence (ptc applies --precision to the whole model instead).
#include <string>
#include <vector>

#include "pt2_context.h"

namespace ptc::pt2 {
namespace {

constexpr const char* kGradWrapper = "torch.ops.higher_order.wrap_with_set_grad_enabled";
constexpr const char* kAutocastWrapper = "torch.ops.higher_order.wrap_with_autocast";

using Renames = std::map<std::string, std::string>;

void rename_value(json& v, const Renames& r) {
  if (!v.is_string()) return;
  auto it = r.find(v.get<std::string>());
  if (it != r.end()) v = it->second;
}

// Renames the tensor and symbol references inside a serialized argument or output.
void rename_refs(json& a, const Renames& r) {
  if (a.is_array()) {
    for (auto& e : a) rename_refs(e, r);
    return;
  }
  if (!a.is_object()) return;
  for (auto it = a.begin(); it != a.end(); ++it) {
    json& v = it.value();
    if (it.key() == "as_tensor" && v.is_object() && v.contains("name")) {
      rename_value(v["name"], r);
    } else if (it.key() == "as_tensors" && v.is_array()) {
      for (auto& t : v)
        if (t.is_object() && t.contains("name")) rename_value(t["name"], r);
    } else if (it.key() == "as_name") {
      rename_value(v, r);
    } else {
      rename_refs(v, r);
    }
  }
}

// The name a one-key reference object ({"as_tensor": {"name"}} or {"as_sym_int": {"as_name"}})
// refers to; "" for anything else.
std::string ref_name(const json& ref) {
  if (!ref.is_object() || ref.size() != 1) return "";
  const json& v = ref.begin().value();
  if (ref.begin().key() == "as_tensor" && v.is_object() && v.contains("name") && v["name"].is_string()) return v["name"];
  if (ref.begin().key() == "as_sym_int" && v.is_object() && v.contains("as_name") && v["as_name"].is_string()) return v["as_name"];
  return "";
}

// The values a node's output entry defines, in order: one per tensor of an `as_tensors` list, ""
// for `as_none`, else ref_name's one ("" when it is no reference).
std::vector<std::string> output_names(const json& o) {
  if (o.is_object() && o.contains("as_tensors") && o["as_tensors"].is_array()) {
    std::vector<std::string> names;
    for (const auto& t : o["as_tensors"]) names.push_back(t.value("name", ""));
    return names;
  }
  if (o.is_object() && o.contains("as_none")) return {""};
  return {ref_name(o)};
}

void inline_node(Context& ctx, const json& jn, json& out);

void inline_wrapper(Context& ctx, const json& jn, json& out) {
  const std::string target = jn.value("target", "");
  const std::string name = jn.contains("name") && jn["name"].is_string() ? jn["name"].get<std::string>() : "wrapper";
  ctx.node_where = "node '" + name + "' (" + target.substr(target.rfind('.') + 1) + ")";
  const json& inputs = ctx.member(jn, "inputs", "node");
  if (!inputs.is_array()) ctx.fail("'inputs' must be a list");
  auto arg = [&](size_t i) -> const json& { return ctx.member(inputs.at(i), "arg", "node input"); };
  size_t gi = inputs.size();
  for (size_t i = 0; i < inputs.size() && gi == inputs.size(); ++i)
    if (arg(i).is_object() && arg(i).contains("as_graph")) gi = i;
  if (gi == inputs.size()) ctx.fail("a higher-order wrapper without its subgraph");
  bool grad_off = false;
  if (target == kGradWrapper) {
    if (gi < 1 || !arg(0).contains("as_bool")) ctx.fail("wrap_with_set_grad_enabled without its 'enabled' flag");
    grad_off = !arg(0)["as_bool"].get<bool>();
  } else {
    if (gi < 3 || !arg(2).contains("as_bool")) ctx.fail("wrap_with_autocast without its 'enabled' flag");
    if (arg(2)["as_bool"].get<bool>())
      ctx.fail("a torch.autocast region inside forward() is not supported: export the model without it (ptc compile --precision "
               "bf16 / fp16 applies autocast's policy to the whole model)");
  }
  const json& sub = ctx.member(arg(gi)["as_graph"], "graph", "as_graph");
  const json& sub_inputs = ctx.member(sub, "inputs", "subgraph");
  const json& sub_outputs = ctx.member(sub, "outputs", "subgraph");
  const json& sub_nodes = ctx.member(sub, "nodes", "subgraph");
  if (!sub_inputs.is_array() || !sub_outputs.is_array() || !sub_nodes.is_array()) ctx.fail("a malformed subgraph");
  if (sub_inputs.size() != inputs.size() - gi - 1)
    ctx.fail("the subgraph takes ", sub_inputs.size(), " inputs, the wrapper passes ", inputs.size() - gi - 1);
  Renames r;
  for (size_t i = 0; i < sub_inputs.size(); ++i) {
    const std::string inner = ref_name(sub_inputs[i]), outer = ref_name(arg(gi + 1 + i));
    if (inner.empty() || outer.empty()) ctx.fail("subgraph input ", i, " is neither a tensor nor a symbol");
    r[inner] = outer;
  }
  const std::string prefix = name + "__";
  for (const auto& n : sub_nodes)
    for (const auto& o : n.value("outputs", json::array()))
      for (const std::string& d : output_names(o))
        if (!d.empty()) r[d] = prefix + d;
  if (auto tv = ctx.member_opt(sub, "tensor_values"); tv && tv->is_object())
    for (const auto& [n, meta] : tv->items())
      if (r.count(n) && r[n].rfind(prefix, 0) == 0) ctx.tensor_types[r[n]] = ctx.tensor_meta(meta, "tensor '" + n + "'");
  if (auto sv = ctx.member_opt(sub, "sym_int_values"); sv && sv->is_object())
    for (const auto& [n, v] : sv->items())
      if (r.count(n) && r[n].rfind(prefix, 0) == 0) ctx.sym_values[r[n]] = ctx.sym_int(v, "sym_int_values entry");
  for (const auto& n : sub_nodes) {
    json copy = n;
    if (copy.contains("inputs")) rename_refs(copy["inputs"], r);
    if (copy.contains("outputs")) rename_refs(copy["outputs"], r);
    copy["name"] = prefix + copy.value("name", std::string("node"));
    inline_node(ctx, copy, out);
  }
  // The wrapper's outputs: aliases (detaches where gradients are off) of the subgraph's.
  std::vector<std::string> results;
  for (const auto& o : ctx.member(jn, "outputs", "node"))
    for (std::string& d : output_names(o)) results.push_back(std::move(d));
  if (results.size() != sub_outputs.size()) ctx.fail("the wrapper has ", results.size(), " outputs, its subgraph ", sub_outputs.size());
  ctx.node_where = "node '" + name + "' (" + target.substr(target.rfind('.') + 1) + ")";
  for (size_t j = 0; j < results.size(); ++j) {
    if (results[j].empty()) continue;
    json src = sub_outputs[j];
    rename_refs(src, r);
    const std::string from = ref_name(src);
    if (from.empty() || !src.contains("as_tensor")) ctx.fail("wrapper output ", j, " is not a tensor");
    json alias = {{"target", grad_off ? "torch.ops.aten.detach.default" : "torch.ops.aten.alias.default"},
                  {"name", results[j]},
                  {"inputs", json::array({{{"name", "self"}, {"arg", {{"as_tensor", {{"name", from}}}}}, {"kind", 1}}})},
                  {"outputs", json::array({{{"as_tensor", {{"name", results[j]}}}}})}};
    if (jn.contains("metadata")) alias["metadata"] = jn["metadata"];
    out.push_back(std::move(alias));
  }
  ctx.node_where.clear();
}

void inline_node(Context& ctx, const json& jn, json& out) {
  const std::string target = jn.is_object() ? jn.value("target", "") : "";
  if (target == kGradWrapper || target == kAutocastWrapper)
    inline_wrapper(ctx, jn, out);
  else
    out.push_back(jn);
}

}  // namespace

json inline_wrappers(Context& ctx, const json& nodes) {
  json out = json::array();
  for (const auto& n : nodes) inline_node(ctx, n, out);
  return out;
}

}  // namespace ptc::pt2
