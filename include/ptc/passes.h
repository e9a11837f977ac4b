// Graph passes: free functions from a Graph to a new Graph (DESIGN.md: "a pass is a free
// function in its own file pair, with its pre- and postconditions in the header comment").
// The input graph is never modified; every pass returns a new graph.
#pragma once

#include <memory>
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

}  // namespace ptc
