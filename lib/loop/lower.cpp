// Lowering driver: graph IR -> loop IR (see lower_internal.h for the model).
#include <algorithm>
#include <set>

#include "lower_internal.h"
#include "ptc/lower.h"
#include "ptc/dtype.h"
#include "ptc/passes.h"  // library_class

namespace ptc::loop {

Index row_major_strides(const Index& sizes) { return contiguous_strides(sizes); }

sym::Expr flat_index(const Index& idx, const Index& strides, const sym::Expr& offset) {
  sym::Expr e = offset;
  for (size_t d = 0; d < idx.size(); ++d) e = e + idx[d] * strides[d];
  return e;
}

std::optional<Index> broadcast_shapes(const Index& a, const Index& b) {
  size_t n = std::max(a.size(), b.size());
  Index out(n);
  for (size_t i = 0; i < n; ++i) {
    const sym::Expr* x = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const sym::Expr* y = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!x) out[i] = *y;
    else if (!y) out[i] = *x;
    else if (*x == *y || *y == sym::Expr(1)) out[i] = *x;
    else if (*x == sym::Expr(1)) out[i] = *y;
    else return std::nullopt;
  }
  return out;
}

int64_t normalize_dim(Lowering& L, int64_t dim, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  int64_t d = dim < 0 ? dim + r : dim;
  if (d < 0 || d >= std::max<int64_t>(r, 1)) L.fail("dimension ", dim, " is out of range for a tensor of rank ", rank);
  return d;
}

Lowering::Lowering(const Graph& g) : graph(g) { prog_.symbols = g.symbols; }

std::string Lowering::origin() const { return current ? current->name : std::string(); }

TensorRef Lowering::of_view(View v, DType dt) const {
  TensorRef t;
  t.dtype = dt;
  t.sizes = v.sizes;
  View copy = v;
  t.fn = [copy, dt](const Index& idx) { return load(copy.buffer, dt, flat_index(idx, copy.strides, copy.offset)); };
  t.view = std::move(v);
  return t;
}

TensorRef Lowering::pointwise(DType dt, Index sizes, std::function<ExprRef(const Index&)> fn) const {
  TensorRef t;
  t.dtype = dt;
  t.sizes = std::move(sizes);
  // The element expression is built later, inside its consumer: tag it with this node.
  std::string node = current ? current->name : std::string();
  t.fn = [fn = std::move(fn), node](const Index& idx) {
    OriginScope scope(node);
    return fn(idx);
  };
  return t;
}

void Lowering::emit(Computation c) {
  std::vector<std::string> nodes = loop::origins_of(c.body);
  if (current && (c.kind == Computation::Kind::Extern || nodes.empty()) &&
      std::find(nodes.begin(), nodes.end(), current->name) == nodes.end())
    nodes.insert(nodes.begin(), current->name);
  c.origin.clear();
  for (const auto& n : nodes) c.origin += (c.origin.empty() ? "" : ",") + n;
  prog_.comps.push_back(std::move(c));
}

int Lowering::new_buffer(const std::string& prefix, DType dt, const Index& sizes) {
  Buffer b;
  b.name = prefix + std::to_string(temp_count_++);
  b.kind = Buffer::Kind::Temp;
  b.dtype = dt;
  b.sizes = sizes;
  b.strides = row_major_strides(sizes);
  prog_.buffers.push_back(std::move(b));
  return static_cast<int>(prog_.buffers.size()) - 1;
}

namespace {

bool is_whole_buffer(const Program& p, const View& v) {
  const Buffer& b = p.buffers[v.buffer];
  return b.kind == Buffer::Kind::Temp && v.offset == sym::Expr(0) && v.sizes == b.sizes && v.strides == b.strides;
}

// A row-major view of a whole row-major temporary with other sizes but the same elements.
bool is_reshaped_whole_buffer(const Program& p, const View& v) {
  const Buffer& b = p.buffers[v.buffer];
  if (b.kind != Buffer::Kind::Temp || !(v.offset == sym::Expr(0)) || !(b.strides == row_major_strides(b.sizes)) ||
      !(v.strides == row_major_strides(v.sizes)))
    return false;
  sym::Expr nv(1), nb(1);
  for (const auto& s : v.sizes) nv = nv * s;
  for (const auto& s : b.sizes) nb = nb * s;
  return nv == nb;
}


}  // namespace

