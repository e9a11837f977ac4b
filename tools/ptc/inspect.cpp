// `ptc inspect MODEL`: the graph as text (or JSON), with weights, an op histogram, the ops ptc
// does not know yet and the known ops each backend's compile would still refuse. `ptc inspect
// LIB.so`: a compiled library's manifest and signature.
#include <spdlog/spdlog.h>

#include <iostream>
#include <map>
#include <unordered_set>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "ptc/backend.h"
#include "ptc/compile.h"
#include "ptc/error.h"
#include "ptc/frontend.h"
#include "ptc/lower.h"
#include "ptc/manifest.h"
#include "ptc/passes.h"

namespace ptc::cli {
namespace {

using json = nlohmann::ordered_json;

struct WeightTotals {
  int64_t count = 0, numel = 0, bytes = 0;
};

// Nodes of one op that a backend's compile would refuse.
struct Refused {
  const Node* first = nullptr;
  int count = 0;
  std::string reason;  // the first node's sentence
};

struct Summary {
  std::map<GraphInput::Role, WeightTotals> by_role;
  WeightTotals total;
  std::map<std::string, int> histogram;         // op name -> count
  std::map<std::string, const Node*> unknown;   // op name -> first node using it
  std::map<std::string, int> unknown_count;
  // Known ops that compile would still refuse, per backend (op name -> nodes), found by running
  // the graph passes and the lowering as compile does; `not_checked` says why it did not run.
  std::vector<std::pair<std::string, std::map<std::string, Refused>>> refused;
  std::string not_checked;
  std::unique_ptr<Graph> passed;  // the graph after the passes (the refused nodes point into it)
};

// What `ptc compile` would refuse for each backend: the graph passes, then the lowering, going on
// past each node it cannot lower (find_unlowerable).
void check_compile(const Graph& g, Summary& s) {
  if (!s.unknown.empty()) {
    s.not_checked = "the unknown ops above stop a compile first";
    return;
  }
  try {
    bool untyped = false;
    for (const auto& n : g.nodes())
      for (const Value* o : n->outputs) untyped = untyped || o->type.kind == Type::Kind::Unknown;
    std::unique_ptr<Graph> typed = untyped ? propagate_shapes(g, ShapePropMode::Fill) : nullptr;
    s.passed = run_graph_passes(typed ? *typed : g);
  } catch (const UserError& e) {
    s.not_checked = std::string("the graph passes refuse the model: ") + e.what();
    return;
  }
  for (const Backend* b : backends()) {
    std::map<std::string, Refused> by_op;
    for (const Unlowerable& u : find_unlowerable(*s.passed, b->lower_options(false, CompileOptions{}))) {
      Refused& r = by_op[u.node ? u.node->op_name() : "?"];
      if (r.count++ == 0) r.first = u.node, r.reason = u.reason;
    }
    s.refused.emplace_back(b->name(), std::move(by_op));
  }
}

Summary summarize(const Graph& g) {
  Summary s;
  for (const auto& in : g.inputs) {
    if (in.role == GraphInput::Role::User) continue;
    auto numel = in.value->type.static_numel().value_or(0);
    int64_t bytes = numel * static_cast<int64_t>(dtype_size(in.value->type.dtype));
    for (WeightTotals* t : {&s.by_role[in.role], &s.total}) {
      t->count += 1;
      t->numel += numel;
      t->bytes += bytes;
    }
  }
  // Nodes no output depends on are dropped before anything is lowered: an unknown op among them
  // (a trace's size bookkeeping, prim::NumToTensor, once its values became constants) does not
  // stop a compile, unless it updates its input in place (functionalize refuses those).
  const std::unordered_set<const Node*> needed = live_nodes(g);
  for (const auto& n : g.nodes()) {
    std::string op = n->op_name();
    s.histogram[op]++;
    if (n->kind == OpKind::Unknown && (needed.count(n.get()) || unknown_inplace(*n))) {
      s.unknown.emplace(op, n.get());
      s.unknown_count[op]++;
    }
  }
  check_compile(g, s);
  return s;
}

json sym_json(const sym::Expr& e) {
  if (auto c = e.as_const()) return *c;
  return e.str();
}

json type_json(const Type& t) {
  json j;
  j["kind"] = t.kind == Type::Kind::Tensor ? "tensor" : t.kind == Type::Kind::Unknown ? "unknown" : "scalar";
  if (t.is_tensor()) {
    j["dtype"] = dtype_name(t.dtype);
    j["sizes"] = json::array();
    for (const auto& s : t.sizes) j["sizes"].push_back(sym_json(s));
    if (t.strides != contiguous_strides(t.sizes)) {
      j["strides"] = json::array();
      for (const auto& s : t.strides) j["strides"].push_back(sym_json(s));
    }
  } else if (t.value) {
    j["value"] = sym_json(*t.value);
  }
  j["text"] = t.str();
  return j;
}

json totals_json(const WeightTotals& t) { return {{"count", t.count}, {"numel", t.numel}, {"bytes", t.bytes}}; }

json range_json(const sym::Range& r) {
  json lo = r.bounded_below() ? json(r.lo) : json(nullptr);
  json hi = r.bounded_above() ? json(r.hi) : json(nullptr);
  return json::array({lo, hi});
}

json to_json(const std::string& path, const Graph& g, const Summary& s) {
  json j;
  j["file"] = path;
  j["format"] = g.source_format;
  j["name"] = g.name;
  j["symbols"] = json::object();
  for (const auto& [name, r] : g.symbols) j["symbols"][name] = range_json(r);
  j["inputs"] = json::array();
  for (const auto& in : g.inputs)
    if (in.role == GraphInput::Role::User) {
      json v = type_json(in.value->type);
      v["name"] = in.value->name;
      j["inputs"].push_back(v);
    }
  j["outputs"] = json::array();
  for (const Value* o : g.outputs) {
    json v = type_json(o->type);
    v["name"] = o->name;
    j["outputs"].push_back(v);
  }
  auto role_totals = [&](GraphInput::Role r) {
    auto it = s.by_role.find(r);
    return totals_json(it == s.by_role.end() ? WeightTotals{} : it->second);
  };
  j["weights"] = {{"parameters", role_totals(GraphInput::Role::Parameter)},
                  {"buffers", role_totals(GraphInput::Role::Buffer)},
                  {"constants", role_totals(GraphInput::Role::Constant)},
                  {"total", totals_json(s.total)}};
  j["nodes"] = json::array();
  for (const auto& n : g.nodes()) {
    json jn{{"name", n->name}, {"op", n->op_name()}, {"target", n->target}, {"known", n->kind != OpKind::Unknown}};
    jn["outputs"] = json::array();
    for (const Value* o : n->outputs) {
      json v = type_json(o->type);
      v["name"] = o->name;
      jn["outputs"].push_back(v);
    }
    std::string frame = n->source.user_frame();
    if (!frame.empty()) jn["source"] = frame;
    j["nodes"].push_back(jn);
  }
  j["op_histogram"] = json::object();
  for (const auto& [op, c] : s.histogram) j["op_histogram"][op] = c;
  j["unknown_ops"] = json::array();
  for (const auto& [op, n] : s.unknown) {
    json u{{"op", op}, {"count", s.unknown_count.at(op)}, {"first_node", n->name}};
    std::string frame = n->source.user_frame();
    if (!frame.empty()) u["source"] = frame;
    j["unknown_ops"].push_back(u);
  }
  j["refused_ops"] = json::object();  // known ops each backend's compile would refuse
  for (const auto& [backend, by_op] : s.refused) {
    json list = json::array();
    for (const auto& [op, r] : by_op) {
      json u{{"op", op}, {"count", r.count}, {"first_node", r.first ? r.first->name : ""}, {"reason", r.reason}};
      list.push_back(u);
    }
    j["refused_ops"][backend] = list;
  }
  if (!s.not_checked.empty()) j["refused_ops_not_checked"] = s.not_checked;
  return j;
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  int k = 0;
  for (size_t i = s.size(); i-- > 0;) {
    out.insert(out.begin(), s[i]);
    if (++k % 3 == 0 && i > 0 && s[i - 1] != '-') out.insert(out.begin(), ',');
  }
  return out;
}

void print_text(std::ostream& os, const std::string& path, const Graph& g, const Summary& s) {
  os << "model:   " << path << " (" << g.source_format << ")\n";
  if (!g.symbols.empty()) {
    os << "symbols:\n";
    for (const auto& [name, r] : g.symbols) {
      json rj = range_json(r);
      os << "  " << name << " in [" << (r.bounded_below() ? std::to_string(r.lo) : "-inf") << ", "
         << (r.bounded_above() ? std::to_string(r.hi) : "inf") << "]\n";
    }
  }
  os << "inputs:\n";
  for (const auto& in : g.inputs)
    if (in.role == GraphInput::Role::User) os << "  " << in.value->name << ": " << in.value->type.str() << "\n";
  os << "outputs:\n";
  for (const Value* o : g.outputs) os << "  " << o->name << ": " << o->type.str() << "\n";
  auto role = [&](GraphInput::Role r) {
    auto it = s.by_role.find(r);
    return it == s.by_role.end() ? WeightTotals{} : it->second;
  };
  os << "weights: " << with_commas(s.total.count) << " tensors, " << with_commas(s.total.numel) << " elements, "
     << with_commas(s.total.bytes) << " bytes (parameters " << role(GraphInput::Role::Parameter).count
     << ", buffers " << role(GraphInput::Role::Buffer).count << ", constants "
     << role(GraphInput::Role::Constant).count << ")\n\n";
  os << print_graph(g) << "\n";
  os << "op histogram (" << g.nodes().size() << " nodes):\n";
  std::vector<std::pair<std::string, int>> ops(s.histogram.begin(), s.histogram.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [op, c] : ops) os << "  " << c << "\t" << op << "\n";
  if (s.unknown.empty()) {
    os << "unknown ops: none\n";
  } else {
    os << "unknown ops (" << s.unknown.size() << "; ptc cannot compile these yet):\n";
    for (const auto& [op, n] : s.unknown) {
      std::string frame = n->source.user_frame();
      os << "  " << op << " x" << s.unknown_count.at(op) << " (first: node " << n->name
         << (frame.empty() ? "" : " at " + frame) << ")\n";
    }
  }
  if (!s.not_checked.empty()) os << "ops compile would refuse: not checked (" << s.not_checked << ")\n";
  for (const auto& [backend, by_op] : s.refused) {
    if (by_op.empty()) {
      os << "ops --device " << backend << " would refuse: none\n";
      continue;
    }
    os << "ops --device " << backend << " would refuse (" << by_op.size() << "; ptc cannot compile these yet):\n";
    for (const auto& [op, r] : by_op) os << "  " << op << " x" << r.count << ": " << r.reason << "\n";
  }
}

void print_manifest(std::ostream& os, const std::string& path, const json& m) {
  const json& model = m["model"];
  os << "library: " << path << " (built by ptc " << m.value("ptc_version", "?") << ", ABI " << m.value("abi_version", 0) << ")\n"
     << "model:   " << model.value("name", "?") << " from " << model.value("file", "?") << " (" << model.value("format", "?") << ")\n"
     << "sha256:  " << model.value("sha256", "?") << "\n"
     << "device:  " << m.value("device", "?") << " (arch " << m.value("arch", "?") << ")\n";
  if (m.contains("symbols") && !m["symbols"].empty()) {
    os << "symbols:\n";
    for (const auto& [name, r] : m["symbols"].items())
      os << "  " << name << " in [" << (r[0].is_null() ? "-inf" : r[0].dump()) << ", " << (r[1].is_null() ? "inf" : r[1].dump()) << "]\n";
  }
  os << "inputs:\n";
  for (const auto& t : m["inputs"]) os << "  " << manifest_tensor_text(t) << "\n";
  os << "outputs:\n";
  for (const auto& t : m["outputs"]) os << "  " << manifest_tensor_text(t) << "\n";
  const json& w = m["weights"];
  os << "weights: " << with_commas(w.value("bytes", int64_t{0})) << " bytes, " << w.value("mode", "?") << "\n";
  os << "flags:   " << m["flags"].dump() << "\n";
}

}  // namespace

std::function<int()> add_inspect(CLI::App& app) {
  struct Opts {
    std::string model;
    bool as_json = false;
    LoadOptions load;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print a model's graph, inputs, outputs, weights and ops");
  cmd->add_option("model", opts->model,
                  "A torch.export archive (.pt2), a TorchScript archive (.pt), or a library ptc compiled (.so: its manifest)")
      ->required();
  cmd->add_flag("--json", opts->as_json, "Machine-readable output");
  cmd->add_option("--input-shape", opts->load.input_shapes,
                  "TorchScript only: shape of each input, e.g. 1x3x224x224, s0x64, int64:1x128");
  cmd->add_option("--symbol", opts->load.symbol_ranges, "TorchScript only: a symbol's range, e.g. s0=1..1024");
  return [opts]() {
    if (is_elf_file(opts->model)) {  // a compiled library: its manifest, without loading it
      json m = read_library_manifest(opts->model);
      if (opts->as_json) std::cout << m.dump(2) << "\n";
      else print_manifest(std::cout, opts->model, m);
      return 0;
    }
    spdlog::debug("reading {}", opts->model);
    std::unique_ptr<Graph> g = load_model(opts->model, opts->load);
    Summary s = summarize(*g);
    if (opts->as_json) std::cout << to_json(opts->model, *g, s).dump(2) << "\n";
    else print_text(std::cout, opts->model, *g, s);
    return 0;
  };
}

}  // namespace ptc::cli
