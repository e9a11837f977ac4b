// Which GEMM / convolution epilogues the library runs itself (cuBLASLt: bias, C with beta = 1,
// ReLU; cuDNN: bias, z with alpha2 = 1, ReLU or clipped ReLU).
#include "ptc/schedule.h"
#include "schedule_internal.h"

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

}  // namespace

std::optional<LibraryEpilogue> match_library_epilogue(const loop::Program& p, const loop::Computation& ext, const loop::Computation& e) {
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
  // its bias and residual are read in that type).
  const DType dt = p.buffers[ext.out].dtype;
  if (p.buffers[e.out].dtype != dt || (dt != DType::Float32 && !dtype_is_half(dt))) return std::nullopt;
  LibraryEpilogue m;
  ExprRef body = strip_casts(e.body, dt);
  if (body->op == Op::Relu) {
    m.act = Act::Relu;
    body = body->args[0];
  } else if (const ExprRef lo = body->op == Op::Min ? strip_casts(body->args[0], dt) : nullptr;
             conv && lo && is_const(body->args[1], 6) && lo->op == Op::Max && is_const(lo->args[1], 0)) {
    m.act = Act::Relu6;
    body = lo->args[0];
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
  return m;
}

}  // namespace ptc::sched
