// Helpers of the passes that rewrite a linear layer's constant weights (merge_sibling_linears.cpp,
// pad_linear_weights.cpp): which linears qualify, and new weights built from rows of old ones.
#pragma once

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "ptc/graph.h"
#include "ptc/rewrite.h"

namespace ptc::linear_weights {

struct ConstantLinear {
  const Value* input;
  const Value *weight, *bias;  // bias nullptr: none
  int64_t n, k;                // output and input features
};

// An aten::linear whose weight (and bias) are 2-d (1-d) constants with static sizes that the
// program does not update (`updated`: Graph::updated_buffers).
std::optional<ConstantLinear> constant_linear(const Graph& g, const Node& n, const std::unordered_set<std::string>& updated);

// A new constant of `like`'s dtype: the rows of `parts` (each a weight of the graph, 2-d or 1-d)
// one after another, then `zero_rows` rows of zeros. Named NAME (made unique), under the
// state-dict name `target`.
Value* stacked_rows(rewrite::GraphRewriter& rw, const Graph& g, const std::vector<const Value*>& parts, int64_t zero_rows,
                    const std::string& name, const std::string& target);

// The state-dict name of a graph input (its value name when it has none).
std::string target_of(const Graph& g, const Value* v);

}  // namespace ptc::linear_weights