Index loop_vars(const Index& sizes) {
  Index idx;
  for (size_t d = 0; d < sizes.size(); ++d) idx.push_back(loop_var(static_cast<int>(d), sizes[d]));
  return idx;
}

bool recomputable(const TensorRef& t) {
  if (t.view) return false;
  int budget = 24;  // nodes
  std::function<bool(const ExprRef&)> ok = [&](const ExprRef& e) {
    if (--budget < 0) return false;
    switch (e->op) {
      case Op::Const: case Op::IndexVal: case Op::Cast: case Op::Add: case Op::Sub: case Op::Mul:
      case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge:
      case Op::And: case Op::Or: case Op::Not: case Op::Select: case Op::Where:
        for (const ExprRef& a : e->args)
          if (!ok(a)) return false;
        return true;
      default: return false;
    }
  };
  return ok(t.at(loop_vars(t.sizes)));
}

std::optional<double> uniform_value(const TensorRef& t) {
  if (t.view) return std::nullopt;
  ExprRef e = t.at(loop_vars(t.sizes));
  if (e->op == Op::Const) return e->value;
  return std::nullopt;
}

bool Lowering::reads_nhwc(const TensorRef& t) const {
  if (nhwc_buffers.empty()) return false;
  if (t.view) return nhwc_buffers.count(t.view->buffer) > 0;
  bool found = false;
  std::set<const Expr*> seen;
  std::function<void(const ExprRef&)> walk = [&](const ExprRef& e) {
    if (found || !seen.insert(e.get()).second) return;
    if ((e->op == Op::Load || e->op == Op::LoadAt) && nhwc_buffers.count(e->buffer)) found = true;
    for (const auto& a : e->args) walk(a);
  };
  walk(t.at(loop_vars(t.sizes)));
  return found;
}

TensorRef Lowering::nhwc_view(int buffer, DType dt) {
  auto shape = nhwc_shapes.find(buffer);
  const Index& sizes = shape != nhwc_shapes.end() ? shape->second : prog_.buffers[buffer].sizes;
  PTC_CHECK(sizes.size() == 4, "an NHWC buffer of rank ", sizes.size());
  return permute(*this, of_view(View{buffer, sizes, row_major_strides(sizes), 0}, dt), {0, 3, 1, 2});
}

TensorRef Lowering::realize(const TensorRef& t, const std::string& origin, bool keep_layout) {
  if (t.view && is_whole_buffer(prog_, *t.view)) return t;
  if (keep_layout && options.channels_last && t.rank() == 4 && reads_nhwc(t)) {
    if (t.view && nhwc_buffers.count(t.view->buffer)) {
      TensorRef whole = nhwc_view(t.view->buffer, t.dtype);
      if (whole.view && t.view->offset == whole.view->offset && t.view->sizes == whole.view->sizes && t.view->strides == whole.view->strides)
        return t;
    }
    TensorRef stored = realize(permute(*this, t, {0, 2, 3, 1}), origin, false);  // [N, H, W, C], row-major
    PTC_CHECK(stored.view, "a realized tensor is no view");
    nhwc_buffers.insert(stored.view->buffer);
    return nhwc_view(stored.view->buffer, t.dtype);
  }
  if (!t.view && t.reshaped_from) {
    TensorRef stored = reshape(*this, realize(*t.reshaped_from, origin), t.sizes);
    if (stored.view) return stored;
  }
  int buf = store(t, "buf");
  return of_view(View{buf, t.sizes, prog_.buffers[buf].strides, 0}, t.dtype);
}

int Lowering::store(const TensorRef& t, const std::string& prefix) {
  int buf = new_buffer(prefix, t.dtype, t.sizes);
  Computation c;
  c.kind = Computation::Kind::Pointwise;
  c.out = buf;
  c.domain = t.sizes;
  c.body = cast(t.at(loop_vars(t.sizes)), t.dtype);
  emit(std::move(c));  // (its origin: the graph nodes in the body)
  return buf;
}

