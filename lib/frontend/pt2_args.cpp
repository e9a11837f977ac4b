// model.json values: tensor metadata, symbolic integers and node arguments.
#include <cmath>
#include <limits>

#include "pt2_context.h"

namespace ptc::pt2 {

const json& Context::member(const json& obj, const char* key, const char* what) const {
  if (!obj.is_object()) fail(what, " must be a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) fail(what, " has no field '", key, "'");
  return *it;
}

const json* Context::member_opt(const json& obj, const char* key) const {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t Context::as_int(const json& v, const char* what) const {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(what, " is out of range");
    return static_cast<int64_t>(u);
  }
  fail(what, " must be an integer, got ", v.dump().substr(0, 60));
}

double Context::as_double(const json& v, const char* what) const {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
  }
  fail(what, " must be a number, got ", v.dump().substr(0, 60));
}

const std::string& Context::as_string(const json& v, const char* what) const {
  if (!v.is_string()) fail(what, " must be a string, got ", v.dump().substr(0, 60));
  return v.get_ref<const std::string&>();
}

sym::Range Context::range_of(const std::string& symbol) {
  auto it = graph->symbols.find(symbol);
  if (it != graph->symbols.end()) return it->second;
  // A symbol without a range constraint (e.g. an unbacked size): a non-negative integer.
  sym::Range r{0, sym::Range::kPosInf};
  graph->symbols[symbol] = r;
  return r;
}

sym::Expr Context::parse_sym(const std::string& text) {
  try {
    return sym::parse(text, [this](const std::string& n) { return range_of(n); });
  } catch (const std::invalid_argument& e) {
    fail("unsupported symbolic size: ", e.what());
  } catch (const std::domain_error& e) {
    fail("invalid symbolic size '", text, "': ", e.what());
  }
}

sym::Expr Context::sym_int(const json& v, const char* what) {
  if (!v.is_object()) fail(what, " must be a SymInt object");
  if (auto i = member_opt(v, "as_int")) return as_int(*i, what);
  if (auto e = member_opt(v, "as_expr")) return parse_sym(as_string(member(*e, "expr_str", what), what));
  if (auto n = member_opt(v, "as_name")) {  // a reference to a symbolic value
    const std::string& name = as_string(*n, what);
    auto it = sym_values.find(name);
    if (it == sym_values.end()) fail(what, " refers to unknown symbolic value '", name, "'");
    return it->second;
  }
  fail(what, " must hold as_int, as_expr or as_name");
}

Type Context::tensor_meta(const json& meta, const std::string& what) {
  const char* w = what.c_str();
  int64_t code = as_int(member(meta, "dtype", w), (what + ".dtype").c_str());
  auto dt = dtype_from_pt2(code);
  if (!dt) fail(what, " has unknown dtype code ", code);
  const json& sizes = member(meta, "sizes", w);
  const json& strides = member(meta, "strides", w);
  if (!sizes.is_array() || !strides.is_array()) fail(what, ": sizes and strides must be lists");
  if (sizes.size() != strides.size())
    fail(what, " has ", sizes.size(), " sizes but ", strides.size(), " strides");
  if (sizes.size() > 64) fail(what, " has rank ", sizes.size(), "; ptc supports at most 64");
  // Known sizes, strides and offsets stay within 2^48 (and so do their element counts): beyond
  // that no machine holds the tensor, and size arithmetic could overflow 64-bit integers.
  constexpr int64_t kLimit = int64_t(1) << 48;
  std::vector<sym::Expr> sz, st;
  __int128 numel = 1;
  for (const auto& s : sizes) {
    sym::Expr e = sym_int(s, w);
    if (sym::prove_lt(e, 0)) fail(what, " has negative size ", e.str());
    if (auto c = e.as_const()) {
      if (*c > kLimit) fail(what, " has a size of ", *c, ", beyond 2^48; ptc refuses it");
      numel = std::min<__int128>(numel * *c, __int128(kLimit) + 1);
    }
    sz.push_back(e);
  }
  if (numel > kLimit) fail(what, " has more than 2^48 elements; ptc refuses it");
  for (const auto& s : strides) {
    st.push_back(sym_int(s, w));
    if (auto c = st.back().as_const(); c && (*c > kLimit || *c < -kLimit))
      fail(what, " has stride ", *c, ", beyond 2^48; ptc refuses it");
  }
  Type t = Type::tensor(*dt, sz, st);
  if (auto off = member_opt(meta, "storage_offset")) {
    t.storage_offset = sym_int(*off, w);
    if (auto c = t.storage_offset.as_const(); c && (*c < 0 || *c > kLimit))
      fail(what, " has storage offset ", *c, ", outside [0, 2^48]");
  }
  if (auto rg = member_opt(meta, "requires_grad")) t.requires_grad = rg->is_boolean() && rg->get<bool>();
  if (auto dev = member_opt(meta, "device")) {
    const std::string& ty = as_string(member(*dev, "type", w), w);
    t.device.type = ty == "cpu" ? Device::Type::CPU : ty == "cuda" ? Device::Type::CUDA
                  : ty == "meta" ? Device::Type::Meta : Device::Type::Other;
    if (auto idx = member_opt(*dev, "index")) t.device.index = static_cast<int>(as_int(*idx, w));
  }
  if (auto layout = member_opt(meta, "layout"))
    if (as_int(*layout, w) != 7) fail(what, " is not a strided (dense) tensor; ptc reads only strided tensors");
  return t;
}

Value* Context::value(const std::string& name) const {
  Value* v = graph->find_value(name);
  if (!v) fail("uses value '", name, "' before it is defined");
  return v;
}

namespace {

const char* memory_format_name(int64_t code) {
  switch (code) {
    case 0: return "unknown";
    case 1: return "contiguous_format";
    case 2: return "channels_last";
    case 3: return "channels_last_3d";
    case 4: return "preserve_format";
    default: return "unknown";
  }
}

Arg int_list(const std::vector<int64_t>& v, const SchemaArg* sa) {
  if (sa && sa->type == ArgType::SymInts) return std::vector<sym::Expr>(v.begin(), v.end());
  return v;
}

}  // namespace

Arg convert_argument(Context& ctx, const json& arg, const SchemaArg* sa) {
  if (!arg.is_object() || arg.size() != 1) ctx.fail("an argument must be a one-key object, got ", arg.dump().substr(0, 80));
  const std::string& key = arg.begin().key();
  const json& v = arg.begin().value();
  const char* what = key.c_str();
  if (key == "as_none") return std::monostate{};
  if (key == "as_tensor") return ctx.value(ctx.as_string(ctx.member(v, "name", what), what));
  if (key == "as_tensors" || key == "as_optional_tensors") {
    if (!v.is_array()) ctx.fail(key, " must be a list");
    std::vector<Value*> out;
    for (const auto& t : v) {
      if (key == "as_tensors") {
        out.push_back(ctx.value(ctx.as_string(ctx.member(t, "name", what), what)));
      } else if (auto inner = ctx.member_opt(t, "as_tensor")) {
        out.push_back(ctx.value(ctx.as_string(ctx.member(*inner, "name", what), what)));
      } else {
        out.push_back(nullptr);
      }
    }
    return out;
  }
  if (key == "as_int") {
    int64_t i = ctx.as_int(v, what);
    if (sa && sa->type == ArgType::SymInt) return sym::Expr(i);
    if (sa && sa->type == ArgType::Float) return static_cast<double>(i);
    if (sa && sa->type == ArgType::MemoryFormat) {  // c10 numbering when written as a plain int
      static const char* kC10[] = {"contiguous_format", "preserve_format", "channels_last", "channels_last_3d"};
      return std::string(i >= 0 && i < 4 ? kC10[i] : "unknown");
    }
    if (sa && (sa->type == ArgType::Ints || sa->type == ArgType::SymInts))  // "int[2] k=3"
      return int_list(std::vector<int64_t>(sa->list_size ? sa->list_size : 1, i), sa);
    return i;
  }
  if (key == "as_ints") {
    if (!v.is_array()) ctx.fail("as_ints must be a list");
    std::vector<int64_t> out;
    for (const auto& x : v) out.push_back(ctx.as_int(x, what));
    return int_list(out, sa);
  }
  if (key == "as_float") return ctx.as_double(v, what);
  if (key == "as_floats") {
    if (!v.is_array()) ctx.fail("as_floats must be a list");
    std::vector<double> out;
    for (const auto& x : v) out.push_back(ctx.as_double(x, what));
    return out;
  }
  if (key == "as_bool") {
    if (!v.is_boolean()) ctx.fail("as_bool must be true or false");
    return v.get<bool>();
  }
  if (key == "as_bools") {
    if (!v.is_array()) ctx.fail("as_bools must be a list");
    std::vector<bool> out;
    for (const auto& x : v) {
      if (!x.is_boolean()) ctx.fail("as_bools must hold booleans");
      out.push_back(x.get<bool>());
    }
    return out;
  }
  if (key == "as_string") return ctx.as_string(v, what);
  if (key == "as_strings") {
    if (!v.is_array()) ctx.fail("as_strings must be a list");
    std::string joined;
    for (const auto& x : v) joined += (joined.empty() ? "" : ",") + ctx.as_string(x, what);
    return joined;
  }
  if (key == "as_sym_int") {
    if (auto n = ctx.member_opt(v, "as_name")) {
      // A SymInt produced by a node: use its expression; keep the value for Scalar arguments.
      const std::string& name = ctx.as_string(*n, what);
      if (sa && sa->type == ArgType::Scalar) return ctx.value(name);
    }
    return ctx.sym_int(v, what);
  }
  if (key == "as_sym_ints") {
    if (!v.is_array()) ctx.fail("as_sym_ints must be a list");
    std::vector<sym::Expr> out;
    for (const auto& x : v) out.push_back(ctx.sym_int(x, what));
    return out;
  }
  if (key == "as_sym_float" || key == "as_sym_bool") {
    if (auto n = ctx.member_opt(v, "as_name")) return ctx.value(ctx.as_string(*n, what));
    if (auto f = ctx.member_opt(v, "as_float")) return ctx.as_double(*f, what);
    if (auto b = ctx.member_opt(v, "as_bool")) return b->is_boolean() && b->get<bool>();
    ctx.fail(key, " must hold as_name or a constant");
  }
  if (key == "as_scalar_type") {
    int64_t code = ctx.as_int(v, what);
    auto dt = dtype_from_pt2(code);
    if (!dt) ctx.fail("unknown scalar type code ", code);
    return *dt;
  }
  if (key == "as_memory_format") return std::string(memory_format_name(ctx.as_int(v, what)));
  if (key == "as_layout") return std::string(ctx.as_int(v, what) == 7 ? "strided" : "sparse");
  if (key == "as_device") {
    Device d;
    const std::string& ty = ctx.as_string(ctx.member(v, "type", what), what);
    d.type = ty == "cpu" ? Device::Type::CPU : ty == "cuda" ? Device::Type::CUDA
           : ty == "meta" ? Device::Type::Meta : Device::Type::Other;
    if (auto idx = ctx.member_opt(v, "index")) d.index = static_cast<int>(ctx.as_int(*idx, what));
    return d;
  }
  if (key == "as_graph") ctx.fail("has a subgraph argument (control flow such as torch.cond); ptc does not support control flow yet");
  if (key == "as_custom_obj") ctx.fail("has a custom object argument; ptc does not support custom objects");
  if (key == "as_operator") ctx.fail("has an operator argument; ptc does not support operator arguments");
  ctx.fail("has an argument of unknown kind '", key, "'");
}

Arg default_argument(const SchemaArg& sa) { return schema_default(sa); }

}  // namespace ptc::pt2
