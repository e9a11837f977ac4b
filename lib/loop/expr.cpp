// Loop IR scalar expressions: builders with light folding, and the text printer.
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <algorithm>
#include <set>
#include <sstream>

#include "ptc/error.h"
#include "ptc/loop.h"

namespace ptc::loop {

const char* op_name(Op op) {
  switch (op) {
    case Op::Load: return "load";
    case Op::Const: return "const";
    case Op::IndexVal: return "index";
    case Op::LoadAt: return "load_at";
    case Op::Neg: return "neg";
    case Op::Abs: return "abs";
    case Op::Exp: return "exp";
    case Op::Log: return "log";
    case Op::Log1p: return "log1p";
    case Op::Sqrt: return "sqrt";
    case Op::Rsqrt: return "rsqrt";
    case Op::Sin: return "sin";
    case Op::Cos: return "cos";
    case Op::Tanh: return "tanh";
    case Op::Erf: return "erf";
    case Op::Sigmoid: return "sigmoid";
    case Op::Relu: return "relu";
    case Op::Floor: return "floor";
    case Op::Ceil: return "ceil";
    case Op::Round: return "round";
    case Op::Sign: return "sign";
    case Op::Reciprocal: return "reciprocal";
    case Op::Not: return "not";
    case Op::IsNan: return "isnan";
    case Op::IsInf: return "isinf";
    case Op::Cast: return "cast";
    case Op::Add: return "add";
    case Op::Sub: return "sub";
    case Op::Mul: return "mul";
    case Op::Div: return "div";
    case Op::Pow: return "pow";
    case Op::Max: return "max";
    case Op::Min: return "min";
    case Op::FloorDiv: return "floordiv";
    case Op::Mod: return "mod";
    case Op::CheckIndex: return "check_index";
    case Op::Rand: return "rand";
    case Op::Eq: return "eq";
    case Op::Ne: return "ne";
    case Op::Lt: return "lt";
    case Op::Le: return "le";
    case Op::Gt: return "gt";
    case Op::Ge: return "ge";
    case Op::And: return "and";
    case Op::Or: return "or";
    case Op::Where: return "where";
    case Op::Select: return "select";
  }
  return "?";
}

int op_arity(Op op) {
  if (op == Op::Load || op == Op::Const || op == Op::IndexVal) return 0;
  if (op == Op::LoadAt) return 2;
  if (op == Op::Where || op == Op::Select) return 3;
  if (op >= Op::Add) return 2;
  return 1;
}

namespace {

thread_local std::string t_origin;

ExprRef make(Expr e) {
  e.origin = t_origin;
  return std::make_shared<const Expr>(std::move(e));
}

void collect_origins(const ExprRef& e, std::vector<std::string>& out, std::set<const Expr*>& seen) {
  if (!seen.insert(e.get()).second) return;
  if (op_arity(e->op) > 0 && !e->origin.empty() && std::find(out.begin(), out.end(), e->origin) == out.end())
    out.push_back(e->origin);
  for (const auto& a : e->args) collect_origins(a, out, seen);
}

bool is_const(const ExprRef& e, double v) { return e->op == Op::Const && e->value == v; }

bool is_comparison(Op op) {
  return op == Op::Eq || op == Op::Ne || op == Op::Lt || op == Op::Le || op == Op::Gt || op == Op::Ge;
}

// An index value or an integer constant as a symbolic expression.
std::optional<sym::Expr> as_index(const ExprRef& e) {
  if (e->op == Op::IndexVal) return e->index;
  if (e->op == Op::Const && e->value == std::floor(e->value) && std::fabs(e->value) < 9007199254740992.0)
    return sym::Expr(static_cast<int64_t>(e->value));
  return std::nullopt;
}

// The outcome of comparison `op` of a and b where it is the same for every value of their
// variables in range (an arange compared with 0: the all-true attention mask of a BERT export).
std::optional<bool> decided(Op op, const ExprRef& a, const ExprRef& b) {
  auto x = as_index(a), y = as_index(b);
  if (!x || !y) return std::nullopt;
  try {
    switch (op) {
      case Op::Eq: if (sym::prove_eq(*x, *y)) return true; if (sym::prove_ne(*x, *y)) return false; break;
      case Op::Ne: if (sym::prove_ne(*x, *y)) return true; if (sym::prove_eq(*x, *y)) return false; break;
      case Op::Lt: if (sym::prove_lt(*x, *y)) return true; if (sym::prove_ge(*x, *y)) return false; break;
      case Op::Le: if (sym::prove_le(*x, *y)) return true; if (sym::prove_gt(*x, *y)) return false; break;
      case Op::Gt: if (sym::prove_gt(*x, *y)) return true; if (sym::prove_le(*x, *y)) return false; break;
      case Op::Ge: if (sym::prove_ge(*x, *y)) return true; if (sym::prove_lt(*x, *y)) return false; break;
      default: break;
    }
  } catch (const std::exception&) {  // (a symbolic division by zero: undecided)
  }
  return std::nullopt;
}

bool integer_dtype(DType t) { return t == DType::Int64 || t == DType::Int32 || t == DType::Int16 || t == DType::Int8 || t == DType::UInt8; }

// Whether a and b are the same value by construction: one node, equal constants, or equal index
// values of one dtype.
bool same_value(const ExprRef& a, const ExprRef& b) {
  if (a.get() == b.get()) return true;
  if (a->op != b->op || a->dtype != b->dtype) return false;
  if (a->op == Op::Const) return a->value == b->value;
  if (a->op == Op::IndexVal) return a->index == b->index;
  return false;
}

}  // namespace

std::optional<bool> decided_comparison(const ExprRef& e) {
  if (!is_comparison(e->op) || e->args.size() != 2) return std::nullopt;
  return decided(e->op, e->args[0], e->args[1]);
}

ExprRef load(int buffer, DType dt, sym::Expr index) {
  index = sym::recombine_divmod(index);
  Expr e{Op::Load, dt, {}, buffer, index, 0, {}};
  return make(std::move(e));
}

ExprRef load_at(int buffer, DType dt, sym::Expr index, ExprRef offset, sym::Expr last) {
  index = sym::recombine_divmod(index);
  if (offset->dtype != DType::Int64) offset = cast(offset, DType::Int64);
  Expr e{Op::LoadAt, dt, {offset, index_value(last)}, buffer, index, 0, {}};
  return make(std::move(e));
}

ExprRef constant(double v, DType dt) { return make(Expr{Op::Const, dt, {}, -1, sym::Expr(), v, {}}); }

ExprRef index_value(sym::Expr index, DType dt) {
  index = sym::recombine_divmod(index);
  if (auto c = index.as_const()) return constant(static_cast<double>(*c), dt);
  return make(Expr{Op::IndexVal, dt, {}, -1, index, 0, {}});
}

ExprRef unary(Op op, ExprRef a) {
  PTC_CHECK(op_arity(op) == 1 && op != Op::Cast, "unary() of ", op_name(op));
  DType dt = (op == Op::Not || op == Op::IsNan || op == Op::IsInf) ? DType::Bool : a->dtype;
  return make(Expr{op, dt, {std::move(a)}, -1, sym::Expr(), 0, {}});
}

ExprRef cast(ExprRef a, DType dt) {
  if (a->dtype == dt) return a;
  if (a->op == Op::Const) {
    double v = a->value;
    if (!dtype_is_float(dt) && dt != DType::Bool) v = std::trunc(v);
    if (dt == DType::Bool) v = v != 0 ? 1 : 0;
    return constant(v, dt);
  }
  return make(Expr{Op::Cast, dt, {std::move(a)}, -1, sym::Expr(), 0, {}});
}

ExprRef binary(Op op, ExprRef a, ExprRef b) {
  PTC_CHECK(op_arity(op) == 2, "binary() of ", op_name(op));
  if (op == Op::Add && is_const(b, 0)) return a;
  if (op == Op::Add && is_const(a, 0)) return b;
  if (op == Op::Sub && is_const(b, 0)) return a;
  if ((op == Op::Mul || op == Op::Div) && is_const(b, 1)) return a;
  if (op == Op::Mul && is_const(a, 1)) return b;
  if (is_comparison(op))
    if (auto d = decided(op, a, b)) return constant(*d ? 1 : 0, DType::Bool);
  // Integer arithmetic of index values stays an index value (a diff of an arange is one number).
  if ((op == Op::Add || op == Op::Sub || op == Op::Mul) && a->dtype == b->dtype && integer_dtype(a->dtype))
    if (auto x = as_index(a), y = as_index(b); x && y)
      return index_value(op == Op::Add ? *x + *y : op == Op::Sub ? *x - *y : *x * *y, a->dtype);
  if ((op == Op::And || op == Op::Or) && a->dtype == DType::Bool && b->dtype == DType::Bool) {
    // true and x = x, false and x = false; false or x = x, true or x = true
    for (const ExprRef* c : {&a, &b})
      if ((*c)->op == Op::Const) {
        const ExprRef& other = c == &a ? b : a;
        return ((*c)->value != 0) == (op == Op::And) ? other : constant(op == Op::And ? 0 : 1, DType::Bool);
      }
  }
  DType dt = is_comparison(op) || op == Op::And || op == Op::Or ? DType::Bool : a->dtype;
  return make(Expr{op, dt, {std::move(a), std::move(b)}, -1, sym::Expr(), 0, {}});
}

ExprRef check_index(ExprRef i, sym::Expr n) {
  if (i->dtype != DType::Int64) i = cast(i, DType::Int64);
  if (auto x = as_index(i)) {  // always inside: no check
    try {
      if (sym::prove_ge(*x, sym::Expr(0)) && sym::prove_lt(*x, n)) return i;
    } catch (const std::exception&) {
    }
  }
  return make(Expr{Op::CheckIndex, DType::Int64, {std::move(i), index_value(n)}, -1, sym::Expr(), 0, {}});
}

ExprRef rand_uniform(ExprRef key, ExprRef counter, uint32_t stream) {
  if (key->dtype != DType::Int64) key = cast(key, DType::Int64);
  if (counter->dtype != DType::Int64) counter = cast(counter, DType::Int64);
  return make(Expr{Op::Rand, DType::Float32, {std::move(key), std::move(counter)}, -1, sym::Expr(), static_cast<double>(stream), {}});
}

ExprRef where(ExprRef c, ExprRef a, ExprRef b) {
  if (c->op == Op::Const) return c->value != 0 ? a : b;
  if (same_value(a, b)) return a;
  DType dt = a->dtype;
  return make(Expr{Op::Where, dt, {std::move(c), std::move(a), std::move(b)}, -1, sym::Expr(), 0, {}});
}

OriginScope::OriginScope(std::string node) : saved_(std::move(t_origin)) { t_origin = std::move(node); }
OriginScope::~OriginScope() { t_origin = std::move(saved_); }

std::vector<std::string> origins_of(const ExprRef& e) {
  std::vector<std::string> out;
  std::set<const Expr*> seen;
  if (e) collect_origins(e, out, seen);
  return out;
}

ExprRef select(ExprRef c, ExprRef a, ExprRef b) {
  if (c->op == Op::Const) return c->value != 0 ? a : b;
  if (same_value(a, b)) return a;
  DType dt = a->dtype;
  return make(Expr{Op::Select, dt, {std::move(c), std::move(a), std::move(b)}, -1, sym::Expr(), 0, {}});
}

namespace {
// [0, hi - 1] for a size whose upper bound is hi; [0, 0] for an empty (or negative) size, whose
// loop never runs (found by fuzzing: a pooling window of size 0).
sym::Expr index_var(const std::string& name, const sym::Expr& size) {
  sym::Range r = sym::bounds(size);
  return sym::symbol(name, {0, r.bounded_above() ? std::max<int64_t>(r.hi - 1, 0) : sym::Range::kPosInf});
}
}  // namespace

sym::Expr loop_var(int d, const sym::Expr& size) { return index_var("x" + std::to_string(d), size); }

sym::Expr reduce_var(int d, const sym::Expr& size) { return index_var("r" + std::to_string(d), size); }

bool is_loop_var(const sym::Expr& s) {
  if (s.kind() != sym::Kind::Symbol) return false;
  const std::string& n = s.name();
  return n.size() > 1 && (n[0] == 'x' || n[0] == 'r') && n.find_first_not_of("0123456789", 1) == std::string::npos;
}

sym::Expr Buffer::numel() const {
  sym::Expr n = 1;
  for (const auto& s : sizes) n = n * s;
  return n;
}

const char* reduce_name(ReduceOp r) {
  switch (r) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::ArgMax: return "argmax";
    case ReduceOp::ArgMin: return "argmin";
    case ReduceOp::Any: return "any";
    case ReduceOp::All: return "all";
  }
  return "?";
}

