// The compile pipeline as named stages. An inference compile and a training compile are each a
// list of stages (inference_stages, training_stages) that run in order over one CompileState;
// each stage is timed and can print its result (--dump-after STAGE). The compile driver
// (ptc/compile.h: compile_model) wraps the pipeline with what is not compilation: option checks,
// the compile cache, the outputs' placement and the package.
//
//   inference: read -> [shapes] -> passes -> lower -> schedule -> layout -> codegen -> build
//   training:  read -> [shapes] -> autodiff -> lower -> schedule -> layout -> codegen -> build
//
// `shapes` runs only when the reader left types unknown (TorchScript with dynamic shapes).
// Training's `lower` and `schedule` work on two programs (the forward and the backward), the
// inference stages on one: both go through the same Part list.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ptc/autodiff.h"
#include "ptc/backend.h"
#include "ptc/codegen.h"
#include "ptc/compile.h"
#include "ptc/graph.h"
#include "ptc/loop.h"
#include "ptc/manifest.h"
#include "ptc/schedule.h"

namespace ptc {

// One program of the library: an inference library has one, a training library two (the
// forward part "fwd" and the backward part "bwd").
struct Part {
  std::string name;           // "" (inference), "fwd", "bwd"
  const Graph* graph = nullptr;
  loop::Program program;
  sched::Schedule schedule;
};

// Everything the stages read and produce. The options and the backend are fixed for the
// compile; each stage fills the fields named in its comment in lib/pipeline/stages.cpp.
struct CompileState {
  CompileState(const CompileOptions& o, const Backend& b) : opts(o), backend(b) {}
  const CompileOptions& opts;
  const Backend& backend;
  bool channels_last = false;       // decided by the `passes` stage (--channels-last, or the backend's auto rule)
  std::unique_ptr<Graph> graph;     // the model as read, then after the graph passes
  TrainGraphs train;                // --train: the forward and backward graphs
  std::vector<Part> parts;          // the programs and their schedules
  WeightLayout weights;
  ManifestOptions manifest_options; // given by the driver; the codegen stage makes the manifest
  nlohmann::ordered_json manifest;
  nlohmann::ordered_json training;  // --train: what the report says about the split
  LibrarySource source;
  std::string header;               // the generated model.h
  std::string library_path;         // where the build stage writes the library
  std::vector<std::pair<std::string, double>> stage_seconds;  // each stage's wall time, in order
};

struct Stage {
  const char* name;
  // Whether the stage runs for this state (false: skipped, e.g. `shapes` on typed graphs).
  std::function<bool(const CompileState&)> applies;
  std::function<void(CompileState&)> run;
  // Prints what the stage produced, for --dump-after NAME (null: nothing to print).
  std::function<void(const CompileState&, std::ostream&)> dump;
};

std::vector<Stage> inference_stages();
std::vector<Stage> training_stages();

// Runs `stages` in order over `state`: times each (state.stage_seconds; logged at info level
// with `progress`, else at debug level) and prints a stage's result to `dump_to` after it when
// opts.dump_after names it (or is "all").
void run_stages(const std::vector<Stage>& stages, CompileState& state, std::ostream& dump_to, bool progress);

}  // namespace ptc
