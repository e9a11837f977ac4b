// Tests for ptc::sym: symbolic integer expressions (lib/sym).
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ptc/sym.h"

using namespace ptc::sym;

namespace {

const Range kUnbounded{};

Range range_for(const std::string& name) {
  if (name == "x") return {0, 7};
  if (name == "y") return {-3, 5};
  if (name == "z") return {1, 4};
  if (name == "s0" || name == "s1" || name == "s77") return {2, Range::kPosInf};
  return kUnbounded;
}

Expr parse_test(const std::string& text) { return parse(text, range_for); }

// Python semantics, the reference for the property tests.
__int128 py_floordiv(__int128 a, __int128 b) {
  __int128 q = a / b;
  if (a % b != 0 && ((a % b < 0) != (b < 0))) --q;
  return q;
}
__int128 py_mod(__int128 a, __int128 b) { return a - b * py_floordiv(a, b); }

}  // namespace

TEST_CASE("sym: constants, symbols and hash-consing", "[sym]") {
  Expr zero;
  CHECK(zero.is_const());
  CHECK(zero.as_const() == 0);
  CHECK(zero == Expr(0));
  CHECK(Expr(42) == constant(42));
  CHECK(Expr(42).node() == constant(42).node());
  CHECK(Expr(size_t{5}) == Expr(5));

  Expr a = symbol("a", {0, 10});
  CHECK(a.kind() == Kind::Symbol);
  CHECK(a.name() == "a");
  CHECK(a.symbol_range() == Range{0, 10});
  CHECK(a == symbol("a", {0, 10}));
  CHECK(a != symbol("a", {0, 11}));  // same name, different range: a different symbol
  CHECK(a != symbol("b", {0, 10}));
  CHECK(!a.as_const());
  CHECK_THROWS_AS(symbol("bad", {5, 3}), std::invalid_argument);
  CHECK_THROWS_AS(symbol("", {}), std::invalid_argument);
  CHECK_THROWS_AS(Expr(3).name(), std::logic_error);

  Expr b = symbol("b");
  Expr e1 = (a + 1) * (b - 2);
  Expr e2 = (b - 2) * (1 + a);
  CHECK(e1 == e2);
  CHECK(e1.node() == e2.node());
  CHECK(e1.hash() == e2.hash());
  CHECK(std::hash<Expr>()(e1) == e1.hash());
}

TEST_CASE("sym: canonical polynomial forms", "[sym]") {
  Expr a = symbol("a"), b = symbol("b"), c = symbol("c");
  CHECK(a + b == b + a);
  CHECK(a * b == b * a);
  CHECK((a + b) + c == a + (b + c));
  CHECK((a * b) * c == a * (b * c));
  CHECK((a + b) * (a - b) == a * a - b * b);
  CHECK(2 * a - a - a == Expr(0));
  CHECK(a * 0 == Expr(0));
  CHECK(a - a == Expr(0));
  CHECK(a * 1 == a);
  CHECK(a + 0 == a);
  CHECK(-(-a) == a);
  CHECK((a + 1) * (a + 1) == a * a + 2 * a + 1);
  CHECK(a * (b + c) == a * b + a * c);
  CHECK(Expr(3) + Expr(4) == Expr(7));
  CHECK(Expr(3) * Expr(-4) == Expr(-12));

  Expr sum = 3 * a + 2 * b + 5;
  REQUIRE(sum.kind() == Kind::Add);
  CHECK(sum.operands() == std::vector<Expr>{a, b});
  CHECK(sum.coeffs() == std::vector<int64_t>{3, 2});
  CHECK(sum.add_constant() == 5);

  Expr prod = a * a * b;
  REQUIRE(prod.kind() == Kind::Mul);
  CHECK(prod.operands() == std::vector<Expr>{a, b});
  CHECK(prod.exponents() == std::vector<int64_t>{2, 1});
  CHECK((2 * a).kind() == Kind::Add);  // a coefficient makes an Add with one term

  // Structural order is total and consistent with equality.
  CHECK(Expr(1) < a);
  CHECK(a < b);
  CHECK(!(b < a));
  CHECK(!(a < a));
  CHECK(a < a + 1);

  // Overflowing constant arithmetic is reported, not wrapped.
  CHECK_THROWS_AS(Expr(Range::kPosInf) + 1, std::overflow_error);
  CHECK_THROWS_AS(Expr(Range::kPosInf) * 2, std::overflow_error);
}

