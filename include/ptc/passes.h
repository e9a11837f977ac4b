// Graph passes: free functions from a Graph to a new Graph, each in its own file pair with its
// pre- and postconditions in its comment here (docs/design.md, "Graph passes").
// The input graph is never modified; every pass returns a new graph.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "ptc/graph.h"

namespace ptc {

// ---- clone (lib/passes/clone.cpp) -------------------------------------------------------------
//
// A deep copy of `g`: inputs, values (same names, ids and types), nodes (arguments with Value*
// remapped to the copy's values), outputs, symbols, name and source format. Weights are copied
// as TensorData, which shares its owner: no weight byte is copied.
// Post: print_graph(*clone_graph(g)) == print_graph(g).
std::unique_ptr<Graph> clone_graph(const Graph& g);

// ---- shape propagation (lib/passes/shape_prop.cpp, lib/passes/shape_rules_*.cpp) ------------
//
// Computes the output Type of every node from the types of its inputs and its arguments, with
// one shape rule per row of the op table (include/ptc/ops.def): dtype (torch's type promotion,
// Python scalars included), symbolic sizes (sym::Expr: broadcasting, views with -1, conv and
// pooling arithmetic, ...), strides and storage offset (torch's: views keep the real strides,
// elementwise ops follow their inputs' layout as TensorIterator does, copies keep or reset the
// memory format as their memory_format argument says), device, and the value of SymInt outputs
// (sym_size.int, _operator.add, ...).
//
// Modes:
//   Fill   every output of a known op gets the inferred type. Used for graphs whose intermediate
//          types are unknown (TorchScript with dynamic input shapes). Outputs of unknown ops
//          (OpKind::Unknown) keep their types; where an input type is unknown, the outputs that
//          depend on it keep their types (unknown) too, without error.
//   Check  infers every output and compares it with the type already recorded (torch.export's
//          tensor_values): dtype, rank, sizes (equal for every value of the symbols in range),
//          device type, SymInt values, and strides and storage offset for the ops whose rule
//          models torch's strides exactly (all but a few, see shape_prop.cpp; strides of
//          dimensions of size 1 are not compared: they never address memory). The first
//          disagreement is a UserError naming the node, the op, the source line and both types.
//          Recorded types are kept; unknown recorded types are filled in.
//
// Pre:  the graph is well formed (verify_graph) and topologically ordered.
// Post: same nodes, values, names and arguments as `g`; only Value::type differs.
// Errors (UserError, one sentence: "node 'NAME' (aten::op) at file.py:LINE: ..."): an input of
// the wrong rank or dtype, shapes that do not broadcast, a dim out of range, an output size that
// depends on data (e.g. boolean-mask indexing), a node whose number of outputs differs from what
// its op returns, and in Check mode a disagreement with the recorded type.
enum class ShapePropMode { Fill, Check };
std::unique_ptr<Graph> propagate_shapes(const Graph& g, ShapePropMode mode);

// The output types the shape rule of `n`'s op gives for the current types of its inputs (for
// passes that build new nodes). Throws UserError as above; returns an empty vector for unknown
// ops and when an input type is unknown.
std::vector<Type> infer_node_types(const Node& n);

// ---- dead-code elimination (lib/passes/dce.cpp) -------------------------------------------------
//
// Removes the nodes none of whose outputs reaches a graph output. Every op is treated as pure
// (as lowering does). Inputs (user inputs, parameters, buffers, constants) and Graph::weights are
// kept as they are, so the graph's signature does not change; see prune_unused_weights.
// Pre:  verify_graph(g) is empty.
// Post: the kept nodes are g's, in g's order, with the same names, arguments, value names, types
//       and sources; verify_graph is empty; applying it again changes nothing.
std::unique_ptr<Graph> dead_code_elimination(const Graph& g);
// The nodes dead_code_elimination keeps: those from which a graph output is reachable.
std::unordered_set<const Node*> live_nodes(const Graph& g);

// Drops the parameter, buffer and constant inputs that no node reads and no graph output is
// (buffers the program updates stay: they are state), and the Graph::weights entries no
// remaining input names (lowering turns every weight input
// into a weight buffer that the library stores, used or not). User inputs always stay.
// Pre/Post: as dead_code_elimination; nodes are unchanged.
std::unique_ptr<Graph> prune_unused_weights(const Graph& g);

// ---- in-place updates (lib/passes/functionalize.cpp) -------------------------------------------
//
// The functional op an in-place op computes (relu_ -> relu, copy_ -> copy, index_copy_ ->
// index_copy, index_put_ -> index_put, ...), or nullopt.
std::optional<OpKind> functional_twin(OpKind k);
// Makes in-place updates functional, as torch's functionalization does: an op that updates its
// first argument ("Tensor(a!) self") becomes its functional twin (when it has one), and every
// later read of that tensor (any earlier version, or a no-op alias of one: alias, detach, `to`
// to the same dtype, which are dropped) reads the op's result. A buffer updated this way becomes
// a buffer update (Graph::updated_buffers, its last version a graph output), as torch.export's
// buffer mutations are read. An update through slice / select views becomes the functional op
// on the view plus slice_scatter / select_scatter nodes up the chain of views to the base (a
// buffer's too), whose result is the base's new version. Refused with a sentence naming the
// node: an update of a parameter or constant (whole or in part), an update through any other
// view, a read of a view taken before its base was updated, and an in-place operator ptc does
// not know (its name ends in '_'), which would otherwise be dropped as unused.
// An update of a user input is computed and warned about (the library's inputs are const).
// `keep_detach` (a graph to be differentiated): detach stays a node, where the backward stops.
// Pre:  verify_graph(g) is empty.
// Post: verify_graph is empty; no in-place op with a functional twin is left; nodes keep names
//       and sources; applying it again changes nothing.
std::unique_ptr<Graph> functionalize(const Graph& g, bool keep_detach = false);
// An operator outside the op table whose name says it updates its input in place (aten's trailing
// underscore: fill_, zero_); functionalize refuses it rather than let dead-code elimination drop it.
bool unknown_inplace(const Node& n);

// ---- common-subexpression elimination (lib/passes/cse.cpp) -------------------------------------
//
// A node with the same op, the same arguments (the same Values after earlier merges; equal
// numbers bit for bit, lists, strings, symbolic expressions, dtypes, devices) and the same output
// types as an earlier node is dropped; its outputs' uses read the earlier node's outputs. Covers
// size arithmetic (sym_size.int, _operator.*) like any other op. Not merged: unknown ops, ops
// that mutate an argument (schema "(a!)"), random ops, empty, dropout unless train=False,
// attention with dropout_p != 0, and a duplicate whose output is a graph output (so that output
// keeps its name).
// Pre:  verify_graph(g) is empty.
// Post: verify_graph is empty; the kept nodes keep their names, value names and sources; the
//       dropped duplicates leave no value behind; applying it again changes nothing.
std::unique_ptr<Graph> common_subexpression_elimination(const Graph& g);

// ---- constant folding (lib/passes/fold_constants.cpp) ------------------------------------------
//
// Evaluates at compile time the nodes whose tensor inputs are all weights (parameter, buffer or
// constant inputs with bytes in Graph::weights) or values folded before, when the op is one of
//   views:     permute, transpose.int, t, view, reshape, _unsafe_view, flatten.using_ints,
//              unflatten.int, unsqueeze, squeeze(.dim/.dims), expand, expand_as, slice.Tensor,
//              select.int, narrow, alias, detach
//   copies:    clone, contiguous, lift_fresh_copy, _to_copy, to.dtype, type_as (dtype casts)
//   pointwise: add/sub/mul/div (.Tensor and .Scalar, with broadcasting and alpha), rsub.Scalar,
//              neg, sqrt, rsqrt, reciprocal, exp, log, abs, relu, sigmoid, tanh,
//              pow.Tensor_Scalar, pow.Tensor_Tensor, maximum, minimum
// and the output has static sizes and strides, one of the dtypes bool, uint8, int8, int16,
// int32, int64, float32, float64, and (when it needs its own bytes) at most 16 MiB. Arithmetic is
// in double precision, rounded to each node's output dtype (int64 values beyond 2^53 are not
// folded). Nodes producing a graph output are never replaced.
// A folded value that a kept node reads becomes a Constant input named like the value (its
// state-dict name "_folded_N"), laid out as the value's recorded type (sizes, strides, storage
// offset, so the types downstream do not change). A value that is a plain view of one weight
// shares that weight's storage and owner (no byte is copied); any other owns fresh bytes (a
// std::shared_ptr<std::string>). Folded values read only by other folded nodes are dropped with
// their nodes; producers that become dead otherwise stay (run dead_code_elimination after).
// Pre:  verify_graph(g) is empty; node output types are known where folding should happen.
// Post: verify_graph is empty; kept nodes keep names, arguments (redirected), value names and
//       sources; inputs and weights of g are kept, new constants are appended to the inputs.
std::unique_ptr<Graph> fold_constants(const Graph& g);

// ---- batch-norm folding (lib/passes/fold_batch_norm.cpp) ---------------------------------------
//
// A convolution (conv1d/2d/3d, or convolution/_convolution with transposed=False) or a linear
// with a 2-d output, followed by an inference batch norm (batch_norm or native_batch_norm with
// training=False, or _native_batch_norm_legit_no_training, whose other outputs are unused) is
// replaced by one convolution (linear) with
//   weight' = weight * s (per output channel),  bias' = (bias or 0 - running_mean) * s + beta,
//   s = gamma / sqrt(running_var + eps)   (gamma = 1, beta = 0 when the batch norm has none)
// computed in double precision and rounded to the weight's dtype, as new owned Constant inputs
// ("<weight>.bn_folded", "<bias>.bn_folded"). Conditions: the producer's output has no other
// reader and is not a graph output; weight, bias and the batch norm's weight, bias,
// running_mean and running_var are weights (Graph::weights) of a float dtype with the expected
// shapes ([C] for the per-channel ones).
// The fused node keeps the producer's name, source and output value name (the batch norm's
// output name when that is a graph output) and takes the batch norm's output type.
// Pre:  verify_graph(g) is empty.
// Post: verify_graph is empty; the old weights stay as inputs (unused; see
//       prune_unused_weights); other nodes are unchanged.
std::unique_ptr<Graph> fold_batch_norm(const Graph& g);

// ---- the precision policy (lib/passes/autocast.cpp) --------------------------------------------
//
// The one place that says which graph ops are library operations and of which class: the ops
// ptc lowers to its GEMM, convolution and attention externs (lib/loop/lower_extern.cpp). Both
// passes below read it, and every backend runs both, so `--precision` means the same on each.
enum class LibraryClass { None, Gemm, Conv, Attention };
LibraryClass library_class(OpKind k);
// Whether argument `arg` of library operation `n` stays float32 in every precision: an
// attention's additive mask (the attention kernels add it in float32; rounded to float16, a
// large negative mask value would become -inf).
bool library_f32_arg(const Node& n, size_t arg);
// Which library classes a backend computes natively in float16 / bfloat16 (tensor cores with
// float32 accumulation); the others get float32 operands from library_ops_f32.
struct HalfLibraryOps {
  bool gemm = false, conv = false, attention = false;
  bool float16 = true;  // false: bfloat16 only (the CPU's oneDNN kernels)
  // GEMMs only as linear layers (linear, addmm) of a constant weight: the CPU's library GEMMs
  // (LowerOptions::library_gemm); the others compute in float32.
  bool gemm_constant_weight = false;
  bool native(LibraryClass c) const {
    return (c == LibraryClass::Gemm && gemm) || (c == LibraryClass::Conv && conv) || (c == LibraryClass::Attention && attention);
  }
};

// ---- autocast (lib/passes/autocast.cpp) ---------------------------------------------------------
//
// torch.autocast's policy for an fp32 model compiled with `--precision bf16 / fp16` (`half`): each
// library operation (library_class) reads its float32 tensor inputs through new
// aten::to.dtype(half) nodes (an additive attention mask stays float32) and writes `half`
// outputs, each converted back to float32 by another to.dtype node that takes the old output's
// place. The ops on autocast's float32 list (autocast_f32_op: softmax, normalization, sums,
// exp / log, upsampling, explicit conversions) compute in float32. With `round_fallthrough`,
// every other op whose floating tensor inputs with dimensions all hold `half` values (library
// results, or such ops' results) runs as torch.autocast runs it, in `half`: its float32 result
// is rounded through `half` (to.dtype(half) then to.dtype(float32)) unless the op only selects or
// moves elements; the lowering stores such a value in `half` where it is stored. Without it
// (training, so far) those ops compute and store in float32. The model's outputs keep their
// dtype. The conversions of weights fold into half-precision constants (fold_constants).
// Pre:  verify_graph(g) is empty; `half` is Float16 or BFloat16.
// Post: verify_graph is empty; no library operation reads a float32 tensor other than a mask;
//       the converted node keeps its name and source, its outputs are new values NAME_half.
bool autocast_f32_op(OpKind k);
std::unique_ptr<Graph> autocast(const Graph& g, DType half, bool round_fallthrough = true);

// ---- library ops in float32 (lib/passes/library_ops_f32.cpp) -----------------------------------
//
// A library operation (library_class) with a float16 / bfloat16 tensor input or output that the
// backend does not compute natively in that dtype (`native`: all its floating tensors of one half
// dtype, and its class native) reads every such input through a new aten::to.dtype(float32) node
// and writes float32 outputs, each converted back to its recorded dtype by another to.dtype node
// that takes the old output's place. The conversions of weights fold into float32 constants
// (fold_constants), the others fuse as pointwise nodes.
// Pre:  verify_graph(g) is empty.
// Post: verify_graph is empty; a library operation reads or writes float16 / bfloat16 only when
//       `native` takes it; the converted node keeps its name and source, its outputs are new
//       values NAME_f32.
std::unique_ptr<Graph> library_ops_f32(const Graph& g, const HalfLibraryOps& native = {});

// ---- sibling linear layers (lib/passes/merge_sibling_linears.cpp) ------------------------------
//
// aten::linear nodes that read one input with constant weights (parameters, buffers the program
// does not update, constants) of one dtype and inner size, all with a bias or all without,
// become one linear over the weights stacked by rows (a new constant NAME_merged, and the biases
// concatenated); each old output is a slice of the merged output's last dimension. Groups whose
// stacked weight would pass 32M elements are left alone. The old weights are left for
// prune_unused_weights.
// Pre:  verify_graph(g) is empty; an inference graph (training updates its parameters).
// Post: verify_graph is empty; each old output keeps its values (per element the same products).
std::unique_ptr<Graph> merge_sibling_linears(const Graph& g);

// ---- padded output features (lib/passes/pad_linear_weights.cpp) --------------------------------
//
// A linear layer with a constant weight of N >= 4096 output rows, N not a multiple of `multiple`,
// reads a new constant NAME_padded: the weight (and bias) with zero rows appended up to the next
// multiple; the old output is a slice of the first N columns of the wider one. Only half-precision
// weights, unless `float32_too` (a float32 model compiled with --precision bf16 / fp16, whose
// weights autocast converts afterwards). multiple <= 1: the graph unchanged.
// Pre:  verify_graph(g) is empty; an inference graph.
// Post: verify_graph is empty; the old outputs keep their values.
std::unique_ptr<Graph> pad_linear_weights(const Graph& g, int64_t multiple, bool float32_too);

// ---- conversion round trips (lib/passes/fold_round_trips.cpp) -----------------------------------
//
// A conversion to a half dtype H of a value that is an exact widening of an H value (its
// conversion to float32 / float64), possibly taken through ops that only rearrange elements
// (op_rearranges: views, splits, reshapes, copies), reads those rearrangements of the H value
// instead (new nodes, outputs NAME_<dtype>); the widened chain is left for dce. autocast makes
// this pattern wherever one library operation's output, split or reshaped, feeds another. A
// conversion whose output is a graph output is kept (the output's layout is the model's).
// Pre:  verify_graph(g) is empty.
// Post: verify_graph is empty; the values the graph computes are unchanged, bit for bit.
std::unique_ptr<Graph> fold_round_trips(const Graph& g);

// ---- channels-last convolution weights (lib/passes/channels_last.cpp) --------------------------
//
// Each 2-d forward convolution (conv2d, convolution / _convolution with transposed=False) whose
// weight is a 4-d graph weight reads it through a new aten::contiguous(memory_format=
// channels_last) node (one per weight), which fold_constants turns into a KRSC constant: the
// filter layout of cuDNN's NHWC convolutions (CUDA, `--channels-last`). With
// `depthwise_channels_fastest`, a depthwise convolution's [C, 1, KH, KW] weight reads
// permute(contiguous(permute(w, [1, 2, 3, 0])), [3, 0, 1, 2]) instead: stored [KH, KW, C], so a
// tap's weights for consecutive channels are adjacent (ptc's own NHWC depthwise kernel on CUDA).
// Pre:  verify_graph(g) is empty.
// Post: verify_graph is empty; the convolutions keep names, sources and output values' names.
std::unique_ptr<Graph> channels_last_weights(const Graph& g, bool depthwise_channels_fastest = false);
// Whether channels-last convolutions pay for `g` (CUDA inference libraries turn them on when they
// do): it has 2-d forward convolutions and each is ungrouped or depthwise. Under channels-last,
// 1x1 ones run as cuBLASLt GEMMs and depthwise ones as ptc's own kernels; other grouped ones
// would run cuDNN's grouped NHWC kernels, slower than its NCHW ones (mobilenet_v2 at batch 8 on
// an H200 with TF32: 1.9 ms in NHWC against 1.2 ms in NCHW, when cuDNN ran its depthwise layers).
// `exact` (no --tf32 / --tf32-conv): cuDNN's exact NHWC kernels are slower than its NCHW ones, so
// also at least one depthwise convolution, and at most an eighth of the convolutions left to
// cuDNN (neither depthwise nor 1x1 stride 1 unpadded): MobileNet / EfficientNet-style nets.
bool channels_last_pays(const Graph& g, bool exact);

}  // namespace ptc

