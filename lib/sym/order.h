// Private to lib/sym: the structural total order on interned nodes.
#pragma once

#include <string>

#include "sym_internal.h"

namespace ptc::sym::detail {

// Const < monomials (Symbol, FloorDiv, Mod, Mul) < Add. Monomials compare as factor lists
// (an atom is the list [(atom, 1)]) lexicographically, so polynomial terms sort like a dictionary.

inline int cmp_node(const Node* a, const Node* b);

inline int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : (a > b ? 1 : 0); }

// Natural order for names ("s2" < "s10"), falling back to plain string order.
inline int cmp_name(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    bool da = a[i] >= '0' && a[i] <= '9', db = b[j] >= '0' && b[j] <= '9';
    if (da && db) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && a[i2] == '0') ++i2;
      while (j2 < b.size() && b[j2] == '0') ++j2;
      size_t ie = i2, je = j2;
      while (ie < a.size() && a[ie] >= '0' && a[ie] <= '9') ++ie;
      while (je < b.size() && b[je] >= '0' && b[je] <= '9') ++je;
      if (ie - i2 != je - j2) return ie - i2 < je - j2 ? -1 : 1;
      int c = a.compare(i2, ie - i2, b, j2, je - j2);
      if (c != 0) return c < 0 ? -1 : 1;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]) ? -1 : 1;
      ++i;
      ++j;
    }
  }
  if (i < a.size() || j < b.size()) return i < a.size() ? 1 : -1;
  int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

inline int atom_rank(Kind k) { return k == Kind::Symbol ? 0 : (k == Kind::FloorDiv ? 1 : 2); }

inline int cmp_atom(const Node* a, const Node* b) {
  if (a == b) return 0;
  if (a->kind != b->kind) return atom_rank(a->kind) < atom_rank(b->kind) ? -1 : 1;
  if (a->kind == Kind::Symbol) {
    if (int c = cmp_name(a->name, b->name)) return c;
    if (int c = cmp_i64(a->range.lo, b->range.lo)) return c;
    return cmp_i64(a->range.hi, b->range.hi);
  }
  if (int c = cmp_node(a->ops[0], b->ops[0])) return c;
  return cmp_node(a->ops[1], b->ops[1]);
}

inline int cmp_factors(size_t na, const Node* const* fa, const int64_t* ea, size_t nb, const Node* const* fb,
                const int64_t* eb) {
  for (size_t i = 0; i < na && i < nb; ++i) {
    if (int c = cmp_atom(fa[i], fb[i])) return c;
    if (int c = cmp_i64(ea[i], eb[i])) return c;
  }
  return na < nb ? -1 : (na > nb ? 1 : 0);
}

inline int node_class(Kind k) { return k == Kind::Const ? 0 : (k == Kind::Add ? 2 : 1); }

inline int cmp_node(const Node* a, const Node* b) {
  if (a == b) return 0;
  int ca = node_class(a->kind), cb = node_class(b->kind);
  if (ca != cb) return ca < cb ? -1 : 1;
  if (ca == 0) return cmp_i64(a->value, b->value);
  if (ca == 1) {
    static const int64_t one = 1;
    bool ma = a->kind == Kind::Mul, mb = b->kind == Kind::Mul;
    return cmp_factors(ma ? a->ops.size() : 1, ma ? a->ops.data() : &a, ma ? a->nums.data() : &one,
                       mb ? b->ops.size() : 1, mb ? b->ops.data() : &b, mb ? b->nums.data() : &one);
  }
  for (size_t i = 0; i < a->ops.size() && i < b->ops.size(); ++i) {
    if (int c = cmp_node(a->ops[i], b->ops[i])) return c;
    if (int c = cmp_i64(a->nums[i], b->nums[i])) return c;
  }
  if (a->ops.size() != b->ops.size()) return a->ops.size() < b->ops.size() ? -1 : 1;
  return cmp_i64(a->value, b->value);
}

}  // namespace ptc::sym::detail
