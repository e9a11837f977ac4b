// Printing symbolic index expressions as C++ (shared by the CPU and, later, CUDA printers).
#include "ptc/codegen.h"
#include "ptc/error.h"

namespace ptc {

std::string view_element(const loop::View& v, const std::vector<std::string>& idx) {
  std::string e = "b" + std::to_string(v.buffer) + "[" + cpp_index(v.offset);
  for (size_t d = 0; d < idx.size(); ++d) e += " + (" + idx[d] + ") * (" + cpp_index(v.strides[d]) + ")";
  return e + "]";
}

std::string dense_element(int buffer, const std::vector<std::string>& idx) {
  std::string e = "0";
  for (size_t d = 0; d < idx.size(); ++d) e = "(" + e + ") * n" + std::to_string(d) + " + " + idx[d];
  return "b" + std::to_string(buffer) + "[" + e + "]";
}

std::string index_list(const std::vector<sym::Expr>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + cpp_index(v[i]);
  return s;
}

std::string cpp_product(const std::vector<std::string>& factors) {
  if (factors.empty()) return "int64_t{1}";
  std::string s;
  for (size_t i = 0; i < factors.size(); ++i) s += (i ? " * " : "") + factors[i];
  return s;
}

std::string cpp_index(const sym::Expr& e) {
  using sym::Kind;
  switch (e.kind()) {
    case Kind::Const: {
      int64_t v = *e.as_const();
      if (v == INT64_MIN) return "INT64_MIN";
      return v < 0 ? "(" + std::to_string(v) + "LL)" : std::to_string(v) + "LL";
    }
    case Kind::Symbol: return e.name();
    case Kind::Add: {
      std::string s = "(";
      auto ops = e.operands();
      auto cs = e.coeffs();
      for (size_t i = 0; i < ops.size(); ++i) {
        if (i) s += " + ";
        s += cs[i] == 1 ? cpp_index(ops[i]) : std::to_string(cs[i]) + "LL * " + cpp_index(ops[i]);
      }
      if (e.add_constant() != 0) s += " + " + cpp_index(sym::Expr(e.add_constant()));
      return s + ")";
    }
    case Kind::Mul: {
      std::string s = "(";
      auto ops = e.operands();
      auto ex = e.exponents();
      bool first = true;
      for (size_t i = 0; i < ops.size(); ++i)
        for (int64_t k = 0; k < ex[i]; ++k) {
          s += (first ? "" : " * ") + cpp_index(ops[i]);
          first = false;
        }
      return s + ")";
    }
    case Kind::FloorDiv:
    case Kind::Mod: {
      auto ops = e.operands();
      bool div = e.kind() == Kind::FloorDiv;
      if (sym::prove_ge(ops[0], 0) && sym::prove_gt(ops[1], 0))
        return "(" + cpp_index(ops[0]) + (div ? " / " : " % ") + cpp_index(ops[1]) + ")";
      return std::string(div ? "ptc_rt::floordiv(" : "ptc_rt::pymod(") + cpp_index(ops[0]) + ", " + cpp_index(ops[1]) + ")";
    }
  }
  PTC_CHECK(false, "cpp_index: unknown kind");
}

}  // namespace ptc