TEST_CASE("sym: printing", "[sym]") {
  Expr s0 = symbol("s0"), s1 = symbol("s1"), s2 = symbol("s2"), s10 = symbol("s10");
  CHECK(Expr(0).str() == "0");
  CHECK(Expr(-17).str() == "-17");
  CHECK(s0.str() == "s0");
  CHECK((2 * s0 + 1).str() == "2*s0 + 1");
  CHECK((s0 * s1).str() == "s0*s1");
  CHECK((s0 * s0).str() == "s0**2");
  CHECK((-s0 + 3).str() == "-s0 + 3");
  CHECK((s0 - 3).str() == "s0 - 3");
  CHECK((s1 - 2 * s0).str() == "-2*s0 + s1");
  CHECK((s10 + s2).str() == "s2 + s10");  // natural order of names
  CHECK((s0 * s0 * s1 * 3).str() == "3*s0**2*s1");
  CHECK(floordiv(s0 + 3, 4).str() == "(s0 + 3)//4");
  CHECK(floordiv(s0, 4).str() == "s0//4");
  CHECK(mod(s0, 8).str() == "s0 % 8");
  CHECK((floordiv(s0, 4) + 1).str() == "s0//4 + 1");
  CHECK((2 * floordiv(s0, 4)).str() == "2*(s0//4)");
  CHECK((1 - floordiv(s0, 4)).str() == "-(s0//4) + 1");
  CHECK((s1 * floordiv(s0, 4)).str() == "s1*(s0//4)");
  CHECK((floordiv(s0, 4) * floordiv(s0, 4)).str() == "(s0//4)**2");
  CHECK(floordiv(s0, s1 + 1).str() == "s0//(s1 + 1)");
  CHECK(floordiv(s0 * s1, 4).str() == "s0*s1//4");
  CHECK(mod(s0 + s1, s2).str() == "(s0 + s1) % s2");
  CHECK(floordiv(mod(s0, s1), 4).str() == "(s0 % s1)//4");
  CHECK(ceildiv(s0, 4).str() == "(s0 + 3)//4");
}

TEST_CASE("sym: floordiv and mod of constants use Python semantics", "[sym]") {
  CHECK(floordiv(Expr(7), Expr(2)) == Expr(3));
  CHECK(floordiv(Expr(-7), Expr(2)) == Expr(-4));
  CHECK(floordiv(Expr(7), Expr(-2)) == Expr(-4));
  CHECK(floordiv(Expr(-7), Expr(-2)) == Expr(3));
  CHECK(floordiv(Expr(-8), Expr(2)) == Expr(-4));
  CHECK(mod(Expr(7), Expr(2)) == Expr(1));
  CHECK(mod(Expr(-7), Expr(2)) == Expr(1));
  CHECK(mod(Expr(7), Expr(-2)) == Expr(-1));
  CHECK(mod(Expr(-7), Expr(-2)) == Expr(-1));
  CHECK(mod(Expr(-8), Expr(2)) == Expr(0));
  CHECK(mod(Expr(Range::kNegInf), Expr(-1)) == Expr(0));
  CHECK_THROWS_AS(floordiv(Expr(Range::kNegInf), Expr(-1)), std::overflow_error);
  CHECK(ceildiv(Expr(7), Expr(2)) == Expr(4));
  CHECK(ceildiv(Expr(8), Expr(2)) == Expr(4));

  Expr s = symbol("s");
  CHECK_THROWS_AS(floordiv(s, Expr(0)), std::domain_error);
  CHECK_THROWS_AS(mod(s, Expr(0)), std::domain_error);
  CHECK_THROWS_AS(floordiv(Expr(3), Expr(0)), std::domain_error);
  CHECK_THROWS_AS(floordiv(s, symbol("zero", {0, 0})), std::domain_error);
  CHECK_THROWS_AS(mod(s, s - s), std::domain_error);
}

