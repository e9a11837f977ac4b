// Which GEMM epilogues a GEMM library runs itself (cuBLASLt: bias, C with beta = 1, ReLU).
#include <functional>

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

// The terms of a (possibly nested) sum.
void add_terms(const ExprRef& e, std::vector<ExprRef>& out) {
  if (e->op == Op::Add) {
    add_terms(e->args[0], out);
    add_terms(e->args[1], out);
  } else {
    out.push_back(e);
  }
}

}  // namespace

std::optional<LibraryEpilogue> match_library_epilogue(const loop::Program& p, const loop::Computation& gemm, const loop::Computation& e) {
  if (gemm.kind != loop::Computation::Kind::Extern || gemm.extern_kind != loop::ExternKind::Gemm) return std::nullopt;
  if (e.kind != loop::Computation::Kind::Pointwise || !e.body || e.domain.empty()) return std::nullopt;
  if (p.buffers[e.out].dtype != DType::Float32 || p.buffers[gemm.out].dtype != DType::Float32) return std::nullopt;
  LibraryEpilogue m;
  ExprRef body = e.body;
  if (body->op == Op::Relu) {
    m.relu = true;
    body = body->args[0];
  }
  std::vector<ExprRef> terms;
  add_terms(body, terms);
  const std::vector<sym::Expr> vars = loop_vars(e.domain, e.domain.size());
  const sym::Expr own = row_major_flat(vars, e.domain);
  const sym::Expr last = vars.back();
  bool result = false;
  for (const auto& t : terms) {
    if (t->op != Op::Load || t->dtype != DType::Float32 || t->buffer == e.out) return std::nullopt;
    if (t->buffer == gemm.out) {
      if (result || !(t->index == own)) return std::nullopt;
      result = true;
      continue;
    }
    const sym::Expr off_own = t->index - own, off_last = t->index - last;
    if (m.residual < 0 && !mentions_loop_var(off_own)) {
      m.residual = t->buffer;
      m.residual_offset = off_own;
    } else if (m.bias < 0 && !mentions_loop_var(off_last)) {
      m.bias = t->buffer;
      m.bias_offset = off_last;
    } else {
      return std::nullopt;
    }
  }
  if (!result) return std::nullopt;
  return m;
}

}  // namespace ptc::sched
