// The split of a joint graph into the forward and the backward graph of a training library.
//
// Values the backward reads from the forward side are either
//   - free: parameters, buffers and constants (the library holds them; the backward reads them
//     directly), the dropout seed (the library passes it to both graphs), and views of free
//     values (recomputed in the backward: a view costs nothing);
//   - recomputed (min-cut mode): outputs of cheap forward nodes — elementwise ops, views, casts,
//     layer norm — whose inputs are free, saved anyway, or recomputed themselves; the forward
//     node is copied into the backward graph instead of its output being saved. This is the
//     effect of AOTAutograd's min-cut partitioner on the graphs ptc sees: GEMM, convolution and
//     attention outputs are saved, the pointwise chains after them are recomputed from them.
//     A value a backward convolution reads (its weight gradient's input, directly or through
//     views) is not recomputed: the backward would write it to memory in a pass of its own,
//     while saving it costs only the bytes the forward wrote anyway. In conv -> batch norm ->
//     relu -> conv the relu output is saved, and the batch norm's output behind the relu's mask
//     is recomputed, fused into the backward's elementwise kernels. (AOTAutograd bans this for
//     every non-fusible reader, GEMMs too: ptc keeps recomputing GEMM operands, the layer-norm
//     and GELU outputs of transformer layers, whose extra pass is small next to the GEMMs that
//     read them: BERT-base saves 0.74 instead of 1.19 MB per sample at no measurable step time.)
//   - saved: everything else (the forward writes them as extra outputs; the training library
//     keeps them until the backward).
// --save-all saves every non-free value the backward reads (views of free values are still
// recomputed). Buffers the forward updates (JointGraph::updated_buffers: batch-norm running
// statistics) are not free: the forward takes them as inputs after the parameters and the seed
// and returns their new contents after the model's outputs.
#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ptc/autodiff.h"
#include "ptc/error.h"
#include "ptc/node_builder.h"