TEST_CASE("sym: floordiv and mod simplification", "[sym]") {
  Expr s = symbol("s"), t = symbol("t");
  Expr x = symbol("x", {0, 7}), y = symbol("y", {0, 3});
  Expr p = symbol("p", {1, 64});

  CHECK(floordiv(s, 1) == s);
  CHECK(floordiv(s, -1) == -s);
  CHECK(mod(s, 1) == Expr(0));
  CHECK(mod(s, -1) == Expr(0));
  CHECK(floordiv(8 * s + 16, 8) == s + 2);
  CHECK(floordiv(8 * s + 8 * t, 4) == 2 * s + 2 * t);
  CHECK(floordiv(8 * s + 3, 8) == s);  // remainder 3 in [0, 8)
  CHECK(floordiv(8 * s - 1, 8) == s - 1);
  CHECK(floordiv(8 * s + 12, 8) == s + 1);
  CHECK(floordiv(8 * s + t, 8) == s + floordiv(t, 8));
  CHECK(floordiv(2 * s + 2, 4) == floordiv(s + 1, 2));  // common factor
  CHECK(floordiv(s + 4, 4) == floordiv(s, 4) + 1);
  CHECK(floordiv(s - 1, 4) == floordiv(s + 3, 4) - 1);
  CHECK(floordiv(floordiv(s, 4), 2) == floordiv(s, 8));
  CHECK(floordiv(floordiv(s + 3, 4), 2) == floordiv(s + 3, 8));
  CHECK(floordiv(s, -4) == floordiv(-s, 4));

  CHECK(mod(8 * s + 3, 8) == Expr(3));
  CHECK(mod(8 * s + t, 8) == mod(t, 8));
  CHECK(mod(s + 9, 8) == mod(s + 1, 8));
  CHECK(mod(mod(s, 8), 4) == mod(s, 4));
  CHECK(mod(mod(s, 4), 8) == mod(s, 4));  // range [0, 3]
  CHECK(mod(4 * s + 2, 8) == 2 * mod(2 * s + 1, 4));
  CHECK(mod(s, -3) == -mod(-s, 3));

  // Range-based: x in [0, 7].
  CHECK(floordiv(x, 8) == Expr(0));
  CHECK(mod(x, 8) == x);
  CHECK(floordiv(x + 8, 8) == Expr(1));
  CHECK(mod(x + 8, 8) == x);
  CHECK(mod(x - 8, 8) == x);
  CHECK(floordiv(8 * s + x, 8) == s);
  CHECK(mod(8 * s + x, 8) == x);
  CHECK(floordiv(x + 2 * y, 16) == Expr(0));  // [0, 13]
  CHECK(floordiv(x, 4) != Expr(0));
  CHECK(mod(x, 4) != x);

  // Symbolic divisors.
  CHECK(floordiv(p * s, p) == s);
  CHECK(floordiv(p * s + p * t, p) == s + t);
  CHECK(mod(p * s, p) == Expr(0));
  CHECK(mod(p * s + t, p) == mod(t, p));
  CHECK(floordiv(p * s + t, p) == s + floordiv(t, p));
  CHECK(floordiv(p * p * s + p * t + x, p * p) == s + floordiv(p * t + x, p * p));
  CHECK(floordiv(p, p) == Expr(1));
  CHECK(mod(p, p) == Expr(0));
  CHECK(floordiv(p * s + x, p + 7) != s);  // not a monomial divisor: stays as an atom
  CHECK(floordiv(Expr(0), p) == Expr(0));
  CHECK(floordiv(2 * p + 2, p + 1) == Expr(2));
  CHECK(mod(3 * p + 3, p + 1) == Expr(0));
  Expr q = symbol("q", {8, 20});
  CHECK(floordiv(q * s + x, q) == s);  // x in [0, 7] < q
  CHECK(mod(q * s + x, q) == x);
  CHECK(floordiv(x, q) == Expr(0));
  CHECK(mod(x, q) == x);
  CHECK(floordiv(s, t).kind() == Kind::FloorDiv);  // t may be zero: kept as is
  CHECK(mod(s, t).kind() == Kind::Mod);
  // A constant multiple of a positive symbol: (8 s + x) // (8 p) == s // p, x in [0, 7].
  CHECK(floordiv(8 * s + x, 8 * p) == floordiv(s, p));
  CHECK(mod(floordiv(8 * s + x, 8 * p), Expr(5)) == mod(floordiv(s, p), Expr(5)));
  CHECK(floordiv(8 * s + t, 8 * p).kind() == Kind::FloorDiv);  // t unbounded: kept
  CHECK(floordiv(8 * s + t, 8 * p) != floordiv(s, p));
}

TEST_CASE("sym: bounds", "[sym]") {
  Expr x = symbol("x", {0, 7}), y = symbol("y", {-3, 5}), u = symbol("u"), n = symbol("n", {1, Range::kPosInf});
  CHECK(bounds(Expr(5)) == Range{5, 5});
  CHECK(bounds(x) == Range{0, 7});
  CHECK(bounds(u) == Range{});
  CHECK(bounds(x + y) == Range{-3, 12});
  CHECK(bounds(x - y) == Range{-5, 10});
  CHECK(bounds(2 * x + 1) == Range{1, 15});
  CHECK(bounds(x * y) == Range{-21, 35});
  CHECK(bounds(y * y) == Range{0, 25});
  CHECK(bounds(y * y * y) == Range{-27, 125});
  Expr w = symbol("w", {-5, 3});
  CHECK(bounds(w * w) == Range{0, 25});
  CHECK(bounds(w * w * w) == Range{-125, 27});
  CHECK(bounds(w * y) == Range{-25, 15});
  CHECK(bounds(u * u) == Range{0, Range::kPosInf});
  CHECK(bounds(-(u * u)) == Range{Range::kNegInf, 0});
  CHECK(bounds(u + 1) == Range{});
  CHECK(bounds(n + 1) == Range{2, Range::kPosInf});
  CHECK(bounds(-n) == Range{Range::kNegInf, -1});
  CHECK(bounds(n * n) == Range{1, Range::kPosInf});
  CHECK(bounds(mod(u, 8)) == Range{0, 7});
  CHECK(bounds(mod(u, -8)) == Range{-7, 0});
  CHECK(bounds(floordiv(x + 3, 4)) == Range{0, 2});
  CHECK(bounds(floordiv(y, 2)) == Range{-2, 2});
  CHECK(bounds(floordiv(n, 4)) == Range{0, Range::kPosInf});
  CHECK(bounds(mod(x + 2 * y, 4)) == Range{0, 3});
  CHECK(bounds(floordiv(x, n)) == Range{0, 7});
  CHECK(bounds(mod(u, n)).lo == 0);
  Expr k8 = symbol("k8", {8, 8}), x6 = symbol("x6", {0, 6});
  CHECK(bounds(mod(x6 + 9, k8)) == Range{1, 7});
  CHECK(bounds(floordiv(x6 + 9, k8)) == Range{1, 1});
  // Saturation: huge ranges never wrap.
  Expr big = symbol("big", {0, Range::kPosInf - 1});
  CHECK(bounds(big * big) == Range{0, Range::kPosInf});
  CHECK(bounds(big + big) == Range{0, Range::kPosInf});
  CHECK(bounds(-big - big) == Range{Range::kNegInf, 0});
  Expr huge = symbol("huge", {Range::kPosInf - 1, Range::kPosInf - 1});
  CHECK(bounds(huge * huge).hi == Range::kPosInf);
}

