// Graph-rewriting helpers shared by the passes (see rewrite.h).
#include "ptc/rewrite.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "ptc/error.h"

namespace ptc::rewrite {

GraphRewriter::GraphRewriter(const Graph& src, const std::function<bool(const GraphInput&)>& keep_input)
    : src_(src), out_(std::make_unique<Graph>()) {
  out_->name = src.name;
  out_->source_format = src.source_format;
  out_->weights = src.weights;
  out_->symbols = src.symbols;
  out_->updated_buffers = src.updated_buffers;
  for (const GraphInput& in : src.inputs)
    if (!keep_input || keep_input(in)) vmap_[in.value] = out_->add_input(in.value->name, in.value->type, in.role, in.target);
}

Value* GraphRewriter::map(const Value* old) const {
  if (!old) return nullptr;
  auto it = vmap_.find(old);
  PTC_CHECK(it != vmap_.end(), "value %", old->name, " is used before the rewrite defined it");
  return it->second;
}

Arg GraphRewriter::map_arg(const Arg& a) const {
  if (auto v = std::get_if<Value*>(&a)) return Arg(map(*v));
  if (auto vs = std::get_if<std::vector<Value*>>(&a)) {
    std::vector<Value*> m;
    m.reserve(vs->size());
    for (Value* x : *vs) m.push_back(map(x));
    return Arg(std::move(m));
  }
  return a;
}

void GraphRewriter::replace(const Value* old, Value* now) { vmap_[old] = now; }

Node* GraphRewriter::add_node(const Node& like, std::vector<Arg> args, std::vector<Value*> outputs) {
  auto nn = std::make_unique<Node>();
  nn->kind = like.kind;
  nn->target = like.target;
  nn->name = like.name;
  nn->arg_names = like.arg_names;
  nn->list_output = like.list_output;
  nn->source = like.source;
  nn->args = std::move(args);
  nn->outputs = std::move(outputs);
  return out_->add_node(std::move(nn));
}

Node* GraphRewriter::copy_node(const Node& n) {
  std::vector<Arg> args;
  args.reserve(n.args.size());
  for (const Arg& a : n.args) args.push_back(map_arg(a));
  std::vector<Value*> outs;
  for (const Value* o : n.outputs) {
    Value* nv = out_->add_value(o->name, o->type);
    vmap_[o] = nv;
    outs.push_back(nv);
  }
  return add_node(n, std::move(args), std::move(outs));
}

std::string GraphRewriter::fresh_value_name(const std::string& base) const {
  auto taken = [&](const std::string& s) { return src_.find_value(s) || out_->find_value(s); };
  if (!taken(base)) return base;
  for (int i = 1;; ++i) {
    std::string s = base + "_" + std::to_string(i);
    if (!taken(s)) return s;
  }
}

std::string GraphRewriter::fresh_target(const std::string& base) const {
  auto taken = [&](const std::string& s) { return src_.weights.count(s) || out_->weights.count(s); };
  if (!taken(base)) return base;
  for (int i = 1;; ++i) {
    std::string s = base + "_" + std::to_string(i);
    if (!taken(s)) return s;
  }
}

Value* GraphRewriter::new_value(const std::string& name, Type type) {
  return out_->add_value(fresh_value_name(name), std::move(type));
}

Value* GraphRewriter::add_constant(const std::string& name, const std::string& target, TensorData data,
                                   bool source_name) {
  std::string t = fresh_target(target);
  Type type = data.type;
  out_->weights[t] = std::move(data);
  return out_->add_input(source_name ? name : fresh_value_name(name), std::move(type), GraphInput::Role::Constant, t);
}

std::unique_ptr<Graph> GraphRewriter::finish() {
  for (const Value* o : src_.outputs) out_->outputs.push_back(map(o));
  return std::move(out_);
}

std::unordered_map<const Value*, int> count_uses(const Graph& g) {
  std::unordered_map<const Value*, int> uses;
  for (const auto& n : g.nodes())
    for (const Value* v : n->inputs()) uses[v]++;
  for (const Value* o : g.outputs) uses[o]++;
  return uses;
}

std::unordered_map<const Value*, std::vector<const Node*>> users(const Graph& g) {
  std::unordered_map<const Value*, std::vector<const Node*>> u;
  for (const auto& n : g.nodes())
    for (const Value* v : n->inputs()) {
      auto& list = u[v];
      if (list.empty() || list.back() != n.get()) list.push_back(n.get());
    }
  return u;
}

bool is_forward_convolution(const Node& n) {
  switch (n.kind) {
    case OpKind::Conv1d:
    case OpKind::Conv2d:
    case OpKind::Conv3d: return true;
    case OpKind::Convolution:
    case OpKind::UnderscoreConvolution: {
      const Arg* t = n.arg("transposed");
      return t && std::holds_alternative<bool>(*t) && !std::get<bool>(*t);
    }
    default: return false;
  }
}

const TensorData* weight_of(const Graph& g, const Value* v) {
  if (!v || v->producer) return nullptr;
  for (const GraphInput& in : g.inputs) {
    if (in.value != v) continue;
    if (in.role == GraphInput::Role::User) return nullptr;
    auto it = g.weights.find(in.target);
    if (it == g.weights.end() || !it->second.type.is_tensor()) return nullptr;
    return &it->second;
  }
  return nullptr;
}

bool dtype_supported(DType t) {
  switch (t) {
    case DType::Bool: case DType::UInt8: case DType::Int8: case DType::Int16: case DType::Int32:
    case DType::Int64: case DType::Float16: case DType::BFloat16: case DType::Float32: case DType::Float64: return true;
    default: return false;
  }
}

int64_t StaticLayout::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::optional<StaticLayout> static_layout(const Type& t) {
  if (!t.is_tensor() || t.sizes.size() != t.strides.size()) return std::nullopt;
  StaticLayout l;
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    auto s = t.sizes[i].as_const();
    auto st = t.strides[i].as_const();
    if (!s || !st || *s < 0 || *st < 0) return std::nullopt;
    l.sizes.push_back(*s);
    l.strides.push_back(*st);
  }
  auto off = t.storage_offset.as_const();
  if (!off || *off < 0) return std::nullopt;
  l.offset = *off;
  return l;
}