namespace ptc {

// ---- the pass pipeline (lib/passes/pipeline.cpp) ------------------------------------------------
//
struct GraphPassOptions {
  bool channels_last_weights = false;  // run channels_last_weights (before library_ops_f32)
  bool depthwise_channels_fastest = false;  // its depthwise weights [KH, KW, C] (Backend::depthwise_weights_channels_fastest)
  std::optional<DType> autocast;       // run autocast to this half dtype (--precision bf16 / fp16)
  HalfLibraryOps half_native;          // what library_ops_f32 leaves in half precision (Backend::half_native)
  int64_t linear_rows_multiple = 0;    // run pad_linear_weights to this multiple (Backend::linear_rows_multiple)
};

// The graph passes of `ptc compile`, in order: functionalize, fold_batch_norm,
// merge_sibling_linears, [pad_linear_weights,] [channels_last_weights,] [autocast,] library_ops_f32, fold_round_trips,
// fold_constants, cse, dce, prune_unused_weights. The verifier checks the graph after each (a failure is an InternalError:
// a ptc bug); `after(name, graph)`, when given, sees each pass's result (--dump-after).
// Pre:  verify_graph(g) is empty; every value has its type (read or shape-propagated).
std::unique_ptr<Graph> run_graph_passes(const Graph& g,
                                        const std::function<void(const char* pass, const Graph&)>& after = {},
                                        const GraphPassOptions& opts = {});
// A named list of graph passes run in order; the verifier checks the graph after each (a failure
// is an InternalError: a ptc bug) and `after(name, graph)`, when given, sees each result. Both
// pass lists (run_graph_passes; autodiff.h: run_training_graph_passes) are such lists.
using GraphPass = std::function<std::unique_ptr<Graph>(const Graph&)>;
std::unique_ptr<Graph> run_pass_list(const Graph& g, const std::vector<std::pair<const char*, GraphPass>>& passes,
                                     const std::function<void(const char* pass, const Graph&)>& after = {});

}  // namespace ptc
