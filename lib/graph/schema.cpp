// Parsing aten schema strings and building the op table from include/ptc/ops.def.
#include <cctype>
#include <cstdlib>
#include <map>
#include <stdexcept>

#include "ptc/error.h"
#include "ptc/ops.h"

namespace ptc {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Splits at top-level commas (outside (), [] and quotes).
std::vector<std::string> split_top(const std::string& s) {
  std::vector<std::string> parts;
  int depth = 0;
  bool quoted = false;
  std::string cur;
  for (char c : s) {
    if (c == '"') quoted = !quoted;
    if (!quoted && (c == '(' || c == '[')) ++depth;
    if (!quoted && (c == ')' || c == ']')) --depth;
    if (!quoted && depth == 0 && c == ',') {
      parts.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!trim(cur).empty()) parts.push_back(trim(cur));
  return parts;
}

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw std::invalid_argument("malformed schema '" + text + "': " + why);
}

// "Tensor(a!)?" -> "Tensor?" : drops alias annotations.
std::string strip_alias(const std::string& t) {
  std::string out;
  int depth = 0;
  for (char c : t) {
    if (c == '(') ++depth;
    else if (c == ')') --depth;
    else if (depth == 0) out += c;
  }
  return out;
}

struct ParsedType {
  ArgType type = ArgType::Other;
  bool optional = false;
  int list_size = 0;
};

ParsedType parse_type(const std::string& raw, const std::string& text) {
  std::string t = strip_alias(raw);
  ParsedType p;
  if (!t.empty() && t.back() == '?') {
    p.optional = true;
    t.pop_back();
  }
  bool list = false;
  bool elem_optional = false;
  size_t lb = t.find('[');
  if (lb != std::string::npos) {
    size_t rb = t.find(']', lb);
    if (rb == std::string::npos) bad(text, "unclosed '[' in type " + raw);
    std::string n = t.substr(lb + 1, rb - lb - 1);
    if (!n.empty()) p.list_size = std::atoi(n.c_str());
    list = true;
    t = t.substr(0, lb);
    if (!t.empty() && t.back() == '?') {
      elem_optional = true;
      t.pop_back();
    }
  }
  static const std::map<std::string, std::pair<ArgType, ArgType>> kTypes = {
      {"Tensor", {ArgType::Tensor, ArgType::TensorList}},
      {"int", {ArgType::Int, ArgType::Ints}},
      {"SymInt", {ArgType::SymInt, ArgType::SymInts}},
      {"float", {ArgType::Float, ArgType::Floats}},
      {"bool", {ArgType::Bool, ArgType::Bools}},
      {"Scalar", {ArgType::Scalar, ArgType::Other}},
      {"str", {ArgType::Str, ArgType::Other}},
      {"ScalarType", {ArgType::ScalarType, ArgType::Other}},
      {"Layout", {ArgType::Layout, ArgType::Other}},
      {"Device", {ArgType::Device, ArgType::Other}},
      {"MemoryFormat", {ArgType::MemoryFormat, ArgType::Other}},
      {"Generator", {ArgType::Generator, ArgType::Other}},
  };
  auto it = kTypes.find(t);
  if (it == kTypes.end()) return p;  // Other: kept as written in type_text
  p.type = list ? it->second.second : it->second.first;
  if (list && elem_optional && p.type == ArgType::TensorList) p.type = ArgType::OptionalTensorList;
  return p;
}

DefaultValue parse_default(const std::string& d, const std::string& text) {
  if (d == "None") return std::monostate{};
  if (d == "True") return true;
  if (d == "False") return false;
  if (d.size() >= 2 && d.front() == '"' && d.back() == '"') return d.substr(1, d.size() - 2);
  if (!d.empty() && d.front() == '[') {
    if (d.back() != ']') bad(text, "bad list default " + d);
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool is_float = false;
    for (const auto& e : split_top(d.substr(1, d.size() - 2))) {
      is_float = is_float || e.find_first_of(".eE") != std::string::npos;
      floats.push_back(std::strtod(e.c_str(), nullptr));
      ints.push_back(std::strtoll(e.c_str(), nullptr, 10));
    }
    if (is_float) return floats;
    return ints;
  }
  char* end = nullptr;
  long long iv = std::strtoll(d.c_str(), &end, 10);
  if (!d.empty() && *end == '\0') return static_cast<int64_t>(iv);
  double fv = std::strtod(d.c_str(), &end);
  if (!d.empty() && *end == '\0') return fv;
  if (d == "inf") return std::strtod("inf", nullptr);
  if (d == "-inf") return -std::strtod("inf", nullptr);
  return d;  // an identifier such as contiguous_format or long
}

}  // namespace

