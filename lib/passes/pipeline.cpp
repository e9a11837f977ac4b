// The graph pass pipeline (see passes.h).
#include "ptc/error.h"
#include "ptc/passes.h"

namespace ptc {

std::unique_ptr<Graph> run_pass_list(const Graph& g, const std::vector<std::pair<const char*, GraphPass>>& passes,
                                     const std::function<void(const char*, const Graph&)>& after) {
  std::unique_ptr<Graph> cur;
  for (const auto& [name, pass] : passes) {
    cur = pass(cur ? *cur : g);
    std::vector<std::string> problems = verify_graph(*cur);
    PTC_CHECK(problems.empty(), "the graph is malformed after ", name, ": ", problems.front());
    if (after) after(name, *cur);
  }
  return cur ? std::move(cur) : clone_graph(g);
}

std::unique_ptr<Graph> run_graph_passes(const Graph& g, const std::function<void(const char*, const Graph&)>& after,
                                        const GraphPassOptions& opts) {
  std::vector<std::pair<const char*, GraphPass>> passes = {
      {"functionalize", [](const Graph& x) { return functionalize(x); }},
      {"fold_batch_norm", fold_batch_norm},
      {"merge_sibling_linears", merge_sibling_linears},
  };
  if (opts.linear_rows_multiple > 1) {
    const int64_t m = opts.linear_rows_multiple;
    const bool f32 = opts.autocast.has_value();
    passes.emplace_back("pad_linear_weights", [m, f32](const Graph& x) { return pad_linear_weights(x, m, f32); });
  }
  // (channels_last_weights first: it finds the weights themselves, before library_ops_f32
  // converts a half model's ones)
  if (opts.channels_last_weights) {
    const bool dw = opts.depthwise_channels_fastest;
    passes.emplace_back("channels_last_weights", [dw](const Graph& x) { return channels_last_weights(x, dw); });
  }
  if (opts.autocast) {
    const DType half = *opts.autocast;
    passes.emplace_back("autocast", [half](const Graph& x) { return autocast(x, half); });
  }
  const HalfLibraryOps native = opts.half_native;
  passes.emplace_back("library_ops_f32", [native](const Graph& x) { return library_ops_f32(x, native); });
  passes.insert(passes.end(), {{"fold_round_trips", fold_round_trips},
                               {"fold_constants", fold_constants},
                               {"cse", common_subexpression_elimination},
                               {"dce", dead_code_elimination},
                               {"prune_unused_weights", prune_unused_weights}});
  return run_pass_list(g, passes, after);
}

}  // namespace ptc
