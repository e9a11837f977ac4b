#include "ptc/graph.h"

#include <sstream>

#include "ptc/error.h"

namespace ptc {

Type Type::tensor(DType dt, std::vector<sym::Expr> sizes, std::vector<sym::Expr> strides) {
  Type t;
  t.kind = Kind::Tensor;
  t.dtype = dt;
  if (strides.empty()) strides = contiguous_strides(sizes);
  t.sizes = std::move(sizes);
  t.strides = std::move(strides);
  return t;
}

Type Type::sym_int(std::optional<sym::Expr> value) {
  Type t;
  t.kind = Kind::SymInt;
  t.dtype = DType::Int64;
  t.value = value;
  return t;
}

std::optional<int64_t> Type::static_numel() const {
  int64_t n = 1;
  for (const auto& s : sizes) {
    auto c = s.as_const();
    if (!c || *c < 0) return std::nullopt;
    if (*c != 0 && n > INT64_MAX / *c) return std::nullopt;
    n *= *c;
  }
  return n;
}

std::string Type::str() const {
  switch (kind) {
    case Kind::Tensor: {
      std::string s = std::string(dtype_short(dtype)) + "[";
      for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + sizes[i].str();
      s += "]";
      // Strides are shown only when not row-major contiguous.
      if (strides != contiguous_strides(sizes)) {
        s += "{";
        for (size_t i = 0; i < strides.size(); ++i) s += (i ? ", " : "") + strides[i].str();
        s += "}";
      }
      if (device.type != Device::Type::CPU) s += "@" + device.str();
      return s;
    }
    case Kind::SymInt: return value ? "SymInt(" + value->str() + ")" : "SymInt";
    case Kind::SymFloat: return "SymFloat";
    case Kind::SymBool: return "SymBool";
    case Kind::Unknown: return "?";
  }
  return "?";
}

std::vector<sym::Expr> contiguous_strides(const std::vector<sym::Expr>& sizes) {
  std::vector<sym::Expr> st(sizes.size());
  sym::Expr acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc = acc * sizes[i];
  }
  return st;
}

std::string SourceInfo::user_frame() const {
  // Frames are "File \"path\", line N, in fn\n    code"; the innermost user frame is the last
  // one whose path is not inside torch itself.
  std::istringstream in(stack_trace);
  std::string line, best;
  while (std::getline(in, line)) {
    size_t f = line.find("File \"");
    if (f == std::string::npos) continue;
    size_t q = line.find('"', f + 6);
    if (q == std::string::npos) continue;
    std::string path = line.substr(f + 6, q - f - 6);
    std::string lineno;
    size_t l = line.find(", line ", q);
    if (l != std::string::npos) {
      size_t e = line.find(',', l + 7);
      lineno = line.substr(l + 7, e == std::string::npos ? std::string::npos : e - l - 7);
    }
    std::string code;
    std::streampos pos = in.tellg();
    std::string next;
    if (std::getline(in, next) && next.find("File \"") == std::string::npos) {
      size_t b = next.find_first_not_of(" \t");
      code = b == std::string::npos ? "" : next.substr(b);
    } else {
      in.clear();
      in.seekg(pos);
    }
    bool in_torch = path.find("/torch/") != std::string::npos ||
                    path.find("site-packages/") != std::string::npos;
    if (!in_torch || best.empty()) {
      std::string frame = path + ":" + lineno + (code.empty() ? "" : ": " + code);
      if (!in_torch) best = frame;
      else if (best.empty()) best = frame;
    }
  }
  return best;
}

const OpInfo* Node::op() const { return kind == OpKind::Unknown ? nullptr : &op_info(kind); }

std::string Node::op_name() const {
  return kind == OpKind::Unknown ? target : op_info(kind).schema.qualified();
}

std::vector<Value*> Node::inputs() const {
  std::vector<Value*> in;
  for (const auto& a : args) {
    if (auto v = std::get_if<Value*>(&a)) {
      if (*v) in.push_back(*v);
    } else if (auto vs = std::get_if<std::vector<Value*>>(&a)) {
      for (Value* x : *vs)
        if (x) in.push_back(x);
    }
  }
  return in;
}

const Arg* Node::arg(const std::string& n) const {
  const OpInfo* info = op();
  if (!info) {
    for (size_t i = 0; i < arg_names.size() && i < args.size(); ++i)
      if (arg_names[i] == n) return &args[i];
    return nullptr;
  }
  const auto& sa = info->schema.args;
  for (size_t i = 0; i < sa.size() && i < args.size(); ++i)
    if (sa[i].name == n) return &args[i];
  return nullptr;
}

const char* role_name(GraphInput::Role r) {
  switch (r) {
    case GraphInput::Role::User: return "input";
    case GraphInput::Role::Parameter: return "parameter";
    case GraphInput::Role::Buffer: return "buffer";
    case GraphInput::Role::Constant: return "constant";
  }
  return "input";
}

size_t TensorData::nbytes() const {
  auto n = type.static_numel();
  return n ? static_cast<size_t>(*n) * dtype_size(type.dtype) : 0;
}

Value* Graph::add_value(std::string name, Type type) {
  PTC_CHECK(!by_name_.count(name), "duplicate value name ", name);
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->name = std::move(name);
  v->type = std::move(type);
  Value* raw = v.get();
  by_name_[raw->name] = raw;
  values_.push_back(std::move(v));
  return raw;
}

Value* Graph::add_input(std::string name, Type type, GraphInput::Role role, std::string target) {
  Value* v = add_value(std::move(name), std::move(type));
  inputs.push_back(GraphInput{v, role, std::move(target)});
  return v;
}

Node* Graph::add_node(std::unique_ptr<Node> node) {
  for (size_t i = 0; i < node->outputs.size(); ++i) {
    node->outputs[i]->producer = node.get();
    node->outputs[i]->output_index = static_cast<int>(i);
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().get();
}

Value* Graph::find_value(const std::string& n) const {
  auto it = by_name_.find(n);
  return it == by_name_.end() ? nullptr : it->second;
}

Arg schema_default(const SchemaArg& sa) {
  struct V {
    const SchemaArg& sa;
    Arg ints(const std::vector<int64_t>& v) const {
      if (sa.type == ArgType::SymInts) return std::vector<sym::Expr>(v.begin(), v.end());
      return v;
    }
    Arg operator()(std::monostate) const { return std::monostate{}; }
    Arg operator()(bool b) const { return b; }
    Arg operator()(int64_t i) const {
      switch (sa.type) {
        case ArgType::SymInt: return sym::Expr(i);
        case ArgType::Float: return static_cast<double>(i);
        case ArgType::Ints:
        case ArgType::SymInts:
          return ints(std::vector<int64_t>(sa.list_size ? sa.list_size : 1, i));
        default: return i;
      }
    }
    Arg operator()(double d) const { return d; }
    Arg operator()(const std::string& s) const {
      if (sa.type == ArgType::ScalarType) {
        if (auto dt = dtype_from_name(s)) return *dt;
      }
      return s;
    }
    Arg operator()(const std::vector<int64_t>& v) const { return ints(v); }
    Arg operator()(const std::vector<double>& v) const { return v; }
  };
  return std::visit(V{sa}, sa.default_value);
}

}  // namespace ptc
