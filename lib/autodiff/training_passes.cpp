// The graph passes of a training compile (autodiff.h: run_training_graph_passes).
#include "ptc/autodiff.h"
#include "ptc/passes.h"

namespace ptc {

std::unique_ptr<Graph> run_training_graph_passes(const Graph& g, const std::function<void(const char* pass, const Graph&)>& after) {
  static const std::vector<std::pair<const char*, GraphPass>> passes = {
      {"batch_norm_training", decompose_training_batch_norm},
      {"cse", common_subexpression_elimination},
      {"dce", dead_code_elimination},
      {"prune_unused_weights", prune_unused_weights},
  };
  return run_pass_list(g, passes, after);
}

}  // namespace ptc
