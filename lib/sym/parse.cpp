// The text forms of expressions: printing (Expr::str) and parsing what torch.export writes into
// model.json (sympy srepr or plain Python-like infix).
#include <cctype>
#include <stdexcept>

#include "ptc/sym.h"
#include "sym_internal.h"

namespace ptc::sym {
namespace {

// ---------------------------------------------------------------- printing

std::string abs_str(int64_t v) {
  return std::to_string(v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
}
bool is_divmod(const Node* n) { return n->kind == Kind::FloorDiv || n->kind == Kind::Mod; }

void print(const Node* n, std::string& out);

void print_factor(const Node* atom, int64_t e, bool paren, std::string& out) {
  bool p = is_divmod(atom) && (paren || e != 1);
  if (p) out += '(';
  print(atom, out);
  if (p) out += ')';
  if (e != 1) out += "**" + std::to_string(e);
}

// A monomial times |k| (sign printed by the caller). FloorDiv/Mod get parentheses unless they
// stand alone (`bare_ok`), since `a*b//c` would group differently.
void print_term(const Node* m, int64_t k, bool bare_ok, std::string& out) {
  bool unit = k == 1 || k == -1;
  if (!unit) out += abs_str(k) + "*";
  if (m->kind == Kind::Mul) {
    for (size_t i = 0; i < m->ops.size(); ++i) {
      if (i) out += '*';
      print_factor(m->ops[i], m->nums[i], true, out);
    }
  } else {
    print_factor(m, 1, !(unit && bare_ok), out);
  }
}

void print_operand(const Node* n, bool paren, std::string& out) {
  if (paren) out += '(';
  print(n, out);
  if (paren) out += ')';
}

void print(const Node* n, std::string& out) {
  switch (n->kind) {
    case Kind::Const: out += std::to_string(n->value); return;
    case Kind::Symbol: out += n->name; return;
    case Kind::Mul: print_term(n, 1, true, out); return;
    case Kind::Add:
      for (size_t i = 0; i < n->ops.size(); ++i) {
        int64_t k = n->nums[i];
        if (i == 0) {
          if (k < 0) out += '-';
        } else {
          out += k < 0 ? " - " : " + ";
        }
        print_term(n->ops[i], k, !(i == 0 && k < 0), out);
      }
      if (n->value != 0) out += (n->value < 0 ? " - " : " + ") + abs_str(n->value);
      return;
    case Kind::FloorDiv:
    case Kind::Mod: {
      const Node* l = n->ops[0];
      const Node* r = n->ops[1];
      print_operand(l, is_divmod(l) || (l->kind == Kind::Add && (l->value != 0 || l->ops.size() > 1)), out);
      out += n->kind == Kind::FloorDiv ? "//" : " % ";
      print_operand(r, !(r->kind == Kind::Symbol || (r->kind == Kind::Const && r->value >= 0)), out);
      return;
    }
  }
}

// ---------------------------------------------------------------- parsing

constexpr size_t kMaxInput = size_t{1} << 20;
constexpr int kMaxDepth = 200;
constexpr int64_t kMaxExponent = 1000;

// The input, quoted for an error message (shortened, non-printable bytes escaped).
std::string quote(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 160; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch >= 0x7f) {
      out += "\\x";
      out += hex[ch >> 4];
      out += hex[ch & 15];
    } else {
      out += static_cast<char>(ch);
    }
  }
  out += s.size() > 160 ? "...\"" : "\"";
  return out;
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_reserved(const std::string& id) {
  static const char* const names[] = {"oo",  "zoo",  "nan",   "pi",   "E",   "I",   "S",        "inf",
                                      "True", "False", "None", "Symbol", "Integer", "Add", "Mul", "Pow",
                                      "FloorDiv", "Mod", "PythonMod", "Min", "Max"};
  for (const char* n : names)
    if (id == n) return true;
  return false;
}

class Parser {
 public:
  Parser(const std::string& text, const std::function<Range(const std::string&)>& range_of)
      : s_(text), range_of_(range_of) {}