TEST_CASE("sym: prove helpers", "[sym]") {
  Expr x = symbol("x", {0, 7}), n = symbol("n", {8, 100}), u = symbol("u");
  CHECK(prove_lt(x, n));
  CHECK(prove_le(x, n));
  CHECK(prove_gt(n, x));
  CHECK(prove_ge(n, x));
  CHECK(prove_ne(x, n));
  CHECK(!prove_eq(x, n));
  CHECK(prove_eq(x + u - u, x));
  CHECK(prove_eq(u, u));
  CHECK(prove_le(u, u));
  CHECK(prove_ge(u, u));
  CHECK(!prove_lt(u, u));
  CHECK(!prove_lt(u, Expr(0)));
  CHECK(!prove_ge(u, Expr(0)));
  CHECK(!prove_ne(u, Expr(0)));
  CHECK(prove_ge(u * u, Expr(0)));
  CHECK(prove_lt(x, Expr(8)));
  CHECK(!prove_lt(x, Expr(7)));
  CHECK(prove_le(x, Expr(7)));
  CHECK(prove_lt(u, u + 1));
  CHECK(prove_eq(mod(x, 8), x));
  CHECK(prove_lt(mod(u, 8), Expr(8)));
}

TEST_CASE("sym: free_symbols, substitute, evaluate", "[sym]") {
  Expr a = symbol("a", {0, 10}), b = symbol("b"), c = symbol("c", {1, 5});
  Expr e = floordiv(a * b + 3, c) + mod(b, 4) * a;
  CHECK(free_symbols(e) == std::vector<Expr>{a, b, c});
  CHECK(free_symbols(Expr(3)).empty());
  CHECK(free_symbols(a * a + a) == std::vector<Expr>{a});

  CHECK(substitute(a + b, {{a, Expr(2)}}) == b + 2);
  CHECK(substitute(a * b, {{b, a}}) == a * a);
  CHECK(substitute(floordiv(b, 4), {{b, 8 * a + 4}}) == 2 * a + 1);
  CHECK(substitute(mod(b, 4), {{b, 4 * a + 1}}) == Expr(1));
  CHECK(substitute(e, {}) == e);
  CHECK(substitute(e, {{a, Expr(2)}, {b, Expr(5)}, {c, Expr(3)}}) == Expr(4 + 2));
  CHECK_THROWS_AS(substitute(floordiv(a, c), {{c, Expr(0)}}), std::domain_error);

  std::map<std::string, int64_t> v{{"a", 2}, {"b", 5}, {"c", 3}};
  CHECK(evaluate(e, v) == 6);  // (13 // 3) + (5 % 4) * 2
  CHECK(evaluate(Expr(-7), {}) == -7);
  CHECK(evaluate(floordiv(b, 2), {{"b", -7}}) == -4);
  CHECK(evaluate(mod(b, 2), {{"b", -7}}) == 1);
  CHECK(evaluate(mod(b, -2), {{"b", 7}}) == -1);
  CHECK(evaluate(b * b * b, {{"b", -3}}) == -27);
  CHECK_THROWS_AS(evaluate(a + b, {{"a", 1}}), std::out_of_range);
  CHECK_THROWS_AS(evaluate(floordiv(a, b), {{"a", 1}, {"b", 0}}), std::domain_error);
  CHECK_THROWS_AS(evaluate(mod(a, b), {{"a", 1}, {"b", 0}}), std::domain_error);
  CHECK_THROWS_AS(evaluate(b * b, {{"b", int64_t{1} << 40}}), std::overflow_error);
  CHECK_THROWS_AS(evaluate(b + 1, {{"b", Range::kPosInf}}), std::overflow_error);
  CHECK_THROWS_AS(evaluate(floordiv(b, a - 3), {{"a", 2}, {"b", Range::kNegInf}}), std::overflow_error);
  CHECK_THROWS_AS(evaluate(b * b * b * b * b * b * b * b, {{"b", 300}}), std::overflow_error);
}

TEST_CASE("sym: parse sympy srepr", "[sym][parse]") {
  Expr s77 = symbol("s77", range_for("s77")), s0 = symbol("s0", range_for("s0")), s1 = symbol("s1", range_for("s1"));
  CHECK(parse_test("Symbol('s77', positive=True, integer=True)") == s77);
  CHECK(parse_test("Symbol(\"s77\")") == s77);
  CHECK(parse_test("Integer(4)") == Expr(4));
  CHECK(parse_test("Integer(-4)") == Expr(-4));
  CHECK(parse_test("Add(Integer(1), Symbol('s0', integer=True, positive=True))") == s0 + 1);
  CHECK(parse_test("Mul(Integer(2), Symbol('s0', integer=True, positive=True))") == 2 * s0);
  CHECK(parse_test("Mul(Integer(-1), Symbol('s0', integer=True, positive=True))") == -s0);
  CHECK(parse_test("Pow(Symbol('s0', integer=True, positive=True), Integer(2))") == s0 * s0);
  CHECK(parse_test("FloorDiv(Symbol('s0', integer=True, positive=True), Integer(4))") == floordiv(s0, 4));
  CHECK(parse_test("Mod(Symbol('s0', integer=True, positive=True), Integer(8))") == mod(s0, 8));
  CHECK(parse_test("PythonMod(Symbol('s0', integer=True, positive=True), Integer(8))") == mod(s0, 8));
  CHECK(parse_test("Add(Mul(Integer(2), Symbol('s0', integer=True, positive=True)), "
                   "Mul(Symbol('s0', integer=True, positive=True), Symbol('s1', integer=True, positive=True)), "
                   "Integer(-3))") == 2 * s0 + s0 * s1 - 3);
  CHECK(parse_test("FloorDiv(Add(Symbol('s0', integer=True, positive=True), Integer(3)), Integer(4))") ==
        floordiv(s0 + 3, 4));
  // The symbol gets its range from the callback.
  CHECK(parse_test("Symbol('x', integer=True)").symbol_range() == Range{0, 7});
  CHECK(parse_test("FloorDiv(Symbol('x', integer=True), Integer(8))") == Expr(0));
}

