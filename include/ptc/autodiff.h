// Training: reverse-mode differentiation of a graph (AOTAutograd's joint graph) and its split into
// a forward and a backward graph (lib/autodiff).
//
//   build_joint_graph      forward nodes, then for every node on a path from a parameter (or a
//                          user input that requires grad) to a differentiable output, its
//                          derivative rule (one per op-table row, lib/autodiff/rules_*.cpp),
//                          written as ordinary aten nodes; gradients reaching a value from several
//                          users are summed.
//   partition_joint_graph  the forward graph (model outputs + the values the backward reads) and
//                          the backward graph (saved values + grad outputs -> gradients):
//                          "save all" keeps every forward value the backward reads; "min-cut"
//                          recomputes cheap pointwise chains in the backward when that saves bytes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ptc/graph.h"

namespace ptc {

// Training-mode batch norm (batch_norm / native_batch_norm / _native_batch_norm_legit with
// training=True, _native_batch_norm_legit_functional) decomposed into mean, sub, mul, rsqrt,
// add, and its running-statistics update into buffer updates (Graph::updated_buffers); an
// in-place add_ on a buffer (num_batches_tracked) into add + a buffer update
// (lib/autodiff/batch_norm.cpp). A graph without either comes back as a clone.
// Errors (UserError): one value per channel, non-float inputs, an in-place update of a
// non-buffer, a buffer updated twice.
std::unique_ptr<Graph> decompose_training_batch_norm(const Graph& g);

// The graph passes of a training compile (--train), before the joint graph and on each of its
// parts: decompose_training_batch_norm, cse, dce, prune_unused_weights (passes.h: run_pass_list,
// with the same verifier checks and `after` hook). No folding: parameters change as the model
// trains, and an inference batch norm must stay one for its gradient.
std::unique_ptr<Graph> run_training_graph_passes(const Graph& g,
                                                 const std::function<void(const char* pass, const Graph&)>& after = {});

struct JointGraph {
  // Inputs: the forward graph's inputs (same names, roles, weights), then one user input per
  // differentiable output: its gradient ("<output>_grad", the output's sizes, contiguous).
  // Outputs: the forward outputs (the model's, then the buffer updates), then the gradients of
  // `grad_params` in order, then those of `grad_inputs`. Nodes: the forward nodes first (num_forward_nodes of them), then the backward.
  std::unique_ptr<Graph> graph;
  size_t num_forward_nodes = 0;
  size_t num_forward_outputs = 0;
  // The forward's last outputs are new contents of these buffers (the forward graph's
  // updated_buffers; the joint graph's own field is empty, its gradients come after them).
  std::vector<std::string> updated_buffers;
  std::vector<const Value*> grad_outputs;   // forward outputs that get a gradient input
  std::vector<const Value*> grad_params;    // parameter inputs with a gradient (float dtype)
  std::vector<const Value*> grad_inputs;    // user inputs the export marked requires_grad
  // The 0-d int64 user input that training-mode dropouts draw their masks from (ptc::dropout);
  // nullptr when the model has none. Not a model input: the library fills it per forward call.
  const Value* rng_seed = nullptr;
};

// Pre:  verify_graph(g) is empty; every value has its type.
// Errors (UserError): an op on a differentiable path that has no derivative rule (names the node,
// the op and the user's source line); a model with no parameter or input that needs a gradient.
JointGraph build_joint_graph(const Graph& g);

struct TrainGraphs {
  // Forward: inputs = the user inputs, then the parameters (as user inputs, in graph order; the
  // training library passes its own copies), then the dropout seed (when forward_seed), then the
  // buffers it updates (state_targets, as user inputs: the library holds them), other buffers and
  // constants as weights. Outputs = the model's outputs, the new contents of the state_targets
  // buffers, then the saved values.
  std::unique_ptr<Graph> forward;
  // Backward: inputs = the saved values (in the forward's order), the parameters it reads (as user
  // inputs), the dropout seed (when backward_seed: it recomputes a mask), then the gradient inputs. Outputs = the parameters' gradients (grad_params order),
  // then the user inputs' gradients.
  std::unique_ptr<Graph> backward;
  size_t num_model_outputs = 0;
  size_t num_saved = 0;
  bool forward_seed = false;   // the forward takes the dropout seed after the parameters
  bool backward_seed = false;  // the backward takes it after its parameters
  std::vector<std::string> params;           // parameter input names of the forward, in order
  std::vector<std::string> param_targets;    // their state-dict names
  std::vector<std::string> state;            // buffer input names of the forward the library holds and updates
  std::vector<std::string> state_targets;    // their state-dict names
  std::vector<int> grad_param_index;          // backward output i -> index into params
  std::vector<int> grad_input_index;          // backward output num_grad_params + i -> user input index
  std::vector<std::string> backward_params;  // parameters the backward reads (names), in its input order
  size_t num_grad_outputs = 0;               // gradient inputs of the backward (after saved and params)
  std::vector<int> grad_output_index;        // -> model output index
  // Saved bytes per sample (per unit of the first user input's first dimension, at the symbols'
  // upper bounds for the other dimensions), for the report.
  double saved_bytes_per_sample = 0;
};

struct PartitionOptions {
  bool save_all = false;  // --save-all: save every forward value the backward reads
};
TrainGraphs partition_joint_graph(const JointGraph& j, const PartitionOptions& opts = {});

}  // namespace ptc