const char* arg_type_name(ArgType t) {
  switch (t) {
    case ArgType::Tensor: return "Tensor";
    case ArgType::TensorList: return "Tensor[]";
    case ArgType::OptionalTensorList: return "Tensor?[]";
    case ArgType::Int: return "int";
    case ArgType::Ints: return "int[]";
    case ArgType::SymInt: return "SymInt";
    case ArgType::SymInts: return "SymInt[]";
    case ArgType::Float: return "float";
    case ArgType::Floats: return "float[]";
    case ArgType::Bool: return "bool";
    case ArgType::Bools: return "bool[]";
    case ArgType::Scalar: return "Scalar";
    case ArgType::Str: return "str";
    case ArgType::ScalarType: return "ScalarType";
    case ArgType::Layout: return "Layout";
    case ArgType::Device: return "Device";
    case ArgType::MemoryFormat: return "MemoryFormat";
    case ArgType::Generator: return "Generator";
    case ArgType::Other: return "other";
  }
  return "other";
}

std::string Schema::qualified() const {
  return ns + "::" + name + (overload.empty() ? "" : "." + overload);
}

Schema parse_schema(const std::string& text) {
  Schema s;
  s.text = text;
  size_t colons = text.find("::");
  size_t lp = text.find('(');
  if (colons == std::string::npos || lp == std::string::npos || colons > lp)
    bad(text, "expected ns::name(...)");
  s.ns = text.substr(0, colons);
  std::string full = text.substr(colons + 2, lp - colons - 2);
  size_t dot = full.find('.');
  s.name = full.substr(0, dot);
  if (dot != std::string::npos) s.overload = full.substr(dot + 1);
  // Find the ')' closing the argument list.
  int depth = 0;
  size_t rp = std::string::npos;
  for (size_t i = lp; i < text.size(); ++i) {
    if (text[i] == '(' || text[i] == '[') ++depth;
    if (text[i] == ')' || text[i] == ']') --depth;
    if (depth == 0) {
      rp = i;
      break;
    }
  }
  if (rp == std::string::npos) bad(text, "unclosed argument list");
  bool kwarg_only = false;
  for (const auto& part : split_top(text.substr(lp + 1, rp - lp - 1))) {
    if (part == "*") {
      kwarg_only = true;
      continue;
    }
    // "TYPE NAME[=DEFAULT]": the name is after the last top-level space before '='.
    std::string decl = part, def;
    size_t eq = std::string::npos;
    int d = 0;
    for (size_t i = 0; i < part.size(); ++i) {
      if (part[i] == '(' || part[i] == '[') ++d;
      if (part[i] == ')' || part[i] == ']') --d;
      if (d == 0 && part[i] == '=') {
        eq = i;
        break;
      }
    }
    if (eq != std::string::npos) {
      decl = trim(part.substr(0, eq));
      def = trim(part.substr(eq + 1));
    }
    size_t sp = decl.find_last_of(' ');
    if (sp == std::string::npos) bad(text, "argument without a name: " + part);
    SchemaArg a;
    a.type_text = trim(decl.substr(0, sp));
    a.name = decl.substr(sp + 1);
    ParsedType pt = parse_type(a.type_text, text);
    a.type = pt.type;
    a.optional = pt.optional;
    a.list_size = pt.list_size;
    a.kwarg_only = kwarg_only;
    if (eq != std::string::npos) {
      a.has_default = true;
      a.default_value = parse_default(def, text);
      // torch prints enum defaults as their c10 numbers ("MemoryFormat memory_format=0").
      if (a.type == ArgType::MemoryFormat && std::holds_alternative<int64_t>(a.default_value)) {
        static const char* kC10[] = {"contiguous_format", "preserve_format", "channels_last", "channels_last_3d"};
        int64_t i = std::get<int64_t>(a.default_value);
        a.default_value = std::string(i >= 0 && i < 4 ? kC10[i] : "unknown");
      }
    }
    s.args.push_back(std::move(a));
  }
  size_t arrow = text.find("->", rp);
  if (arrow == std::string::npos) bad(text, "missing '->'");
  std::string ret = trim(text.substr(arrow + 2));
  if (!ret.empty() && ret.front() == '(' && ret.back() == ')') ret = ret.substr(1, ret.size() - 2);
  for (const auto& r : split_top(ret)) {
    SchemaReturn sr;
    std::string t = r;
    size_t sp = strip_alias(r).find(' ');
    if (sp != std::string::npos) {
      size_t last = r.find_last_of(' ');
      sr.name = r.substr(last + 1);
      t = trim(r.substr(0, last));
    }
    ParsedType pt = parse_type(t, text);
    sr.type = pt.type;
    sr.optional = pt.optional;
    s.returns.push_back(sr);
  }
  return s;
}