TEST_CASE("sym: parse infix", "[sym][parse]") {
  Expr s77 = symbol("s77", range_for("s77")), s0 = symbol("s0", range_for("s0")), s1 = symbol("s1", range_for("s1"));
  CHECK(parse_test("s77") == s77);
  CHECK(parse_test("  s77  ") == s77);
  CHECK(parse_test("2*s77 + 1") == 2 * s77 + 1);
  CHECK(parse_test("s0//4") == floordiv(s0, 4));
  CHECK(parse_test("s0*s1") == s0 * s1);
  CHECK(parse_test("s0**2") == s0 * s0);
  CHECK(parse_test("-s0") == -s0);
  CHECK(parse_test("-s0**2") == -(s0 * s0));  // ** binds tighter than unary minus
  CHECK(parse_test("2**3**2") == Expr(512));  // right-associative
  CHECK(parse_test("Mod(s0, 8)") == mod(s0, 8));
  CHECK(parse_test("FloorDiv(s0, 4)") == floordiv(s0, 4));
  CHECK(parse_test("s0 % 8") == mod(s0, 8));
  CHECK(parse_test("(s0 + 3)//4") == floordiv(s0 + 3, 4));
  CHECK(parse_test("s0*s1//4") == floordiv(s0 * s1, 4));  // left-associative
  CHECK(parse_test("s0//4*s1") == floordiv(s0, 4) * s1);
  CHECK(parse_test("s0 - s1 - 1") == s0 - s1 - 1);
  CHECK(parse_test("-(s0 - 1)") == 1 - s0);
  CHECK(parse_test("((((s0))))") == s0);
  CHECK(parse_test("3 - -s0") == s0 + 3);
  CHECK(parse_test("s0*(s1 + 1)") == s0 * s1 + s0);
  CHECK(parse_test("x//8") == Expr(0));
}

TEST_CASE("sym: parse decides Min/Max from symbol ranges", "[sym][parse]") {
  auto range = [](const std::string& n) { return n == "s27" ? Range{2, 512} : Range{1, Range::kPosInf}; };
  Expr s27 = symbol("s27", {2, 512});
  CHECK(parse("Min(Integer(64), Mul(Integer(64), Symbol('s27', positive=True, integer=True)))", range) == Expr(64));
  CHECK(parse("Max(Integer(64), Mul(Integer(64), Symbol('s27', positive=True, integer=True)))", range) == s27 * 64);
  CHECK(parse("Max(1, s27, 2)", range) == s27);
  CHECK_THROWS_AS(parse("Min(s27, 100)", range), std::invalid_argument);
}

TEST_CASE("sym: parse rejects malformed input", "[sym][parse]") {
  const char* bad[] = {
      "",
      "   ",
      "Max(s0, s1)",
      "Min(s0, s1)",
      "CeilToInt(s0)",
      "CleanDiv(s0, 2)",
      "IntTrueDiv(s0, 2)",
      "Rational(1, 2)",
      "Float('1.5', precision=53)",
      "1.5",
      "1e3",
      "s0 / 2",
      "s0 +",
      "s0 + + ",
      "(s0",
      "s0)",
      "((s0)",
      "s0 s1",
      "s0 $ 1",
      "Symbol(s0)",
      "Symbol('s0'",
      "Symbol('s0', positive=Maybe)",
      "Symbol('')",
      "Symbol('a b')",
      "Symbol('oo')",
      "Integer(x)",
      "Integer()",
      "Pow(s0, -1)",
      "Pow(s0, s1)",
      "s0**-1",
      "s0**100000",
      "Mod(s0)",
      "FloorDiv(s0, 4, 5)",
      "Add()",
      "oo",
      "zoo",
      "nan",
      "99999999999999999999",
      "s0//0",
      "s0 % (s1 - s1)",
      "9223372036854775807 + 1",
      "Integer(9223372036854775807)*2",
      "s0,",
      "'s0'",
      "s0\x01",
      "\xff\xfe",
  };
  for (const char* text : bad) {
    INFO("input: " << text);
    CHECK_THROWS_AS(parse_test(text), std::invalid_argument);
  }
  CHECK_THROWS_AS(parse_test(std::string("s0\0+1", 5)), std::invalid_argument);

  // The message quotes the offending text.
  try {
    parse_test("Max(s0, s1)");
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("Max(s0, s1)") != std::string::npos);
  }
}

