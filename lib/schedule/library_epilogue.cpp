// Which GEMM / convolution epilogues the library runs itself (cuBLASLt: bias, C with beta = 1,
// ReLU; cuDNN: bias, z with alpha2 = 1, ReLU or clipped ReLU).
#include "ptc/schedule.h"
#include "schedule_internal.h"

#include <cmath>

namespace ptc::sched {
namespace {

using loop::ExprRef;
using loop::Op;

bool mentions_loop_var(const sym::Expr& e) {
  for (const auto& s : sym::free_symbols(e))
    if (loop::is_loop_var(s)) return true;
  return false;
}

// `e` without conversions between float32 and the library call's type `dt`. Generated code
// computes a half-precision value in float32 and rounds it where it is stored, and so does the
// library's epilogue (one rounding of the float32 accumulator plus bias and residual: none of the
// intermediate roundings an unfused chain might name, which only lose precision).
ExprRef strip_casts(ExprRef e, DType dt) {
  auto either = [dt](DType t) { return t == DType::Float32 || t == dt; };
  while (e->op == Op::Cast && either(e->dtype) && either(e->args[0]->dtype)) e = e->args[0];
  return e;
}

// `e` with every such conversion removed, at every level: a half-precision activation that
// autocast computes with roundings in between (GPT-2's tanh-GELU rounds 0.5 x, x^3, ... to bf16)
// as the library computes it, in float32 from the accumulator and rounded once.
ExprRef strip_all_casts(const ExprRef& e, DType dt) {
  const ExprRef s = strip_casts(e, dt);
  if (s->args.empty()) return s;
  auto n = std::make_shared<loop::Expr>(*s);
  for (auto& a : n->args) a = strip_all_casts(a, dt);
  return n;
}

// The terms of a (possibly nested) sum.
void add_terms(const ExprRef& e, DType dt, std::vector<ExprRef>& out) {
  const ExprRef x = strip_casts(e, dt);
  if (x->op == Op::Add) {
    add_terms(x->args[0], dt, out);
    add_terms(x->args[1], dt, out);
  } else {
    out.push_back(x);
  }
}

bool is_const(const ExprRef& e, double v) { return e->op == Op::Const && e->value == v; }

// A constant within float32 rounding of v (the graph's constants went through float32).
bool near_const(const ExprRef& e, double v) { return e->op == Op::Const && std::abs(e->value - v) <= 1e-6 * std::abs(v); }

// Structurally the same expression (loads of the same buffer at the same index, ...).
bool same(const ExprRef& a, const ExprRef& b) {
  if (a == b) return true;
  if (a->op != b->op || a->dtype != b->dtype || a->args.size() != b->args.size()) return false;
  if (a->op == Op::Const) return a->value == b->value;
  if (a->op == Op::Load || a->op == Op::IndexVal || a->op == Op::LoadAt) {
    if (a->buffer != b->buffer || !(a->index == b->index)) return false;
  }
  for (size_t i = 0; i < a->args.size(); ++i)
    if (!same(a->args[i], b->args[i])) return false;
  return true;
}

// e = op(l, r) with l and r matching f and g in either order.
template <class F, class G>
bool commuted(const ExprRef& e, Op op, F&& f, G&& g) {
  if (e->op != op || e->args.size() != 2) return false;
  return (f(e->args[0]) && g(e->args[1])) || (f(e->args[1]) && g(e->args[0]));
}

// 0.5 * x * (1 + inner(x)), the GELUs' outer form, with x bound on success.
template <class Inner>
bool half_x_one_plus(const ExprRef& e, ExprRef* x, Inner&& inner) {
  ExprRef cand;
  auto half_x = [&](const ExprRef& h) { return commuted(h, Op::Mul, [](const ExprRef& c) { return near_const(c, 0.5); },
                                                        [&](const ExprRef& v) { cand = v; return true; }); };
  auto one_plus = [&](const ExprRef& a) {
    return cand && commuted(a, Op::Add, [](const ExprRef& c) { return near_const(c, 1.0); }, [&](const ExprRef& t) { return inner(t, cand); });
  };
  if (!commuted(e, Op::Mul, half_x, one_plus)) return false;
  *x = cand;
  return true;
}

// erf(x / sqrt(2)) as x * (1 / sqrt(2))
bool erf_of(const ExprRef& t, const ExprRef& x) {
  return t->op == Op::Erf && commuted(t->args[0], Op::Mul, [&](const ExprRef& v) { return same(v, x); },
                                      [](const ExprRef& c) { return near_const(c, M_SQRT1_2); });
}

// x * x * x, as (x * x) * x in either order
bool cube_of(const ExprRef& t, const ExprRef& x) {
  auto is_x = [&](const ExprRef& v) { return same(v, x); };
  auto square = [&](const ExprRef& v) { return commuted(v, Op::Mul, is_x, is_x); };
  return commuted(t, Op::Mul, square, is_x);
}

// tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))
bool tanh_of(const ExprRef& t, const ExprRef& x) {
  if (t->op != Op::Tanh) return false;
  auto cubic = [&](const ExprRef& v) {
    return commuted(v, Op::Mul, [](const ExprRef& c) { return near_const(c, 0.044715); }, [&](const ExprRef& c3) { return cube_of(c3, x); });
  };
  auto poly = [&](const ExprRef& v) { return commuted(v, Op::Add, [&](const ExprRef& y) { return same(y, x); }, cubic); };
  return commuted(t->args[0], Op::Mul, [](const ExprRef& c) { return near_const(c, std::sqrt(2.0 / M_PI)); }, poly);
}

// The activation `body` applies to its argument (bound to *x), among `acts`; Act::None if none.
LibraryEpilogue::Act extended_act(const ExprRef& body, LibraryActs acts, ExprRef* x) {
  using Act = LibraryEpilogue::Act;
  if ((acts & LibraryEpilogue::act_bit(Act::Gelu)) && half_x_one_plus(body, x, erf_of)) return Act::Gelu;
  if ((acts & LibraryEpilogue::act_bit(Act::GeluTanh)) && half_x_one_plus(body, x, tanh_of)) return Act::GeluTanh;
  if (acts & LibraryEpilogue::act_bit(Act::Silu)) {
    ExprRef cand;
    auto sig = [&](const ExprRef& s) { return s->op == Op::Sigmoid && (cand = s->args[0]); };
    auto arg = [&](const ExprRef& v) { return cand && same(v, cand); };
    if (body->op == Op::Mul && ((sig(body->args[1]) && arg(body->args[0])) || (sig(body->args[0]) && arg(body->args[1])))) {
      *x = cand;
      return Act::Silu;
    }
  }
  return Act::None;
}

}  // namespace

std::optional<LibraryEpilogue> match_library_epilogue(const loop::Program& p, const loop::Computation& ext, const loop::Computation& e,
                                                      LibraryActs gemm_acts) {
  using Act = LibraryEpilogue::Act;
  if (ext.kind != loop::Computation::Kind::Extern) return std::nullopt;
  const bool gemm = ext.extern_kind == loop::ExternKind::Gemm;
  // A convolution cuDNN runs: no bias operand (the CUDA lowering adds it as a pointwise op), a
  // dense weight (else the direct kernel runs it), NCHW.
  const bool conv = ext.extern_kind == loop::ExternKind::Convolution && ext.operands.size() == 2 &&
                    (ext.operands[1].dense() || ext.operands[1].channels_last()) && ext.domain.size() == 4;
  // An NHWC convolution (ConvAttrs::nhwc, domain [N, OH, OW, O]) has its channel last, as a GEMM.
  const bool nhwc = conv && ext.as<loop::ConvAttrs>().nhwc;
  if (!gemm && !conv) return std::nullopt;
  if (e.kind != loop::Computation::Kind::Pointwise || !e.body || e.domain.empty()) return std::nullopt;
  // One element type throughout (float32, or a half-precision library call's bfloat16 / float16:
  // its bias and residual are read in that type). A half-precision GEMM may also write a float32
  // result straight from its float32 accumulator (LibraryEpilogue::widens): the conversion that
  // returns an autocast model's output in float32. Then no residual (cuBLASLt reads it as C, of
  // D's type) and no bias (cuBLASLt takes a float32 D's bias only in float32: on an H100 a bf16
  // bias left the epilogue to a separate kernel, 28 us per GPT-2 layer).
  const DType dt = p.buffers[ext.out].dtype;
  if (dt != DType::Float32 && !dtype_is_half(dt)) return std::nullopt;
  LibraryEpilogue m;
  m.widens = p.buffers[e.out].dtype != dt;
  if (m.widens && !(gemm && dtype_is_half(dt) && p.buffers[e.out].dtype == DType::Float32)) return std::nullopt;
  ExprRef body = strip_casts(e.body, dt);
  if (body->op == Op::Relu) {
    m.act = Act::Relu;
    body = body->args[0];
  } else if (const ExprRef lo = body->op == Op::Min ? strip_casts(body->args[0], dt) : nullptr;
             conv && lo && is_const(body->args[1], 6) && lo->op == Op::Max && is_const(lo->args[1], 0)) {
    m.act = Act::Relu6;
    body = lo->args[0];
  } else if (ExprRef x; gemm && gemm_acts && (m.act = extended_act(strip_all_casts(body, dt), gemm_acts, &x)) != Act::None) {
    body = x;
  }
  std::vector<ExprRef> terms;
  add_terms(body, dt, terms);
  const std::vector<sym::Expr> vars = loop_vars(e.domain, e.domain.size());
  const sym::Expr own = row_major_flat(vars, e.domain);
  const sym::Expr channel = gemm || nhwc ? vars.back() : vars[1];
  bool result = false;
  for (const auto& t : terms) {
    if (t->op != Op::Load || t->dtype != dt || p.buffers[t->buffer].dtype != dt || t->buffer == e.out) return std::nullopt;
    if (t->buffer == ext.out) {
      if (result || !(t->index == own)) return std::nullopt;
      result = true;
      continue;
    }
    const sym::Expr off_own = t->index - own, off_channel = t->index - channel;
    if (m.residual < 0 && !mentions_loop_var(off_own)) {
      m.residual = t->buffer;
      m.residual_offset = off_own;
    } else if (m.bias < 0 && !mentions_loop_var(off_channel)) {
      m.bias = t->buffer;
      m.bias_offset = off_channel;
    } else {
      return std::nullopt;
    }
  }
  if (!result) return std::nullopt;
  if (conv && m.bias < 0) return std::nullopt;
  if (m.widens && (m.bias >= 0 || m.residual >= 0)) return std::nullopt;
  return m;
}

}  // namespace ptc::sched
