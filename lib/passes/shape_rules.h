// Shape rules (internal to lib/passes): the per-node context with typed argument access, the
// shared helpers (broadcasting, type promotion, torch's stride rules) and the rule table.
//
// A rule is a function Ctx& -> std::vector<Type> (one Type per output). The rules live in
// shape_rules_<family>.cpp; each family registers its rows in the table (rule_table(), in
// shape_prop.cpp). Ctx and make_tensor are in shape_rules_args.cpp, the other helpers in
// shape_rules_common.cpp.
// Conventions that mirror torch.export's symbolic reasoning:
//   * a symbolic size is never 1 unless it is the constant 1 (size-oblivious reasoning: torch
//     specialises sizes 0 and 1);
//   * comparisons that torch decides with "guard_or_false" use what sym can prove.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "ptc/error.h"
#include "ptc/graph.h"

namespace ptc::shape {

using sym::Expr;
using Exprs = std::vector<Expr>;

// Thrown by Ctx accessors when an input's type (or a SymInt's value) is unknown: the rule cannot
// run, and the node's outputs stay as they are.
struct UnknownInput {};

enum class MemoryFormat { Contiguous, ChannelsLast, ChannelsLast3d, Preserve };

// A Scalar argument: a Python number or a SymInt/SymFloat/SymBool value (or, from TorchScript, a
// 0-dim tensor).
struct ScalarArg {
  enum Kind { Bool, Int, Float, Tensor } kind = Int;
  double f = 0;           // Float/Int/Bool value when constant
  std::optional<Expr> i;  // Int: its value (maybe symbolic); Bool: 0/1
  const Type* tensor = nullptr;
  bool constant = false;  // f (and i) hold the value
  bool is_const() const { return constant; }
};

class Ctx {
 public:
  explicit Ctx(const Node& n) : node(n) {}
  const Node& node;
  // Rules set this to false where they do not model torch's output strides exactly; Check mode
  // then compares dtype and sizes only.
  bool exact_strides = true;

  // "node 'NAME' (aten::op) at file.py:9"
  std::string where() const;
  template <class... P>
  [[noreturn]] void fail(const P&... parts) const {
    throw UserError(where() + ": " + cat(parts...));
  }

  const Arg& arg(const char* name) const;  // InternalError when the schema has no such argument
  bool is_none(const char* name) const;
  // Tensors. tensor() requires a tensor; opt_tensor() returns nullptr for None.
  const Type& tensor(const char* name) const;
  const Type* opt_tensor(const char* name) const;
  std::vector<const Type*> tensors(const char* name) const;  // Tensor[] / Tensor?[] (nullptr = None)
  // Integers: int (constant) and SymInt (maybe symbolic), single or lists.
  int64_t int_(const char* name) const;
  std::optional<int64_t> opt_int(const char* name) const;
  std::vector<int64_t> ints(const char* name) const;
  std::optional<std::vector<int64_t>> opt_ints(const char* name) const;
  Expr sym(const char* name) const;
  std::optional<Expr> opt_sym(const char* name) const;
  Exprs syms(const char* name) const;
  std::optional<Exprs> opt_syms(const char* name) const;
  bool bool_(const char* name) const;
  std::optional<bool> opt_bool(const char* name) const;
  double float_(const char* name) const;
  std::optional<std::vector<double>> opt_floats(const char* name) const;
  std::optional<DType> opt_dtype(const char* name) const;
  std::optional<std::string> opt_str(const char* name) const;
  ScalarArg scalar(const char* name) const;
  std::optional<ScalarArg> opt_scalar(const char* name) const;
  // MemoryFormat argument; None gives `none_means`.
  MemoryFormat memory_format(const char* name, MemoryFormat none_means) const;
  // The `device` argument when the schema has one and it is given.
  std::optional<Device> opt_device(const char* name) const;
  bool has_arg(const char* name) const;  // the op's schema has this argument
  // A Tensor argument that may also hold a Python number (torch.export writes add.Tensor(x, 1)):
  // the tensor, or nullptr and the number in `scalar`.
  const Type* tensor_or_scalar(const char* name, ScalarArg* scalar) const;

  // A dim argument wrapped into [0, rank) (rank 0 accepts -1 and 0, as torch does).
  int64_t wrap_dim(int64_t d, int64_t rank) const;
  int64_t dim_arg(const char* name, int64_t rank) const { return wrap_dim(int_(name), rank); }

