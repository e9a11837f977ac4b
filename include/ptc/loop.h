// The loop IR: buffers, and for each computed buffer an iteration domain plus an element
// expression (Pointwise), a reduction (Reduction), or a library/template call (Extern).
//
// Bodies are small scalar expression DAGs (loop::Expr): loads with symbolic index expressions,
// constants, index values, unary/binary/ternary math, casts. Index expressions are sym::Exprs
// over the loop variables (symbols named x0, x1, ... for the domain and r0, r1, ... for the
// reduced domain, each with range [0, size-1]) and the graph's size symbols. Views never copy:
// they rewrite the index expressions of the loads that read them.
//
// Nodes are immutable and shared (ExprRef); a Program is built once by lowering and then only
// read (the scheduler and the printers build new structures).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ptc/dtype.h"
#include "ptc/error.h"
#include "ptc/sym.h"

namespace ptc::loop {

enum class Op : uint8_t {
  // leaves
  Load,      // buffer[index]: `buffer`, `index` (flat element offset into the buffer's storage)
  Const,     // `value` (stored as double; integral dtypes hold exact integers up to 2^53)
  IndexVal,  // `index` evaluated as an integer value (iota / arange / masks)
  LoadAt,    // buffer[clamp(index + args[0], 0, args[1])]: a load at a data-dependent offset
             // (embedding, gather); args[0] is an int64 element offset, args[1] the last valid
             // element index of the buffer (an index value), so no index can read outside it.
  // unary
  Neg, Abs, Exp, Log, Log1p, Sqrt, Rsqrt, Sin, Cos, Tanh, Erf, Sigmoid, Relu, Floor, Ceil,
  Round, Sign, Reciprocal, Not, IsNan, IsInf,
  Cast,      // to `dtype`
  // binary
  Add, Sub, Mul, Div, Pow, Max, Min, FloorDiv, Mod,  // FloorDiv/Mod: Python semantics
  CheckIndex,  // args: i, n (int64): i when 0 <= i < n; else 0, and the run fails with an
               // "index out of range" error naming the node (embedding / gather / index ids)
  Rand,        // args: key, counter (int64); `value` holds the stream: a float32 in [0, 1),
               // ptc_rt::philox_uniform(key, counter, stream) (training-mode dropout)
  Eq, Ne, Lt, Le, Gt, Ge, And, Or,
  // ternary
  Where,     // args: cond, a, b — only the chosen branch is evaluated (guards out-of-range loads)
  Select,    // args: cond, a, b — both branches are safe to evaluate (vectorizes as a blend)
};
const char* op_name(Op op);
int op_arity(Op op);

struct Expr;
using ExprRef = std::shared_ptr<const Expr>;

struct Expr {
  Op op;
  DType dtype;
  std::vector<ExprRef> args;
  int buffer = -1;   // Load
  sym::Expr index;   // Load, IndexVal
  double value = 0;  // Const
  std::string origin;  // the graph node whose lowering built this node (see OriginScope)
};

// While an OriginScope lives, the expression builders tag new nodes with `node` (per thread):
// that is how kernels know which graph nodes they contain.
class OriginScope {
 public:
  explicit OriginScope(std::string node);
  ~OriginScope();
  OriginScope(const OriginScope&) = delete;
  OriginScope& operator=(const OriginScope&) = delete;

