// Helpers shared by the graph rewrites (lib/passes, lib/autodiff; implemented in
// lib/graph/rewrite.cpp): a builder that copies a graph node by node while some nodes are
// dropped, replaced or added, and small utilities over weights (TensorData) that constant folding
// and batch-norm folding both need.
//
// GraphRewriter: the new graph starts with the source's name, source format, symbols, weights
// (TensorData copied: owners shared, no byte copied) and inputs (same names, types, roles and
// targets). The pass then walks the source's nodes in order and calls copy_node() for the ones it
// keeps, replace() for values it redirects, add_node() for new nodes and add_constant() for new
// weights; finish() maps the graph outputs. Values keep their names; only values the pass copies
// or creates exist in the new graph.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ptc/graph.h"

namespace ptc::rewrite {

class GraphRewriter {
 public:
  // `keep_input` (when given) says which of the source's inputs the new graph has.
  explicit GraphRewriter(const Graph& src, const std::function<bool(const GraphInput&)>& keep_input = {});

  const Graph& source() const { return src_; }
  Graph& graph() { return *out_; }

  // The new graph's value for a source value (after replace()); InternalError when the pass has
  // not defined it yet.
  Value* map(const Value* old) const;
  Arg map_arg(const Arg& a) const;
  // From now on, uses of `old` read `now` (a value of the new graph).
  void replace(const Value* old, Value* now);
  // Copies `n`: arguments mapped, outputs new values with the same names and types; kind,
  // target, name, arg_names, list_output and source kept.
  Node* copy_node(const Node& n);
  // A new node like `like` (kind, target, name, arg_names, list_output, source) with the given
  // arguments (already in the new graph's values) and outputs (from new_value()).
  Node* add_node(const Node& like, std::vector<Arg> args, std::vector<Value*> outputs);
  // A new value named `name` (made unique against the source and the new graph).
  Value* new_value(const std::string& name, Type type);
  // A new Constant graph input named `name` whose bytes are `data` under the state-dict name
  // `target` (made unique against the weights); the input's type is `data.type`. The name is made
  // unique against the source and the new graph, unless `source_name` says it is the name of a
  // source value that the new graph drops (a folded value keeps its name).
  Value* add_constant(const std::string& name, const std::string& target, TensorData data, bool source_name = false);
  std::unique_ptr<Graph> finish();

  std::string fresh_value_name(const std::string& base) const;
  std::string fresh_target(const std::string& base) const;

 private:
  const Graph& src_;
  std::unique_ptr<Graph> out_;
  std::unordered_map<const Value*, Value*> vmap_;
};

// How many times each value is read: once per node argument slot, once per graph output.
std::unordered_map<const Value*, int> count_uses(const Graph& g);
// The nodes that read each value (each node once, in graph order).
std::unordered_map<const Value*, std::vector<const Node*>> users(const Graph& g);

// A convolution that is not transposed (conv1d/2d/3d, or convolution / _convolution with
// transposed=False).
bool is_forward_convolution(const Node& n);

// The bytes behind a graph input that is a parameter, buffer or constant with a tensor
// TensorData in g.weights; nullptr for user inputs, node outputs and missing data.
const TensorData* weight_of(const Graph& g, const Value* v);

// Element access by dtype, as the loop interpreter does (double precision). Supported dtypes:
// bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64.
bool dtype_supported(DType t);
using ptc::read_element;   // (ptc/dtype.h)
using ptc::write_element;
using ptc::read_elements;
using ptc::write_elements;

// The static sizes/strides/storage offset of a type; nullopt when any is symbolic or negative
// strides/sizes occur.
// Whether sizes / strides lay their elements out row-major without gaps (size-1 dims aside).
bool row_major_dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

struct StaticLayout {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  int64_t numel() const;
};
std::optional<StaticLayout> static_layout(const Type& t);

// A TensorData that owns its bytes (a std::shared_ptr<std::string> as owner), laid out as `t`
// says (sizes, strides and storage offset, which must be static with non-negative strides;
// overlapping strides are fine when the overlapping elements are equal) and filled from
// `rowmajor`, the elements in row-major order of t.sizes.
TensorData owned_tensor(const Type& t, const std::vector<double>& rowmajor);

// Reads every element of a weight in row-major order of its sizes (as_strided over its storage).
std::vector<double> read_all(const TensorData& td);

}  // namespace ptc::rewrite
