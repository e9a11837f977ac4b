// The joint forward + backward graph (AOTAutograd's joint graph, built ahead of time).
//
// 1. The forward graph is cloned; in-place ops are made functional where allowed, and
//    training-mode dropouts draw their masks from a seed input (dropout.cpp).
// 2. Values that need a gradient: float parameters, user inputs the export marked requires_grad,
//    and every float tensor output of a node (with a derivative) that reads one of them.
// 3. One gradient input per forward output that needs a gradient.
// 4. The nodes in reverse order: a node with a gradient on some output runs its rule, which adds
//    the gradients of its inputs; several contributions to one value are summed in order.
// 5. Outputs: the forward outputs, then the parameters' gradients (zeros when no path reaches
//    the outputs), then the inputs' gradients.
#include <unordered_map>
#include <unordered_set>

#include "dropout.h"
#include "rules.h"
#include "ptc/autodiff.h"
#include "ptc/error.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"

namespace ptc {
namespace {

// In-place ops whose mutated input nothing reads afterwards (and which is no graph output)
// become their functional twins (same arguments): the backward may then read that input, as
// AOTAutograd's functionalization allows. Others stay (lowering refuses them with a message).
void functionalize_inplace(Graph& g) {
  const auto& nodes = g.nodes();
  std::unordered_map<const Value*, size_t> last_read;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* v : nodes[i]->inputs()) last_read[v] = i;
  std::unordered_set<const Value*> outputs(g.outputs.begin(), g.outputs.end());
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = *nodes[i];
    std::optional<OpKind> functional = functional_twin(n.kind);
    if (!functional) continue;
    const Arg* self = n.arg("self");
    const Value* x = self && std::holds_alternative<Value*>(*self) ? std::get<Value*>(*self) : nullptr;
    if (!x || last_read[x] != i || outputs.count(x)) continue;
    PTC_CHECK(op_info(*functional).schema.args.size() == n.args.size(), "autodiff: ", n.op_name(), " and its functional twin differ");
    n.kind = *functional;
    n.target = op_info(*functional).schema.qualified();
  }
}

}  // namespace

JointGraph build_joint_graph(const Graph& src) {
  using autodiff::Builder;
  JointGraph j;
  j.graph = clone_graph(src);
  Graph& g = *j.graph;
  functionalize_inplace(g);
  j.rng_seed = autodiff::seed_dropout(g);
  j.num_forward_nodes = g.nodes().size();
  j.num_forward_outputs = g.outputs.size();
  j.updated_buffers = std::move(g.updated_buffers);  // (the gradient outputs go after them)
  g.updated_buffers.clear();
  const size_t num_model_outputs = j.num_forward_outputs - j.updated_buffers.size();

  auto differentiable = [](const Value* v) { return v && v->type.is_tensor() && dtype_is_float(v->type.dtype); };
  std::unordered_set<const Value*> needs;
  for (const GraphInput& in : g.inputs) {
    if (!differentiable(in.value)) continue;
    if (in.role == GraphInput::Role::Parameter) {
      needs.insert(in.value);
      j.grad_params.push_back(in.value);
    } else if (in.role == GraphInput::Role::User && in.value->type.requires_grad) {
      needs.insert(in.value);
      j.grad_inputs.push_back(in.value);
    }
  }
  if (needs.empty())
    user_error("--train: the model has no float parameter and no input that requires grad; there is nothing to train");
  // Forward propagation of "needs a gradient" (a node without a derivative passes it on, so that
  // the error below names the first such node that the backward actually reaches).
  for (const auto& n : g.nodes()) {
    bool reads = false;
    for (const Value* v : n->inputs()) reads = reads || needs.count(v);
    if (!reads) continue;
    const autodiff::RuleEntry* r = n->kind == OpKind::Unknown ? nullptr : autodiff::find_rule(n->kind);
    if (r && r->no_gradient) continue;
    for (const Value* o : n->outputs)
      if (differentiable(o)) needs.insert(o);
  }

  Builder b(g);
  std::unordered_map<const Value*, Value*> grads;
  auto add_grad = [&](const Value* v, Value* gv) {
    PTC_CHECK(gv->type.rank() == v->type.rank(), "autodiff: gradient of ", v->name, " has rank ", gv->type.rank(), ", not ",
              v->type.rank());
    auto it = grads.find(v);
    if (it == grads.end()) grads[v] = gv;
    else it->second = b.add(it->second, gv);
  };
  for (size_t i = 0; i < num_model_outputs; ++i) {  // buffer updates get no gradient
    const Value* out = g.outputs[i];
    if (!needs.count(out)) continue;
    bool seen = false;
    for (const Value* o : j.grad_outputs) seen = seen || o == out;
    if (seen) continue;  // one gradient input per distinct output value
    Type t = Type::tensor(out->type.dtype, out->type.sizes);
    Value* gin = g.add_input(b.fresh_name(out->name + "_grad"), t, GraphInput::Role::User);
    j.grad_outputs.push_back(out);
    add_grad(out, gin);
  }
  if (j.grad_outputs.empty())
    user_error("--train: no output of the model depends on a parameter or on an input that requires grad");

  // Reverse sweep over the forward nodes.
  const size_t nf = j.num_forward_nodes;
  std::vector<const Node*> fwd;
  for (size_t i = 0; i < nf; ++i) fwd.push_back(g.nodes()[i].get());
  for (size_t k = nf; k-- > 0;) {
    const Node& n = *fwd[k];
    bool any = false;
    for (const Value* o : n.outputs) any = any || grads.count(o);
    if (!any) continue;
    const autodiff::RuleEntry* r = n.kind == OpKind::Unknown ? nullptr : autodiff::find_rule(n.kind);
    if (!r || !r->rule) {
      std::string where = n.source.user_frame();
      user_error("node '", n.name, "' (", n.op_name(), ")", where.empty() ? "" : " at " + where,
                 ": ptc has no derivative for this op, so --train cannot differentiate through it");
    }
    b.set_origin(&n);
    autodiff::GradContext ctx(
        b, n,
        [&](const Value* v) -> Value* {
          auto it = grads.find(v);
          return it == grads.end() ? nullptr : it->second;
        },
        [&](const Value* v) { return needs.count(v) > 0; }, add_grad);
    r->rule(ctx);
  }
  b.set_origin(nullptr);

  for (const Value* p : j.grad_params) {
    auto it = grads.find(p);
    g.outputs.push_back(it != grads.end() ? it->second : b.zeros(p->type.sizes, p->type.dtype));
  }
  for (const Value* x : j.grad_inputs) {
    auto it = grads.find(x);
    g.outputs.push_back(it != grads.end() ? it->second : b.zeros(x->type.sizes, x->type.dtype));
  }
  auto problems = verify_graph(g);
  PTC_CHECK(problems.empty(), "autodiff: the joint graph is malformed: ", problems.front());
  return j;
}

}  // namespace ptc