 private:
  Expr to_expr(const Arg& a, const char* name) const;
};

// ---- types --------------------------------------------------------------------------------

// A tensor type on `like`'s device with explicit strides (and storage offset).
Type make_tensor(const Type& like, DType dt, Exprs sizes, Exprs strides, Expr offset = 0);
// A contiguous tensor on `like`'s device.
Type make_contiguous(const Type& like, DType dt, Exprs sizes);

// ---- sizes and strides ----------------------------------------------------------------------

bool is_one(Expr e);   // the constant 1
bool is_zero(Expr e);  // the constant 0
Expr numel(const Exprs& sizes);
std::string sizes_str(const Exprs& sizes);
// Row-major strides as torch computes them (a size-0 dimension counts as 1).
Exprs dense_strides(const Exprs& sizes);
// Strides of a tensor of `sizes` in `fmt` (ChannelsLast needs rank 4, ChannelsLast3d rank 5;
// otherwise contiguous).
Exprs format_strides(const Exprs& sizes, MemoryFormat fmt);
bool is_contiguous(const Type& t);
bool is_channels_last_contiguous(const Type& t);  // 2d for rank 4, 3d for rank 5
bool is_non_overlapping_and_dense(const Type& t);
// torch's suggest_memory_format: ChannelsLast(3d) when the strides look channels-last.
MemoryFormat suggest_memory_format(const Type& t);
// Strides of torch.empty_like(t, memory_format=fmt) (Preserve keeps dense strides, else follows
// t's layout like an elementwise op).
Exprs empty_like_strides(const Type& t, MemoryFormat fmt);
// Output strides of an elementwise op of `out_sizes` over `inputs` (broadcast to out_sizes),
// as torch computes them (fast paths for all-contiguous / all-channels-last inputs, then the
// stride-sorting permutation of TensorIterator / prims). 0-dim inputs are ignored.
Exprs elementwise_strides(const Exprs& out_sizes, const std::vector<const Type*>& inputs);
// Dense strides for t.sizes in the dimension order of t's strides (torch's elementwise
// permutation of one tensor, with its contiguous / channels-last short cuts).
Exprs follow_layout_strides(const Type& t);
// Strides of `view(new_sizes)` on a tensor with these sizes and strides (torch's computeStride);
// nullopt when the view is impossible without a copy.
std::optional<Exprs> view_strides(const Exprs& old_sizes, const Exprs& old_strides, const Exprs& new_sizes);

// The type of an elementwise op over `ins` (nullptr entries skipped): broadcast sizes, torch's
// elementwise output strides, the device of the first input of rank > 0.
Type elementwise(const Ctx& c, const std::vector<const Type*>& ins, DType dt);

// total / known when known divides total (a constant times a monomial divides in two steps).
Expr exact_quotient(Expr total, Expr known);

// Broadcast two shapes (numpy rules); a UserError through `c` when they cannot broadcast.
Exprs broadcast_shapes(const Ctx& c, const Exprs& a, const Exprs& b);
// A view/reshape size list with at most one -1, resolved against `total` elements.
Exprs infer_size(const Ctx& c, const Exprs& shape, Expr total);

// ---- dtypes -------------------------------------------------------------------------------

bool is_integral(DType t, bool include_bool);
DType promote_types(DType a, DType b);
// torch.result_type over tensors (dim > 0 tensors, 0-dim tensors) and Python scalars.
DType result_type(const std::vector<const Type*>& tensors, const std::vector<ScalarArg>& scalars);
constexpr DType kDefaultFloat = DType::Float32;
// int/bool -> default float; floats unchanged (ops that "promote integer inputs to float").
DType to_float(DType t);

// ---- the rule table -----------------------------------------------------------------------

using Rule = std::vector<Type> (*)(Ctx&);
constexpr size_t kNumOps = static_cast<size_t>(OpKind::Unknown);
using RuleTable = std::array<Rule, kNumOps>;
const RuleTable& rule_table();

void add_pointwise_rules(RuleTable& t);  // shape_rules_pointwise.cpp
void add_linalg_rules(RuleTable& t);     // shape_rules_linalg.cpp
void add_reduce_rules(RuleTable& t);     // shape_rules_reduce.cpp (norms, softmax, reductions)
void add_view_rules(RuleTable& t);       // shape_rules_view.cpp
void add_data_rules(RuleTable& t);       // shape_rules_data.cpp (cat, pad, index, pooling, ...)
void add_factory_rules(RuleTable& t);    // shape_rules_factory.cpp (copies, factories, SymInt)

inline void set_rule(RuleTable& t, OpKind k, Rule r) { t[static_cast<size_t>(k)] = r; }

}  // namespace ptc::shape
