// Lowering state shared by lib/loop/lower*.cpp (internal header).
//
// Each graph Value lowers to a TensorRef: a dtype, symbolic sizes and a function giving the
// element expression at a symbolic index. Pointwise ops compose these functions (vertical
// fusion is the default); a value is realized into a buffer only when something needs memory:
// a reduction or extern result, a value with several users, a graph output, or an extern
// operand that is not already a strided view of a buffer.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "ptc/error.h"
#include "ptc/graph.h"
#include "ptc/loop.h"
#include "ptc/lower.h"

namespace ptc::loop {

using Index = std::vector<sym::Expr>;

struct TensorRef {
  DType dtype = DType::Float32;
  Index sizes;
  std::optional<View> view;  // set when the tensor is a strided view of a buffer
  std::function<ExprRef(const Index&)> fn;
  // Set for a reshape of a computed (not stored) tensor: realizing stores that tensor in its own
  // shape and reads it through the reshape (the same elements in the same order), so its
  // computation keeps its producers' domain (a layer norm's rows stay in the norm's row kernel
  // when GPT-2 views them as [B*T, C] for addmm).
  std::shared_ptr<const TensorRef> reshaped_from;
  // Set for a permutation of a computed tensor: that tensor, output dim d being its dim perm[d].
  // A GEMM operand stores the tensor in its own order and reads it through the permuted strides
  // (gemm_operand) instead of storing the permutation with strided reads (the GELU output that
  // a weight gradient reads transposed, recomputed in the backward).
  std::shared_ptr<const TensorRef> permuted_from;
  std::vector<int64_t> perm;
  // Set for a stored value that is computed from its indices alone (recomputable): that
  // computation, which a library operation's lowering may read instead of the buffer.
  std::shared_ptr<const TensorRef> stored_from;
  // Set for the float32 widening of half values stored by realize_narrow: that stored view, which
  // a conversion back to its dtype returns as it is (no copy).
  std::shared_ptr<const TensorRef> widened_from;
  ExprRef at(const Index& idx) const { return fn(idx); }
  size_t rank() const { return sizes.size(); }
};

class Lowering {
 public:
  explicit Lowering(const Graph& g);
  Program run();

  // --- building blocks for op lowerings ---------------------------------------------------
  TensorRef of_view(View v, DType dt) const;
  TensorRef pointwise(DType dt, Index sizes, std::function<ExprRef(const Index&)> fn) const;
  // Writes `t` to a new buffer (unless it already is a whole contiguous buffer) and returns
  // a TensorRef reading it. With LowerOptions::channels_last and `keep_layout`, a 4-d tensor
  // computed from an NHWC buffer is stored NHWC and read through the permutation (unless it
  // already is such a view of a whole NHWC buffer).
  TensorRef realize(const TensorRef& t, const std::string& origin, bool keep_layout = true);
  // realize() of a float32 tensor that widens a float16 / bfloat16 one (autocast's rounded
  // results, a half-precision convolution's result read in float32), or only selects among such
  // values and half constants (a ReLU or clamp of one): stores the half values (the same values
  // in half the bytes) and returns their widening, which is no view.
  TensorRef realize_narrow(const TensorRef& t, const std::string& origin, bool keep_layout = true);
  // realize() for output `output` of node `n`, which several users read: realize_narrow unless a
  // library operation is among them.
  TensorRef realize_shared(const Node& n, size_t output, const TensorRef& t);
  // The second operand of a sum whose operands both compute on the results of different GEMM /
  // convolution externs (a ResNet downsample block: conv(x) + bias + downsample(x) + bias): b
  // stored (realize_narrow), so that its extern fuses b's bias and the other one takes b as its
  // residual; else b as it is.
  TensorRef split_library_sum(const TensorRef& a, const TensorRef& b, const std::string& origin);
  // (channels_last) Whether `t` reads a buffer stored NHWC (nhwc_buffers), and such a buffer
  // as the [N, C, H, W] view of its [N, H, W, C] storage.
  bool reads_nhwc(const TensorRef& t) const;
  TensorRef nhwc_view(int buffer, DType dt);
  std::set<int> nhwc_buffers;
  // The [N, H, W, C] sizes of an NHWC buffer declared with other sizes (a 1x1 convolution's
  // GEMM result, declared [N H W, C]); the others' are their declared sizes.
  std::map<int, Index> nhwc_shapes;
  // A strided view for an extern operand (realizing when needed).
  View as_view(const TensorRef& t, const std::string& origin);
  // Reduces `in` over `dims` (sorted, non-negative); kept dims become size 1 when keepdim.
  TensorRef reduce(const TensorRef& in, std::vector<int64_t> dims, bool keepdim, ReduceOp op,
                   DType out_dtype, const std::string& origin);
  int new_buffer(const std::string& prefix, DType dt, const Index& sizes);
  // A new row-major buffer named after `prefix` holding `t` (one pointwise computation); its id.
  int store(const TensorRef& t, const std::string& prefix);
  // Records a computation; its origin lists every graph node whose work it contains.
  void emit(Computation c);
  // Broadcasts `t` to `sizes` (numpy rules, aligned from the right).
  TensorRef broadcast_to(const TensorRef& t, const Index& sizes) const;

