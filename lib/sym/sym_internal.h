// Private to lib/sym: the interned node layout and n-ary builders used by the parser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ptc/sym.h"

namespace ptc::sym {

// One interned expression. Immutable after interning; never freed.
class Node {
 public:
  Kind kind = Kind::Const;
  int64_t value = 0;             // Const: the value; Add: the constant term
  std::string name;              // Symbol
  Range range;                   // Symbol: declared range
  std::vector<const Node*> ops;  // Add: terms; Mul: factors; FloorDiv/Mod: {lhs, rhs}
  std::vector<int64_t> nums;     // Add: coefficients; Mul: exponents
  size_t hash = 0;               // structural hash (children hashed by their own hash)
  Range bnd;                     // cached bounds()
};

namespace detail {

// Products whose expansion would exceed these limits throw std::length_error.
constexpr size_t kMaxTerms = 10000;
constexpr size_t kMaxTermProducts = 1000000;

// sum(coeff * expr), built in one pass without intermediate nodes.
Expr linear_combination(const std::vector<std::pair<Expr, int64_t>>& terms);
// Product of all factors (1 when empty), built in one pass.
Expr product(const std::vector<Expr>& factors);
// base ** exp for exp >= 0 (throws std::invalid_argument for a negative exponent).
Expr power(Expr base, int64_t exp);

}  // namespace detail
}  // namespace ptc::sym