 private:
  std::string saved_;
};
// The graph nodes tagged on the non-leaf nodes of `e`, in first-seen order.
std::vector<std::string> origins_of(const ExprRef& e);

// Builders (they fold constants and a few identities: x+0, x*1, cast to the same dtype).
ExprRef load(int buffer, DType dt, sym::Expr index);
ExprRef load_at(int buffer, DType dt, sym::Expr index, ExprRef offset, sym::Expr last);
ExprRef constant(double v, DType dt);
ExprRef index_value(sym::Expr index, DType dt = DType::Int64);
ExprRef unary(Op op, ExprRef a);
ExprRef cast(ExprRef a, DType dt);
ExprRef binary(Op op, ExprRef a, ExprRef b);  // result dtype: bool for comparisons, else a's
// A data-dependent index `i` checked against its dimension's size `n` (Op::CheckIndex).
ExprRef check_index(ExprRef i, sym::Expr n);
// A counter-based random float32 in [0, 1) (Op::Rand): the same for the same key, counter, stream.
ExprRef rand_uniform(ExprRef key, ExprRef counter, uint32_t stream);
ExprRef where(ExprRef c, ExprRef a, ExprRef b);   // lazy: for padding, cat, pooling windows
ExprRef select(ExprRef c, ExprRef a, ExprRef b);  // eager: for value masks (where.self, causal)

// Loop variables: the symbol for domain dimension d / reduced dimension d, whose range is
// [0, hi-1] for a size whose upper bound is hi.
sym::Expr loop_var(int d, const sym::Expr& size);
sym::Expr reduce_var(int d, const sym::Expr& size);
bool is_loop_var(const sym::Expr& s);
// The outcome of comparison `e` of two index values (or integer constants) where their
// variables' ranges decide it, else nullopt. binary() folds such comparisons as it builds them;
// this asks again after a substitution narrowed the ranges.
std::optional<bool> decided_comparison(const ExprRef& e);

struct Buffer {
  // State: a buffer the library holds between runs (a buffer the program updates: a KV cache),
  // initialized from the weight `weight`, state index `io_index`; kernels may write it in place.
  // StateNext: the new contents of state `io_index`, copied into it after the run's kernels.
  enum class Kind : uint8_t { Input, Weight, Temp, Output, State, StateNext };
  std::string name;
  Kind kind = Kind::Temp;
  DType dtype = DType::Float32;
  std::vector<sym::Expr> sizes;    // logical shape
  std::vector<sym::Expr> strides;  // in elements; row-major for buffers ptc allocates
  sym::Expr offset;                // element offset into the storage (inputs/weights views)
  int io_index = -1;               // Input: user-input position; Output: output position; State(Next): state index
  std::string weight;              // Weight, State: state-dict name in Graph::weights
  sym::Expr numel() const;
};

enum class ReduceOp : uint8_t { Sum, Max, Min, Prod, ArgMax, ArgMin, Any, All };
const char* reduce_name(ReduceOp r);

enum class ExternKind : uint8_t {
  Gemm,         // out[b, m, n] = sum_k a[b, m, k] * b[b, k, n]; operands {a, b}; GemmAttrs
  Convolution,  // NCHW direct convolution; operands {input, weight, bias?}; ConvAttrs
  Attention,    // softmax(scale * q k^T + mask) v over the last two dims, leading dims (<= 2) equal;
                // operands {q, k, v, mask?} (mask broadcast to [..., Tq, Tk]); AttentionAttrs
  Scatter,      // out = self; out[.., index[i], ..] = src[i] (or += with ScatterAttrs::accumulate)
                // along ScatterAttrs::dim (torch.scatter_add, index_copy, index_put); operands
                // {self, index, src}, index and src of one shape (the index may broadcast: stride
                // 0), or {index, src} when in_place (out already holds self: a state buffer); an
                // index outside [0, size) fails the run (CPU) as torch does
  ConvWeightGrad,  // out [O, C/groups, KH, KW] = a convolution's weight gradient; operands {input
                   // [N, C, H, W], grad_output laid out [groups, O/groups, N, OH, OW] contiguous};
                   // ConvAttrs (the CPU's implicit GEMM; cuDNN on CUDA, where grad_output may be any
                   // view of that shape whose groups and channels merge)
  ConvInputGrad,   // out [N, C, H, W] = a convolution's input gradient; operands {weight [O, C/groups,
                   // KH, KW] contiguous, grad_output viewed [groups, O/groups, N, OH, OW]}; ConvAttrs.
                   // CUDA only (cuDNN's backward data); the CPU lowers GEMMs (depthwise ones aside:
                   // its direct kernel)
  MaxPoolGrad,     // out [N, C, H, W] = max pooling's input gradient: each window's dy added at its
                   // first maximum of x (a NaN wins); operands {x [N, C, H, W], dy [N, C, OH, OW]};
                   // MaxPoolGradAttrs. The CPU's direct kernel (LowerOptions::max_pool_grad_extern)
};
const char* extern_name(ExternKind k);

// The attributes of each extern kind, one struct per kind (Computation::attrs).
struct GemmAttrs {
  // A convolution run as a GEMM (1x1, patchify): it computes in the convolution's math mode
  // (ptc_rt::MathModes::conv; TF32 under --precision tf32-conv).
  bool of_convolution = false;
  // The backend's matrix library runs it (LowerOptions::library_gemm; the CPU: oneDNN's matmul):
  // a float32 [M, K] x [K, N] product whose right operand is a constant weight.
  bool library = false;
};
struct ConvAttrs {  // Convolution, ConvWeightGrad, ConvInputGrad
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  // Convolution: the output is stored NHWC (the computation's domain is [N, OH, OW, O]; the
  // result is a permuted view) and the input and weight are read channels-last.
  bool nhwc = false;
};
struct AttentionAttrs {
  int mask_kind = 0;              // ptc_rt::kMaskNone / Keep / Drop / Add
  bool causal = false;            // key j allowed for query i when j <= i
  double scale = 1;
  bool masked_rows_zero = false;  // a row whose keys are all masked gives zeros (else NaN)
  // Over [B, H, T, D]: the output is stored [B, T, H, Dv] (the domain in that order; the result
  // is a permuted view), so merging the heads back is a view.
  bool heads_inner = false;
  // Over [B, H, T, D]: the output is stored [T, B, H, Dv] (nn.MultiheadAttention's layout for
  // its output projection; the result is a permuted view).
  bool time_outer = false;
  // Grouped-query attention (rank 4): k and v have H / kv_group heads; query head h reads key and
  // value head h / kv_group.
  int64_t kv_group = 1;
};
struct ScatterAttrs {
  int64_t dim = 0;
  bool accumulate = true;  // += (scatter_add, index_put with accumulate) or = (index_copy, index_put)
  bool in_place = false;   // no self operand: the output buffer is self
};
struct MaxPoolGradAttrs {
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
};
using ExternAttrs = std::variant<GemmAttrs, ConvAttrs, AttentionAttrs, ScatterAttrs, MaxPoolGradAttrs>;
// The attributes an extern kind carries, default-initialized.
ExternAttrs default_attrs(ExternKind k);
// Whether `a` holds the attributes of kind `k`.
bool attrs_match(ExternKind k, const ExternAttrs& a);
const char* extern_name(ExternKind k);

// Strided view of a buffer as an extern operand: element (i0..in) is at
// offset + sum(i_d * strides_d) of buffer `buffer`.
struct View {
  int buffer = -1;
  std::vector<sym::Expr> sizes, strides;
  sym::Expr offset;
  // The strides of a contiguous tensor of these sizes (those of size-1 dimensions aside).
  bool dense() const;
  // A 4-d [A, B, C, D] view stored densely as [A, C, D, B] (channels last: NHWC activations,
  // KRSC filters), size-1 dimensions aside.
  bool channels_last() const;
  // A 5-d [1, O, N, OH, OW] view of a dense [N, O, OH, OW] buffer: an ungrouped convolution's
  // output gradient as the forward wrote it, seen as the weight gradient's one group.
  bool nchw_as_one_group() const;
};

struct Computation {
  enum class Kind : uint8_t { Pointwise, Reduction, Extern };
  Kind kind = Kind::Pointwise;
  int out = -1;                          // the buffer written
  std::vector<sym::Expr> domain;         // loop sizes; the output element index is row-major
  std::vector<sym::Expr> reduce_domain;  // Reduction only
  ReduceOp reduce = ReduceOp::Sum;
  ExprRef body;                          // over x_i (and r_j for reductions)
  // Extern:
  ExternKind extern_kind = ExternKind::Gemm;
  std::vector<View> operands;
  ExternAttrs attrs;                     // the kind's attributes (attrs_match(extern_kind, attrs))
  // The attributes as kind A (an internal error when they are another kind's).
  template <class A>
  const A& as() const;
  std::string origin;                    // graph node(s) it came from, for reports
};

template <class A>
const A& Computation::as() const {
  const A* a = std::get_if<A>(&attrs);
  if (!a) throw InternalError(std::string("extern ") + extern_name(extern_kind) + " (" + origin + ") has another kind's attributes");
  return *a;
}

struct Program {
  std::vector<Buffer> buffers;
  std::vector<Computation> comps;  // in execution order
  std::map<std::string, sym::Range> symbols;
  std::vector<int> inputs;   // buffer ids of user inputs, in order
  std::vector<int> outputs;  // buffer ids of graph outputs, in order
  // The buffers the program updates (Graph::updated_buffers), by state index: the State buffer,
  // and the StateNext buffer its new contents go to first (-1: the kernels update it in place).
  std::vector<int> states;
  std::vector<int> state_next;
};

std::string print_expr(const Program& p, const ExprRef& e);
// `e` with the symbols of its load indices and index values replaced by `repl` (sym::substitute);
// nodes that do not change are shared. `memo` (optional) maps each node of `e` walked to its
// replacement, so a caller can find what became of a node it holds.
ExprRef substitute(const ExprRef& e, const std::map<sym::Expr, sym::Expr>& repl, std::map<const Expr*, ExprRef>* memo = nullptr);
std::string print_program(const Program& p);

}  // namespace ptc::loop