TEST_CASE("sym: parse survives hostile input", "[sym][parse]") {
  CHECK_THROWS_AS(parse_test(std::string(100000, '(')), std::invalid_argument);
  CHECK_THROWS_AS(parse_test(std::string(100000, '(') + "s0" + std::string(100000, ')')), std::invalid_argument);
  CHECK_THROWS_AS(parse_test(std::string(100000, '-') + "s0"), std::invalid_argument);
  std::string nested;
  for (int i = 0; i < 5000; ++i) nested += "Add(Integer(1), ";
  CHECK_THROWS_AS(parse_test(nested), std::invalid_argument);
  CHECK_THROWS_AS(parse_test(std::string(3 << 20, ' ')), std::invalid_argument);  // too long
  // Moderate nesting is fine.
  CHECK(parse_test(std::string(50, '(') + "s0" + std::string(50, ')')) == parse_test("s0"));
  // Expansion blow-up is refused, not attempted.
  CHECK_THROWS_AS(parse_test("(s0 + s1 + s77 + x + y + z + 1)**1000"), std::invalid_argument);
  CHECK_THROWS_AS(parse_test("Pow(Pow(Add(s0, s1, Integer(1)), Integer(1000)), Integer(1000))"), std::invalid_argument);
  // A long flat sum is handled in one pass.
  std::string flat = "s0";
  for (int i = 0; i < 20000; ++i) flat += " + s0";
  CHECK(parse_test(flat) == 20001 * parse_test("s0"));
}

TEST_CASE("sym: thread-safe interning", "[sym]") {
  std::vector<const Node*> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &results] {
      Expr acc;
      for (int i = 0; i < 200; ++i) acc = acc + symbol("th" + std::to_string(i % 17), {0, 100}) * (i + 1);
      results[t] = floordiv(acc, 7).node();
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t) CHECK(results[t] == results[0]);
}

// ---------------------------------------------------------------- randomized property test

namespace {

// A random expression: built both through the simplifying API and as a plain tree evaluated
// directly with Python semantics.
struct RandExpr {
  enum Op { kConst, kSym, kAdd, kSub, kMul, kNeg, kFloorDiv, kMod, kCeilDiv };
  Op op = kConst;
  int64_t k = 0;
  int sym = 0;
  std::shared_ptr<RandExpr> a, b;
};

struct Universe {
  std::vector<Expr> syms;
  std::vector<std::string> names;
  std::vector<Range> ranges;
};

using RandPtr = std::shared_ptr<RandExpr>;

RandPtr leaf_const(int64_t k) {
  auto r = std::make_shared<RandExpr>();
  r->op = RandExpr::kConst;
  r->k = k;
  return r;
}
RandPtr leaf_sym(int s) {
  auto r = std::make_shared<RandExpr>();
  r->op = RandExpr::kSym;
  r->sym = s;
  return r;
}
RandPtr node(RandExpr::Op op, RandPtr a, RandPtr b = nullptr) {
  auto r = std::make_shared<RandExpr>();
  r->op = op;
  r->a = std::move(a);
  r->b = std::move(b);
  return r;
}

RandPtr gen(std::mt19937& rng, int depth, size_t nsyms);

// A divisor that is never zero. The last symbol of the universe has a range starting at 1.
RandPtr gen_divisor(std::mt19937& rng, int depth, size_t nsyms, bool positive_only) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  RandPtr pos_sym = leaf_sym(static_cast<int>(nsyms) - 1);
  RandPtr d;
  switch (pick(0, 9)) {
    case 0: case 1: case 2: case 3: case 4: {  // a constant, sometimes a larger power of two
      int64_t k;
      do k = pick(positive_only ? 1 : -9, 9);
      while (k == 0);
      if (pick(0, 4) == 0) k *= 8;
      return leaf_const(k);
    }
    case 5: d = pos_sym; break;                                                       // z
    case 6: d = node(RandExpr::kAdd, node(RandExpr::kMul, leaf_const(pick(1, 3)), pos_sym), leaf_const(pick(0, 4)));
      break;                                                                          // m*z + c
    case 7: d = node(RandExpr::kMul, pos_sym, pos_sym); break;                        // z*z
    case 8: {  // t*t + k for a random t
      RandPtr t = gen(rng, std::min(depth, 2), nsyms);
      d = node(RandExpr::kAdd, node(RandExpr::kMul, t, t), leaf_const(pick(1, 3)));
      break;
    }
    default: d = node(RandExpr::kMul, pos_sym, node(RandExpr::kAdd, node(RandExpr::kMul, pos_sym, pos_sym), leaf_const(1)));
      break;                                                                          // z*(z*z + 1)
  }
  if (!positive_only && pick(0, 3) == 0) d = node(RandExpr::kNeg, d);
  return d;
}