bool View::dense() const {
  sym::Expr expect(1);
  for (size_t d = sizes.size(); d-- > 0; expect = expect * sizes[d])
    if (!(sizes[d] == sym::Expr(1)) && !(strides[d] == expect)) return false;
  return true;
}

bool View::nchw_as_one_group() const {
  if (sizes.size() != 5 || !(sizes[0] == sym::Expr(1))) return false;
  View p{buffer, {sizes[2], sizes[1], sizes[3], sizes[4]}, {strides[2], strides[1], strides[3], strides[4]}, offset};
  return p.dense();
}

bool View::channels_last() const {
  if (sizes.size() != 4) return false;
  View p{buffer, {sizes[0], sizes[2], sizes[3], sizes[1]}, {strides[0], strides[2], strides[3], strides[1]}, offset};
  return p.dense();
}

const char* extern_name(ExternKind k) {
  switch (k) {
    case ExternKind::Gemm: return "gemm";
    case ExternKind::Convolution: return "conv";
    case ExternKind::Attention: return "attention";
    case ExternKind::Scatter: return "scatter";
    case ExternKind::ConvWeightGrad: return "conv_weight_grad";
    case ExternKind::ConvInputGrad: return "conv_input_grad";
    case ExternKind::MaxPoolGrad: return "max_pool_grad";
  }
  return "?";
}

