// The graph pass pipeline (see passes.h).
#include "ptc/autodiff.h"
#include "ptc/error.h"
#include "ptc/passes.h"

namespace ptc {

namespace {
using Pass = std::unique_ptr<Graph> (*)(const Graph&);

template <class Passes>
std::unique_ptr<Graph> run(const Graph& g, const Passes& passes, const std::function<void(const char*, const Graph&)>& after) {
  std::unique_ptr<Graph> cur;
  for (const auto& [name, pass] : passes) {
    cur = pass(cur ? *cur : g);
    std::vector<std::string> problems = verify_graph(*cur);
    PTC_CHECK(problems.empty(), "the graph is malformed after ", name, ": ", problems.front());
    if (after) after(name, *cur);
  }
  return cur;
}
}  // namespace

std::unique_ptr<Graph> run_graph_passes(const Graph& g, const std::function<void(const char*, const Graph&)>& after,
                                        const GraphPassOptions& opts) {
  std::vector<std::pair<const char*, Pass>> passes = {
      {"drop_buffer_updates", drop_buffer_updates},
      {"fold_batch_norm", fold_batch_norm},
  };
  // (channels_last_weights first: it finds the weights themselves, before library_ops_f32
  // converts a half model's ones)
  if (opts.channels_last_weights) passes.emplace_back("channels_last_weights", channels_last_weights);
  passes.insert(passes.end(), {{"library_ops_f32", library_ops_f32},
                               {"fold_constants", fold_constants},
                               {"cse", common_subexpression_elimination},
                               {"dce", dead_code_elimination},
                               {"prune_unused_weights", prune_unused_weights}});
  return run(g, passes, after);
}

std::unique_ptr<Graph> run_training_graph_passes(const Graph& g, const std::function<void(const char*, const Graph&)>& after) {
  static const std::pair<const char*, Pass> passes[] = {
      {"batch_norm_training", decompose_training_batch_norm},
      {"cse", common_subexpression_elimination},
      {"dce", dead_code_elimination},
      {"prune_unused_weights", prune_unused_weights},
  };
  return run(g, passes, after);
}

}  // namespace ptc