bool row_major_dense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t expect = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expect) return false;
    expect *= sizes[d];
  }
  return true;
}

TensorData owned_tensor(const Type& t, const std::vector<double>& rowmajor) {
  auto l = static_layout(t);
  PTC_CHECK(l, "owned_tensor needs a static layout, got ", t.str());
  PTC_CHECK(static_cast<int64_t>(rowmajor.size()) == l->numel(), "owned_tensor: ", rowmajor.size(),
            " elements for ", t.str());
  const size_t item = dtype_size(t.dtype);
  int64_t extent = 0;  // elements of storage the layout reaches
  if (l->numel() > 0) {
    extent = l->offset + 1;
    for (size_t d = 0; d < l->sizes.size(); ++d) extent += (l->sizes[d] - 1) * l->strides[d];
  }
  auto bytes = std::make_shared<std::string>(static_cast<size_t>(extent) * item, '\0');
  auto* base = reinterpret_cast<std::byte*>(bytes->data());
  const size_t rank = l->sizes.size();
  std::vector<int64_t> idx(rank, 0);
  if (row_major_dense(l->sizes, l->strides)) {  // one block
    write_elements(base + static_cast<size_t>(l->offset) * item, t.dtype, rowmajor.data(), rowmajor.size());
  } else {
    for (size_t k = 0; k < rowmajor.size(); ++k) {
      int64_t pos = l->offset;
      for (size_t d = 0; d < rank; ++d) pos += idx[d] * l->strides[d];
      write_element(base + static_cast<size_t>(pos) * item, t.dtype, rowmajor[k]);
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < l->sizes[d]) break;
        idx[d] = 0;
      }
    }
  }
  TensorData td;
  td.type = t;
  td.type.requires_grad = false;
  td.storage = base;
  td.storage_bytes = bytes->size();
  td.owner = bytes;
  return td;
}

std::vector<double> read_all(const TensorData& td) {
  auto l = static_layout(td.type);
  PTC_CHECK(l, "read_all needs a static layout, got ", td.type.str());
  const size_t item = dtype_size(td.type.dtype);
  const size_t rank = l->sizes.size();
  std::vector<double> out(static_cast<size_t>(l->numel()));
  if (row_major_dense(l->sizes, l->strides)) {  // one block
    PTC_CHECK(out.empty() || static_cast<size_t>(l->offset) * item + out.size() * item <= td.storage_bytes, "weight elements out of their storage");
    read_elements(td.storage + static_cast<size_t>(l->offset) * item, td.type.dtype, out.data(), out.size());
    return out;
  }
  std::vector<int64_t> idx(rank, 0);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t pos = l->offset;
    for (size_t d = 0; d < rank; ++d) pos += idx[d] * l->strides[d];
    PTC_CHECK(static_cast<size_t>(pos + 1) * item <= td.storage_bytes, "weight element out of its storage");
    out[k] = read_element(td.storage + static_cast<size_t>(pos) * item, td.type.dtype);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < l->sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace ptc::rewrite
