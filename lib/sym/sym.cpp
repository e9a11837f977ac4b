// Symbolic integer expressions: interning, canonical polynomial arithmetic, floor division /
// modulo simplification, bounds, substitution and evaluation. The structural order is in
// order.h, interval arithmetic in interval.h, printing and parsing in parse.cpp.
#include "ptc/sym.h"

#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "interval.h"
#include "order.h"
#include "sym_internal.h"

namespace ptc::sym {
namespace {

using I128 = __int128;
using detail::cmp_atom;
using detail::cmp_factors;
using detail::cmp_node;
using detail::node_class;

// ---------------------------------------------------------------- checked integer helpers

[[noreturn]] void overflow(const char* what) {
  throw std::overflow_error(std::string("ptc::sym: integer overflow in ") + what);
}
int64_t narrow(I128 v, const char* what) {
  if (v < iv::kMin || v > iv::kMax) overflow(what);
  return static_cast<int64_t>(v);
}
int64_t ck_add(int64_t a, int64_t b) { return narrow(static_cast<I128>(a) + b, "addition"); }
int64_t ck_mul(int64_t a, int64_t b) { return narrow(static_cast<I128>(a) * b, "multiplication"); }
int64_t ck_neg(int64_t a) { return narrow(-static_cast<I128>(a), "negation"); }
int64_t py_floordiv(int64_t a, int64_t b) {  // b != 0
  if (b == -1) return ck_neg(a);
  int64_t q = a / b;
  if (a % b != 0 && ((a % b < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) {  // b != 0
  if (b == 1 || b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
uint64_t abs_u(int64_t v) { return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }
uint64_t gcd_u(uint64_t a, uint64_t b) {
  while (b != 0) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// ---------------------------------------------------------------- interning

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

struct NodeHash {
  size_t operator()(const Node* n) const { return n->hash; }
};
struct NodeEq {
  bool operator()(const Node* a, const Node* b) const {
    return a->kind == b->kind && a->value == b->value && a->name == b->name &&
           a->range == b->range && a->ops == b->ops && a->nums == b->nums;
  }
};

Range compute_bounds(const Node& n) {
  switch (n.kind) {
    case Kind::Const: return Range{n.value, n.value};
    case Kind::Symbol: return n.range;
    case Kind::Add: {
      iv::Iv acc{n.value, n.value};
      for (size_t i = 0; i < n.ops.size(); ++i)
        acc = iv::add(acc, iv::scale(iv::from_range(n.ops[i]->bnd), n.nums[i]));
      return iv::to_range(acc);
    }
    case Kind::Mul: {
      iv::Iv acc{1, 1};
      for (size_t i = 0; i < n.ops.size(); ++i)
        acc = iv::mul(acc, iv::pow(iv::from_range(n.ops[i]->bnd), n.nums[i]));
      return iv::to_range(acc);
    }
    case Kind::FloorDiv:
      return iv::to_range(iv::floordiv(iv::from_range(n.ops[0]->bnd), iv::from_range(n.ops[1]->bnd)));
    case Kind::Mod:
      return iv::to_range(iv::mod(iv::from_range(n.ops[0]->bnd), iv::from_range(n.ops[1]->bnd)));
  }
  return Range{};
}

const Node* intern(Node&& n) {
  size_t h = static_cast<size_t>(n.kind);
  h = mix(h, std::hash<int64_t>()(n.value));
  if (n.kind == Kind::Symbol) {
    h = mix(h, std::hash<std::string>()(n.name));
    h = mix(mix(h, std::hash<int64_t>()(n.range.lo)), std::hash<int64_t>()(n.range.hi));
  }
  for (const Node* op : n.ops) h = mix(h, op->hash);
  for (int64_t v : n.nums) h = mix(h, std::hash<int64_t>()(v));
  n.hash = h;
  n.bnd = compute_bounds(n);

  static std::mutex* mu = new std::mutex;
  static auto* table = new std::unordered_set<const Node*, NodeHash, NodeEq>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = table->find(&n);
  if (it != table->end()) return *it;
  const Node* fresh = new Node(std::move(n));
  table->insert(fresh);
  return fresh;
}

const Node* const_node(int64_t v) {
  Node n;
  n.kind = Kind::Const;
  n.value = v;
  return intern(std::move(n));
}

Expr make_binary(Kind k, Expr a, Expr b) {
  Node n;
  n.kind = k;
  n.ops = {a.node(), b.node()};
  return Expr(intern(std::move(n)));
}

// ---------------------------------------------------------------- polynomials

struct Mono {
  std::vector<const Node*> f;  // atoms, sorted by cmp_atom
  std::vector<int64_t> e;      // positive exponents
};
struct MonoLess {
  bool operator()(const Mono& a, const Mono& b) const {
    return cmp_factors(a.f.size(), a.f.data(), a.e.data(), b.f.size(), b.f.data(), b.e.data()) < 0;
  }
};
struct Poly {
  int64_t c = 0;
  std::map<Mono, int64_t, MonoLess> t;  // zero coefficients may appear; from_poly drops them
};

Mono mono_of(const Node* m) {
  if (m->kind == Kind::Mul) return Mono{m->ops, m->nums};
  return Mono{{m}, {1}};
}

Poly poly(Expr x) {
  const Node* n = x.node();
  Poly p;
  switch (n->kind) {
    case Kind::Const: p.c = n->value; break;
    case Kind::Add:
      p.c = n->value;
      for (size_t i = 0; i < n->ops.size(); ++i) p.t.emplace(mono_of(n->ops[i]), n->nums[i]);
      break;
    default: p.t.emplace(mono_of(n), 1); break;
  }
  return p;
}

const Node* mono_node(const Mono& m) {
  if (m.f.size() == 1 && m.e[0] == 1) return m.f[0];
  Node n;
  n.kind = Kind::Mul;
  n.ops = m.f;
  n.nums = m.e;
  return intern(std::move(n));
}

Expr from(const Poly& p) {
  Node n;
  n.kind = Kind::Add;
  n.value = p.c;
  for (const auto& [m, k] : p.t) {
    if (k == 0) continue;
    n.ops.push_back(mono_node(m));
    n.nums.push_back(k);
  }
  if (n.ops.empty()) return Expr(const_node(p.c));
  if (n.ops.size() == 1 && n.nums[0] == 1 && p.c == 0) return Expr(n.ops[0]);
  return Expr(intern(std::move(n)));
}

// p += k * q
void add_into(Poly& p, const Poly& q, int64_t k) {
  p.c = narrow(p.c + static_cast<I128>(q.c) * k, "addition");
  for (const auto& [m, v] : q.t) {
    int64_t& slot = p.t[m];
    slot = narrow(slot + static_cast<I128>(v) * k, "addition");
  }
}

Mono mono_mul(const Mono& a, const Mono& b) {
  Mono r;
  size_t i = 0, j = 0;
  while (i < a.f.size() || j < b.f.size()) {
    int c = i == a.f.size() ? 1 : (j == b.f.size() ? -1 : cmp_atom(a.f[i], b.f[j]));
    if (c < 0) {
      r.f.push_back(a.f[i]);
      r.e.push_back(a.e[i++]);
    } else if (c > 0) {
      r.f.push_back(b.f[j]);
      r.e.push_back(b.e[j++]);
    } else {
      r.f.push_back(a.f[i]);
      r.e.push_back(ck_add(a.e[i++], b.e[j++]));
    }
  }
  return r;
}

Poly poly_mul(const Poly& a, const Poly& b) {
  if ((a.t.size() + 1) * (b.t.size() + 1) > detail::kMaxTermProducts)
    throw std::length_error("ptc::sym: product too large to expand");
  Poly r;
  r.c = ck_mul(a.c, b.c);
  auto acc = [&](const Mono& m, int64_t k) {
    int64_t& slot = r.t[m];
    slot = ck_add(slot, k);
    if (r.t.size() > detail::kMaxTerms) throw std::length_error("ptc::sym: expression has too many terms");
  };
  for (const auto& [m, k] : a.t)
    if (b.c != 0) acc(m, ck_mul(k, b.c));
  for (const auto& [m, k] : b.t)
    if (a.c != 0) acc(m, ck_mul(k, a.c));
  for (const auto& [ma, ka] : a.t)
    for (const auto& [mb, kb] : b.t) acc(mono_mul(ma, mb), ck_mul(ka, kb));
  return r;
}

// If monomial d divides monomial m, the quotient (possibly empty = 1).
bool mono_div(const Mono& m, const Mono& d, Mono& q) {
  q = Mono{};
  size_t j = 0;
  for (size_t i = 0; i < m.f.size(); ++i) {
    if (j < d.f.size() && m.f[i] == d.f[j]) {
      if (m.e[i] < d.e[j]) return false;
      if (m.e[i] > d.e[j]) {
        q.f.push_back(m.f[i]);
        q.e.push_back(m.e[i] - d.e[j]);
      }
      ++j;
    } else {
      q.f.push_back(m.f[i]);
      q.e.push_back(m.e[i]);
    }
  }
  return j == d.f.size();
}

// ---------------------------------------------------------------- division helpers

bool is_zero(Expr b) { return bounds(b) == Range{0, 0}; }
bool nonzero(Expr b) {
  Range r = bounds(b);
  return r.lo > 0 || r.hi < 0;
}
bool is_monomial(Expr b) { return node_class(b.kind()) == 1; }

// 0 <= r < b, provably (b provably positive).
bool in_zero_to(Expr r, Expr b) { return bounds(b).lo > 0 && prove_ge(r, Expr(0)) && prove_lt(r, b); }

// a == k * b for a constant k (b an Add); the k if so.
std::optional<int64_t> exact_multiple(Expr a, Expr b) {
  if (b.kind() != Kind::Add) return std::nullopt;
  Poly pa = poly(a), pb = poly(b);
  if (pa.t.size() != pb.t.size()) return std::nullopt;
  auto lead = pb.t.begin();
  auto it = pa.t.find(lead->first);
  if (it == pa.t.end() || py_mod(it->second, lead->second) != 0) return std::nullopt;
  try {
    int64_t k = py_floordiv(it->second, lead->second);
    add_into(pa, pb, ck_neg(k));
    if (pa.c != 0) return std::nullopt;
    for (const auto& [m, v] : pa.t)
      if (v != 0) return std::nullopt;
    return k;
  } catch (const std::overflow_error&) {
    return std::nullopt;
  }
}

// Splits p by a monomial divisor d: terms divisible by d go (divided) into q, the rest into r.
void split_by_mono(const Poly& p, Expr d, Poly& q, Poly& r) {
  Mono dm = mono_of(d.node()), quot;
  r.c = p.c;
  for (const auto& [m, k] : p.t) {
    if (!mono_div(m, dm, quot)) {
      r.t.emplace(m, k);
    } else if (quot.f.empty()) {
      q.c = ck_add(q.c, k);
    } else {
      q.t.emplace(quot, k);
    }
  }
}

// Divides out g = gcd(c, coefficients of r, constant of r); returns g.
int64_t reduce_gcd(Poly& r, int64_t& c) {
  uint64_t g = gcd_u(static_cast<uint64_t>(c), abs_u(r.c));
  for (const auto& [m, k] : r.t) g = gcd_u(g, abs_u(k));
  if (g <= 1) return 1;
  int64_t gi = static_cast<int64_t>(g);
  r.c /= gi;
  for (auto& [m, k] : r.t) k /= gi;
  c /= gi;
  return gi;
}

// floor(lo / c) == floor(hi / c) over r's bounds: that quotient.
std::optional<int64_t> same_block(Expr r, int64_t c) {
  Range b = bounds(r);
  if (!b.bounded_below() || !b.bounded_above()) return std::nullopt;
  int64_t q = py_floordiv(b.lo, c);
  if (q != py_floordiv(b.hi, c)) return std::nullopt;
  return q;
}

// The divisor of a FloorDiv/Mod node when it is a positive constant, else 0.
int64_t inner_const_divisor(Expr e) {
  const Node* d = e.node()->ops[1];
  return d->kind == Kind::Const && d->value > 0 ? d->value : 0;
}

Expr floordiv_const(Expr a, int64_t c) {  // c >= 2
  Poly p = poly(a), d, r;
  d.c = py_floordiv(p.c, c);
  r.c = py_mod(p.c, c);
  for (const auto& [m, k] : p.t) {
    if (k % c == 0) {
      d.t.emplace(m, k / c);
    } else {
      r.t.emplace(m, k);
    }
  }
  Expr base = from(d);
  if (r.t.empty()) return base;
  reduce_gcd(r, c);
  Expr rest = from(r);
  if (auto q = same_block(rest, c)) return base + Expr(*q);
  if (rest.kind() == Kind::FloorDiv) {  // (x // k) // c == x // (k * c)
    int64_t k = inner_const_divisor(rest);
    if (k > 0 && k <= iv::kMax / c) return base + floordiv(Expr(rest.node()->ops[0]), Expr(k * c));
  }
  return base + make_binary(Kind::FloorDiv, rest, Expr(c));
}

Expr mod_const(Expr a, int64_t c) {  // c >= 2
  Poly p = poly(a), r;
  r.c = py_mod(p.c, c);
  for (const auto& [m, k] : p.t)
    if (k % c != 0) r.t.emplace(m, k);
  if (r.t.empty()) return Expr(r.c);
  int64_t g = reduce_gcd(r, c);
  Expr rest = from(r), res;
  if (auto q = same_block(rest, c)) {
    res = rest - Expr(ck_mul(*q, c));
  } else if (rest.kind() == Kind::Mod && inner_const_divisor(rest) > 0 &&
             inner_const_divisor(rest) % c == 0) {
    res = mod(Expr(rest.node()->ops[0]), Expr(c));  // (x % (k*c)) % c == x % c
  } else {
    res = make_binary(Kind::Mod, rest, Expr(c));
  }
  return g == 1 ? res : Expr(g) * res;
}

Expr floordiv_sym(Expr a, Expr b) {
  if (a == Expr(0)) return Expr(0);
  if (!nonzero(b)) return make_binary(Kind::FloorDiv, a, b);
  if (a == b) return Expr(1);
  if (in_zero_to(a, b)) return Expr(0);
  if (is_monomial(b)) {
    Poly q, r;
    split_by_mono(poly(a), b, q, r);
    if (q.c != 0 || !q.t.empty()) {
      Expr rest = from(r);
      return from(q) + (rest == Expr(0) ? Expr(0) : floordiv(rest, b));
    }
  }
  if (auto k = exact_multiple(a, b)) return Expr(*k);
  // b = k m with a constant k >= 2 and m >= 1: a // b == (a // k) // m, taken where a // k leaves
  // no division (a = k q + r with 0 <= r < k: an index flattened as 768 x0 + x1, x1 < 768, over
  // a dimension of 768 s rows).
  if (bounds(b).lo > 0) {
    const Poly pb = poly(b);
    if (pb.c == 0 && pb.t.size() == 1 && pb.t.begin()->second >= 2) {
      const int64_t k = pb.t.begin()->second;
      Poly pm;
      pm.t.emplace(pb.t.begin()->first, 1);
      const Expr m = from(pm), q = floordiv(a, Expr(k));
      bool divides = true;
      for (const auto& [mono, coeff] : poly(q).t)
        for (const Node* f : mono.f) divides = divides && f->kind != Kind::FloorDiv && f->kind != Kind::Mod;
      if (divides && bounds(m).lo >= 1) return floordiv(q, m);
    }
  }
  return make_binary(Kind::FloorDiv, a, b);
}

Expr mod_sym(Expr a, Expr b) {
  if (a == Expr(0)) return Expr(0);
  if (!nonzero(b)) return make_binary(Kind::Mod, a, b);
  if (a == b) return Expr(0);
  if (in_zero_to(a, b)) return a;
  if (is_monomial(b)) {
    Poly q, r;
    split_by_mono(poly(a), b, q, r);
    if (q.c != 0 || !q.t.empty()) return mod(from(r), b);
  }
  if (exact_multiple(a, b)) return Expr(0);
  return make_binary(Kind::Mod, a, b);
}

// ---------------------------------------------------------------- evaluation / traversal

int64_t eval_node(const Node* n, const std::map<std::string, int64_t>& values,
                  std::unordered_map<const Node*, int64_t>& memo) {
  auto it = memo.find(n);
  if (it != memo.end()) return it->second;
  int64_t r = 0;
  switch (n->kind) {
    case Kind::Const: r = n->value; break;
    case Kind::Symbol: {
      auto v = values.find(n->name);
      if (v == values.end()) throw std::out_of_range("ptc::sym::evaluate: no value for symbol '" + n->name + "'");
      r = v->second;
      break;
    }
    case Kind::Add:
      r = n->value;
      for (size_t i = 0; i < n->ops.size(); ++i) r = ck_add(r, ck_mul(n->nums[i], eval_node(n->ops[i], values, memo)));
      break;
    case Kind::Mul:
      r = 1;
      for (size_t i = 0; i < n->ops.size(); ++i) {
        int64_t base = eval_node(n->ops[i], values, memo), p = 1;
        if (base == 0 || base == 1) {
          p = base;
        } else if (base == -1) {
          p = (n->nums[i] & 1) ? -1 : 1;
        } else {
          for (int64_t e = 0; e < n->nums[i]; ++e) p = ck_mul(p, base);
        }
        r = ck_mul(r, p);
      }
      break;
    case Kind::FloorDiv:
    case Kind::Mod: {
      int64_t a = eval_node(n->ops[0], values, memo), b = eval_node(n->ops[1], values, memo);
      if (b == 0) throw std::domain_error("ptc::sym::evaluate: division by zero");
      r = n->kind == Kind::FloorDiv ? py_floordiv(a, b) : py_mod(a, b);
      break;
    }
  }
  memo.emplace(n, r);
  return r;
}

Expr subst_node(const Node* n, const std::map<Expr, Expr>& repl, std::unordered_map<const Node*, Expr>& memo) {
  auto it = memo.find(n);
  if (it != memo.end()) return it->second;
  Expr r(n);
  switch (n->kind) {
    case Kind::Const: break;
    case Kind::Symbol: {
      auto s = repl.find(Expr(n));
      if (s != repl.end()) r = s->second;
      break;
    }
    case Kind::Add: {
      std::vector<std::pair<Expr, int64_t>> terms{{Expr(n->value), 1}};
      for (size_t i = 0; i < n->ops.size(); ++i) terms.emplace_back(subst_node(n->ops[i], repl, memo), n->nums[i]);
      r = detail::linear_combination(terms);
      break;
    }
    case Kind::Mul: {
      std::vector<Expr> fs;
      for (size_t i = 0; i < n->ops.size(); ++i) fs.push_back(detail::power(subst_node(n->ops[i], repl, memo), n->nums[i]));
      r = detail::product(fs);
      break;
    }
    case Kind::FloorDiv:
      r = floordiv(subst_node(n->ops[0], repl, memo), subst_node(n->ops[1], repl, memo));
      break;
    case Kind::Mod: r = mod(subst_node(n->ops[0], repl, memo), subst_node(n->ops[1], repl, memo)); break;
  }
  memo.emplace(n, r);
  return r;
}

void collect_symbols(const Node* n, std::set<Expr>& out, std::unordered_set<const Node*>& seen) {
  if (!seen.insert(n).second) return;
  if (n->kind == Kind::Symbol) out.insert(Expr(n));
  for (const Node* op : n->ops) collect_symbols(op, out, seen);
}

Range diff_bounds(Expr a, Expr b) {
  try {
    return bounds(a - b);
  } catch (const std::overflow_error&) {
    return Range{};
  } catch (const std::length_error&) {
    return Range{};
  }
}

void require(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("ptc::sym::Expr::") + what);
}

}  // namespace

// ---------------------------------------------------------------- public API

Expr::Expr() : Expr(int64_t{0}) {}
Expr::Expr(int64_t v) : n_(nullptr) {
  static const Node* small[33];  // -16..16, filled on first use
  static std::once_flag once;
  std::call_once(once, [] {
    for (int64_t i = -16; i <= 16; ++i) small[i + 16] = const_node(i);
  });
  n_ = (v >= -16 && v <= 16) ? small[v + 16] : const_node(v);
}

Kind Expr::kind() const { return n_->kind; }
std::optional<int64_t> Expr::as_const() const {
  if (n_->kind != Kind::Const) return std::nullopt;
  return n_->value;
}
const std::string& Expr::name() const {
  require(n_->kind == Kind::Symbol, "name() called on a non-symbol");
  return n_->name;
}
Range Expr::symbol_range() const {
  require(n_->kind == Kind::Symbol, "symbol_range() called on a non-symbol");
  return n_->range;
}
std::vector<Expr> Expr::operands() const {
  std::vector<Expr> r;
  for (const Node* op : n_->ops) r.emplace_back(op);
  return r;
}
std::vector<int64_t> Expr::coeffs() const {
  require(n_->kind == Kind::Add, "coeffs() called on a non-Add");
  return n_->nums;
}
int64_t Expr::add_constant() const {
  require(n_->kind == Kind::Add, "add_constant() called on a non-Add");
  return n_->value;
}
std::vector<int64_t> Expr::exponents() const {
  require(n_->kind == Kind::Mul, "exponents() called on a non-Mul");
  return n_->nums;
}
size_t Expr::hash() const { return n_->hash; }
bool Expr::operator<(const Expr& o) const { return cmp_node(n_, o.n_) < 0; }

Expr constant(int64_t v) { return Expr(v); }

Expr symbol(const std::string& name, Range r) {
  if (name.empty()) throw std::invalid_argument("ptc::sym::symbol: empty name");
  if (r.lo > r.hi) throw std::invalid_argument("ptc::sym::symbol: empty range for '" + name + "'");
  Node n;
  n.kind = Kind::Symbol;
  n.name = name;
  n.range = r;
  return Expr(intern(std::move(n)));
}

namespace detail {

Expr linear_combination(const std::vector<std::pair<Expr, int64_t>>& terms) {
  Poly acc;
  for (const auto& [e, k] : terms) add_into(acc, poly(e), k);
  return from(acc);
}

Expr product(const std::vector<Expr>& factors) {
  Poly acc;
  acc.c = 1;
  for (const Expr& f : factors) {
    if (auto c = f.as_const(); c && *c == 1) continue;
    acc = poly_mul(acc, poly(f));
  }
  return from(acc);
}

Expr power(Expr base, int64_t exp) {
  if (exp < 0) throw std::invalid_argument("ptc::sym: negative exponent");
  if (auto c = base.as_const()) {
    if (*c == 0 || *c == 1) return exp == 0 ? Expr(1) : base;
    if (*c == -1) return Expr((exp & 1) ? -1 : 1);
  }
  Poly result, sq = poly(base);
  result.c = 1;
  while (exp > 0) {
    if (exp & 1) result = poly_mul(result, sq);
    exp >>= 1;
    if (exp > 0) sq = poly_mul(sq, sq);
  }
  return from(result);
}

}  // namespace detail

Expr operator+(Expr a, Expr b) {
  if (a.is_const() && b.is_const()) return Expr(ck_add(*a.as_const(), *b.as_const()));
  return detail::linear_combination({{a, 1}, {b, 1}});
}
Expr operator-(Expr a, Expr b) { return detail::linear_combination({{a, 1}, {b, -1}}); }
Expr operator-(Expr a) { return detail::linear_combination({{a, -1}}); }
Expr operator*(Expr a, Expr b) {
  if (a.is_const() && b.is_const()) return Expr(ck_mul(*a.as_const(), *b.as_const()));
  return detail::product({a, b});
}

Expr floordiv(Expr a, Expr b) {
  if (is_zero(b)) throw std::domain_error("ptc::sym::floordiv: division by zero");
  auto c = b.as_const();
  if (!c) return floordiv_sym(a, b);
  if (auto x = a.as_const()) return Expr(py_floordiv(*x, *c));
  if (*c == 1) return a;
  if (*c == -1) return -a;
  if (*c == Range::kNegInf) return make_binary(Kind::FloorDiv, a, b);
  if (*c < 0) return floordiv(-a, Expr(-*c));  // a // c == (-a) // (-c)
  return floordiv_const(a, *c);
}

Expr mod(Expr a, Expr b) {
  if (is_zero(b)) throw std::domain_error("ptc::sym::mod: division by zero");
  auto c = b.as_const();
  if (!c) return mod_sym(a, b);
  if (auto x = a.as_const()) return Expr(py_mod(*x, *c));
  if (*c == 1 || *c == -1) return Expr(0);
  if (*c == Range::kNegInf) return make_binary(Kind::Mod, a, b);
  if (*c < 0) return -mod(-a, Expr(-*c));  // a % c == -((-a) % (-c))
  return mod_const(a, *c);
}

Expr ceildiv(Expr a, Expr b) { return floordiv(a + b - Expr(1), b); }

Range bounds(Expr e) { return e.node()->bnd; }

bool prove_eq(Expr a, Expr b) { return a == b || diff_bounds(a, b) == Range{0, 0}; }
bool prove_ne(Expr a, Expr b) {
  Range d = diff_bounds(a, b);
  return d.lo > 0 || d.hi < 0;
}
bool prove_lt(Expr a, Expr b) { return diff_bounds(a, b).hi < 0; }
bool prove_le(Expr a, Expr b) { return a == b || diff_bounds(a, b).hi <= 0; }
bool prove_gt(Expr a, Expr b) { return diff_bounds(a, b).lo > 0; }
bool prove_ge(Expr a, Expr b) { return a == b || diff_bounds(a, b).lo >= 0; }

std::vector<Expr> free_symbols(Expr e) {
  std::set<Expr> syms;
  std::unordered_set<const Node*> seen;
  collect_symbols(e.node(), syms, seen);
  return std::vector<Expr>(syms.begin(), syms.end());
}

Expr substitute(Expr e, const std::map<Expr, Expr>& repl) {
  std::unordered_map<const Node*, Expr> memo;
  return subst_node(e.node(), repl, memo);
}

int64_t evaluate(Expr e, const std::map<std::string, int64_t>& values) {
  std::unordered_map<const Node*, int64_t> memo;
  return eval_node(e.node(), values, memo);
}

}  // namespace ptc::sym