ElementCost element_cost(const TensorRef& x, size_t max_loads) {
  ElementCost cost;
  if (x.view) {
    cost.loads = 1;
    return cost;
  }
  std::set<const Expr*> seen;
  std::function<void(const ExprRef&)> walk = [&](const ExprRef& e) {
    if (!e || !seen.insert(e.get()).second || cost.loads > max_loads) return;
    switch (e->op) {
      case Op::Load:
      case Op::LoadAt: ++cost.loads; break;
      case Op::Exp:
      case Op::Log:
      case Op::Log1p:
      case Op::Sqrt:
      case Op::Rsqrt:
      case Op::Sin:
      case Op::Cos:
      case Op::Tanh:
      case Op::Erf:
      case Op::Sigmoid:
      case Op::Pow: ++cost.transcendental; break;
      default: break;
    }
    for (const auto& a : e->args) walk(a);
  };
  walk(x.at(loop_vars(x.sizes)));
  return cost;
}

// Element-wise graph ops (what a value read only by them may stay inlined into).
bool elementwise_kind(OpKind k) {
  switch (k) {
    case OpKind::AddTensor: case OpKind::AddScalar: case OpKind::SubTensor: case OpKind::SubScalar: case OpKind::RsubScalar:
    case OpKind::MulTensor: case OpKind::MulScalar: case OpKind::DivTensor: case OpKind::DivScalar: case OpKind::PowTensorScalar:
    case OpKind::Neg: case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Erf: case OpKind::Exp: case OpKind::Relu:
    case OpKind::Gelu: case OpKind::Silu: case OpKind::ToDtype: return true;
    default: return false;
  }
}

TensorRef stored_if_costly(Lowering& L, const TensorRef& x, const std::string& origin, size_t max_loads, bool transcendental_ok,
                           bool keep_layout) {
  if (x.view) return x;
  const ElementCost cost = element_cost(x, max_loads);
  const bool costly = cost.loads > max_loads || (!transcendental_ok && cost.transcendental > 0);
  return costly ? L.realize_narrow(x, origin, keep_layout) : x;
}

namespace {

// Whether constant c is a value of half dtype `half` (0 and 6 are, for ReLU and ReLU6).
bool half_value(double c, DType half) {
  std::byte b[2];
  write_element(b, half, c);
  return read_element(b, half) == c;
}

// The half dtype whose values float32 expression e takes on every element, if any: a widened
// half value, or what only selects among such values and half constants (ReLU, clamps, max /
// min, a choice, a negation). autocast leaves these ops unrounded because they create no new
// values, and neither does storing their result in the half dtype.
std::optional<DType> half_valued(const ExprRef& e, int depth = 0) {
  if (depth > 8 || e->dtype != DType::Float32) return std::nullopt;
  switch (e->op) {
    case Op::Cast:
      if (dtype_is_half(e->args[0]->dtype)) return e->args[0]->dtype;
      return std::nullopt;
    case Op::Relu:
    case Op::Neg: return half_valued(e->args[0], depth + 1);
    case Op::Max:
    case Op::Min:
    case Op::Where:
    case Op::Select: {
      const size_t first = e->op == Op::Where || e->op == Op::Select ? 1 : 0;
      std::optional<DType> h;
      for (size_t i = first; i < e->args.size(); ++i) {
        if (e->args[i]->op == Op::Const) continue;
        const std::optional<DType> a = half_valued(e->args[i], depth + 1);
        if (!a || (h && *h != *a)) return std::nullopt;
        h = a;
      }
      if (!h) return std::nullopt;
      for (size_t i = first; i < e->args.size(); ++i)
        if (e->args[i]->op == Op::Const && !half_value(e->args[i]->value, *h)) return std::nullopt;
      return h;
    }
    default: return std::nullopt;
  }
}

std::optional<DType> half_valued(const TensorRef& t) {
  if (t.view || t.dtype != DType::Float32) return std::nullopt;
  return half_valued(t.at(loop_vars(t.sizes)), 0);
}

}  // namespace

// The float32 widening of stored half values, which a conversion back returns as they are.
TensorRef widened(Lowering& L, const TensorRef& stored) {
  TensorRef w = map1(L, stored, DType::Float32, [](ExprRef v) { return cast(v, DType::Float32); });
  w.widened_from = std::make_shared<const TensorRef>(stored);
  return w;
}

