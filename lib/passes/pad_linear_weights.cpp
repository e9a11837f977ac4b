// Padded output features: a linear layer with a constant weight of many output rows N that is not
// a multiple of `multiple` (GPT-2's LM head: N = 50257) reads a weight padded with zero rows to
// the next multiple, and its consumers read the first N columns of the wider output (a slice, so
// the output's rows are `multiple`-aligned). Library GEMMs pick their fast kernels only for
// aligned rows: on an H200, GPT-2's 2048 x 768 x 50257 bf16 LM head took 1.5 ms in cuBLASLt's
// alignment-1 kernel, against about 0.3 ms for its aligned kernels. torch.compile pads the same
// way (pad_mm).
#include <unordered_set>

#include "linear_weights.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"

namespace ptc {
namespace {

// Narrower layers gain little, and the padded copy is a second weight.
constexpr int64_t kMinRows = 4096;
constexpr int64_t kMaxElements = int64_t{256} << 20;

}  // namespace

std::unique_ptr<Graph> pad_linear_weights(const Graph& g, int64_t multiple, bool float32_too) {
  if (multiple <= 1) return clone_graph(g);
  const std::unordered_set<std::string> updated(g.updated_buffers.begin(), g.updated_buffers.end());
  rewrite::GraphRewriter rw(g);
  NodeBuilder b(rw.graph(), &g, "_padded");
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    auto l = linear_weights::constant_linear(g, n, updated);
    // A graph output is copied out of the wider buffer (in half precision that copy costs a
    // tenth of what the aligned kernels save; float32 GEMMs have not been measured).
    if (!l || l->n < kMinRows || l->n % multiple == 0 || !(float32_too || dtype_is_half(l->weight->type.dtype))) {
      rw.copy_node(n);
      continue;
    }
    const int64_t padded = (l->n + multiple - 1) / multiple * multiple;
    if (padded * l->k > kMaxElements) {
      rw.copy_node(n);
      continue;
    }
    Value* w = linear_weights::stacked_rows(rw, g, {l->weight}, padded - l->n, l->weight->name + "_padded",
                                            linear_weights::target_of(g, l->weight) + ".padded");
    Arg bias;
    if (l->bias)
      bias = linear_weights::stacked_rows(rw, g, {l->bias}, padded - l->n, l->bias->name + "_padded",
                                          linear_weights::target_of(g, l->bias) + ".padded");
    b.set_origin(&n);
    Value* y = b.op(OpKind::Linear, {{"input", rw.map(l->input)}, {"weight", w}, {"bias", bias}});
    const int64_t last = static_cast<int64_t>(y->type.rank()) - 1;
    rw.replace(n.outputs[0], b.op(OpKind::SliceTensor, {{"self", y}, {"dim", last}, {"start", sym::Expr(0)}, {"end", sym::Expr(l->n)}}));
  }
  return rw.finish();
}

}  // namespace ptc