namespace ptc {
namespace {

bool is_view(OpKind k) { return op_rearranges(k); }

// Cheap to recompute in the backward (min-cut mode): elementwise math, casts, layer norm,
// eval-mode batch norm.
bool is_cheap(OpKind k) {
  if (is_view(k)) return true;
  switch (k) {
    case OpKind::Relu: case OpKind::Gelu: case OpKind::Silu: case OpKind::Sigmoid: case OpKind::Tanh: case OpKind::Hardswish:
    case OpKind::Hardsigmoid: case OpKind::Hardtanh: case OpKind::Mish: case OpKind::Relu6: case OpKind::Elu:
    case OpKind::Selu: case OpKind::Celu:
    case OpKind::LeakyRelu: case OpKind::Softplus: case OpKind::Erf: case OpKind::Exp: case OpKind::Log: case OpKind::Sqrt:
    case OpKind::Rsqrt: case OpKind::Abs: case OpKind::Neg: case OpKind::Reciprocal: case OpKind::AddTensor:
    case OpKind::AddScalar: case OpKind::SubTensor: case OpKind::SubScalar: case OpKind::RsubScalar: case OpKind::MulTensor:
    case OpKind::MulScalar: case OpKind::DivTensor: case OpKind::DivScalar: case OpKind::PowTensorScalar: case OpKind::Clamp:
    case OpKind::ClampMin: case OpKind::WhereSelf: case OpKind::WhereScalarSelf: case OpKind::WhereScalarOther:
    case OpKind::MaskedFillScalar: case OpKind::UnderscoreToCopy: case OpKind::ToDtype: case OpKind::LayerNorm:
    case OpKind::NativeLayerNorm: case OpKind::RmsNorm: case OpKind::Dropout:
    case OpKind::ReluInplace: case OpKind::HardtanhInplace: case OpKind::AddTensorInplace: case OpKind::SubTensorInplace:
    case OpKind::MulTensorInplace: case OpKind::MulScalarInplace: case OpKind::DivTensorInplace: case OpKind::DivScalarInplace:
    case OpKind::SigmoidInplace: case OpKind::TanhInplace: case OpKind::GeluInplace: case OpKind::SiluInplace:
    case OpKind::HardswishInplace: case OpKind::HardsigmoidInplace: case OpKind::ClampInplace:
    case OpKind::PtcDropout:  // the mask is recomputed from the seed
    case OpKind::LtScalar: case OpKind::LeScalar: case OpKind::GtScalar: case OpKind::GeScalar: case OpKind::EqScalar:
    case OpKind::NeScalar: case OpKind::Flip: case OpKind::Roll:
    case OpKind::UnderscoreNativeBatchNormLegitNoTraining:  // eval-mode batch norm: per-channel affine
    case OpKind::BatchNorm: case OpKind::NativeBatchNorm:   // (training mode has no derivative rule yet)
      return true;
    default: return false;
  }
}

// Convolutions (and their gradients): their operands are read from memory.
bool convolution(OpKind k) {
  switch (k) {
    case OpKind::Conv1d: case OpKind::Conv2d: case OpKind::Conv3d: case OpKind::Convolution:
    case OpKind::UnderscoreConvolution: case OpKind::ConvTranspose2dInput: case OpKind::PtcConv2dWeightGrad:
    case OpKind::PtcConv2dInputGrad:
      return true;
    default: return false;
  }
}

class Extractor {
 public:
  Extractor(const Graph& src, Graph& dst) : src_(src), dst_(dst) {
    dst_.name = src.name;
    dst_.source_format = src.source_format;
    dst_.symbols = src.symbols;
  }
  Value* input(const Value* v, GraphInput::Role role, const std::string& target, bool contiguous) {
    Type t = v->type;
    if (contiguous && t.is_tensor()) {
      t.strides = contiguous_strides(t.sizes);
      t.storage_offset = 0;
    }
    Value* nv = dst_.add_input(v->name, t, role, target);
    map_[v] = nv;
    if (role != GraphInput::Role::User && src_.weights.count(target)) dst_.weights[target] = src_.weights.at(target);
    return nv;
  }
  bool has(const Value* v) const { return map_.count(v) > 0; }
  Value* map(const Value* v) const {
    auto it = map_.find(v);
    PTC_CHECK(it != map_.end(), "partition: value ", v->name, " is not defined in the ", dst_.name, " graph");
    return it->second;
  }
  void copy(const Node& n) {
    auto m = std::make_unique<Node>();
    m->kind = n.kind;
    m->target = n.target;
    m->name = n.name;
    m->arg_names = n.arg_names;
    m->list_output = n.list_output;
    m->source = n.source;
    for (const Arg& a : n.args) {
      if (auto v = std::get_if<Value*>(&a)) m->args.emplace_back(*v ? map(*v) : nullptr);
      else if (auto l = std::get_if<std::vector<Value*>>(&a)) {
        std::vector<Value*> out;
        for (Value* x : *l) out.push_back(x ? map(x) : nullptr);
        m->args.emplace_back(std::move(out));
      } else {
        m->args.push_back(a);
      }
    }
    for (const Value* o : n.outputs) {
      Value* no = dst_.add_value(o->name, o->type);
      map_[o] = no;
      m->outputs.push_back(no);
    }
    dst_.add_node(std::move(m));
  }

