// Reduction lowerings: sum/mean/amax/..., var, softmax, layer/batch/RMS/group norm, pooling.
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "lower_internal.h"

namespace ptc::loop {
// (A max / min that propagated a NaN found it where this holds.)
ExprRef same_or_both_nan(ExprRef v, ExprRef w) {
  return binary(Op::Or, binary(Op::Eq, v, w), binary(Op::And, unary(Op::IsNan, v), unary(Op::IsNan, w)));
}

namespace {

// No position: what first_position reduces to when nothing matches.
constexpr int64_t kNoPosition = int64_t(1) << 62;

// The first position over `dims` (flat, row-major within them) where `match` holds, kept dims
// size 1 when `keep`; kNoPosition where none does. A Min reduction over positions.
TensorRef first_position(Lowering& L, const Index& sizes, const std::vector<int64_t>& dims, bool keep,
                         std::function<ExprRef(const Index&)> match, const std::string& o) {
  TensorRef pos = L.pointwise(DType::Int64, sizes, [=](const Index& idx) {
    sym::Expr flat = 0;
    for (int64_t d : dims) flat = flat * sizes[static_cast<size_t>(d)] + idx[static_cast<size_t>(d)];
    return select(match(idx), index_value(flat), constant(static_cast<double>(kNoPosition), DType::Int64));
  });
  return L.reduce(pos, dims, keep, ReduceOp::Min, DType::Int64, o);
}

// argmax / argmin over `dims` (the flat position within them, row-major): one ArgMax / ArgMin
// reduction, or without LowerOptions::arg_reductions the max / min and then the first position
// holding it (a NaN, when there is one: maxnan / minnan propagate it, as torch's answer does).
// `best` (when given) gets the max / min the second form computes, with kept dims of size 1;
// it stays unset with ArgMax / ArgMin.
TensorRef arg_reduce(Lowering& L, TensorRef x, const std::vector<int64_t>& dims, bool keep, bool max, const std::string& o,
                     std::optional<TensorRef>* best = nullptr) {
  if (L.options.arg_reductions) return L.reduce(x, dims, keep, max ? ReduceOp::ArgMax : ReduceOp::ArgMin, DType::Int64, o);
  if (!x.view) x = L.realize(x, o);
  const TensorRef m = L.reduce(x, dims, true, max ? ReduceOp::Max : ReduceOp::Min, x.dtype, o);
  if (best) *best = m;
  const bool nan = dtype_is_float(x.dtype);
  return first_position(L, x.sizes, dims, keep, [=](const Index& idx) {
    Index at = idx;
    for (int64_t d : dims) at[static_cast<size_t>(d)] = 0;
    ExprRef v = x.at(idx), best = m.at(at);
    return nan ? same_or_both_nan(v, best) : binary(Op::Eq, v, best);
  }, o);
}

std::vector<int64_t> dims_of(Lowering& L, const Args& a, const char* name, size_t rank) {
  std::vector<int64_t> dims;
  if (!a.n.arg(name) || a.is_none(name)) {
    for (size_t d = 0; d < rank; ++d) dims.push_back(static_cast<int64_t>(d));
    return dims;
  }
  const Arg& raw = a.raw(name);
  if (std::holds_alternative<int64_t>(raw)) dims = {a.i(name)};
  else dims = a.ints(name);
  if (dims.empty())
    for (size_t d = 0; d < rank; ++d) dims.push_back(static_cast<int64_t>(d));
  for (auto& d : dims) d = normalize_dim(L, d, rank);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

sym::Expr count_of(const TensorRef& x, const std::vector<int64_t>& dims) {
  sym::Expr n = 1;
  for (int64_t d : dims) n = n * x.sizes[d];
  return n;
}

ExprRef c(double v, DType dt) { return constant(v, dt); }

// A row operation (normalization, softmax) reads its input once per statistic and once more to
// write: a computed input is recomputed by each. Past kMaxRecomputedLoads loads per element
// (ConvNeXt's depthwise 7x7 convolution, 49 taps, inlined into its layer norm: three times 49
// loads per element, which made that net slower in bf16 than eager on an H100) the input is
// stored once first, in its own logical order.
constexpr size_t kMaxRecomputedLoads = 8;

// (x - mean) * rstd over the trailing `dims`, with mean and rstd returned keepdim.
struct Normalized {
  TensorRef y, mean, rstd;
};

Normalized normalize(Lowering& L, const TensorRef& x, const std::vector<int64_t>& dims, double eps, DType dt,
                     bool subtract_mean = true) {
  std::string o = L.origin();
  sym::Expr n = count_of(x, dims);
  TensorRef xf = map1(L, stored_if_costly(L, x, o, kMaxRecomputedLoads, /*transcendental_ok=*/true, /*keep_layout=*/false), dt, [dt](ExprRef v) { return cast(v, dt); });
  TensorRef mean;
  TensorRef centered = xf;
  if (subtract_mean) {
    TensorRef sum = L.reduce(xf, dims, true, ReduceOp::Sum, dt, o);
    mean = map1(L, sum, dt, [n, dt](ExprRef s) { return binary(Op::Div, s, cast(index_value(n), dt)); });
    mean = L.realize(mean, o);
    centered = map2(L, xf, mean, dt, [](ExprRef p, ExprRef q) { return binary(Op::Sub, p, q); });
  }
  TensorRef sq = map1(L, centered, dt, [](ExprRef v) { return binary(Op::Mul, v, v); });
  TensorRef ss = L.reduce(sq, dims, true, ReduceOp::Sum, dt, o);
  TensorRef rstd = map1(L, ss, dt, [n, eps, dt](ExprRef s) {
    return unary(Op::Rsqrt, binary(Op::Add, binary(Op::Div, s, cast(index_value(n), dt)), c(eps, dt)));
  });
  rstd = L.realize(rstd, o);
  TensorRef y = map2(L, centered, rstd, dt, [](ExprRef p, ExprRef q) { return binary(Op::Mul, p, q); });
  return {y, mean, rstd};
}

// y * weight + bias, with weight/bias broadcast from `channel_dim` (or the trailing dims).
TensorRef affine(Lowering& L, const TensorRef& y, const std::optional<TensorRef>& w, const std::optional<TensorRef>& b,
                 std::optional<size_t> channel_dim, DType dt) {
  auto lift = [&](const TensorRef& t) {
    if (!channel_dim) return t;  // trailing dims broadcast by numpy rules
    Index s(y.rank() - *channel_dim, sym::Expr(1));
    s[0] = t.sizes[0];
    return reshape(L, t, s);
  };
  TensorRef out = y;
  if (w) out = map2(L, out, lift(*w), dt, [dt](ExprRef p, ExprRef q) { return binary(Op::Mul, p, cast(q, dt)); });
  if (b) out = map2(L, out, lift(*b), dt, [dt](ExprRef p, ExprRef q) { return binary(Op::Add, p, cast(q, dt)); });
  return out;
}

std::optional<TensorRef> opt_tensor(const Args& a, const char* name) {
  if (!a.n.arg(name) || a.is_none(name)) return std::nullopt;
  return a.tensor(name);
}

// Sliding-window reduction over the last two dims (pooling). `pad_value` fills outside.
TensorRef pool2d(Lowering& L, const TensorRef& x, const Index& out_sizes, std::vector<int64_t> k, std::vector<int64_t> s,
                 std::vector<int64_t> p, std::vector<int64_t> d, ReduceOp op, DType dt) {
  k = two(k, 1);
  s = s.empty() ? k : two(s, 1);
  p = two(p, 0);
  d = two(d, 1);
  size_t r = x.rank();
  double fill = op == ReduceOp::Max ? -std::numeric_limits<double>::infinity() : 0.0;
  // A virtual tensor [..., OH, OW, KH, KW] reduced over its last two dims.
  Index win = out_sizes;
  win.push_back(k[0]);
  win.push_back(k[1]);
  TensorRef src = x;
  TensorRef windows = L.pointwise(dt, win, [=](const Index& idx) {
    Index in(idx.begin(), idx.begin() + static_cast<long>(r));
    ExprRef inside;
    for (size_t j = 0; j < 2; ++j) {
      size_t dim = r - 2 + j;
      in[dim] = idx[dim] * s[j] - p[j] + idx[r + j] * d[j];
      if (p[j] > 0 || true) {
        ExprRef ok = binary(Op::And, binary(Op::Ge, index_value(in[dim]), index_value(0)),
                            binary(Op::Lt, index_value(in[dim]), index_value(src.sizes[dim])));
        inside = inside ? binary(Op::And, inside, ok) : ok;
      }
    }
    return where(inside, cast(src.at(in), dt), c(fill, dt));
  });
  if (L.options.channels_last && r == 4 && L.reads_nhwc(x)) {
    // Pooling an NHWC tensor: the windows' results stored [N, OH, OW, C] as well.
    TensorRef y = L.reduce(permute(L, windows, {0, 2, 3, 1, 4, 5}), {4, 5}, false, op, dt, L.origin());
    PTC_CHECK(y.view, "a reduction result is no buffer");
    L.nhwc_buffers.insert(y.view->buffer);
    return L.nhwc_view(y.view->buffer, dt);
  }
  return L.reduce(windows, {static_cast<int64_t>(r), static_cast<int64_t>(r + 1)}, false, op, dt, L.origin());
}

// Adaptive pooling's window o of I rows pooled to O: [floor(o I / O), ceil((o + 1) I / O)).
std::pair<ExprRef, ExprRef> adaptive_window(ExprRef o, const sym::Expr& I, const sym::Expr& O) {
  ExprRef start = binary(Op::FloorDiv, binary(Op::Mul, o, index_value(I)), index_value(O));
  ExprRef end = binary(Op::FloorDiv, binary(Op::Add, binary(Op::Mul, binary(Op::Add, o, index_value(1)), index_value(I)), index_value(O - 1)),
                       index_value(O));
  return {start, end};
}
// 1 / the window's size where row h is inside window [start, end), else 0 (float32).
ExprRef adaptive_weight(ExprRef h, const std::pair<ExprRef, ExprRef>& w) {
  const DType F = DType::Float32;
  ExprRef inside = binary(Op::And, binary(Op::Le, w.first, h), binary(Op::Lt, h, w.second));
  return select(inside, binary(Op::Div, constant(1, F), cast(binary(Op::Sub, w.second, w.first), F)), constant(0, F));
}

// The divisor of average-pooling window o along one dim (torch's avg_pool2d): the window
// [o s - p, o s - p + k) clipped to [-p, H + p) (count_include_pad; only a ceil_mode window
// reaches past it) or to the input's [0, H).
ExprRef avg_pool_count(ExprRef o, int64_t k, int64_t s, int64_t p, const sym::Expr& H, bool include_pad) {
  ExprRef start = binary(Op::Sub, binary(Op::Mul, o, index_value(s)), index_value(p));
  ExprRef end = binary(Op::Add, start, index_value(k));
  if (include_pad) return binary(Op::Sub, binary(Op::Min, end, index_value(H + p)), start);
  return binary(Op::Sub, binary(Op::Min, end, index_value(H)), binary(Op::Max, start, index_value(0)));
}

// avg_pool2d's (and its backward's) geometry arguments, with torch's defaults.
struct AvgPoolGeometry {
  std::vector<int64_t> k, s, p;
  bool ceil_mode = false, include_pad = true;
  std::optional<int64_t> divisor;  // divisor_override
};
AvgPoolGeometry avg_pool_geometry(Lowering& L, const Args& a) {
  AvgPoolGeometry g;
  g.k = two(a.ints("kernel_size"), 1);
  g.s = a.ints("stride").empty() ? g.k : two(a.ints("stride"), 1);
  g.p = two(a.ints("padding"), 0);
  g.ceil_mode = a.b("ceil_mode");
  g.include_pad = a.b("count_include_pad");
  if (!a.is_none("divisor_override")) g.divisor = a.i("divisor_override");
  if (g.divisor && *g.divisor == 0) L.fail("avg_pool2d's divisor_override must not be 0");
  return g;
}

// max_pool2d's indices (torch's): per window, the flat input position ih * W + iw of the first
// element in row-major window order that equals the window's max `y` (a NaN max: the first NaN).
TensorRef max_pool2d_indices(Lowering& L, const TensorRef& x, const TensorRef& y, std::vector<int64_t> k,
                             std::vector<int64_t> s, std::vector<int64_t> p, std::vector<int64_t> d) {
  k = two(k, 1);
  s = s.empty() ? k : two(s, 1);
  p = two(p, 0);
  d = two(d, 1);
  const size_t r = x.rank();
  const DType dt = x.dtype;
  const Index xs = x.sizes;
  auto iv = [](const sym::Expr& e) { return index_value(e); };
  return L.pointwise(DType::Int64, y.sizes, [=](const Index& o) {
    ExprRef m = cast(y.at(o), dt);
    ExprRef nan_max = binary(Op::Ne, m, m);
    ExprRef pos = c(-1, DType::Int64);
    for (int64_t kh = k[0]; kh-- > 0;)  // backwards: the first position in the window wins
      for (int64_t kw = k[1]; kw-- > 0;) {
        Index q(o.begin(), o.end());
        q[r - 2] = o[r - 2] * s[0] - p[0] + kh * d[0];
        q[r - 1] = o[r - 1] * s[1] - p[1] + kw * d[1];
        ExprRef inside;
        for (int j = 0; j < 2; ++j) {
          ExprRef ok = binary(Op::And, binary(Op::Ge, iv(q[r - 2 + j]), iv(0)), binary(Op::Lt, iv(q[r - 2 + j]), iv(xs[r - 2 + j])));
          inside = inside ? binary(Op::And, inside, ok) : ok;
        }
        ExprRef v = cast(x.at(q), dt);
        ExprRef same = binary(Op::Or, binary(Op::Eq, v, m), binary(Op::And, nan_max, binary(Op::Ne, v, v)));
        pos = select(where(inside, same, c(0, DType::Bool)), iv(q[r - 2] * xs[r - 1] + q[r - 1]), pos);
      }
    return pos;
  });
}

// Whether max_pool2d_with_indices_backward node `n` takes the indices max_pool2d_with_indices
// computed for the same input and geometry (without ceil_mode), over 4-d float32 tensors: then
// its windows' maxima can be found again from the input.
bool indices_of_same_pool(const Node& n) {
  auto value = [](const Node& m, const char* name) -> const Value* {
    const Arg* a = m.arg(name);
    const Value* const* v = a ? std::get_if<Value*>(a) : nullptr;
    return v ? *v : nullptr;
  };
  const Value *ix = value(n, "indices"), *self = value(n, "self"), *gout = value(n, "grad_output");
  if (!ix || !self || !gout || !ix->producer || ix->output_index != 1 || ix->producer->kind != OpKind::MaxPool2dWithIndices) return false;
  const Node& pool = *ix->producer;
  if (value(pool, "self") != self) return false;
  if (self->type.rank() != 4 || self->type.dtype != DType::Float32 || gout->type.dtype != DType::Float32) return false;
  if (n.outputs.size() != 1 || n.outputs[0]->type.dtype != DType::Float32) return false;
  // The geometry, schema defaults filled in (stride [] = the kernel size).
  auto geometry = [](const Node& m) -> std::optional<std::vector<int64_t>> {
    auto ints = [&](const char* name) -> std::optional<std::vector<int64_t>> {
      const Arg* a = m.arg(name);
      if (!a || std::holds_alternative<std::monostate>(*a)) return std::vector<int64_t>{};
      if (const auto* v = std::get_if<std::vector<int64_t>>(a)) return *v;
      return std::nullopt;
    };
    auto k = ints("kernel_size"), s = ints("stride"), p = ints("padding"), d = ints("dilation");
    if (!k || !s || !p || !d || k->empty()) return std::nullopt;
    const Arg* ceil = m.arg("ceil_mode");
    if (ceil && std::holds_alternative<bool>(*ceil) && std::get<bool>(*ceil)) return std::nullopt;
    if (ceil && !std::holds_alternative<bool>(*ceil) && !std::holds_alternative<std::monostate>(*ceil)) return std::nullopt;
    std::vector<int64_t> kk = two(*k, 1), ss = s->empty() ? kk : two(*s, 1), pp = two(*p, 0), dd = two(*d, 1), g;
    for (const auto* v : {&kk, &ss, &pp, &dd}) {
      if (v->size() != 2) return std::nullopt;
      g.insert(g.end(), v->begin(), v->end());
    }
    return g;
  };
  auto a = geometry(n), b = geometry(pool);
  return a && b && *a == *b;
}

}  // namespace

std::vector<int64_t> two(std::vector<int64_t> v, int64_t dflt) {
  if (v.empty()) v = {dflt};
  if (v.size() == 1) v.push_back(v[0]);
  return v;
}

TensorRef softmax(Lowering& L, const TensorRef& x, int64_t dim, bool log, DType dt) {
  std::string o = L.origin();
  TensorRef xf = map1(L, stored_if_costly(L, x, o, kMaxRecomputedLoads, /*transcendental_ok=*/true, /*keep_layout=*/false), dt, [dt](ExprRef v) { return cast(v, dt); });
  TensorRef m = L.reduce(xf, {dim}, true, ReduceOp::Max, dt, o);
  TensorRef shifted = map2(L, xf, m, dt, [](ExprRef p, ExprRef q) { return binary(Op::Sub, p, q); });
  TensorRef e = map1(L, shifted, dt, [](ExprRef v) { return unary(Op::Exp, v); });
  TensorRef s = L.reduce(e, {dim}, true, ReduceOp::Sum, dt, o);
  if (log) return map2(L, shifted, s, dt, [](ExprRef p, ExprRef q) { return binary(Op::Sub, p, unary(Op::Log, q)); });
  return map2(L, e, s, dt, [](ExprRef p, ExprRef q) { return binary(Op::Div, p, q); });
}

// out[n, (c KH + kh) KW + kw, oh OW + ow] = x[n, c, oh s - p + kh d, ow s - p + kw d], 0 outside.
TensorRef im2col(Lowering& L, const TensorRef& x, std::array<int64_t, 2> k, std::array<int64_t, 2> d, std::array<int64_t, 2> p,
                 std::array<int64_t, 2> s, const Index& out, DType dt) {
  const size_t r = x.rank();
  sym::Expr OW = sym::floordiv(x.sizes[r - 1] + 2 * p[1] - d[1] * (k[1] - 1) - 1, sym::Expr(s[1])) + 1;
  return L.pointwise(dt, out, [=](const Index& i) {
    const sym::Expr& j = i[r - 3];  // the (c, kh, kw) index
    const sym::Expr& l = i[r - 2];  // the (oh, ow) index
    sym::Expr cc = sym::floordiv(j, sym::Expr(k[0] * k[1]));
    sym::Expr kh = sym::mod(sym::floordiv(j, sym::Expr(k[1])), sym::Expr(k[0])), kw = sym::mod(j, sym::Expr(k[1]));
    sym::Expr oh = sym::floordiv(l, OW), ow = sym::mod(l, OW);
    Index src(i.begin(), i.begin() + static_cast<long>(r - 3));
    src.push_back(cc);
    src.push_back(oh * s[0] - p[0] + kh * d[0]);
    src.push_back(ow * s[1] - p[1] + kw * d[1]);
    ExprRef inside;
    for (int q = 0; q < 2; ++q) {
      ExprRef ok = binary(Op::And, binary(Op::Ge, index_value(src[r - 2 + q]), index_value(0)),
                          binary(Op::Lt, index_value(src[r - 2 + q]), index_value(x.sizes[r - 2 + q])));
      inside = inside ? binary(Op::And, inside, ok) : ok;
    }
    return where(inside, cast(x.at(src), dt), constant(0, dt));
  });
}

Lowered lower_reduction(Lowering& L, const Node& n, const Args& a) {
  auto one = [](TensorRef t) { return Lowered(std::vector<TensorRef>{std::move(t)}); };
  std::string o = L.origin();
  switch (n.kind) {
    case OpKind::SumDimIntList: case OpKind::Sum: case OpKind::MeanDim: case OpKind::Mean: {
      TensorRef x = a.tensor("self");
      DType dt = a.out_dtype();
      auto dims = dims_of(L, a, "dim", x.rank());
      bool keep = n.arg("keepdim") && a.b("keepdim");
      if (n.kind != OpKind::MeanDim && n.kind != OpKind::Mean) return one(L.reduce(x, dims, keep, ReduceOp::Sum, dt, o));
      // A float16 / bfloat16 mean divides the float32 sum and rounds once, as torch (a half sum
      // could overflow where the mean does not).
      const DType acc = dtype_compute(dt);
      TensorRef s = L.reduce(x, dims, keep, ReduceOp::Sum, acc, o);
      sym::Expr cnt = count_of(x, dims);
      return one(map1(L, s, dt, [cnt, acc, dt](ExprRef v) { return cast(binary(Op::Div, v, cast(index_value(cnt), acc)), dt); }));
    }
    case OpKind::VarCorrection: case OpKind::VarMeanCorrection: case OpKind::StdCorrection:
    case OpKind::VarDim: case OpKind::VarMeanDim: case OpKind::StdDim: {
      // sum((x - mean)^2) / max(N - correction, 0) over `dim` (correction 1 when None), computed
      // in float32 for half dtypes; std is its square root; var_mean also returns the mean.
      TensorRef x = a.tensor("self");
      const DType dt = a.out_dtype(), acc = dtype_compute(dt);
      auto dims = dims_of(L, a, "dim", x.rank());
      const bool keep = a.b("keepdim");
      // (the .dim overloads say `unbiased`: correction 1 or 0)
      const bool dim_form = n.kind == OpKind::VarDim || n.kind == OpKind::VarMeanDim || n.kind == OpKind::StdDim;
      const ExprRef corr = dim_form ? c(a.b("unbiased") ? 1 : 0, acc) : a.is_none("correction") ? c(1, acc) : cast(a.scalar("correction", acc), acc);
      const sym::Expr cnt = count_of(x, dims);
      TensorRef xf = map1(L, x, acc, [acc](ExprRef v) { return cast(v, acc); });
      TensorRef sum = L.reduce(xf, dims, true, ReduceOp::Sum, acc, o);
      TensorRef mean = L.realize(map1(L, sum, acc, [cnt, acc](ExprRef s) { return binary(Op::Div, s, cast(index_value(cnt), acc)); }), o);
      TensorRef sq = map2(L, xf, mean, acc, [](ExprRef p, ExprRef q) {
        ExprRef d = binary(Op::Sub, p, q);
        return binary(Op::Mul, d, d);
      });
      TensorRef ss = L.reduce(sq, dims, keep, ReduceOp::Sum, acc, o);
      const bool root = n.kind == OpKind::StdCorrection || n.kind == OpKind::StdDim;
      TensorRef var = map1(L, ss, dt, [cnt, corr, acc, dt, root](ExprRef s) {
        ExprRef denom = binary(Op::Max, binary(Op::Sub, cast(index_value(cnt), acc), corr), c(0, acc));
        ExprRef v = binary(Op::Div, s, denom);
        return cast(root ? unary(Op::Sqrt, v) : v, dt);
      });
      if (n.kind != OpKind::VarMeanCorrection && n.kind != OpKind::VarMeanDim) return one(var);
      TensorRef m = map1(L, keep ? mean : reshape(L, mean, a.out_sizes(1)), a.out_dtype(1),
                         [dt = a.out_dtype(1)](ExprRef v) { return cast(v, dt); });
      return std::vector<TensorRef>{var, m};
    }
    case OpKind::Amax: case OpKind::Amin: {
      TensorRef x = a.tensor("self");
      return one(L.reduce(x, dims_of(L, a, "dim", x.rank()), a.b("keepdim"), n.kind == OpKind::Amax ? ReduceOp::Max : ReduceOp::Min,
                          a.out_dtype(), o));
    }
    case OpKind::AnyDim: case OpKind::AnyDims: case OpKind::Any: case OpKind::AllDim: {
      TensorRef x = map1(L, a.tensor("self"), DType::Bool, [](ExprRef v) { return cast(v, DType::Bool); });
      bool keep = n.arg("keepdim") && a.b("keepdim");
      return one(L.reduce(x, dims_of(L, a, "dim", x.rank()), keep, n.kind == OpKind::AllDim ? ReduceOp::All : ReduceOp::Any, DType::Bool, o));
    }
    case OpKind::Argmax: case OpKind::Argmin: {
      TensorRef x = a.tensor("self");
      return one(arg_reduce(L, x, dims_of(L, a, "dim", x.rank()), a.b("keepdim"), n.kind == OpKind::Argmax, o));
    }
    case OpKind::Topk: {
      // One pass per value: the best of the elements not yet chosen (a max / min reduction), then
      // the first element not yet chosen that equals it (a min reduction over positions), so ties
      // and infinities pick distinct positions. NaN counts as the largest value, as in torch.
      TensorRef x = a.tensor("self");
      const sym::Expr ks = a.syms("k")[0];
      if (!ks.as_const()) L.fail("topk: k must be a constant, got ", ks.str());
      const int64_t k = *ks.as_const();
      if (x.rank() == 0) return std::vector<TensorRef>{x, L.pointwise(DType::Int64, {}, [](const Index&) { return constant(0, DType::Int64); })};
      const size_t dim = static_cast<size_t>(normalize_dim(L, a.i("dim"), x.rank()));
      const bool largest = a.b("largest");
      if (k > 64 || !dtype_is_float(x.dtype)) {  // the first k of a sort (stable: ties in order)
        const std::vector<TensorRef> sorted = sort_along(L, x, dim, largest, n.name);
        Index sizes = x.sizes;
        sizes[dim] = sym::Expr(k);
        std::vector<TensorRef> out;
        for (const TensorRef& t : sorted) out.push_back(L.pointwise(t.dtype, sizes, [t](const Index& idx) { return t.at(idx); }));
        return out;
      }
      if (!x.view) x = L.realize(x, n.name);
      const DType dt = x.dtype;
      const double inf = std::numeric_limits<double>::infinity();
      auto kept = [dim](const TensorRef& t, Index i) {
        i[dim] = 0;
        return t.at(i);
      };
      std::vector<TensorRef> vals, idxs;
      for (int64_t i = 0; i < k; ++i) {
        const std::vector<TensorRef> chosen = idxs;
        auto taken = [=](const Index& idx) -> ExprRef {
          ExprRef p;
          for (const TensorRef& t : chosen) {
            ExprRef e = binary(Op::Eq, kept(t, idx), index_value(idx[dim]));
            p = p ? binary(Op::Or, p, e) : e;
          }
          return p;
        };
        // The candidates' order key: NaN above +inf for largest; for smallest NaN is left out
        // (+inf) and only chosen once nothing else is left.
        TensorRef masked = L.pointwise(dt, x.sizes, [=](const Index& idx) {
          ExprRef v = x.at(idx);
          if (!largest) v = select(unary(Op::IsNan, v), constant(inf, dt), v);
          ExprRef p = taken(idx);
          return p ? select(p, constant(largest ? -inf : inf, dt), v) : v;
        });
        TensorRef m = L.reduce(masked, {static_cast<int64_t>(dim)}, true, largest ? ReduceOp::Max : ReduceOp::Min, dt, n.name);
        auto first = [&](std::function<ExprRef(const Index&)> match) {  // the first position not yet chosen that matches
          return first_position(L, x.sizes, {static_cast<int64_t>(dim)}, true, [=](const Index& idx) {
            ExprRef c = match(idx), p = taken(idx);
            return p ? binary(Op::And, c, unary(Op::Not, p)) : c;
          }, n.name);
        };
        TensorRef ix = first([=](const Index& idx) {
          ExprRef v = x.at(idx), best = kept(m, idx);
          return largest ? same_or_both_nan(v, best) : binary(Op::Eq, v, best);
        });
        if (largest) {
          vals.push_back(m);
        } else {  // nothing real left: a NaN, after every real value (+inf included)
          TensorRef nan_ix = first([=](const Index& idx) { return unary(Op::IsNan, x.at(idx)); });
          const TensorRef real_ix = ix;
          const ExprRef none = constant(static_cast<double>(kNoPosition), DType::Int64);
          auto found = [=](const Index& idx) { return binary(Op::Lt, kept(real_ix, idx), none); };
          ix = L.pointwise(DType::Int64, real_ix.sizes, [=](const Index& idx) { return select(found(idx), real_ix.at(idx), nan_ix.at(idx)); });
          vals.push_back(L.pointwise(dt, real_ix.sizes, [=](const Index& idx) {
            return select(found(idx), m.at(idx), constant(std::numeric_limits<double>::quiet_NaN(), dt));
          }));
        }
        idxs.push_back(ix);
      }
      // Assemble the k slices along dim (nested selects, as cat does).
      auto assemble = [&](const std::vector<TensorRef>& parts, DType t) {
        Index sizes = x.sizes;
        sizes[dim] = sym::Expr(k);
        return L.pointwise(t, sizes, [=](const Index& idx) {
          ExprRef e = kept(parts.back(), idx);
          for (int64_t j = k - 1; j-- > 0;)
            e = where(binary(Op::Eq, index_value(idx[dim]), index_value(sym::Expr(j))), kept(parts[static_cast<size_t>(j)], idx), e);
          return e;
        });
      };
      return std::vector<TensorRef>{assemble(vals, dt), assemble(idxs, DType::Int64)};
    }
    case OpKind::MaxDim: {
      TensorRef x = a.tensor("self");
      auto dims = dims_of(L, a, "dim", x.rank());
      bool keep = a.b("keepdim");
      std::optional<TensorRef> m;  // (the max the two-reduction argmax computed, when it did)
      TensorRef ix = arg_reduce(L, x, dims, keep, true, o, &m);
      TensorRef values = !m ? L.reduce(x, dims, keep, ReduceOp::Max, a.out_dtype(0), o) : keep ? *m : reshape(L, *m, a.out_sizes(0));
      return std::vector<TensorRef>{values, ix};
    }
    case OpKind::SoftmaxInt: case OpKind::UnderscoreSoftmax: case OpKind::LogSoftmaxInt: case OpKind::UnderscoreLogSoftmax: {
      TensorRef x = a.tensor("self");
      bool log = n.kind == OpKind::LogSoftmaxInt || n.kind == OpKind::UnderscoreLogSoftmax;
      DType dt = a.out_dtype();
      DType compute = dtype_size(dt) < 4 ? DType::Float32 : dt;
      TensorRef y = softmax(L, x, normalize_dim(L, a.i("dim"), x.rank()), log, compute);
      return one(map1(L, y, dt, [dt](ExprRef v) { return cast(v, dt); }));
    }
    case OpKind::LayerNorm: case OpKind::NativeLayerNorm: case OpKind::RmsNorm: {
      TensorRef x = a.tensor("input");
      size_t nd = a.syms("normalized_shape").size();
      std::vector<int64_t> dims;
      for (size_t d = x.rank() - nd; d < x.rank(); ++d) dims.push_back(static_cast<int64_t>(d));
      DType dt = a.out_dtype();
      DType compute = dtype_size(dt) < 4 ? DType::Float32 : dt;
      double eps = n.kind == OpKind::RmsNorm ? (a.is_none("eps") ? 1.1920928955078125e-07 : a.f("eps")) : a.f("eps");
      Normalized nm = normalize(L, x, dims, eps, compute, n.kind != OpKind::RmsNorm);
      TensorRef y = affine(L, nm.y, opt_tensor(a, "weight"), n.kind == OpKind::RmsNorm ? std::nullopt : opt_tensor(a, "bias"),
                           std::nullopt, compute);
      y = map1(L, y, dt, [dt](ExprRef v) { return cast(v, dt); });
      if (n.kind != OpKind::NativeLayerNorm) return one(y);
      return std::vector<TensorRef>{y, nm.mean, nm.rstd};
    }
    case OpKind::GroupNorm: case OpKind::NativeGroupNorm: {
      // x [N, C, *] normalized over each group of C / G channels and the spatial dims: the
      // layer-norm building block over [N, G, C / G * prod(*)], then the per-channel affine.
      TensorRef x = a.tensor("input");
      if (x.rank() < 2) L.fail("group_norm expects an input of rank 2 or more, got rank ", x.rank());
      const int64_t G = a.i(n.kind == OpKind::GroupNorm ? "num_groups" : "group");
      const DType dt = a.out_dtype();
      const DType compute = dtype_size(dt) < 4 ? DType::Float32 : dt;
      sym::Expr per = sym::floordiv(x.sizes[1], sym::Expr(G));
      for (size_t d = 2; d < x.rank(); ++d) per = per * x.sizes[d];
      const Index grouped{x.sizes[0], sym::Expr(G), per};
      Normalized nm = normalize(L, reshape(L, x, grouped), {2}, a.f("eps"), compute);
      TensorRef y = affine(L, reshape(L, nm.y, x.sizes), opt_tensor(a, "weight"), opt_tensor(a, "bias"), size_t{1}, compute);
      y = map1(L, y, dt, [dt](ExprRef v) { return cast(v, dt); });
      if (n.kind == OpKind::GroupNorm) return one(y);
      auto stat = [&](const TensorRef& t, size_t i) {  // [N, G, 1] -> [N, G] in the output's dtype
        const DType st = a.out_dtype(i);
        return map1(L, reshape(L, t, {x.sizes[0], sym::Expr(G)}), st, [st](ExprRef v) { return cast(v, st); });
      };
      return std::vector<TensorRef>{y, stat(nm.mean, 1), stat(nm.rstd, 2)};
    }
    case OpKind::UnderscoreNativeBatchNormLegitFunctional:  // (only ever seen in training mode)
    case OpKind::BatchNorm: case OpKind::UnderscoreNativeBatchNormLegitNoTraining: case OpKind::NativeBatchNorm:
    case OpKind::UnderscoreNativeBatchNormLegit: {
      if ((n.arg("training") && a.b("training")) || n.kind == OpKind::UnderscoreNativeBatchNormLegitFunctional)
        L.fail("batch norm in training mode is not supported for inference compiles (export the model in eval mode, or compile "
               "with --train)");
      TensorRef x = a.tensor("input");
      DType dt = a.out_dtype();
      DType compute = dtype_size(dt) < 4 ? DType::Float32 : dt;
      double eps = a.f("eps");
      TensorRef mean = a.tensor("running_mean"), var = a.tensor("running_var");
      Index cs(x.rank() - 1, sym::Expr(1));
      cs[0] = x.sizes[1];
      TensorRef mv = reshape(L, mean, cs);
      TensorRef rstd = reshape(L, map1(L, var, compute, [eps, compute](ExprRef v) {
                                 return unary(Op::Rsqrt, binary(Op::Add, cast(v, compute), c(eps, compute)));
                               }), cs);
      TensorRef y = map2(L, x, mv, compute, [compute](ExprRef p, ExprRef q) { return binary(Op::Sub, cast(p, compute), cast(q, compute)); });
      y = map2(L, y, rstd, compute, [](ExprRef p, ExprRef q) { return binary(Op::Mul, p, q); });
      y = affine(L, y, opt_tensor(a, "weight"), opt_tensor(a, "bias"), size_t{1}, compute);
      y = map1(L, y, dt, [dt](ExprRef v) { return cast(v, dt); });
      if (n.outputs.size() == 1) return one(y);
      std::vector<TensorRef> outs{y};
      for (size_t i = 1; i < n.outputs.size(); ++i)  // saved statistics: empty in inference
        outs.push_back(L.pointwise(a.out_dtype(i), a.out_sizes(i), [dt](const Index&) { return constant(0, dt); }));
      return outs;
    }
    case OpKind::AdaptiveAvgPool2d: case OpKind::UnderscoreAdaptiveAvgPool2d: case OpKind::AdaptiveAvgPool1d: {
      TensorRef x = a.tensor("self");
      Index out = a.out_sizes();
      size_t sp = n.kind == OpKind::AdaptiveAvgPool1d ? 1 : 2;
      std::vector<int64_t> k;
      bool uniform = true;  // every window of one size: a pooling with kernel = stride
      for (size_t j = 0; j < sp; ++j) {
        auto in = x.sizes[x.rank() - sp + j].as_const(), o = out[out.size() - sp + j].as_const();
        if (!in || !o || *o == 0 || *in == 0)
          L.fail("adaptive pooling is supported over constant input and output sizes");
        uniform = uniform && *in % *o == 0;
        k.push_back(*in / *o);
      }
      if (!uniform) {
        // Windows of their own sizes (torch's adaptive ranges): the mean along W, then along H,
        // each a gather over the window's rows (float32 between the two).
        DType dt = a.out_dtype(), acc = dtype_compute(dt);
        TensorRef t = x;
        for (size_t j = sp; j-- > 0;) {
          const size_t dim = x.rank() - sp + j;
          const sym::Expr I = x.sizes[dim], O = out[dim];
          const int64_t ic = *I.as_const(), oc = *O.as_const();
          t = gather_along(
              L, t, dim, O, I, (ic + oc - 1) / oc + 2, [=](ExprRef o) { return adaptive_window(o, I, O).first; },
              [=](ExprRef h, ExprRef o) { return adaptive_weight(h, adaptive_window(o, I, O)); }, n.name, j == 0 ? dt : acc);
        }
        return one(t);
      }
      if (sp == 1) {
        Index s4 = x.sizes;
        s4.insert(s4.end() - 1, 1);
        Index o4 = out;
        o4.insert(o4.end() - 1, 1);
        DType dt = a.out_dtype(), acc = dtype_compute(dt);
        TensorRef r = pool2d(L, reshape(L, x, s4), o4, {1, k[0]}, {1, k[0]}, {0}, {1}, ReduceOp::Sum, acc);
        int64_t cnt = k[0];
        return one(reshape(L, map1(L, r, dt, [cnt, acc, dt](ExprRef v) { return cast(binary(Op::Div, v, c(static_cast<double>(cnt), acc)), dt); }),
                           out));
      }
      DType dt = a.out_dtype(), acc = dtype_compute(dt);
      TensorRef r = pool2d(L, x, out, k, k, {0}, {1}, ReduceOp::Sum, acc);
      double cnt = static_cast<double>(k[0] * k[1]);
      return one(map1(L, r, dt, [cnt, acc, dt](ExprRef v) { return cast(binary(Op::Div, v, c(cnt, acc)), dt); }));
    }
    case OpKind::MaxPool2d: case OpKind::MaxPool2dWithIndices: {
      TensorRef x = a.tensor("self");
      // With indices, the input is stored once: the maxima and the equality tests must see the
      // same values (an inline recomputation may round differently in two kernels, e.g. FMA).
      if (n.kind == OpKind::MaxPool2dWithIndices) x = L.realize(x, L.origin());
      // Overlapping windows (ResNet's 3x3 stride-2 stem pool reads each input 2.25 times) would
      // recompute an input computed from several loads (a convolution's bias and ReLU) per
      // window: it is stored first, which a convolution's epilogue then does.
      const std::vector<int64_t> kk = two(a.ints("kernel_size"), 1), ss = a.ints("stride").empty() ? kk : two(a.ints("stride"), 1);
      if (ss[0] < kk[0] || ss[1] < kk[1]) x = stored_if_costly(L, x, L.origin(), /*max_loads=*/1, /*transcendental_ok=*/true, /*keep_layout=*/true);
      if (n.kind == OpKind::MaxPool2d && x.widened_from && a.out_dtype() == DType::Float32) {
        // The maxima of half values stored in half precision (--precision bf16's activations):
        // exact, and the next library operation reads them as they are.
        const TensorRef& h = *x.widened_from;
        return one(widened(L, pool2d(L, h, a.out_sizes(), a.ints("kernel_size"), a.ints("stride"), a.ints("padding"),
                                     a.ints("dilation"), ReduceOp::Max, h.dtype)));
      }
      TensorRef y = pool2d(L, x, a.out_sizes(), a.ints("kernel_size"), a.ints("stride"), a.ints("padding"), a.ints("dilation"),
                           ReduceOp::Max, a.out_dtype());
      if (n.kind == OpKind::MaxPool2d) return one(y);
      return std::vector<TensorRef>{y, max_pool2d_indices(L, x, L.realize(y, L.origin()), a.ints("kernel_size"), a.ints("stride"),
                                                          a.ints("padding"), a.ints("dilation"))};
    }
    case OpKind::Im2col: {
      auto k = two(a.ints("kernel_size"), 1), d = two(a.ints("dilation"), 1), p = two(a.ints("padding"), 0),
           s = two(a.ints("stride"), 1);
      return one(im2col(L, a.tensor("self"), {k[0], k[1]}, {d[0], d[1]}, {p[0], p[1]}, {s[0], s[1]}, a.out_sizes(), a.out_dtype()));
    }
    case OpKind::MaxPool2dWithIndicesBackward: {
      if (L.options.max_pool_grad_extern && indices_of_same_pool(n)) {
        // The indices are max_pool2d_with_indices' of this very input and geometry: one extern
        // finds each window's first maximum again and adds its gradient there (the indices and
        // the maxima, unread, are not computed).
        TensorRef x = a.tensor("self"), g = a.tensor("grad_output");
        std::vector<int64_t> k = two(a.ints("kernel_size"), 1);
        std::vector<int64_t> st = a.ints("stride").empty() ? k : two(a.ints("stride"), 1);
        std::vector<int64_t> pd = two(a.ints("padding"), 0), dl = two(a.ints("dilation"), 1);
        return one(emit_extern(L, ExternKind::MaxPoolGrad, a.out_dtype(), x.sizes, {L.as_view(x, L.origin()), L.as_view(g, L.origin())},
                               MaxPoolGradAttrs{{k[0], k[1]}, {st[0], st[1]}, {pd[0], pd[1]}, {dl[0], dl[1]}}));
      }
      // dx[.., ih, iw] = sum of dy[.., oh, ow] over the windows whose index (the flat input
      // position of their first maximum, max_pool2d_with_indices') is ih W + iw. The windows
      // that can hold a row: oh = (ih + p) // s - a for a < (K - 1) d // s + 1.
      TensorRef g = a.tensor("grad_output");
      TensorRef indices = L.realize(a.tensor("indices"), L.origin());  // read by up to A0 A1 windows each
      const Index xs = a.tensor("self").sizes, gs = g.sizes;
      std::vector<int64_t> k = two(a.ints("kernel_size"), 1);
      std::vector<int64_t> st = a.ints("stride").empty() ? k : two(a.ints("stride"), 1);
      std::vector<int64_t> pd = two(a.ints("padding"), 0), dl = two(a.ints("dilation"), 1);
      DType dt = a.out_dtype();
      const size_t r = xs.size();
      auto iv = [](const sym::Expr& e) { return index_value(e); };
      int64_t A[2];
      for (int j = 0; j < 2; ++j) A[j] = (k[j] - 1) * dl[j] / st[j] + 1;
      return one(L.pointwise(dt, xs, [=](const Index& idx) {
        ExprRef total = c(0, dt);
        ExprRef here = iv(idx[r - 2] * xs[r - 1] + idx[r - 1]);
        for (int64_t a0 = 0; a0 < A[0]; ++a0)
          for (int64_t a1 = 0; a1 < A[1]; ++a1) {
            Index oi(idx.begin(), idx.end());
            ExprRef valid;
            for (int j = 0; j < 2; ++j) {
              const sym::Expr o = sym::floordiv(idx[r - 2 + j] + pd[j], sym::Expr(st[j])) - (j ? a1 : a0);
              oi[r - 2 + j] = o;
              ExprRef ok = binary(Op::And, binary(Op::Ge, iv(o), iv(0)), binary(Op::Lt, iv(o), iv(gs[r - 2 + j])));
              valid = valid ? binary(Op::And, valid, ok) : ok;
            }
            ExprRef mine = binary(Op::Eq, cast(indices.at(oi), DType::Int64), here);
            total = binary(Op::Add, total, where(valid, where(mine, cast(g.at(oi), dt), c(0, dt)), c(0, dt)));
          }
        return total;
      }));
    }
    case OpKind::AvgPool2d: {
      TensorRef x = a.tensor("self");
      const AvgPoolGeometry geo = avg_pool_geometry(L, a);
      const std::vector<int64_t> &k = geo.k, &s = geo.s, &p = geo.p;
      const bool ceil_mode = geo.ceil_mode, include_pad = geo.include_pad;
      const std::optional<int64_t> over = geo.divisor;
      DType dt = a.out_dtype(), acc = dtype_compute(dt);
      TensorRef r = pool2d(L, x, a.out_sizes(), k, s, p, {1}, ReduceOp::Sum, acc);
      if (!over && !ceil_mode && (include_pad || (p[0] == 0 && p[1] == 0))) {  // every window divides by k_h k_w
        double cnt = static_cast<double>(k[0] * k[1]);
        return one(map1(L, r, dt, [cnt, acc, dt](ExprRef v) { return cast(binary(Op::Div, v, c(cnt, acc)), dt); }));
      }
      // Windows of their own divisors: past the padding (ceil_mode), without it, or the override.
      const size_t rk = x.rank();
      const Index xs = x.sizes;
      return one(L.pointwise(dt, r.sizes, [=](const Index& i) {
        ExprRef d = over ? c(static_cast<double>(*over), acc)
                         : cast(binary(Op::Mul, avg_pool_count(index_value(i[rk - 2]), k[0], s[0], p[0], xs[rk - 2], include_pad),
                                       avg_pool_count(index_value(i[rk - 1]), k[1], s[1], p[1], xs[rk - 1], include_pad)),
                                acc);
        return cast(binary(Op::Div, r.at(i), d), dt);
      }));
    }
    case OpKind::AvgPool2dBackward: {
      // Separable: each input row gathers the windows that hold it (along W, then H), each
      // times 1 / its divisor (the override divides once, along H).
      TensorRef g = a.tensor("grad_output"), x = a.tensor("self");
      const AvgPoolGeometry geo = avg_pool_geometry(L, a);
      const std::vector<int64_t> &k = geo.k, &s = geo.s, &p = geo.p;
      const bool include_pad = geo.include_pad;
      const std::optional<int64_t> over = geo.divisor;
      const size_t rk = x.rank();
      const DType F = DType::Float32;
      TensorRef t = g;
      for (int j = 1; j >= 0; --j) {
        const size_t dim = rk - 2 + static_cast<size_t>(j);
        const int64_t kj = k[static_cast<size_t>(j)], sj = s[static_cast<size_t>(j)], pj = p[static_cast<size_t>(j)];
        const sym::Expr H = x.sizes[dim];
        const std::optional<double> fixed = over ? std::optional<double>(j == 0 ? 1.0 / static_cast<double>(*over) : 1.0) : std::nullopt;
        const DType rdt = j == 0 ? g.dtype : dtype_compute(g.dtype);  // float32 between the passes: half gradients round once
        t = gather_along(
            L, t, dim, H, g.sizes[dim], (kj + sj - 1) / sj + 1,
            // the first window that can hold h: ceil((h + p - k + 1) / s)
            [=](ExprRef h) { return binary(Op::FloorDiv, binary(Op::Add, h, index_value(pj - kj + sj)), index_value(sj)); },
            [=](ExprRef o, ExprRef h) {
              ExprRef start = binary(Op::Sub, binary(Op::Mul, o, index_value(sj)), index_value(pj));
              ExprRef inside = binary(Op::And, binary(Op::Le, start, h), binary(Op::Lt, h, binary(Op::Add, start, index_value(kj))));
              ExprRef w = fixed ? constant(*fixed, F) : binary(Op::Div, constant(1, F), cast(avg_pool_count(o, kj, sj, pj, H, include_pad), F));
              return select(inside, w, constant(0, F));
            },
            n.name, rdt);
      }
      return one(t);
    }
    case OpKind::UnderscoreAdaptiveAvgPool2dBackward: {
      // Each input row gathers the windows that hold it (adaptive_window), each times 1 / its
      // size: along W, then H.
      TensorRef g = a.tensor("grad_output"), x = a.tensor("self");
      const size_t rk = x.rank();
      TensorRef t = g;
      for (int j = 1; j >= 0; --j) {
        const size_t dim = rk - 2 + static_cast<size_t>(j);
        const sym::Expr I = x.sizes[dim], O = g.sizes[dim];
        const auto ic = I.as_const(), oc = O.as_const();
        if (!ic || !oc || *ic < 1 || *oc < 1)
          L.fail("--train differentiates adaptive average pooling over constant sizes only; got ", I.str(), " -> ", O.str());
        t = gather_along(
            L, t, dim, I, O, (*oc + *ic - 1) / *ic + 3,
            [=](ExprRef h) { return binary(Op::Sub, binary(Op::FloorDiv, binary(Op::Mul, h, index_value(O)), index_value(I)), index_value(1)); },
            [=](ExprRef o, ExprRef h) { return adaptive_weight(h, adaptive_window(o, I, O)); }, n.name,
            j == 0 ? g.dtype : dtype_compute(g.dtype));
      }
      return one(t);
    }
    default: return std::nullopt;
  }
}

}  // namespace ptc::loop