RandPtr gen(std::mt19937& rng, int depth, size_t nsyms) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  if (depth <= 0 || pick(0, 9) < 2) {
    if (pick(0, 2) == 0) return leaf_const(pick(-10, 10));
    return leaf_sym(pick(0, static_cast<int>(nsyms) - 1));
  }
  switch (pick(0, 9)) {
    case 0: case 1: return node(RandExpr::kAdd, gen(rng, depth - 1, nsyms), gen(rng, depth - 1, nsyms));
    case 2: return node(RandExpr::kSub, gen(rng, depth - 1, nsyms), gen(rng, depth - 1, nsyms));
    case 3: return node(RandExpr::kMul, gen(rng, depth - 1, nsyms), gen(rng, depth - 1, nsyms));
    case 4: return node(RandExpr::kNeg, gen(rng, depth - 1, nsyms));
    default: break;
  }
  RandExpr::Op op = pick(0, 4) < 2 ? RandExpr::kFloorDiv : (pick(0, 2) < 2 ? RandExpr::kMod : RandExpr::kCeilDiv);
  RandPtr d = gen_divisor(rng, depth - 1, nsyms, op == RandExpr::kCeilDiv);
  RandPtr a = gen(rng, depth - 1, nsyms);
  // Often a dividend of the form q*d + r, which is what the simplifier looks for.
  if (pick(0, 2) == 0) a = node(RandExpr::kAdd, node(RandExpr::kMul, gen(rng, depth - 2, nsyms), d), a);
  return node(op, a, d);
}

Expr build(const RandExpr& r, const Universe& u, bool mirror) {
  switch (r.op) {
    case RandExpr::kConst: return Expr(r.k);
    case RandExpr::kSym: return u.syms[r.sym];
    case RandExpr::kAdd: return mirror ? build(*r.b, u, mirror) + build(*r.a, u, mirror) : build(*r.a, u, mirror) + build(*r.b, u, mirror);
    case RandExpr::kSub: return mirror ? -build(*r.b, u, mirror) + build(*r.a, u, mirror) : build(*r.a, u, mirror) - build(*r.b, u, mirror);
    case RandExpr::kMul: return mirror ? build(*r.b, u, mirror) * build(*r.a, u, mirror) : build(*r.a, u, mirror) * build(*r.b, u, mirror);
    case RandExpr::kNeg: return mirror ? Expr(-1) * build(*r.a, u, mirror) : -build(*r.a, u, mirror);
    case RandExpr::kFloorDiv: return floordiv(build(*r.a, u, mirror), build(*r.b, u, mirror));
    case RandExpr::kMod: return mod(build(*r.a, u, mirror), build(*r.b, u, mirror));
    case RandExpr::kCeilDiv: return ceildiv(build(*r.a, u, mirror), build(*r.b, u, mirror));
  }
  return Expr();
}

// Direct evaluation with Python semantics; tracks the largest magnitude seen.
__int128 ref_eval(const RandExpr& r, const std::vector<int64_t>& vals, __int128& maxmag) {
  __int128 v = 0;
  switch (r.op) {
    case RandExpr::kConst: v = r.k; break;
    case RandExpr::kSym: v = vals[r.sym]; break;
    case RandExpr::kAdd: v = ref_eval(*r.a, vals, maxmag) + ref_eval(*r.b, vals, maxmag); break;
    case RandExpr::kSub: v = ref_eval(*r.a, vals, maxmag) - ref_eval(*r.b, vals, maxmag); break;
    case RandExpr::kMul: v = ref_eval(*r.a, vals, maxmag) * ref_eval(*r.b, vals, maxmag); break;
    case RandExpr::kNeg: v = -ref_eval(*r.a, vals, maxmag); break;
    case RandExpr::kFloorDiv: {
      __int128 a = ref_eval(*r.a, vals, maxmag), b = ref_eval(*r.b, vals, maxmag);
      v = py_floordiv(a, b);
      break;
    }
    case RandExpr::kMod: {
      __int128 a = ref_eval(*r.a, vals, maxmag), b = ref_eval(*r.b, vals, maxmag);
      v = py_mod(a, b);
      break;
    }
    case RandExpr::kCeilDiv: {
      __int128 a = ref_eval(*r.a, vals, maxmag), b = ref_eval(*r.b, vals, maxmag);
      v = py_floordiv(a + b - 1, b);
      break;
    }
  }
  __int128 mag = v < 0 ? -v : v;
  if (mag > maxmag) maxmag = mag;
  return v;
}

std::string describe(const RandExpr& r, const Universe& u) {
  switch (r.op) {
    case RandExpr::kConst: return "(" + std::to_string(r.k) + ")";
    case RandExpr::kSym: return u.names[r.sym];
    case RandExpr::kAdd: return "(" + describe(*r.a, u) + " + " + describe(*r.b, u) + ")";
    case RandExpr::kSub: return "(" + describe(*r.a, u) + " - " + describe(*r.b, u) + ")";
    case RandExpr::kMul: return "(" + describe(*r.a, u) + " * " + describe(*r.b, u) + ")";
    case RandExpr::kNeg: return "(-" + describe(*r.a, u) + ")";
    case RandExpr::kFloorDiv: return "(" + describe(*r.a, u) + " // " + describe(*r.b, u) + ")";
    case RandExpr::kMod: return "(" + describe(*r.a, u) + " % " + describe(*r.b, u) + ")";
    case RandExpr::kCeilDiv: return "ceildiv(" + describe(*r.a, u) + ", " + describe(*r.b, u) + ")";
  }
  return "?";
}

