// The div-mod identity m*(x // m) + x % m == x, applied to the terms of a sum (reshapes of
// symbolic shapes produce it: x0 = 64*s1*(x0 // s1) ... ).
#include "ptc/sym.h"

namespace ptc::sym {

Expr recombine_divmod(Expr e) {
  for (int guard = 0; guard < 64 && e.kind() == Kind::Add; ++guard) {
    bool changed = false;
    auto ops = e.operands();
    auto cs = e.coeffs();
    for (size_t i = 0; i < ops.size() && !changed; ++i) {
      if (ops[i].kind() != Kind::Mod) continue;
      auto xm = ops[i].operands();
      const Expr& x = xm[0];
      const Expr& m = xm[1];
      int64_t c = cs[i];
      Expr candidate = e - ops[i] * c - floordiv(x, m) * m * c + x * c;
      // Accept when the mod (and so its floor-division partner) cancelled out.
      bool still = false;
      if (candidate.kind() == Kind::Add) {
        for (const auto& o : candidate.operands()) still = still || o == ops[i];
      } else {
        still = candidate == ops[i];
      }
      if (!still) {
        // The partner term must really have been there: the result may not grow.
        size_t before = ops.size(), after = candidate.kind() == Kind::Add ? candidate.operands().size() : 1;
        if (after < before) {
          e = candidate;
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  return e;
}

}  // namespace ptc::sym