namespace {

struct Table {
  std::vector<OpInfo> ops;
  std::map<std::string, OpKind> by_name;
  Table() {
    struct Row {
      OpKind kind;
      const char* enum_name;
      const char* schema;
    };
    static const Row kRows[] = {
#define PTC_OP(name, schema) {OpKind::name, #name, schema},
#include "ptc/ops.def"
#undef PTC_OP
    };
    for (const auto& r : kRows) {
      ops.push_back(OpInfo{r.kind, r.enum_name, parse_schema(r.schema)});
      by_name[ops.back().schema.qualified()] = r.kind;
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const std::vector<OpInfo>& all_ops() { return table().ops; }

bool op_rearranges(OpKind k) {
  switch (k) {
    case OpKind::View: case OpKind::Reshape: case OpKind::UnderscoreUnsafeView: case OpKind::Permute:
    case OpKind::TransposeInt: case OpKind::T: case OpKind::Expand: case OpKind::ExpandAs: case OpKind::Alias:
    case OpKind::FlattenUsingInts: case OpKind::UnflattenInt: case OpKind::Unsqueeze: case OpKind::SqueezeDim:
    case OpKind::SqueezeDims: case OpKind::Squeeze: case OpKind::SliceTensor: case OpKind::SelectInt: case OpKind::Narrow:
    case OpKind::SplitTensor: case OpKind::SplitWithSizes: case OpKind::Chunk: case OpKind::UnbindInt: case OpKind::Detach:
    case OpKind::Contiguous: case OpKind::Clone: case OpKind::LiftFreshCopy:
      return true;
    default: return false;
  }
}

EluConstants elu_constants(OpKind kind, EluConstants given) {
  if (kind == OpKind::Selu) return {1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1};
  if (kind == OpKind::Celu) return {given.alpha, 1, 1 / given.alpha};
  return given;
}

const OpInfo& op_info(OpKind kind) {
  const auto& ops = table().ops;
  PTC_CHECK(static_cast<size_t>(kind) < ops.size(), "op_info of an unknown op");
  return ops[static_cast<size_t>(kind)];
}

std::optional<OpKind> find_op(const std::string& qualified) {
  std::string q = qualified;
  const std::string kDefault = ".default";
  if (q.size() > kDefault.size() && q.compare(q.size() - kDefault.size(), kDefault.size(), kDefault) == 0)
    q.resize(q.size() - kDefault.size());
  const auto& m = table().by_name;
  auto it = m.find(q);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

std::string qualified_from_target(const std::string& target) {
  // "torch.ops.<ns>.<name>.<overload>"
  const std::string kOps = "torch.ops.";
  if (target.rfind(kOps, 0) == 0) {
    std::string rest = target.substr(kOps.size());
    size_t d1 = rest.find('.');
    if (d1 == std::string::npos) return target;
    std::string ns = rest.substr(0, d1);
    std::string name = rest.substr(d1 + 1);
    size_t d2 = name.find('.');
    std::string overload;
    if (d2 != std::string::npos) {
      overload = name.substr(d2 + 1);
      name = name.substr(0, d2);
    }
    if (overload == "default") overload.clear();
    return ns + "::" + name + (overload.empty() ? "" : "." + overload);
  }
  // "_operator.mul", "torch.sym_max", "math.ceil": module path, then function.
  size_t d = target.find_last_of('.');
  if (d == std::string::npos) return target;
  return target.substr(0, d) + "::" + target.substr(d + 1);
}

}  // namespace ptc
