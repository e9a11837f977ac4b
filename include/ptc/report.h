// `ptc compile --report FILE.json|FILE.html`: what the compiler did, for tools and people — the kernels
// with the graph nodes (and user source lines) each one fused, the workspace arena, weights and
// per-stage compile times.
#pragma once

#include <nlohmann/json.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ptc/codegen.h"
#include "ptc/graph.h"
#include "ptc/schedule.h"

namespace ptc {

// `library`: the library a kernel calls, if any (Backend::kernel_library; the report's "library").
nlohmann::ordered_json make_report(const Graph& g, const loop::Program& p, const sched::Schedule& s,
                                   const WeightLayout& w, const std::vector<std::pair<std::string, double>>& stage_seconds,
                                   const std::function<std::string(const sched::Kernel&)>& library = {});

// The report as one self-contained HTML page (no scripts or links to fetch): summary, compile
// stages, the kernels with the nodes and source lines each fused, arena use over the run, and the
// graph with the kernel that computes each node.
std::string render_report_html(const nlohmann::ordered_json& report);

}  // namespace ptc