  const TensorRef& ref(const Value* v) const;
  // How many nodes (and graph outputs) read `v`.
  int uses(const Value* v) const {
    auto it = uses_.find(v);
    return it == uses_.end() ? 0 : it->second;
  }
  void check_inplace(const Node& n);
  const Node* current = nullptr;  // the node being lowered, for messages and origins
  std::string origin() const;
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    std::string where = current ? "node '" + current->name + "' (" + current->op_name() + ")" : "lowering";
    if (current) {
      std::string frame = current->source.user_frame();
      if (!frame.empty()) where += " at " + frame;
    }
    user_error(where, ": ", parts...);
  }

  const Graph& graph;
  LowerOptions options;
  Program prog_;
  // Values whose contents are a state buffer's current contents, whole (the buffer's input, and
  // the results of scatters written into it in place), and that buffer's id.
  std::map<const Value*, int> state_values;
  // find_unlowerable: nodes that cannot be lowered are recorded here and stand in as zeros
  // instead of failing the lowering (null: fail).
  std::vector<Unlowerable>* refused = nullptr;

 private:
  std::map<const Value*, TensorRef> env_;
  std::map<const Value*, int> uses_;
  std::set<const Value*> read_by_library_;  // inputs of GEMMs, convolutions, attention
  std::set<const Value*> read_by_other_;    // values read by some op that is not element-wise (elementwise_kind), or returned
  int temp_count_ = 0;
};

// Per-op lowerings (lower_ops.cpp): the tensors a node's outputs lower to, in order.
std::vector<TensorRef> lower_node(Lowering& L, const Node& n);

// The loop variables x0, x1, ... of a domain of these sizes.
Index loop_vars(const Index& sizes);
// Whether `t` is computed from its indices alone, in a few operations (no load): an arange, a
// comparison of aranges. Such a value is recomputed by each user rather than stored.
bool recomputable(const TensorRef& t);
// The value of every element of `t` where it is computed (no view) as one constant: an arange
// compared with 0, a full(); else nullopt.
std::optional<double> uniform_value(const TensorRef& t);

// Broadcast result shape of two shapes; nullopt when they cannot broadcast.
std::optional<Index> broadcast_shapes(const Index& a, const Index& b);
int64_t normalize_dim(Lowering& L, int64_t dim, size_t rank);
Index row_major_strides(const Index& sizes);
sym::Expr flat_index(const Index& idx, const Index& strides, const sym::Expr& offset);

}  // namespace ptc::loop