// Runs `cases` random expressions over the universe; for each, checks every assignment in
// `assignments` against the reference evaluation, bounds() soundness, print/parse round trip,
// substitution and commutation.
void property_run(const Universe& u, const std::vector<std::vector<int64_t>>& assignments, int cases, int depth,
                  uint32_t seed) {
  std::mt19937 rng(seed);
  auto range_of = [&u](const std::string& name) {
    for (size_t i = 0; i < u.names.size(); ++i)
      if (u.names[i] == name) return u.ranges[i];
    throw std::out_of_range("unknown symbol " + name);
  };
  int done = 0, failures = 0;
  while (done < cases && failures < 5) {
    auto tree = gen(rng, depth, u.syms.size());
    __int128 maxmag = 0;
    std::vector<int64_t> refs;
    for (const auto& vals : assignments) refs.push_back(static_cast<int64_t>(ref_eval(*tree, vals, maxmag)));
    if (maxmag > (static_cast<__int128>(1) << 40)) continue;  // keep far from overflow
    ++done;
    std::string what = describe(*tree, u);
    Expr e;
    try {
      e = build(*tree, u, false);
    } catch (const std::exception& ex) {
      FAIL_CHECK("building " << what << " threw " << ex.what());
      ++failures;
      continue;
    }
    INFO("tree: " << what << "\nsimplified: " << e.str());
    Range rb = bounds(e);
    bool ok = true;
    for (size_t i = 0; i < assignments.size() && ok; ++i) {
      std::map<std::string, int64_t> env;
      for (size_t s = 0; s < u.names.size(); ++s) env[u.names[s]] = assignments[i][s];
      int64_t got = evaluate(e, env);
      if (got != refs[i] || got < rb.lo || got > rb.hi) {
        std::string env_s;
        for (const auto& [n, v] : env) env_s += n + "=" + std::to_string(v) + " ";
        FAIL_CHECK("at " << env_s << ": evaluate=" << got << " reference=" << refs[i] << " bounds=[" << rb.lo << ", "
                         << rb.hi << "]");
        ok = false;
      }
    }
    // Printing round-trips through the parser to the same node.
    Expr back = parse(e.str(), range_of);
    if (back != e) {
      FAIL_CHECK("round trip: " << e.str() << " parsed back as " << back.str());
      ok = false;
    }
    // Building with operands swapped gives the same canonical node.
    Expr mirrored = build(*tree, u, true);
    if (mirrored != e) {
      FAIL_CHECK("mirrored build differs: " << mirrored.str());
      ok = false;
    }
    // Substituting constants for every symbol folds to the reference value.
    std::map<Expr, Expr> repl;
    for (size_t s = 0; s < u.syms.size(); ++s) repl[u.syms[s]] = Expr(assignments[0][s]);
    Expr folded = substitute(e, repl);
    if (folded != Expr(refs[0])) {
      FAIL_CHECK("substitute gave " << folded.str() << ", expected " << refs[0]);
      ok = false;
    }
    if (!ok) ++failures;
  }
  CHECK(failures == 0);
  CHECK(done == cases);
}

}  // namespace

TEST_CASE("sym: random expressions agree with direct evaluation (exhaustive small ranges)", "[sym][property]") {
  Universe u;
  u.names = {"x", "y", "z"};
  u.ranges = {{0, 7}, {-5, 3}, {1, 4}};
  for (size_t i = 0; i < u.names.size(); ++i) u.syms.push_back(symbol(u.names[i], u.ranges[i]));
  std::vector<std::vector<int64_t>> all;
  for (int64_t x = 0; x <= 7; ++x)
    for (int64_t y = -5; y <= 3; ++y)
      for (int64_t z = 1; z <= 4; ++z) all.push_back({x, y, z});
  property_run(u, all, 2500, 4, 12345);
  property_run(u, all, 500, 6, 777);
}

TEST_CASE("sym: random expressions agree with direct evaluation (wide ranges)", "[sym][property]") {
  Universe u;
  u.names = {"p", "q", "w"};
  u.ranges = {{Range::kNegInf, Range::kPosInf}, {-1000, 1000}, {1, Range::kPosInf}};
  for (size_t i = 0; i < u.names.size(); ++i) u.syms.push_back(symbol(u.names[i], u.ranges[i]));
  std::mt19937 rng(4242);
  std::vector<std::vector<int64_t>> samples;
  for (int i = 0; i < 60; ++i) {
    samples.push_back({std::uniform_int_distribution<int64_t>(-300, 300)(rng),
                       std::uniform_int_distribution<int64_t>(-1000, 1000)(rng),
                       std::uniform_int_distribution<int64_t>(1, 300)(rng)});
  }
  samples.push_back({0, 0, 1});
  samples.push_back({-1, -1, 1});
  property_run(u, samples, 2000, 4, 99);
}

TEST_CASE("sym: recombine_divmod folds m*(x//m) + x%m back into x", "[sym]") {
  Expr x = symbol("x0", {0, 1000}), s = symbol("s27", {2, 512});
  CHECK(recombine_divmod(s * floordiv(x, s) * 64 + mod(x, s) * 64 + 5) == x * 64 + 5);
  CHECK(recombine_divmod(floordiv(x, 8) * 8 + mod(x, 8)) == x);
  Expr y = mod(x, s) + 3;  // no partner: unchanged
  CHECK(recombine_divmod(y) == y);
  Expr z = floordiv(x, s) * s * 2 + mod(x, s);  // coefficients differ: unchanged
  CHECK(recombine_divmod(z) == z);
}