TensorRef Lowering::realize_narrow(const TensorRef& t, const std::string& origin, bool keep_layout) {
  if (t.widened_from) return t;  // stored in half precision already
  if (t.view || t.dtype != DType::Float32) return realize(t, origin, keep_layout);
  const std::optional<DType> narrow_dt = half_valued(t);
  if (!narrow_dt) return realize(t, origin, keep_layout);
  const DType half = *narrow_dt;
  TensorRef wide = t;
  TensorRef narrow = pointwise(half, t.sizes, [wide, half](const Index& i) {
    ExprRef v = wide.at(i);
    return v->op == Op::Cast && v->args[0]->dtype == half ? v->args[0] : cast(v, half);
  });
  return widened(*this, realize(narrow, origin, keep_layout));
}

// A value with several users is stored once: in half precision where it is a widened half value
// (realize_narrow), unless a library operation reads it (its operand must be a float32 buffer).
TensorRef Lowering::realize_shared(const Node& n, size_t output, const TensorRef& t) {
  if (read_by_library_.count(n.outputs[output])) return realize(t, n.name);
  return realize_narrow(t, n.name);
}

TensorRef Lowering::split_library_sum(const TensorRef& a, const TensorRef& b, const std::string& origin) {
  auto externs = [&](const TensorRef& t) {
    std::set<int> found;
    if (t.view) return found;
    std::set<const Expr*> seen;
    std::function<void(const ExprRef&)> walk = [&](const ExprRef& e) {
      if (!seen.insert(e.get()).second) return;
      if (e->op == Op::Load) found.insert(e->buffer);
      for (const auto& x : e->args) walk(x);
    };
    walk(t.at(loop_vars(t.sizes)));
    std::set<int> ext;
    for (const Computation& c : prog_.comps)
      if (c.kind == Computation::Kind::Extern && found.count(c.out) &&
          (c.extern_kind == ExternKind::Gemm || c.extern_kind == ExternKind::Convolution))
        ext.insert(c.out);
    return ext;
  };
  const std::set<int> ea = externs(a);
  if (ea.empty()) return b;
  const std::set<int> eb = externs(b);
  if (eb.empty()) return b;
  for (int x : eb)
    if (ea.count(x)) return b;
  return realize_narrow(b, origin);
}

View Lowering::as_view(const TensorRef& t, const std::string& origin) {
  if (t.view) return *t.view;
  return *realize(t, origin).view;
}