ExternAttrs default_attrs(ExternKind k) {
  switch (k) {
    case ExternKind::Gemm: return GemmAttrs{};
    case ExternKind::Convolution: case ExternKind::ConvWeightGrad: case ExternKind::ConvInputGrad: return ConvAttrs{};
    case ExternKind::Attention: return AttentionAttrs{};
    case ExternKind::Scatter: return ScatterAttrs{};
    case ExternKind::MaxPoolGrad: return MaxPoolGradAttrs{};
  }
  return GemmAttrs{};
}

bool attrs_match(ExternKind k, const ExternAttrs& a) { return default_attrs(k).index() == a.index(); }

namespace {

std::string pair_str(const std::array<int64_t, 2>& v) { return "[" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + "]"; }

// An extern's attributes as " name=value ..." (nothing for their defaults' flags).
std::string print_attrs(const ExternAttrs& attrs) {
  std::ostringstream os;
  if (const auto* g = std::get_if<GemmAttrs>(&attrs)) {
    if (g->of_convolution) os << " of_convolution";
    if (g->library) os << " library";
  } else if (const auto* c = std::get_if<ConvAttrs>(&attrs)) {
    os << " stride=" << pair_str(c->stride) << " padding=" << pair_str(c->padding) << " dilation=" << pair_str(c->dilation)
       << " groups=" << c->groups << (c->nhwc ? " nhwc" : "");
  } else if (const auto* a = std::get_if<AttentionAttrs>(&attrs)) {
    os << " mask_kind=" << a->mask_kind << " scale=" << a->scale << (a->causal ? " causal" : "")
       << (a->masked_rows_zero ? " masked_rows_zero" : "") << (a->heads_inner ? " heads_inner" : "") << (a->time_outer ? " time_outer" : "")
       << (a->kv_group > 1 ? " kv_group=" + std::to_string(a->kv_group) : "");
  } else if (const auto* sa = std::get_if<ScatterAttrs>(&attrs)) {
    os << " dim=" << sa->dim << (sa->accumulate ? " accumulate" : "") << (sa->in_place ? " in_place" : "");
  } else if (const auto* m = std::get_if<MaxPoolGradAttrs>(&attrs)) {
    os << " kernel=" << pair_str(m->kernel) << " stride=" << pair_str(m->stride) << " padding=" << pair_str(m->padding)
       << " dilation=" << pair_str(m->dilation);
  }
  return os.str();
}

}  // namespace

