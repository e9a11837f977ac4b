// Training-mode dropout: the counter-based random mask of the training library.
//
// torch draws a dropout mask from its global generator; a library built ahead of time has none,
// and its backward must apply exactly the forward's mask (or recompute it). Each training-mode
// dropout becomes ptc::dropout(x, seed, p, stream): element i is kept when
// philox_uniform(seed, i, stream) < 1 - p (lib/runtime/cpu/ptc_philox.h), so the mask is a pure
// function of the seed the library passes to the forward call, the dropout's stream number and
// the element index. Its derivative is the same op applied to the gradient (rules_pointwise.cpp),
// and the partition may recompute the output in the backward instead of saving it.
#include "dropout.h"

#include <unordered_map>

#include "ptc/error.h"

namespace ptc::autodiff {
namespace {

const Value* tensor_arg(const Node& n, const char* name) {
  const Arg* a = n.arg(name);
  return a && std::holds_alternative<Value*>(*a) ? std::get<Value*>(*a) : nullptr;
}

bool training_mode(const Node& n) {
  const Arg* train = n.arg("train");
  const Arg* p = n.arg("p");
  bool on = train && std::holds_alternative<bool>(*train) && std::get<bool>(*train);  // native_dropout: None = eval
  auto pv = p ? arg_number(*p) : std::nullopt;
  return on && pv && *pv != 0;
}

[[noreturn]] void fail(const Node& n, const std::string& what) {
  std::string where = n.source.user_frame();
  user_error("node '", n.name, "' (", n.op_name(), ")", where.empty() ? "" : " at " + where, ": ", what);
}

}  // namespace

Value* seed_dropout(Graph& g) {
  const auto& nodes = g.nodes();
  std::unordered_map<const Value*, size_t> last_read;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* v : nodes[i]->inputs()) last_read[v] = i;
  for (const Value* o : g.outputs) last_read[o] = nodes.size();

  Value* seed = nullptr;
  int64_t stream = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = *nodes[i];
    if (n.kind != OpKind::Dropout && n.kind != OpKind::DropoutInplace && n.kind != OpKind::NativeDropout) continue;
    if (!training_mode(n)) continue;
    Value* x = const_cast<Value*>(tensor_arg(n, n.kind == OpKind::DropoutInplace ? "self" : "input"));
    PTC_CHECK(x, "dropout without a tensor input");
    if (n.kind == OpKind::DropoutInplace && last_read[x] != i)
      fail(n, "in-place dropout of a tensor that is read afterwards; --train needs the functional form (nn.Dropout(inplace=False))");
    if (n.kind == OpKind::NativeDropout && n.outputs.size() > 1) {
      Value* mask = n.outputs[1];
      if (last_read.count(mask)) fail(n, "the model reads native_dropout's mask; --train supports dropout whose mask only autograd uses");
      mask->producer = nullptr;
      n.outputs.resize(1);
    }
    if (!seed) {
      std::string name = "ptc_rng_seed";
      for (int k = 1; g.find_value(name); ++k) name = "ptc_rng_seed_" + std::to_string(k);
      seed = g.add_input(name, Type::tensor(DType::Int64, {}), GraphInput::Role::User);
    }
    const double p = *arg_number(*n.arg("p"));
    n.kind = OpKind::PtcDropout;
    n.target = op_info(OpKind::PtcDropout).schema.qualified();
    n.args = {Arg{x}, Arg{seed}, Arg{p}, Arg{stream++}};
    n.list_output = false;
  }
  return seed;
}

}  // namespace ptc::autodiff