  Expr run() {
    Expr e = sum();
    if (peek() != '\0') fail("unexpected trailing text");
    return e;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("ptc::sym::parse: " + what + " at offset " + std::to_string(pos_) + " in " +
                                quote(s_));
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.fail("expression nested too deeply");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // The next non-space character ('\0' at the end; a NUL byte inside the text is rejected).
  char peek() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (pos_ >= s_.size()) return '\0';
    if (s_[pos_] == '\0') fail("unexpected NUL byte");
    return s_[pos_];
  }
  bool at(const char* tok) { return peek() != '\0' && s_.compare(pos_, std::char_traits<char>::length(tok), tok) == 0; }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  // sum := term (('+' | '-') term)*
  Expr sum() {
    std::vector<std::pair<Expr, int64_t>> terms;
    terms.emplace_back(term(), 1);
    for (char c = peek(); c == '+' || c == '-'; c = peek()) {
      ++pos_;
      terms.emplace_back(term(), c == '+' ? 1 : -1);
    }
    return terms.size() == 1 ? terms[0].first : detail::linear_combination(terms);
  }

  // term := unary (('*' | '//' | '%') unary)*, left-associative like Python.
  Expr term() {
    std::vector<Expr> prod{unary()};
    while (true) {
      if (at("//") || at("%")) {
        bool div = at("//");
        pos_ += div ? 2 : 1;
        Expr lhs = detail::product(prod);
        Expr rhs = unary();
        prod = {div ? floordiv(lhs, rhs) : mod(lhs, rhs)};
      } else if (at("/")) {
        fail("true division '/' is not supported");
      } else if (at("*") && !at("**")) {
        ++pos_;
        prod.push_back(unary());
      } else {
        break;
      }
    }
    return prod.size() == 1 ? prod[0] : detail::product(prod);
  }

  // unary := ('-' | '+') unary | power ;  power := primary ('**' unary)?
  Expr unary() {
    DepthGuard guard(*this);
    char c = peek();
    if (c == '-' || c == '+') {
      ++pos_;
      Expr e = unary();
      return c == '-' ? -e : e;
    }
    Expr base = primary();
    if (!at("**")) return base;
    pos_ += 2;
    return pow(base, unary());
  }

  Expr pow(Expr base, Expr exponent) {
    auto k = exponent.as_const();
    if (!k || *k < 0 || *k > kMaxExponent) fail("unsupported exponent '" + exponent.str() + "'");
    return detail::power(base, *k);
  }

  Expr primary() {
    char c = peek();
    if (c == '(') {
      ++pos_;
      Expr e = sum();
      expect(')');
      return e;
    }
    if (is_digit(c)) return Expr(integer());
    if (!ident_start(c)) fail(c == '\0' ? "unexpected end of input" : "unexpected character");
    std::string id = ident();
    if (peek() == '(') return call(id);
    if (is_reserved(id)) fail("unsupported name '" + id + "'");
    return make_symbol(id);
  }

  std::string ident() {
    if (!ident_start(peek())) fail("expected a name");
    size_t start = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }

  int64_t integer() {
    if (!is_digit(peek())) fail("expected an integer");
    uint64_t v = 0;
    for (; pos_ < s_.size() && is_digit(s_[pos_]); ++pos_) {
      uint64_t d = static_cast<uint64_t>(s_[pos_] - '0');
      if (v > (static_cast<uint64_t>(INT64_MAX) - d) / 10) fail("integer out of range");
      v = v * 10 + d;
    }
    if (pos_ < s_.size() && (ident_char(s_[pos_]) || s_[pos_] == '.')) fail("malformed number");
    return static_cast<int64_t>(v);
  }