std::string print_expr(const Program& p, const ExprRef& e) {
  switch (e->op) {
    case Op::Load: {
      const std::string& name = e->buffer >= 0 && e->buffer < static_cast<int>(p.buffers.size()) ? p.buffers[e->buffer].name : "?";
      return name + "[" + e->index.str() + "]";
    }
    case Op::Const: {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.9g", e->value);
      return buf;
    }
    case Op::IndexVal: return "index(" + e->index.str() + ")";
    case Op::LoadAt: {
      const std::string& name = e->buffer >= 0 && e->buffer < static_cast<int>(p.buffers.size()) ? p.buffers[e->buffer].name : "?";
      return name + "[" + e->index.str() + " + " + print_expr(p, e->args[0]) + "]";
    }
    case Op::Cast: return std::string("cast<") + dtype_short(e->dtype) + ">(" + print_expr(p, e->args[0]) + ")";
    case Op::Rand:
      return "rand(" + print_expr(p, e->args[0]) + ", " + print_expr(p, e->args[1]) + ", stream " +
             std::to_string(static_cast<uint32_t>(e->value)) + ")";
    default: break;
  }
  std::string s = std::string(op_name(e->op)) + "(";
  for (size_t i = 0; i < e->args.size(); ++i) s += (i ? ", " : "") + print_expr(p, e->args[i]);
  return s + ")";
}

