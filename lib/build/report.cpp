#include "ptc/report.h"

#include <map>

#include "runtime/cpu/ptc_arena.h"

namespace ptc {
namespace {

using json = nlohmann::ordered_json;

// The value of a size at the symbols' largest (bounded) values, else their smallest.
int64_t at_bound(const sym::Expr& e, const std::map<std::string, sym::Range>& symbols, bool upper) {
  std::map<std::string, int64_t> env;
  for (const auto& [name, r] : symbols) env[name] = upper && r.bounded_above() ? r.hi : (r.bounded_below() ? std::max<int64_t>(r.lo, 1) : 1);
  return sym::evaluate(e, env);
}

const char* kind_name(sched::Kernel::Kind k) {
  switch (k) {
    case sched::Kernel::Kind::Loop: return "loop";
    case sched::Kernel::Kind::RowGroup: return "row_group";
    case sched::Kernel::Kind::Gemm: return "gemm";
    case sched::Kernel::Kind::Conv: return "conv";
    case sched::Kernel::Kind::Attention: return "attention";
    case sched::Kernel::Kind::Scatter: return "scatter_add";
  }
  return "?";
}

}  // namespace

json make_report(const Graph& g, const loop::Program& p, const sched::Schedule& s, const WeightLayout& w,
                 const std::vector<std::pair<std::string, double>>& stage_seconds,
                 const std::function<std::string(const sched::Kernel&)>& library) {
  std::map<std::string, const Node*> nodes;
  for (const auto& n : g.nodes()) nodes[n->name] = n.get();
  json j;
  j["model"] = g.name;
  j["format"] = g.source_format;
  j["symbols"] = json::object();
  for (const auto& [name, r] : p.symbols)
    j["symbols"][name] = {r.bounded_below() ? json(r.lo) : json(nullptr), r.bounded_above() ? json(r.hi) : json(nullptr)};
  j["kernels"] = json::array();
  for (const auto& k : s.kernels) {
    json jk{{"name", k.name}, {"kind", kind_name(k.kind)}};
    if (library)
      if (std::string lib = library(k); !lib.empty()) jk["library"] = lib;
    jk["computations"] = json::array();
    for (int ci : k.comps) {
      const auto& c = p.comps[ci];
      const char* ck = c.kind == loop::Computation::Kind::Pointwise ? "pointwise"
                       : c.kind == loop::Computation::Kind::Reduction ? "reduction" : loop::extern_name(c.extern_kind);
      json jc{{"buffer", p.buffers[c.out].name}, {"kind", ck}};
      if (ci == k.epilogue) jc["fused_as"] = k.kind == sched::Kernel::Kind::Conv ? "conv_epilogue" : "gemm_epilogue";
      jk["computations"].push_back(jc);
    }
    jk["nodes"] = json::array();
    for (const auto& o : k.origins) {
      json jn{{"name", o}};
      if (auto it = nodes.find(o); it != nodes.end()) {
        jn["op"] = it->second->op_name();
        std::string frame = it->second->source.user_frame();
        if (!frame.empty()) jn["source"] = frame;
      }
      jk["nodes"].push_back(jn);
    }
    j["kernels"].push_back(jk);
  }
  // The graph after the passes, each node with the kernels that compute it (none: a view, a
  // folded constant or work the scheduler proved unnecessary).
  std::map<std::string, std::vector<int>> kernels_of;
  for (size_t ki = 0; ki < s.kernels.size(); ++ki)
    for (const auto& o : s.kernels[ki].origins) kernels_of[o].push_back(static_cast<int>(ki));
  j["graph"] = json::array();
  for (const auto& n : g.nodes()) {
    json jn{{"name", n->name}, {"op", n->op_name()}};
    jn["inputs"] = json::array();
    for (const Value* v : n->inputs()) jn["inputs"].push_back(v ? v->name : "None");
    jn["outputs"] = json::array();
    for (const Value* v : n->outputs) jn["outputs"].push_back(json{{"name", v->name}, {"type", v->type.str()}});
    std::string frame = n->source.user_frame();
    if (!frame.empty()) jn["source"] = frame;
    jn["kernels"] = kernels_of.count(n->name) ? json(kernels_of[n->name]) : json::array();
    j["graph"].push_back(jn);
  }
  // The arena at the symbols' upper bounds, as the generated library would plan it.
  std::vector<sched::Lifetime> lives = sched::temp_lifetimes(p, s);
  std::vector<size_t> bytes, offs(lives.size());
  std::vector<int> first, last;
  size_t unplanned = 0;
  for (const auto& l : lives) {
    const auto& b = p.buffers[l.buffer];
    bytes.push_back(static_cast<size_t>(at_bound(b.numel(), p.symbols, true)) * dtype_size(b.dtype));
    unplanned += (bytes.back() + 63) / 64 * 64;
    for (int a : l.aliases)
      unplanned += (static_cast<size_t>(at_bound(p.buffers[a].numel(), p.symbols, true)) * dtype_size(p.buffers[a].dtype) + 63) / 64 * 64;
    first.push_back(l.first);
    last.push_back(l.last);
  }
  size_t total = ptc_rt::plan_arena(static_cast<int>(lives.size()), bytes.data(), first.data(), last.data(), offs.data());
  json arena{{"bytes_at_max_sizes", total}, {"bytes_without_reuse", unplanned}};
  arena["buffers"] = json::array();
  size_t in_place = 0;
  for (size_t i = 0; i < lives.size(); ++i) {
    json jb{{"buffer", p.buffers[lives[i].buffer].name}, {"bytes", bytes[i]}, {"offset", offs[i]},
            {"first_kernel", lives[i].first}, {"last_kernel", lives[i].last}};
    if (!lives[i].aliases.empty()) {
      jb["in_place"] = json::array();
      for (int a : lives[i].aliases) jb["in_place"].push_back(p.buffers[a].name);
      in_place += lives[i].aliases.size();
    }
    arena["buffers"].push_back(jb);
  }
  arena["in_place_buffers"] = in_place;
  j["arena"] = arena;
  // The buffers the library holds between runs, and whether a run updates each in place (else it
  // writes the new contents to a second buffer of the same size and copies them over).
  j["state"] = json::array();
  for (size_t k = 0; k < p.states.size(); ++k) {
    const auto& b = p.buffers[p.states[k]];
    j["state"].push_back({{"buffer", b.weight}, {"bytes", static_cast<size_t>(at_bound(b.numel(), p.symbols, true)) * dtype_size(b.dtype)},
                          {"in_place", p.state_next[k] < 0}});
  }
  j["weights"] = {{"bytes", w.total_bytes}, {"tensors", w.entries.size()}};
  j["compile_seconds"] = json::object();
  for (const auto& [stage, secs] : stage_seconds) j["compile_seconds"][stage] = secs;
  return j;
}

}  // namespace ptc
