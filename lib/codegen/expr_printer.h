// Prints loop-IR element expressions as C++ (CPU kernels) or CUDA C++ (device code): common
// subexpressions hoisted into locals, `where` branches inline so that only the chosen branch's
// loads run (or, with eager_guards, both branches with clamped loads: a blend).
#pragma once

#include <map>
#include <ostream>
#include <set>
#include <string>

#include "ptc/loop.h"

namespace ptc::codegen {

enum class Dialect { Cpu, Cuda };

// A C++ literal of `v` in dtype `t` (infinities and NaN through std::numeric_limits).
std::string literal(double v, DType t);
// The C++ type of a dtype's elements in memory (float, int64_t, bool, ..., ptc_rt::half and
// ptc_rt::bfloat16: ptc_half.h).
const char* ctype(DType t);

class ExprPrinter {
 public:
  ExprPrinter(std::ostream& os, std::string indent, Dialect dialect = Dialect::Cpu)
      : os_(os), indent_(std::move(indent)), dialect_(dialect) {}

  // Hoists `e`'s subexpressions into locals (printed now) and returns the text of its value.
  std::string print(const loop::ExprRef& e);
  // Loads of `buffer` print as `text` (a GEMM epilogue's own element, already in registers).
  void override_load(int buffer, std::string text) { overrides_[buffer] = std::move(text); }
  // Node `e` prints as `text` (a value already in registers: one lane of a vector load).
  void bind(const loop::Expr* e, std::string text) { names_[e] = std::move(text); }
  // Evaluates both branches of every `where` of `e` whose branches are safe to run anyway (no
  // integer division), with their loads' indices clamped into their buffers: a blend instead of
  // a branch, which vectorizes where masked strided loads do not (pooling windows over padding).
  // Returns false (and changes nothing) when some guarded load's buffer may be empty.
  bool eager_guards(const loop::Program& p, const loop::ExprRef& e);
  // After eager_guards: a C++ condition that holds when every clamped load's buffer has fewer
  // than 2^31 elements ("" when there is no clamped load), and the switch that then indexes
  // them with 32-bit integers: a gather with 64-bit indices does not vectorize (GCC), one with
  // 32-bit indices does (a pooling window over a batch-norm's output: 2.4x).
  std::string clamps_fit_int32() const;
  void index32(bool on) { index32_ = on; }
  // Its locals are named <prefix>t<k> (printers whose locals share one scope).
  void prefix(std::string p) { prefix_ = std::move(p); }

 private:
  void hoist(const loop::ExprRef& e);
  std::string name(const loop::ExprRef& e);
  std::string inline_text(const loop::ExprRef& e);
  std::string element(const loop::ExprRef& e, const std::string& index) const;  // a load's element of its buffer

  std::ostream& os_;
  std::string indent_;
  Dialect dialect_;
  std::map<const loop::Expr*, std::string> names_;
  std::map<int, std::string> overrides_;
  bool eager_ = false;
  bool index32_ = false;
  std::string prefix_;
  std::map<const loop::Expr*, std::string> clamp_hi_;
  std::set<const loop::Expr*> arm_loads_;  // CUDA: loads under a where's branches (ptc_cuda::ldg)
};

}  // namespace ptc::codegen
