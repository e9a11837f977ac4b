// `ptc compile --report FILE.json`: what the compiler did, for tools and people — the kernels
// with the graph nodes (and user source lines) each one fused, the workspace arena, weights and
// per-stage compile times.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ptc/codegen.h"
#include "ptc/graph.h"
#include "ptc/schedule.h"

namespace ptc {

nlohmann::ordered_json make_report(const Graph& g, const loop::Program& p, const sched::Schedule& s,
                                   const WeightLayout& w, const std::vector<std::pair<std::string, double>>& stage_seconds);

}  // namespace ptc