namespace {

std::string sizes_str(const std::vector<sym::Expr>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i].str();
  return s + "]";
}

const char* kind_name(Buffer::Kind k) {
  switch (k) {
    case Buffer::Kind::Input: return "input";
    case Buffer::Kind::Weight: return "weight";
    case Buffer::Kind::Temp: return "temp";
    case Buffer::Kind::Output: return "output";
    case Buffer::Kind::State: return "state";
    case Buffer::Kind::StateNext: return "state_next";
  }
  return "?";
}

}  // namespace

ExprRef substitute(const ExprRef& e, const std::map<sym::Expr, sym::Expr>& repl, std::map<const Expr*, ExprRef>* memo) {
  std::map<const Expr*, ExprRef> own;
  std::map<const Expr*, ExprRef>& done = memo ? *memo : own;
  std::function<ExprRef(const ExprRef&)> walk = [&](const ExprRef& n) -> ExprRef {
    auto it = done.find(n.get());
    if (it != done.end()) return it->second;
    Expr copy = *n;
    bool changed = false;
    for (auto& a : copy.args) {
      ExprRef b = walk(a);
      changed = changed || b != a;
      a = std::move(b);
    }
    if (n->op == Op::Load || n->op == Op::LoadAt || n->op == Op::IndexVal) {
      sym::Expr at = sym::substitute(n->index, repl);
      changed = changed || !(at == n->index);
      copy.index = std::move(at);
    }
    ExprRef out = changed ? std::make_shared<const Expr>(std::move(copy)) : n;
    done.emplace(n.get(), out);
    return out;
  };
  return walk(e);
}

std::string print_program(const Program& p) {
  std::ostringstream os;
  for (const auto& b : p.buffers) {
    os << kind_name(b.kind) << " " << b.name << ": " << dtype_short(b.dtype) << sizes_str(b.sizes);
    if (b.kind == Buffer::Kind::Input || b.kind == Buffer::Kind::Weight || b.kind == Buffer::Kind::State) {
      if (b.strides != std::vector<sym::Expr>() ) os << " strides " << sizes_str(b.strides);
      if (!(b.offset == sym::Expr(0))) os << " offset " << b.offset.str();
    }
    if (!b.weight.empty()) os << " = \"" << b.weight << "\"";
    os << "\n";
  }
  for (const auto& c : p.comps) {
    const std::string& out = p.buffers[c.out].name;
    switch (c.kind) {
      case Computation::Kind::Pointwise:
        os << out << " = pointwise " << sizes_str(c.domain) << " { " << print_expr(p, c.body) << " }";
        break;
      case Computation::Kind::Reduction:
        os << out << " = reduce_" << reduce_name(c.reduce) << " " << sizes_str(c.domain) << " over "
           << sizes_str(c.reduce_domain) << " { " << print_expr(p, c.body) << " }";
        break;
      case Computation::Kind::Extern: {
        os << out << " = " << extern_name(c.extern_kind) << "(";
        for (size_t i = 0; i < c.operands.size(); ++i) {
          const View& v = c.operands[i];
          os << (i ? ", " : "") << p.buffers[v.buffer].name << sizes_str(v.sizes) << "{" << sizes_str(v.strides) << "+"
             << v.offset.str() << "}";
        }
        os << ")" << print_attrs(c.attrs);
        break;
      }
    }
    if (!c.origin.empty()) os << "  # " << c.origin;
    os << "\n";
  }
  return os.str();
}

}  // namespace ptc::loop