  Expr make_symbol(const std::string& name) {
    Range r = range_of_(name);
    try {
      return symbol(name, r);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }

  // Symbol('name', key=True, ...)
  Expr symbol_call() {
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted symbol name");
    size_t start = ++pos_;
    while (pos_ < s_.size() && s_[pos_] != q) ++pos_;
    if (pos_ >= s_.size()) fail("unterminated string");
    std::string name = s_.substr(start, pos_ - start);
    ++pos_;
    bool valid = !name.empty() && ident_start(name[0]) && !is_reserved(name);
    for (char ch : name) valid = valid && ident_char(ch);
    if (!valid) fail("invalid symbol name");
    while (peek() == ',') {
      ++pos_;
      ident();
      expect('=');
      std::string v = ident();
      if (v != "True" && v != "False") fail("expected True or False");
    }
    expect(')');
    return make_symbol(name);
  }

  Expr call(const std::string& fn) {
    enum { kAdd, kMul, kPow, kFloorDiv, kMod, kMin, kMax } op;
    if (fn == "Symbol" || fn == "Integer") {
      ++pos_;
      if (fn == "Symbol") return symbol_call();
      bool negative = peek() == '-';
      if (negative) ++pos_;
      int64_t v = integer();
      expect(')');
      return Expr(negative ? -v : v);
    }
    if (fn == "Add") {
      op = kAdd;
    } else if (fn == "Mul") {
      op = kMul;
    } else if (fn == "Pow") {
      op = kPow;
    } else if (fn == "FloorDiv") {
      op = kFloorDiv;
    } else if (fn == "Mod" || fn == "PythonMod") {
      op = kMod;
    } else if (fn == "Min") {
      op = kMin;
    } else if (fn == "Max") {
      op = kMax;
    } else {
      fail("unsupported function '" + fn + "'");
    }
    ++pos_;
    std::vector<Expr> args;
    if (peek() != ')') {
      args.push_back(sum());
      while (peek() == ',') {
        ++pos_;
        args.push_back(sum());
      }
    }
    expect(')');
    if (args.empty() || (op != kAdd && op != kMul && op != kMin && op != kMax && args.size() != 2))
      fail("wrong number of arguments to '" + fn + "'");
    switch (op) {
      case kAdd: {
        std::vector<std::pair<Expr, int64_t>> terms;
        for (const Expr& a : args) terms.emplace_back(a, 1);
        return detail::linear_combination(terms);
      }
      case kMul: return detail::product(args);
      case kPow: return pow(args[0], args[1]);
      case kFloorDiv: return floordiv(args[0], args[1]);
      case kMod: break;
      case kMin:
      case kMax: {
        // Min/Max are not part of the expression language: they are accepted only where the
        // symbol ranges decide them (e.g. Min(64, 64*s0) with s0 >= 1 is 64).
        Expr best = args[0];
        for (size_t i = 1; i < args.size(); ++i) {
          bool keep = op == kMin ? prove_le(best, args[i]) : prove_ge(best, args[i]);
          bool take = op == kMin ? prove_le(args[i], best) : prove_ge(args[i], best);
          if (!keep && !take) fail("'" + fn + "' whose result the symbol ranges do not decide");
          if (!keep) best = args[i];
        }
        return best;
      }
    }
    return mod(args[0], args[1]);
  }

  const std::string& s_;
  const std::function<Range(const std::string&)>& range_of_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string Expr::str() const {
  std::string out;
  print(n_, out);
  return out;
}

Expr parse(const std::string& text, const std::function<Range(const std::string&)>& range_of) {
  if (text.size() > kMaxInput) {
    throw std::invalid_argument("ptc::sym::parse: input too long (" + std::to_string(text.size()) +
                                " bytes): " + quote(text));
  }
  Parser p(text, range_of);
  try {
    return p.run();
  } catch (const std::domain_error& e) {
    p.fail(e.what());
  } catch (const std::overflow_error& e) {
    p.fail(e.what());
  } catch (const std::length_error& e) {
    p.fail(e.what());
  }
}

}  // namespace ptc::sym