TensorRef Lowering::reduce(const TensorRef& in, std::vector<int64_t> dims, bool keepdim, ReduceOp op,
                           DType out_dtype, const std::string& origin) {
  std::vector<bool> reduced(in.rank(), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  Index kept, red;
  for (size_t d = 0; d < in.rank(); ++d) (reduced[d] ? red : kept).push_back(in.sizes[d]);
  int buf = new_buffer("buf", out_dtype, kept);
  Index idx(in.rank());
  size_t k = 0, r = 0;
  for (size_t d = 0; d < in.rank(); ++d) {
    if (reduced[d]) {
      idx[d] = reduce_var(static_cast<int>(r), red[r]);
      ++r;
    } else {
      idx[d] = loop_var(static_cast<int>(k), kept[k]);
      ++k;
    }
  }
  Computation c;
  c.kind = Computation::Kind::Reduction;
  c.out = buf;
  c.domain = kept;
  c.reduce_domain = red;
  c.reduce = op;
  ExprRef body = in.at(idx);
  c.body = (op == ReduceOp::ArgMax || op == ReduceOp::ArgMin) ? body : cast(body, out_dtype);
  c.origin = origin;
  emit(std::move(c));
  TensorRef out = of_view(View{buf, kept, prog_.buffers[buf].strides, 0}, out_dtype);
  if (!keepdim) return out;
  View v;
  v.buffer = buf;
  v.offset = 0;
  Index st = prog_.buffers[buf].strides;
  k = 0;
  for (size_t d = 0; d < in.rank(); ++d) {
    v.sizes.push_back(reduced[d] ? sym::Expr(1) : kept[k]);
    v.strides.push_back(reduced[d] ? sym::Expr(0) : st[k]);
    if (!reduced[d]) ++k;
  }
  return of_view(v, out_dtype);
}

TensorRef Lowering::broadcast_to(const TensorRef& t, const Index& sizes) const {
  if (t.sizes == sizes) return t;
  size_t diff = sizes.size() - t.rank();
  std::vector<bool> bcast(t.rank());
  for (size_t d = 0; d < t.rank(); ++d) bcast[d] = t.sizes[d] == sym::Expr(1) && !(sizes[d + diff] == sym::Expr(1));
  if (t.view) {
    View v;
    v.buffer = t.view->buffer;
    v.offset = t.view->offset;
    v.sizes = sizes;
    for (size_t d = 0; d < sizes.size(); ++d)
      v.strides.push_back(d < diff || bcast[d - diff] ? sym::Expr(0) : t.view->strides[d - diff]);
    return of_view(v, t.dtype);
  }
  TensorRef src = t;
  return pointwise(t.dtype, sizes, [src, diff, bcast](const Index& idx) {
    Index in(src.rank());
    for (size_t d = 0; d < src.rank(); ++d) in[d] = bcast[d] ? sym::Expr(0) : idx[d + diff];
    return src.at(in);
  });
}

const TensorRef& Lowering::ref(const Value* v) const {
  auto it = env_.find(v);
  if (it == env_.end()) fail("uses %", v->name, ", which ptc could not lower");
  return it->second;
}

// torch.export keeps in-place ops of eval models (relu_, add_ on a residual). ptc computes them
// functionally, which is right as long as nothing reads the mutated value afterwards.
void Lowering::check_inplace(const Node& n) {
  const OpInfo* info = n.op();
  if (!info || info->schema.args.empty() || info->schema.args[0].type_text.find('!') == std::string::npos) return;
  const Arg& a = n.args[0];
  const Value* self = std::holds_alternative<Value*>(a) ? std::get<Value*>(a) : nullptr;
  if (!self) return;
  bool after = false;
  for (const auto& m : graph.nodes()) {
    if (m.get() == &n) {
      after = true;
      continue;
    }
    if (!after) continue;
    for (const Value* v : m->inputs())
      if (v == self) fail("mutates %", self->name, " in place, and node '", m->name, "' reads it afterwards; ptc supports in-place ops only on values nothing reads later");
  }
  for (const Value* o : graph.outputs)
    if (o == self) fail("mutates the graph output %", self->name, " in place");
}

namespace {

// Removes the computations whose results nothing reads: a lowering's by-products, e.g. the
// maxima max_pool2d_with_indices computes for its indices when a MaxPoolGrad extern finds the
// windows' maxima itself. Computations that check indices stay (their errors are the run's), as
// do scatter_adds (the CPU's fails the run on an index out of range).
void drop_unread(Program& p) {
  std::vector<bool> read(p.buffers.size(), false);
  for (int o : p.outputs) read[static_cast<size_t>(o)] = true;
  std::vector<bool> keep(p.comps.size(), false);
  for (size_t i = p.comps.size(); i-- > 0;) {
    const Computation& c = p.comps[i];
    bool checks = false;
    std::set<const Expr*> seen;
    std::vector<const Expr*> pending;
    if (c.body) pending.push_back(c.body.get());
    std::vector<int> loads;
    while (!pending.empty()) {
      const Expr* e = pending.back();
      pending.pop_back();
      if (!seen.insert(e).second) continue;
      if (e->op == Op::Load || e->op == Op::LoadAt) loads.push_back(e->buffer);
      checks = checks || e->op == Op::CheckIndex;
      for (const auto& a : e->args) pending.push_back(a.get());
    }
    checks = checks || (c.kind == Computation::Kind::Extern && c.extern_kind == ExternKind::Scatter);
    const Buffer::Kind k = p.buffers[static_cast<size_t>(c.out)].kind;
    keep[i] = read[static_cast<size_t>(c.out)] || checks || k == Buffer::Kind::Output || k == Buffer::Kind::State || k == Buffer::Kind::StateNext;
    if (!keep[i]) continue;
    for (int b : loads) read[static_cast<size_t>(b)] = true;
    for (const View& v : c.operands) read[static_cast<size_t>(v.buffer)] = true;
  }
  std::vector<Computation> kept;
  for (size_t i = 0; i < p.comps.size(); ++i)
    if (keep[i]) kept.push_back(std::move(p.comps[i]));
  p.comps = std::move(kept);
}

}  // namespace

Program Lowering::run() {
  for (const auto& in : graph.inputs) {
    const Value* v = in.value;
    if (!v->type.is_tensor()) continue;
    Buffer b;
    b.name = v->name;
    b.dtype = v->type.dtype;
    b.sizes = v->type.sizes;
    b.strides = v->type.strides;
    b.offset = v->type.storage_offset;
    if (in.role == GraphInput::Role::User) {
      b.kind = Buffer::Kind::Input;
      b.io_index = static_cast<int>(prog_.inputs.size());
      b.strides = row_major_strides(b.sizes);  // callers pass contiguous tensors (checked at run time)
      b.offset = 0;
    } else {
      b.kind = Buffer::Kind::Weight;
      b.weight = in.target;
      const TensorData& td = graph.weights.at(in.target);
      b.strides = td.type.strides;
      b.offset = td.type.storage_offset;
      auto st = std::find(graph.updated_buffers.begin(), graph.updated_buffers.end(), in.target);
      if (in.role == GraphInput::Role::Buffer && st != graph.updated_buffers.end()) {
        // A buffer the program updates: state the library holds, a dense copy of the tensor.
        b.kind = Buffer::Kind::State;
        b.io_index = static_cast<int>(st - graph.updated_buffers.begin());
        if (!td.type.static_numel() || static_cast<size_t>(*td.type.static_numel()) * dtype_size(td.type.dtype) != td.storage_bytes ||
            !(b.offset == sym::Expr(0)) || !(b.strides == row_major_strides(b.sizes)))
          user_error(graph.name, ": buffer '", in.target, "' is updated by the program but is not a contiguous tensor of its own; ptc holds such state as dense tensors");
      }
    }
    prog_.buffers.push_back(b);
    int id = static_cast<int>(prog_.buffers.size()) - 1;
    if (b.kind == Buffer::Kind::Input) prog_.inputs.push_back(id);
    env_[v] = of_view(View{id, b.sizes, b.strides, b.offset}, b.dtype);
    if (b.kind == Buffer::Kind::State) state_values[v] = id;
  }
  prog_.states.assign(graph.updated_buffers.size(), -1);
  prog_.state_next.assign(graph.updated_buffers.size(), -1);
  for (const auto& [v, id] : state_values) prog_.states[static_cast<size_t>(prog_.buffers[id].io_index)] = id;
  for (size_t k = 0; k < prog_.states.size(); ++k)
    if (prog_.states[k] < 0) user_error(graph.name, ": the program updates buffer '", graph.updated_buffers[k], "', which is no buffer input");
  for (const auto& n : graph.nodes())
    for (const Value* v : n->inputs()) {
      uses_[v]++;
      if (library_class(n->kind) != LibraryClass::None) read_by_library_.insert(v);
      if (!elementwise_kind(n->kind)) read_by_other_.insert(v);
    }
  for (const Value* o : graph.outputs) uses_[o]++, read_by_other_.insert(o);

  // Only nodes that contribute to an output are lowered (dead code, e.g. size arithmetic a
  // TorchScript trace keeps as 0-d tensors after its sizes were folded, costs nothing).
  std::set<const Value*> live(graph.outputs.begin(), graph.outputs.end());
  std::set<const Node*> live_nodes;
  for (auto it = graph.nodes().rbegin(); it != graph.nodes().rend(); ++it) {
    const Node* n = it->get();
    bool needed = false;
    for (const Value* o : n->outputs) needed = needed || live.count(o);
    if (!needed) continue;
    live_nodes.insert(n);
    for (const Value* v : n->inputs()) live.insert(v);
  }
  for (const auto& n : graph.nodes()) {
    if (!live_nodes.count(n.get())) continue;
    bool any_tensor = false;
    for (const Value* o : n->outputs) any_tensor = any_tensor || o->type.is_tensor();
    current = n.get();
    bool all_sym = true;
    for (const Value* o : n->outputs) all_sym = all_sym && o->type.kind == Type::Kind::SymInt;
    if (!any_tensor) {
      if (all_sym) continue;  // size arithmetic: its expressions are used directly
      if (n->kind == OpKind::Unknown) fail("ptc does not know this operator yet");
      fail("its result has no known type (shape propagation has not run on this graph)");
    }
    if (n->kind == OpKind::Unknown) fail("ptc does not know this operator yet");
    check_inplace(*n);
    OriginScope scope(n->name);
    std::vector<TensorRef> outs = lower_node(*this, *n);
    if (outs.size() != n->outputs.size()) fail("lowered to ", outs.size(), " results, expected ", n->outputs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const Value* v = n->outputs[i];
      TensorRef t = std::move(outs[i]);
      // A value computed from its indices alone costs little to recompute, and its users see its
      // expression (an arange of positions, an all-true mask). One that a library operation reads
      // is stored once all the same, its expression kept beside (stored_from: the attention
      // lowering reads a mask's).
      // A cheap value that only element-wise ops read (a GEMM's result plus its bias, which
      // GPT-2's tanh-GELU reads three times) stays an expression: those ops inline it, and when
      // they end in one computation over the GEMM's rows, the GEMM runs that as its epilogue
      // (a library activation) instead of storing the sum for a separate kernel.
      auto inlined = [&] {
        if (read_by_other_.count(v)) return false;
        const ElementCost cost = element_cost(t, 2);
        return cost.loads <= 2 && cost.transcendental == 0;
      };
      if (uses_[v] > 1 && !t.view && !inlined()) {
        const bool cheap = recomputable(t);
        if (!cheap || (read_by_library_.count(v) && !uniform_value(t))) {
          TensorRef stored = realize_shared(*n, i, t);
          if (cheap) stored.stored_from = std::make_shared<const TensorRef>(t);
          t = std::move(stored);
        }
      }
      env_[v] = std::move(t);
    }
  }
  current = nullptr;

  const size_t num_user_outputs = graph.outputs.size() - graph.updated_buffers.size();
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const Value* o = graph.outputs[i];
    const TensorRef& t = ref(o);
    if (i >= num_user_outputs) {  // a state's new contents: in place, or into a StateNext buffer copied after the run
      const size_t k = i - num_user_outputs;
      const int sbuf = prog_.states[k];
      const Buffer& sb = prog_.buffers[static_cast<size_t>(sbuf)];
      if (t.view && t.view->buffer == sbuf && t.view->offset == sb.offset && t.view->sizes == sb.sizes && t.view->strides == sb.strides)
        continue;
      if (!(t.sizes == sb.sizes) || t.dtype != sb.dtype)
        user_error(graph.name, ": the new contents of buffer '", graph.updated_buffers[k], "' have another shape or dtype than the buffer");
      int buf = store(t, "state_next");
      prog_.buffers[buf].kind = Buffer::Kind::StateNext;
      prog_.buffers[buf].io_index = static_cast<int>(k);
      prog_.state_next[k] = buf;
      continue;
    }
    // The output is a temporary's storage in its flat order (e.g. a GEMM's [B*T, V] result
    // returned as [B, T, V]): that buffer becomes the output, shaped as the graph returns it,
    // instead of being copied (GPT-2's logits: a 103 MB copy at batch 4).
    bool reuse = t.view && (is_whole_buffer(prog_, *t.view) || is_reshaped_whole_buffer(prog_, *t.view));
    for (int prev : prog_.outputs) reuse = reuse && prev != t.view->buffer;
    int buf;
    if (reuse) {
      buf = t.view->buffer;
      prog_.buffers[buf].sizes = t.view->sizes;
      prog_.buffers[buf].strides = t.view->strides;
    } else {
      buf = store(t, "out");
    }
    Buffer& b = prog_.buffers[buf];
    b.kind = Buffer::Kind::Output;
    b.io_index = static_cast<int>(i);
    b.name = "out" + std::to_string(i);
    prog_.outputs.push_back(buf);
  }
  drop_unread(prog_);
  return std::move(prog_);
}

}  // namespace ptc::loop

namespace ptc {

loop::Program lower_to_loops(const Graph& g, const LowerOptions& opts) {
  loop::Lowering L(g);
  L.options = opts;
  return L.run();
}

std::vector<Unlowerable> find_unlowerable(const Graph& g, const LowerOptions& opts) {
  std::vector<Unlowerable> refused;
  loop::Lowering L(g);
  L.options = opts;
  L.refused = &refused;
  try {
    L.run();
  } catch (const UserError& e) {  // past a refused node whose outputs cannot stand in, or a later step
    if (refused.empty() || refused.back().node != L.current) refused.push_back({L.current, e.what()});
  }
  return refused;
}

}  // namespace ptc