namespace ptc::loop {

// Argument access for op lowerings (by schema name), with user errors for surprises.
struct Args {
  Lowering& L;
  const Node& n;
  const Arg& raw(const char* name) const;
  bool is_none(const char* name) const;
  TensorRef tensor(const char* name) const;
  std::vector<TensorRef> tensors(const char* name) const;
  int64_t i(const char* name) const;
  double f(const char* name) const;
  bool b(const char* name) const;
  std::string s(const char* name) const;
  Index syms(const char* name) const;            // int[] / SymInt[]
  std::vector<int64_t> ints(const char* name) const;  // int[] with constant entries
  ExprRef scalar(const char* name, DType dt) const;  // Scalar (number or SymInt) as an expression
  std::optional<DType> dtype(const char* name) const;
  DType out_dtype(size_t i = 0) const;
  Index out_sizes(size_t i = 0) const;
};

// Family lowerings; each returns nullopt when the op is not in its family.
using Lowered = std::optional<std::vector<TensorRef>>;
Lowered lower_pointwise(Lowering& L, const Node& n, const Args& a);
Lowered lower_view(Lowering& L, const Node& n, const Args& a);
Lowered lower_reduction(Lowering& L, const Node& n, const Args& a);
// Records an extern computation writing a new buffer of `out` sizes; returns its result.
TensorRef emit_extern(Lowering& L, ExternKind kind, DType dt, const Index& out, std::vector<View> operands,
                      std::optional<ExternAttrs> attrs = std::nullopt);
Lowered lower_extern(Lowering& L, const Node& n, const Args& a);
Lowered lower_index(Lowering& L, const Node& n, const Args& a);

// Shared pieces.
// What recomputing one element of a computed tensor costs: its loads, and its transcendental
// operations (exp, log, sigmoid, tanh, erf, pow, square roots, sin / cos). The walk stops
// counting loads past `max_loads`. A view costs one load.
struct ElementCost {
  size_t loads = 0;
  size_t transcendental = 0;
};
ElementCost element_cost(const TensorRef& x, size_t max_loads);
// `x` stored once (in its own logical order; realize_narrow) when a consumer that reads each element several
// times would otherwise recompute more than `max_loads` loads per element, or, unless
// `transcendental_ok`, any transcendental operation; else `x` itself.
TensorRef stored_if_costly(Lowering& L, const TensorRef& x, const std::string& origin, size_t max_loads, bool transcendental_ok,
                           bool keep_layout);
bool elementwise_kind(OpKind k);
TensorRef map1(Lowering& L, const TensorRef& x, DType dt, const std::function<ExprRef(ExprRef)>& f);
// The float32 widening of half values stored in `stored` (a view), which a conversion back to
// their dtype returns as they are (TensorRef::widened_from).
TensorRef widened(Lowering& L, const TensorRef& stored);
// v == w, or both NaN (lower_reduce.cpp).
ExprRef same_or_both_nan(ExprRef v, ExprRef w);
// The gradient of a window op along one dim (upsampling, average pooling), gathered: result row
// h (of `in` rows, `g` having `out` along `dim`) sums g's rows o in [first(h), first(h) + K) that
// lie in [0, out), each times weight(o, h) (float32; 0 where row o does not read h). first(h)
// (int64) must not exceed the first row that reads h, nor first(h) + K - 1 fall short of the last
// The result is of `result_dtype` (default: g's); the sum is in g's compute dtype (lower_index.cpp).
TensorRef gather_along(Lowering& L, const TensorRef& g, size_t dim, const sym::Expr& in, const sym::Expr& out, int64_t K,
                       std::function<ExprRef(ExprRef)> first, std::function<ExprRef(ExprRef, ExprRef)> weight, const std::string& origin,
                       std::optional<DType> result_dtype = std::nullopt);
// x sorted along dim, stably (NaN last, or first when descending): {values, int64 indices}
// (lower_index.cpp; quadratic in the dim's size).
std::vector<TensorRef> sort_along(Lowering& L, TensorRef x, size_t dim, bool descending, const std::string& origin);
TensorRef map2(Lowering& L, const TensorRef& x, const TensorRef& y, DType dt,
               const std::function<ExprRef(ExprRef, ExprRef)>& f);
TensorRef softmax(Lowering& L, const TensorRef& x, int64_t dim, bool log, DType dt);
TensorRef reshape(Lowering& L, const TensorRef& x, const Index& sizes);
TensorRef permute(Lowering& L, const TensorRef& x, const std::vector<int64_t>& perm);
// Elements start, start + step, ... (len of them) along `dim`; a strided view when x is one.
TensorRef narrow(Lowering& L, const TensorRef& x, int64_t dim, sym::Expr start, sym::Expr step, sym::Expr len);
TensorRef gemm(Lowering& L, const TensorRef& a, const TensorRef& b, DType dt);  // [...,M,K] x [...,K,N]
// A 2-d window argument (kernel, stride, padding, dilation): empty -> {dflt, dflt}, {a} -> {a, a}.
std::vector<int64_t> two(std::vector<int64_t> v, int64_t dflt);
// aten::im2col of a [.., C, H, W] tensor: [.., C KH KW, OH OW] columns (zeros over the padding).
TensorRef im2col(Lowering& L, const TensorRef& x, std::array<int64_t, 2> k, std::array<int64_t, 2> d, std::array<int64_t, 2> p,
                 std::array<int64_t, 2> s, const Index& out, DType dt);

}  // namespace ptc::loop
