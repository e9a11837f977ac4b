// Symbolic integers: immutable, hash-consed expressions over integer symbols.
//
// An expression is built from constants, symbols (each with an inclusive range), +, *, floor
// division and modulo. Every constructor returns the canonical, simplified form, and equal
// canonical forms are the same pointer, so `a == b` is structural equality.
//
// Canonical form (what the simplifier maintains):
//   * a Const is a 64-bit integer;
//   * atoms are Symbol, FloorDiv(a, b) and Mod(a, b);
//   * a Mul is a product of >= 1 atoms with positive integer exponents (sorted, no coefficient,
//     never a single atom with exponent 1);
//   * an Add is a constant plus >= 1 terms coeff*monomial (monomial = atom or Mul), sorted,
//     coefficients non-zero, never a single term with coefficient 1 and constant 0.
//   Products distribute over sums, so every polynomial has exactly one form.
// Ordering of terms and factors is structural (not pointer order), so printing is deterministic.
//
// Ranges: each symbol carries [lo, hi] (hi may be unbounded). bounds() computes an interval for
// any expression; prove_*() use it. Only provable facts are used to simplify (e.g. FloorDiv(x, c)
// -> 0 when 0 <= x < c).
//
// The intern table is process-global and thread-safe; expressions are never freed.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace ptc::sym {

enum class Kind : uint8_t { Const, Symbol, Add, Mul, FloorDiv, Mod };

// Interval with inclusive bounds; kNegInf / kPosInf mean unbounded.
struct Range {
  static constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kPosInf = std::numeric_limits<int64_t>::max();
  int64_t lo = kNegInf;
  int64_t hi = kPosInf;
  bool bounded_below() const { return lo != kNegInf; }
  bool bounded_above() const { return hi != kPosInf; }
  bool operator==(const Range& o) const { return lo == o.lo && hi == o.hi; }
};

class Node;  // interned expression node, defined in lib/sym

// A handle to an interned expression. Cheap to copy; compare with ==.
class Expr {
 public:
  Expr();                      // the constant 0
  Expr(int64_t v);             // NOLINT: implicit from integers is deliberate
  // Any other integer type (so that Expr(0) is not ambiguous with the Node* constructor).
  template <typename T, typename = std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, int64_t>>>
  Expr(T v) : Expr(static_cast<int64_t>(v)) {}  // NOLINT
  explicit Expr(const Node* n) : n_(n) {}

  Kind kind() const;
  bool is_const() const { return kind() == Kind::Const; }
  std::optional<int64_t> as_const() const;
  // Symbol accessors (valid only for Kind::Symbol).
  const std::string& name() const;
  Range symbol_range() const;
  // Children: Add -> terms (monomials, coefficient separate: coeffs()), constant via add_constant();
  // Mul -> factors (atoms, exponents: exponents()); FloorDiv/Mod -> {lhs, rhs}.
  std::vector<Expr> operands() const;
  std::vector<int64_t> coeffs() const;     // Add only, aligned with operands()
  int64_t add_constant() const;            // Add only
  std::vector<int64_t> exponents() const;  // Mul only, aligned with operands()

  const Node* node() const { return n_; }
  size_t hash() const;
  bool operator==(const Expr& o) const { return n_ == o.n_; }
  bool operator!=(const Expr& o) const { return n_ != o.n_; }
  // Structural total order (deterministic across runs).
  bool operator<(const Expr& o) const;

  std::string str() const;  // e.g. "2*s0 + 1", "s0*s1", "(s0 + 3)//4", "s0 % 8"

 private:
  const Node* n_;
};

Expr constant(int64_t v);
// A symbol named `name` with inclusive range [lo, hi]. The same (name, range) gives the same
// symbol; a different range gives a different symbol with the same name.
Expr symbol(const std::string& name, Range r = {});

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator-(Expr a);
Expr operator*(Expr a, Expr b);
// Floor division and Python-style modulo (result has the divisor's sign). Division by a
// provable zero is an error thrown as std::domain_error.
Expr floordiv(Expr a, Expr b);
Expr mod(Expr a, Expr b);
// Ceil division for non-negative operands: floordiv(a + b - 1, b).
Expr ceildiv(Expr a, Expr b);

// Rewrites c*m*(x // m) + c*(x % m) into c*x wherever both terms appear in a sum.
Expr recombine_divmod(Expr e);

// Interval arithmetic over symbol ranges (saturating; unbounded stays unbounded).
Range bounds(Expr e);
bool prove_eq(Expr a, Expr b);  // a == b for every assignment in range
bool prove_ne(Expr a, Expr b);
bool prove_lt(Expr a, Expr b);
bool prove_le(Expr a, Expr b);
bool prove_gt(Expr a, Expr b);
bool prove_ge(Expr a, Expr b);

// The symbols an expression mentions, in structural order.
std::vector<Expr> free_symbols(Expr e);
// Replace symbols (by pointer identity) and re-simplify.
Expr substitute(Expr e, const std::map<Expr, Expr>& repl);
// Evaluate with integer values for symbols (by name). Throws std::out_of_range when a symbol has
// no value, std::domain_error on division by zero.
int64_t evaluate(Expr e, const std::map<std::string, int64_t>& values);

// Parse an expression as torch.export writes it into model.json: sympy srepr
// ("Mul(Integer(2), Symbol('s0', integer=True, positive=True))", "FloorDiv(...)", "Mod(...)",
// "PythonMod(...)", "CeilToInt"/"Max"/"Min" are rejected) or plain infix ("2*s0 + 1", "s0//4",
// "Mod(s0, 8)"). `range_of(name)` gives each symbol's range. Throws std::invalid_argument with a
// message naming the offending text on anything it does not understand.
Expr parse(const std::string& text, const std::function<Range(const std::string&)>& range_of);

}  // namespace ptc::sym

template <>
struct std::hash<ptc::sym::Expr> {
  size_t operator()(const ptc::sym::Expr& e) const { return e.hash(); }
};