 private:
  const Graph& src_;
  Graph& dst_;
  std::unordered_map<const Value*, Value*> map_;
};

}  // namespace

TrainGraphs partition_joint_graph(const JointGraph& j, const PartitionOptions& opts) {
  const Graph& g = *j.graph;
  const size_t nf = j.num_forward_nodes;
  const size_t n_grad_in = j.grad_outputs.size();
  const size_t n_fwd_inputs = g.inputs.size() - n_grad_in;

  std::unordered_map<const Value*, size_t> fwd_index;  // forward node outputs -> node index
  for (size_t i = 0; i < nf; ++i)
    for (const Value* o : g.nodes()[i]->outputs) fwd_index[o] = i;
  // Buffers the forward updates are state: forward inputs the library passes (not weights).
  std::vector<const Value*> state(j.updated_buffers.size(), nullptr);
  std::unordered_set<const Value*> is_param, is_weight;
  for (size_t i = 0; i < n_fwd_inputs; ++i) {
    const GraphInput& in = g.inputs[i];
    bool updated = false;
    for (size_t k = 0; k < j.updated_buffers.size(); ++k)
      if (in.role == GraphInput::Role::Buffer && in.target == j.updated_buffers[k]) {
        state[k] = in.value;
        updated = true;
      }
    if (updated) continue;
    if (in.role == GraphInput::Role::Parameter) is_param.insert(in.value);
    else if (in.role != GraphInput::Role::User) is_weight.insert(in.value);
  }
  for (size_t k = 0; k < state.size(); ++k)
    PTC_CHECK(state[k], "partition: updated buffer ", j.updated_buffers[k], " is no buffer input");

  // Free values: held by the library (the dropout seed too: the library passes it to both
  // graphs), or views of those.
  const Value* seed = j.rng_seed;
  std::unordered_set<const Value*> free_vals(is_param.begin(), is_param.end());
  free_vals.insert(is_weight.begin(), is_weight.end());
  if (seed) free_vals.insert(seed);
  for (size_t i = 0; i < nf; ++i) {
    const Node& n = *g.nodes()[i];
    if (!is_view(n.kind)) continue;
    bool all = true;
    for (const Value* v : n.inputs()) all = all && (!v->type.is_tensor() || free_vals.count(v));
    if (all)
      for (const Value* o : n.outputs) free_vals.insert(o);
  }

  // Forward values the backward nodes read.
  std::vector<const Value*> read;
  std::unordered_set<const Value*> read_set;
  auto forward_value = [&](const Value* v) {
    return fwd_index.count(v) || (v->producer == nullptr && !is_param.count(v) && !is_weight.count(v) && v != seed);
  };
  for (size_t i = nf; i < g.nodes().size(); ++i)
    for (const Value* v : g.nodes()[i]->inputs())
      if (forward_value(v) && v->type.is_tensor() && read_set.insert(v).second) read.push_back(v);
  // The gradient inputs are backward inputs, not forward values.
  for (size_t i = n_fwd_inputs; i < g.inputs.size(); ++i) read_set.erase(g.inputs[i].value);
  read.erase(std::remove_if(read.begin(), read.end(), [&](const Value* v) { return !read_set.count(v); }), read.end());

  // Recomputation: which forward nodes the backward graph copies.
  std::unordered_set<const Value*> saved, recomputed;
  std::unordered_set<size_t> recompute_nodes;
  // The closure of free views the backward needs.
  std::function<void(const Value*)> need_free = [&](const Value* v) {
    auto it = fwd_index.find(v);
    if (it == fwd_index.end() || recompute_nodes.count(it->second)) return;
    recompute_nodes.insert(it->second);
    for (const Value* u : g.nodes()[it->second]->inputs()) need_free(u);
  };
  for (const Value* v : read) {
    if (free_vals.count(v)) need_free(v);
    else saved.insert(v);
  }
  if (!opts.save_all) {
    // Values the backward materializes: operands of its convolutions, and (latest first) the
    // sources of views of those.
    std::unordered_set<const Value*> materialized;
    for (size_t i = nf; i < g.nodes().size(); ++i)
      if (convolution(g.nodes()[i]->kind))
        for (const Value* v : g.nodes()[i]->inputs()) materialized.insert(v);
    for (size_t i = g.nodes().size(); i-- > 0;) {
      const Node& n = *g.nodes()[i];
      if (!is_view(n.kind)) continue;
      bool m = false;
      for (const Value* o : n.outputs) m = m || materialized.count(o);
      if (m)
        for (const Value* v : n.inputs()) materialized.insert(v);
    }
    // A node whose output the backward materializes is not recomputed (a view of one is).
    auto kept = [&](const Node& n) {
      if (is_view(n.kind)) return false;
      for (const Value* o : n.outputs)
        if (materialized.count(o)) return true;
      return false;
    };
    // Greedy to a fixpoint, latest first: a saved value produced by a cheap node is recomputed
    // when the chain of cheap nodes behind it reaches only values available anyway (free,
    // saved, recomputed) — so recomputing never adds a saved value. A chain may pass through
    // values the backward does not read (bn -> relu: the batch norm's output is not saved).
    std::function<bool(const Value*, std::vector<size_t>&, int)> reachable = [&](const Value* u, std::vector<size_t>& chain,
                                                                                 int depth) {
      if (!u->type.is_tensor() || free_vals.count(u) || saved.count(u) || recomputed.count(u)) return true;
      auto it = fwd_index.find(u);
      if (it == fwd_index.end() || depth > 16 || !is_cheap(g.nodes()[it->second]->kind) || kept(*g.nodes()[it->second]))
        return false;
      if (std::find(chain.begin(), chain.end(), it->second) != chain.end()) return true;
      chain.push_back(it->second);
      for (const Value* w : g.nodes()[it->second]->inputs())
        if (!reachable(w, chain, depth + 1)) return false;
      return true;
    };
    bool changed = true;
    while (changed) {
      changed = false;
      for (size_t i = nf; i-- > 0;) {
        const Node& n = *g.nodes()[i];
        if (!is_cheap(n.kind) || recompute_nodes.count(i)) continue;
        bool wanted = false;
        for (const Value* o : n.outputs) wanted = wanted || saved.count(o);
        if (!wanted || kept(n)) continue;
        std::vector<size_t> chain{i};
        bool ok = true;
        for (const Value* u : n.inputs()) ok = ok && reachable(u, chain, 0);
        if (!ok) continue;
        for (size_t ci : chain) {
          recompute_nodes.insert(ci);
          for (const Value* o : g.nodes()[ci]->outputs) {
            saved.erase(o);
            recomputed.insert(o);
          }
          for (const Value* u : g.nodes()[ci]->inputs())
            if (free_vals.count(u)) need_free(u);
        }
        changed = true;
      }
    }
    // A saved value that only recomputed nodes read stays saved (they read it); one that nothing
    // reads any more is dropped.
    std::unordered_set<const Value*> still;
    for (size_t i = nf; i < g.nodes().size(); ++i)
      for (const Value* v : g.nodes()[i]->inputs()) still.insert(v);
    for (size_t i : recompute_nodes)
      for (const Value* v : g.nodes()[i]->inputs()) still.insert(v);
    for (auto it = saved.begin(); it != saved.end();) it = still.count(*it) ? std::next(it) : saved.erase(it);
  }

  TrainGraphs t;
  t.num_model_outputs = j.num_forward_outputs - j.updated_buffers.size();
  // Saved values in forward order: user inputs, then node outputs.
  std::vector<const Value*> saved_list;
  for (size_t i = 0; i < n_fwd_inputs; ++i)
    if (saved.count(g.inputs[i].value)) saved_list.push_back(g.inputs[i].value);
  for (size_t i = 0; i < nf; ++i)
    for (const Value* o : g.nodes()[i]->outputs)
      if (saved.count(o)) saved_list.push_back(o);
  // A library binds each size symbol from an input dimension that is exactly that symbol. A
  // symbol that none of the backward's inputs has (a size of an input only the forward reads, as
  // in x / t.numel()) travels in an empty saved tensor [s, 0] of its own.
  std::set<std::string> bindable;
  auto bind = [&](const Value* v) {
    if (v->type.is_tensor())
      for (const auto& s : v->type.sizes)
        if (s.kind() == sym::Kind::Symbol) bindable.insert(s.name());
  };
  for (const Value* v : saved_list) bind(v);
  for (size_t i = n_fwd_inputs; i < g.inputs.size(); ++i) bind(g.inputs[i].value);
  std::vector<std::string> carried;
  for (const auto& [name, r] : g.symbols)
    if (!bindable.count(name)) carried.push_back(name);
  t.num_saved = saved_list.size() + carried.size();

  // Forward graph.
  t.forward = std::make_unique<Graph>();
  {
    Extractor x(g, *t.forward);
    for (size_t i = 0; i < n_fwd_inputs; ++i)
      if (g.inputs[i].role == GraphInput::Role::User && g.inputs[i].value != seed)
        x.input(g.inputs[i].value, GraphInput::Role::User, "", false);
    for (size_t i = 0; i < n_fwd_inputs; ++i)
      if (is_param.count(g.inputs[i].value)) {
        x.input(g.inputs[i].value, GraphInput::Role::User, "", true);
        t.params.push_back(g.inputs[i].value->name);
        t.param_targets.push_back(g.inputs[i].target);
      }
    if (seed) {
      x.input(seed, GraphInput::Role::User, "", true);
      t.forward_seed = true;
    }
    for (size_t k = 0; k < state.size(); ++k) {
      x.input(state[k], GraphInput::Role::User, "", true);
      t.state.push_back(state[k]->name);
      t.state_targets.push_back(j.updated_buffers[k]);
    }
    for (size_t i = 0; i < n_fwd_inputs; ++i)
      if (is_weight.count(g.inputs[i].value)) x.input(g.inputs[i].value, g.inputs[i].role, g.inputs[i].target, false);
    for (size_t i = 0; i < nf; ++i) x.copy(*g.nodes()[i]);
    for (size_t i = 0; i < j.num_forward_outputs; ++i) t.forward->outputs.push_back(x.map(g.outputs[i]));
    for (const Value* v : saved_list) t.forward->outputs.push_back(x.map(v));
    NodeBuilder b(*t.forward, &g, "_size");
    for (const std::string& s : carried) t.forward->outputs.push_back(b.zeros({sym::symbol(s, g.symbols.at(s)), sym::Expr(0)}, DType::Float32));
  }

  // Backward graph.
  t.backward = std::make_unique<Graph>();
  {
    Extractor x(g, *t.backward);
    for (const Value* v : saved_list) x.input(v, GraphInput::Role::User, "", true);
    for (const std::string& s : carried)
      t.backward->add_input("size_" + s, Type::tensor(DType::Float32, {sym::symbol(s, g.symbols.at(s)), sym::Expr(0)}), GraphInput::Role::User, "");
    std::unordered_set<const Value*> used;  // params/weights the backward side reads
    auto note = [&](const Node& n) {
      for (const Value* v : n.inputs()) used.insert(v);
    };
    for (size_t i : recompute_nodes) note(*g.nodes()[i]);
    for (size_t i = nf; i < g.nodes().size(); ++i) note(*g.nodes()[i]);
    for (size_t i = 0; i < n_fwd_inputs; ++i) {
      const Value* v = g.inputs[i].value;
      if (is_param.count(v) && used.count(v)) {
        x.input(v, GraphInput::Role::User, "", true);
        t.backward_params.push_back(v->name);
      }
    }
    if (seed && used.count(seed)) {
      x.input(seed, GraphInput::Role::User, "", true);
      t.backward_seed = true;
    }
    for (size_t i = 0; i < n_fwd_inputs; ++i)
      if (is_weight.count(g.inputs[i].value) && used.count(g.inputs[i].value))
        x.input(g.inputs[i].value, g.inputs[i].role, g.inputs[i].target, false);
    for (size_t i = n_fwd_inputs; i < g.inputs.size(); ++i) x.input(g.inputs[i].value, GraphInput::Role::User, "", false);
    t.num_grad_outputs = n_grad_in;
    for (const Value* o : j.grad_outputs)
      for (size_t k = 0; k < j.num_forward_outputs; ++k)
        if (g.outputs[k] == o) {
          t.grad_output_index.push_back(static_cast<int>(k));
          break;
        }
    std::vector<size_t> order(recompute_nodes.begin(), recompute_nodes.end());
    std::sort(order.begin(), order.end());
    for (size_t i : order) x.copy(*g.nodes()[i]);
    for (size_t i = nf; i < g.nodes().size(); ++i) x.copy(*g.nodes()[i]);
    for (size_t i = j.num_forward_outputs; i < g.outputs.size(); ++i) t.backward->outputs.push_back(x.map(g.outputs[i]));
  }
  for (size_t i = 0; i < j.grad_params.size(); ++i)
    for (size_t k = 0; k < t.params.size(); ++k)
      if (t.params[k] == j.grad_params[i]->name) t.grad_param_index.push_back(static_cast<int>(k));
  {
    int user = 0;
    for (size_t i = 0; i < n_fwd_inputs; ++i) {
      if (g.inputs[i].role != GraphInput::Role::User || g.inputs[i].value == seed) continue;
      for (const Value* v : j.grad_inputs)
        if (v == g.inputs[i].value) t.grad_input_index.push_back(user);
      ++user;
    }
  }

  // Saved bytes per sample: every symbol at max(its minimum, 1); divided by the first user
  // input's first dimension there.
  std::map<std::string, int64_t> at;
  for (const auto& [name, r] : g.symbols) at[name] = std::max<int64_t>(r.lo, 1);
  double bytes = 0, batch = 1;
  for (const Value* v : saved_list) {
    double n = static_cast<double>(dtype_size(v->type.dtype));
    for (const auto& s : v->type.sizes) n *= static_cast<double>(sym::evaluate(s, at));
    bytes += n;
  }
  for (const GraphInput& in : g.inputs)
    if (in.role == GraphInput::Role::User && in.value->type.rank() > 0) {
      batch = static_cast<double>(std::max<int64_t>(1, sym::evaluate(in.value->type.sizes[0], at)));
      break;
    }
  t.saved_bytes_per_sample = bytes / batch;

  for (const Graph* part : {t.forward.get(), t.backward.get()}) {
    auto problems = verify_graph(*part);
    PTC_CHECK(problems.empty(), "partition: the ", part == t.forward.get() ? "forward" : "backward", " graph is malformed: ",
              problems.front());
  }
  return t;
}

}  // namespace ptc
