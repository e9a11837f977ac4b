// Shape rules: views (the output aliases the input: torch's real strides and storage offset)
// and the copies that sit next to them (contiguous, clone).
#include <algorithm>

#include "shape_rules.h"

namespace ptc::shape {
namespace {

constexpr int64_t kHuge = int64_t(1) << 62;  // slice bounds beyond this mean "to the end"

Type view(const Type& x, Exprs sizes, Exprs strides, Expr offset) {
  return make_tensor(x, x.dtype, std::move(sizes), std::move(strides), offset);
}

Type same_view(const Type& x) { return x; }

int64_t rank_of(const Type& x) { return static_cast<int64_t>(x.rank()); }

// ---- view / reshape

// view: torch's computeStride. When ptc cannot prove the view possible without a copy but the
// input is contiguous, the contiguous strides are right; otherwise use them and skip the check.
std::vector<Type> view_op(Ctx& c) {
  const Type& x = c.tensor("self");
  Exprs sizes = infer_size(c, c.syms(c.node.kind == OpKind::Reshape ? "shape" : "size"), numel(x.sizes));
  if (auto st = view_strides(x.sizes, x.strides, sizes)) return {view(x, sizes, *st, x.storage_offset)};
  if (c.node.kind == OpKind::Reshape) return {make_contiguous(x, x.dtype, sizes)};  // reshape copies
  if (!is_contiguous(x)) c.exact_strides = false;
  return {view(x, sizes, dense_strides(sizes), x.storage_offset)};
}

std::vector<Type> flatten(Ctx& c) {
  const Type& x = c.tensor("self");
  if (x.rank() == 0) return {view(x, {1}, {1}, x.storage_offset)};
  int64_t s = c.dim_arg("start_dim", rank_of(x)), e = c.dim_arg("end_dim", rank_of(x));
  if (s > e) c.fail("start_dim ", c.int_("start_dim"), " comes after end_dim ", c.int_("end_dim"));
  if (s == e) return {same_view(x)};
  Exprs sizes(x.sizes.begin(), x.sizes.begin() + s);
  Expr m = 1;
  for (int64_t i = s; i <= e; ++i) m = m * x.sizes[static_cast<size_t>(i)];
  sizes.push_back(m);
  sizes.insert(sizes.end(), x.sizes.begin() + e + 1, x.sizes.end());
  if (auto st = view_strides(x.sizes, x.strides, sizes)) return {view(x, sizes, *st, x.storage_offset)};
  return {make_contiguous(x, x.dtype, sizes)};
}

std::vector<Type> unflatten(Ctx& c) {
  const Type& x = c.tensor("self");
  if (x.rank() == 0) c.fail("cannot unflatten a 0-dim tensor");
  int64_t d = c.dim_arg("dim", rank_of(x));
  Exprs parts = infer_size(c, c.syms("sizes"), x.sizes[static_cast<size_t>(d)]);
  if (parts.empty()) c.fail("sizes must not be empty");
  Exprs sizes(x.sizes.begin(), x.sizes.begin() + d);
  sizes.insert(sizes.end(), parts.begin(), parts.end());
  sizes.insert(sizes.end(), x.sizes.begin() + d + 1, x.sizes.end());
  if (auto st = view_strides(x.sizes, x.strides, sizes)) return {view(x, sizes, *st, x.storage_offset)};
  c.exact_strides = false;
  return {make_contiguous(x, x.dtype, sizes)};
}

// ---- permutations

std::vector<Type> permute(Ctx& c) {
  const Type& x = c.tensor("self");
  std::vector<int64_t> dims = c.ints("dims");
  if (dims.size() != x.rank())
    c.fail("dims ", sizes_str(Exprs(dims.begin(), dims.end())), " do not match rank ", x.rank());
  Exprs sizes, strides;
  std::vector<bool> seen(x.rank(), false);
  for (int64_t d : dims) {
    int64_t w = c.wrap_dim(d, rank_of(x));
    if (seen[static_cast<size_t>(w)]) c.fail("dim ", d, " appears twice in the permutation");
    seen[static_cast<size_t>(w)] = true;
    sizes.push_back(x.sizes[static_cast<size_t>(w)]);
    strides.push_back(x.strides[static_cast<size_t>(w)]);
  }
  return {view(x, sizes, strides, x.storage_offset)};
}

Type transposed(const Type& x, size_t a, size_t b) {
  Type t = x;
  std::swap(t.sizes[a], t.sizes[b]);
  std::swap(t.strides[a], t.strides[b]);
  return t;
}

std::vector<Type> transpose(Ctx& c) {
  const Type& x = c.tensor("self");
  int64_t a = c.dim_arg("dim0", rank_of(x)), b = c.dim_arg("dim1", rank_of(x));
  if (x.rank() == 0) return {same_view(x)};
  return {transposed(x, static_cast<size_t>(a), static_cast<size_t>(b))};
}

std::vector<Type> t(Ctx& c) {
  const Type& x = c.tensor("self");
  if (x.rank() > 2) c.fail("expects a tensor of rank <= 2, got ", x.str());
  if (x.rank() < 2) return {same_view(x)};
  return {transposed(x, 0, 1)};
}

// ---- expand

Type expand_to(const Ctx& c, const Type& x, const Exprs& target) {
  if (target.size() < x.rank())
    c.fail("the target size ", sizes_str(target), " has fewer dims than the tensor ", x.str());
  size_t n = target.size();
  Exprs sizes(n), strides(n);
  for (size_t i = n; i-- > 0;) {
    int64_t dim = static_cast<int64_t>(x.rank()) - static_cast<int64_t>(n - i);
    Expr size = dim >= 0 ? x.sizes[static_cast<size_t>(dim)] : Expr(1);
    Expr stride =
        dim >= 0 ? x.strides[static_cast<size_t>(dim)] : (i + 1 < n ? sizes[i + 1] * strides[i + 1] : Expr(1));
    Expr want = target[i];
    if (want.as_const() == std::optional<int64_t>(-1)) {
      if (dim < 0) c.fail("-1 is not allowed in a new leading dim of the expand size ", sizes_str(target));
      want = size;
    }
    if (!sym::prove_eq(size, want)) {
      if (is_one(size)) {
        stride = 0;
      } else if ((size.is_const() && want.is_const()) || sym::prove_ne(size, want)) {
        c.fail("cannot expand ", x.str(), " to ", sizes_str(target), ": size ", size.str(), " vs ", want.str(),
               " in a dim that is not 1");
      }
      size = want;
    }
    sizes[i] = size;
    strides[i] = stride;
  }
  return view(x, sizes, strides, x.storage_offset);
}

std::vector<Type> expand(Ctx& c) { return {expand_to(c, c.tensor("self"), c.syms("size"))}; }
std::vector<Type> expand_as(Ctx& c) { return {expand_to(c, c.tensor("self"), c.tensor("other").sizes)}; }

// ---- unsqueeze / squeeze

std::vector<Type> unsqueeze(Ctx& c) {
  const Type& x = c.tensor("self");
  int64_t d = c.wrap_dim(c.int_("dim"), rank_of(x) + 1);
  size_t du = static_cast<size_t>(d);
  Expr st = du >= x.rank() ? Expr(1) : x.sizes[du] * x.strides[du];
  Type t = x;
  t.sizes.insert(t.sizes.begin() + d, Expr(1));
  t.strides.insert(t.strides.begin() + d, st);
  return {t};
}

Type squeeze_dims(const Type& x, const std::vector<bool>& drop) {
  Type t = x;
  t.sizes.clear();
  t.strides.clear();
  for (size_t i = 0; i < x.rank(); ++i) {
    if (drop[i] && is_one(x.sizes[i])) continue;
    t.sizes.push_back(x.sizes[i]);
    t.strides.push_back(x.strides[i]);
  }
  return t;
}

std::vector<Type> squeeze(Ctx& c) {
  const Type& x = c.tensor("self");
  std::vector<bool> drop(x.rank(), c.node.kind == OpKind::Squeeze);
  if (c.node.kind == OpKind::SqueezeDim) {
    int64_t d = c.dim_arg("dim", rank_of(x));
    if (x.rank() > 0) drop[static_cast<size_t>(d)] = true;
  } else if (c.node.kind == OpKind::SqueezeDims) {
    for (int64_t d : c.ints("dim")) {
      int64_t w = c.wrap_dim(d, rank_of(x));
      if (x.rank() > 0) drop[static_cast<size_t>(w)] = true;
    }
  }
  return {squeeze_dims(x, drop)};
}

// ---- slicing

Expr wrap_index(Expr i, Expr size) { return sym::prove_lt(i, 0) ? i + size : i; }

// Clamp to [lo, size] where provable (torch clamps slice bounds).
Expr clamp_bound(Expr v, Expr lo, Expr size) {
  if (sym::prove_lt(v, lo)) return lo;
  if (sym::prove_ge(v, size)) return size;
  return v;
}

void need_rank(const Ctx& c, const Type& x, const char* what) {
  if (x.rank() == 0) c.fail(what, " cannot be applied to a 0-dim tensor");
}

std::vector<Type> slice(Ctx& c) {
  const Type& x = c.tensor("self");
  need_rank(c, x, "slice()");
  size_t d = static_cast<size_t>(c.dim_arg("dim", rank_of(x)));
  Expr size = x.sizes[d];
  Expr step = c.sym("step");
  if (!sym::prove_gt(step, 0)) c.fail("slice step must be positive, got ", step.str());
  std::optional<Expr> s = c.opt_sym("start"), e = c.opt_sym("end");
  Expr start = 0, end = size;
  if (s) {
    auto k = s->as_const();
    start = (k && *k <= -kHuge) ? Expr(0) : clamp_bound(wrap_index(*s, size), 0, size);
  }
  if (e) {
    auto k = e->as_const();
    if (k && *k >= kHuge)
      end = size;
    else if (k && *k <= -kHuge)
      end = 0;
    else
      end = clamp_bound(wrap_index(*e, size), 0, size);
  }
  if (sym::prove_lt(end, start)) end = start;
  Type t = x;
  t.sizes[d] = sym::floordiv(end - start + step - 1, step);
  t.strides[d] = x.strides[d] * step;
  t.storage_offset = x.storage_offset + start * x.strides[d];
  return {t};
}

std::vector<Type> select(Ctx& c) {
  const Type& x = c.tensor("self");
  need_rank(c, x, "select()");
  size_t d = static_cast<size_t>(c.dim_arg("dim", rank_of(x)));
  Expr size = x.sizes[d], idx = c.sym("index");
  if (sym::prove_lt(idx, -size) || sym::prove_ge(idx, size))
    c.fail("index ", idx.str(), " is out of range for dim ", d, " of size ", size.str());
  idx = wrap_index(idx, size);
  Type t = x;
  t.sizes.erase(t.sizes.begin() + static_cast<long>(d));
  t.strides.erase(t.strides.begin() + static_cast<long>(d));
  t.storage_offset = x.storage_offset + idx * x.strides[d];
  return {t};
}

std::vector<Type> narrow(Ctx& c) {
  const Type& x = c.tensor("self");
  need_rank(c, x, "narrow()");
  size_t d = static_cast<size_t>(c.dim_arg("dim", rank_of(x)));
  Expr size = x.sizes[d], start = wrap_index(c.sym("start"), x.sizes[d]), len = c.sym("length");
  if (sym::prove_lt(len, 0) || sym::prove_lt(start, 0) || sym::prove_gt(start + len, size))
    c.fail("start ", start.str(), " + length ", len.str(), " exceeds dim ", d, " of size ", size.str());
  Type t = x;
  t.sizes[d] = len;
  t.storage_offset = x.storage_offset + start * x.strides[d];
  return {t};
}

// Pieces of `sizes` along dim d, each a view at its offset.
std::vector<Type> pieces(const Type& x, size_t d, const Exprs& lens) {
  std::vector<Type> out;
  Expr at = 0;
  for (const Expr& l : lens) {
    Type t = x;
    t.sizes[d] = l;
    t.storage_offset = x.storage_offset + at * x.strides[d];
    out.push_back(std::move(t));
    at = at + l;
  }
  return out;
}

// The number of list elements when it is not a constant: the node's own (torch fixed it while
// tracing).
int64_t count_or_node(const Ctx& c, Expr n) {
  if (auto k = n.as_const()) return *k;
  return static_cast<int64_t>(c.node.outputs.size());
}

std::vector<Type> split_by(const Ctx& c, const Type& x, size_t d, Expr split) {
  Expr size = x.sizes[d];
  if (sym::prove_lt(split, 0) || (is_zero(split) && !is_zero(size)))
    c.fail("split_size must be positive, got ", split.str());
  int64_t n = is_zero(split) ? 1 : std::max<int64_t>(count_or_node(c, sym::ceildiv(size, split)), 1);
  Exprs lens(static_cast<size_t>(n), split);
  lens.back() = size - split * (n - 1);
  return pieces(x, d, lens);
}

std::vector<Type> split(Ctx& c) {
  const Type& x = c.tensor("self");
  need_rank(c, x, "split()");
  size_t d = static_cast<size_t>(c.dim_arg("dim", rank_of(x)));
  return split_by(c, x, d, c.sym("split_size"));
}

std::vector<Type> split_with_sizes(Ctx& c) {
  const Type& x = c.tensor("self");
  need_rank(c, x, "split_with_sizes()");
  size_t d = static_cast<size_t>(c.dim_arg("dim", rank_of(x)));
  Exprs lens = c.syms("split_sizes");
  Expr total = 0;
  for (const Expr& l : lens) total = total + l;
  if (sym::prove_ne(total, x.sizes[d]) || (total.is_const() && x.sizes[d].is_const() && total != x.sizes[d]))
    c.fail("split_sizes ", sizes_str(lens), " sum to ", total.str(), " but dim ", d, " has size ", x.sizes[d].str());
  return pieces(x, d, lens);
}

std::vector<Type> chunk(Ctx& c) {
  const Type& x = c.tensor("self");
  need_rank(c, x, "chunk()");
  size_t d = static_cast<size_t>(c.dim_arg("dim", rank_of(x)));
  int64_t chunks = c.int_("chunks");
  if (chunks <= 0) c.fail("chunks must be positive, got ", chunks);
  return split_by(c, x, d, sym::ceildiv(x.sizes[d], Expr(chunks)));
}

std::vector<Type> unbind(Ctx& c) {
  const Type& x = c.tensor("self");
  need_rank(c, x, "unbind()");
  size_t d = static_cast<size_t>(c.dim_arg("dim", rank_of(x)));
  int64_t n = count_or_node(c, x.sizes[d]);
  std::vector<Type> out;
  for (int64_t i = 0; i < n; ++i) {
    Type t = x;
    t.sizes.erase(t.sizes.begin() + static_cast<long>(d));
    t.strides.erase(t.strides.begin() + static_cast<long>(d));
    t.storage_offset = x.storage_offset + x.strides[d] * i;
    out.push_back(std::move(t));
  }
  return out;
}

// ---- aliases and copies

std::vector<Type> alias(Ctx& c) { return {same_view(c.tensor("self"))}; }

std::vector<Type> contiguous(Ctx& c) {
  const Type& x = c.tensor("self");
  MemoryFormat fmt = c.memory_format("memory_format", MemoryFormat::Contiguous);
  if (fmt == MemoryFormat::Preserve) fmt = MemoryFormat::Contiguous;
  bool already = fmt == MemoryFormat::Contiguous ? is_contiguous(x) : is_channels_last_contiguous(x);
  if (already) return {same_view(x)};
  return {make_tensor(x, x.dtype, x.sizes, format_strides(x.sizes, fmt))};
}

std::vector<Type> clone(Ctx& c) {
  const Type& x = c.tensor("self");
  MemoryFormat fmt = c.memory_format("memory_format", MemoryFormat::Preserve);
  return {make_tensor(x, x.dtype, x.sizes, empty_like_strides(x, fmt))};
}

// as_strided: the given sizes and strides over self's storage, at storage_offset (default:
// self's offset).
std::vector<Type> as_strided(Ctx& c) {
  const Type& x = c.tensor("self");
  Exprs size = c.syms("size"), stride = c.syms("stride");
  if (size.size() != stride.size()) c.fail(size.size(), " sizes but ", stride.size(), " strides");
  auto off = c.opt_sym("storage_offset");
  return {view(x, size, stride, off ? *off : x.storage_offset)};
}

}  // namespace

void add_view_rules(RuleTable& tb) {
  using K = OpKind;
  for (K k : {K::View, K::Reshape, K::UnderscoreUnsafeView}) set_rule(tb, k, view_op);
  set_rule(tb, K::FlattenUsingInts, flatten);
  set_rule(tb, K::UnflattenInt, unflatten);
  set_rule(tb, K::Permute, permute);
  set_rule(tb, K::TransposeInt, transpose);
  set_rule(tb, K::T, t);
  set_rule(tb, K::Expand, expand);
  set_rule(tb, K::ExpandAs, expand_as);
  set_rule(tb, K::Unsqueeze, unsqueeze);
  for (K k : {K::SqueezeDim, K::SqueezeDims, K::Squeeze}) set_rule(tb, k, squeeze);
  set_rule(tb, K::SliceTensor, slice);
  set_rule(tb, K::SelectInt, select);
  set_rule(tb, K::Narrow, narrow);
  set_rule(tb, K::SplitTensor, split);
  set_rule(tb, K::SplitWithSizes, split_with_sizes);
  set_rule(tb, K::Chunk, chunk);
  set_rule(tb, K::UnbindInt, unbind);
  set_rule(tb, K::Alias, alias);
  set_rule(tb, K::Detach, alias);
  set_rule(tb, K::Contiguous, contiguous);
  set_rule(tb, K::AsStrided, as_strided);
  set_rule(tb, K::Clone, clone);
}

}  // namespace ptc::shape
