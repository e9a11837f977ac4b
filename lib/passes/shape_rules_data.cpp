// Shape rules: ops that move data around: cat/stack, pad, repeat, roll, indexing, gather,
// embedding, pooling, upsampling.
#include <cmath>

#include "shape_rules.h"

namespace ptc::shape {
namespace {

bool differ(Expr a, Expr b) { return (a.is_const() && b.is_const() && a != b) || sym::prove_ne(a, b); }

// ---- cat / stack

Type cat_types(const Ctx& c, const std::vector<const Type*>& ts, int64_t dim_arg) {
  if (ts.empty()) c.fail("needs at least one tensor");
  for (const Type* t : ts)
    if (!t) c.fail("has a None entry in its tensor list");
  const Type* example = nullptr;
  for (const Type* t : ts)
    if (!example && t->rank() != 1) example = t;
  if (!example) example = ts[0];
  std::vector<const Type*> kept;
  for (const Type* t : ts) {
    if (t->rank() == 1 && is_zero(t->sizes[0])) continue;  // legacy: 1-d empty tensors are skipped
    if (t->rank() != example->rank())
      c.fail("tensors must have the same rank, got ", example->str(), " and ", t->str());
    kept.push_back(t);
  }
  std::vector<const Type*> all(ts.begin(), ts.end());
  DType dt = result_type(all, {});
  if (kept.empty()) return make_contiguous(*ts[0], dt, {0});
  int64_t d = c.wrap_dim(dim_arg, static_cast<int64_t>(example->rank()));
  if (example->rank() == 0) c.fail("zero-dimensional tensors cannot be concatenated");
  Exprs sizes = kept[0]->sizes;
  sizes[static_cast<size_t>(d)] = 0;
  for (const Type* t : kept) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (static_cast<int64_t>(i) == d) continue;
      if (differ(t->sizes[i], sizes[i]))
        c.fail("sizes must match except in dim ", d, ": ", kept[0]->str(), " vs ", t->str());
    }
    sizes[static_cast<size_t>(d)] = sizes[static_cast<size_t>(d)] + t->sizes[static_cast<size_t>(d)];
  }
  // Memory format: the inputs' common suggested format, else contiguous.
  std::optional<MemoryFormat> fmt;
  for (const Type* t : ts) {
    MemoryFormat f = suggest_memory_format(*t);
    if (f == MemoryFormat::Contiguous || (fmt && *fmt != f)) {
      fmt = MemoryFormat::Contiguous;
      break;
    }
    fmt = f;
  }
  return make_tensor(*kept[0], dt, sizes, format_strides(sizes, *fmt));
}

std::vector<Type> cat(Ctx& c) { return {cat_types(c, c.tensors("tensors"), c.int_("dim"))}; }

// torch's stack: cat along dim then view (dim < rank), or cat of unsqueezed inputs.
std::vector<Type> stack(Ctx& c) {
  std::vector<const Type*> ts = c.tensors("tensors");
  if (ts.empty()) c.fail("needs at least one tensor");
  for (const Type* t : ts)
    if (!t || t->sizes.size() != ts[0]->sizes.size() || [&] {
          for (size_t i = 0; i < t->rank(); ++i)
            if (differ(t->sizes[i], ts[0]->sizes[i])) return true;
          return false;
        }())
      c.fail("expects tensors of equal size, got ", ts[0]->str(), " and ", t ? t->str() : "None");
  int64_t r = static_cast<int64_t>(ts[0]->rank());
  int64_t d = c.wrap_dim(c.int_("dim"), r + 1);
  Exprs result = ts[0]->sizes;
  result.insert(result.begin() + d, Expr(static_cast<int64_t>(ts.size())));
  if (d < r) {
    Type catted = cat_types(c, ts, d);
    auto st = view_strides(catted.sizes, catted.strides, result);
    return {make_tensor(catted, catted.dtype, result, st ? *st : dense_strides(result))};
  }
  std::vector<Type> unsq;
  for (const Type* t : ts) {
    Type u = *t;
    u.sizes.push_back(1);
    u.strides.push_back(1);
    unsq.push_back(std::move(u));
  }
  std::vector<const Type*> ptrs;
  for (const Type& u : unsq) ptrs.push_back(&u);
  return {cat_types(c, ptrs, d)};
}

// ---- pad / repeat / roll

std::vector<Type> pad(Ctx& c) {
  const Type& x = c.tensor("self");
  Exprs p = c.syms("pad");
  if (p.size() % 2 != 0) c.fail("pad ", sizes_str(p), " must have an even number of entries");
  if (p.size() / 2 > x.rank()) c.fail("pad ", sizes_str(p), " pads more dims than the input ", x.str(), " has");
  Exprs sizes = x.sizes;
  for (size_t i = 0; i < p.size() / 2; ++i) {
    size_t d = x.rank() - 1 - i;
    sizes[d] = sizes[d] + p[2 * i] + p[2 * i + 1];
    if (sym::prove_lt(sizes[d], 0)) c.fail("padding ", sizes_str(p), " makes dim ", d, " of ", x.str(), " negative");
  }
  return {make_tensor(x, x.dtype, sizes, format_strides(sizes, suggest_memory_format(x)))};
}

std::vector<Type> repeat(Ctx& c) {
  const Type& x = c.tensor("self");
  Exprs rep = c.syms("repeats");
  if (rep.size() < x.rank()) c.fail("repeats ", sizes_str(rep), " has fewer entries than the input's rank ", x.rank());
  Exprs sizes(rep.size());
  size_t lead = rep.size() - x.rank();
  for (size_t i = 0; i < rep.size(); ++i) sizes[i] = (i < lead ? Expr(1) : x.sizes[i - lead]) * rep[i];
  return {make_contiguous(x, x.dtype, sizes)};
}

std::vector<Type> roll(Ctx& c) {
  const Type& x = c.tensor("self");
  std::vector<int64_t> dims = c.ints("dims");
  Exprs shifts = c.syms("shifts");
  if (!dims.empty() && dims.size() != shifts.size())
    c.fail("shifts and dims must have the same length, got ", shifts.size(), " and ", dims.size());
  for (int64_t d : dims) c.wrap_dim(d, static_cast<int64_t>(x.rank()));
  return {make_contiguous(x, x.dtype, x.sizes)};
}

// flip: self's sizes, contiguous; dims distinct.
std::vector<Type> flip(Ctx& c) {
  const Type& x = c.tensor("self");
  std::vector<bool> seen(x.rank(), false);
  for (int64_t d : c.ints("dims")) {
    size_t w = static_cast<size_t>(c.wrap_dim(d, static_cast<int64_t>(x.rank())));
    if (seen[w]) c.fail("dim ", d, " appears more than once in dims");
    seen[w] = true;
  }
  return {make_contiguous(x, x.dtype, x.sizes)};
}

// ---- indexing

std::vector<Type> index(Ctx& c) {
  const Type& x = c.tensor("self");
  std::vector<const Type*> idx = c.tensors("indices");
  if (idx.size() > x.rank()) c.fail("has ", idx.size(), " indices for a tensor of rank ", x.rank());
  Exprs bshape;
  bool any = false;
  for (const Type* t : idx) {
    if (!t) continue;
    if (t->dtype == DType::Bool || t->dtype == DType::UInt8)
      c.fail("indexes with a boolean mask: the output size depends on data");
    if (!is_integral(t->dtype, false)) c.fail("index tensors must be integers, got ", t->str());
    bshape = any ? broadcast_shapes(c, bshape, t->sizes) : t->sizes;
    any = true;
  }
  if (!any) c.fail("needs at least one index tensor");
  idx.resize(x.rank(), nullptr);
  // Adjacent index tensors replace their dims in place; separated ones go to the front.
  int state = 0;
  bool adjacent = true;
  for (const Type* t : idx) {
    if (state == 0 && t)
      state = 1;
    else if (state == 1 && !t)
      state = 2;
    else if (state == 2 && t)
      adjacent = false;
  }
  std::vector<size_t> order;
  if (!adjacent) {
    for (size_t i = 0; i < idx.size(); ++i)
      if (idx[i]) order.push_back(i);
    for (size_t i = 0; i < idx.size(); ++i)
      if (!idx[i]) order.push_back(i);
  } else {
    for (size_t i = 0; i < idx.size(); ++i) order.push_back(i);
  }
  Exprs before, after, before_st, after_st;
  bool seen = false;
  for (size_t i : order) {
    if (idx[i]) {
      seen = true;
    } else if (seen) {
      after.push_back(x.sizes[i]);
      after_st.push_back(x.strides[i]);
    } else {
      before.push_back(x.sizes[i]);
      before_st.push_back(x.strides[i]);
    }
  }
  Exprs sizes = before;
  sizes.insert(sizes.end(), bshape.begin(), bshape.end());
  sizes.insert(sizes.end(), after.begin(), after.end());
  // torch follows TensorIterator: the layout of self restrided with 0 strides over the index dims.
  Type restrided = x;
  restrided.sizes = sizes;
  restrided.strides = before_st;
  restrided.strides.insert(restrided.strides.end(), bshape.size(), Expr(0));
  restrided.strides.insert(restrided.strides.end(), after_st.begin(), after_st.end());
  Exprs strides = is_zero(numel(x.sizes)) ? dense_strides(sizes) : follow_layout_strides(restrided);
  return {make_tensor(x, x.dtype, sizes, strides)};
}

std::vector<Type> index_select(Ctx& c) {
  const Type &x = c.tensor("self"), &i = c.tensor("index");
  if (i.rank() > 1) c.fail("index must have rank <= 1, got ", i.str());
  if (!is_integral(i.dtype, false)) c.fail("index must be an integer tensor, got ", i.str());
  int64_t d = c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  Exprs sizes = x.sizes;
  if (x.rank() > 0) sizes[static_cast<size_t>(d)] = i.rank() == 0 ? Expr(1) : i.sizes[0];
  return {make_contiguous(x, x.dtype, sizes)};
}

std::vector<Type> gather(Ctx& c) {
  const Type &x = c.tensor("self"), &i = c.tensor("index");
  c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  if (std::max<size_t>(i.rank(), 1) != std::max<size_t>(x.rank(), 1))
    c.fail("index ", i.str(), " must have the rank of self ", x.str());
  if (!is_integral(i.dtype, false)) c.fail("index must be an integer tensor, got ", i.str());
  return {make_contiguous(x, x.dtype, i.sizes)};
}

// scatter_add: self's shape; index and src of one rank with self, index no larger than src.
std::vector<Type> scatter(Ctx& c) {  // scatter.src / scatter.value: self with self[index] = src (or value)
  const Type &x = c.tensor("self"), &i = c.tensor("index");
  c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  if (i.rank() != x.rank()) c.fail("self ", x.str(), " and index ", i.str(), " must have one rank");
  if (!is_integral(i.dtype, false)) c.fail("index must be an integer tensor, got ", i.str());
  if (c.node.kind == OpKind::ScatterSrc) {
    const Type& src = c.tensor("src");
    if (src.rank() != x.rank()) c.fail("src ", src.str(), " must have self's rank ", x.str());
    if (src.dtype != x.dtype) c.fail("src ", src.str(), " must have self's dtype ", x.str());
  }
  return {make_contiguous(x, x.dtype, x.sizes)};
}

std::vector<Type> scatter_add(Ctx& c) {
  const Type &x = c.tensor("self"), &i = c.tensor("index"), &src = c.tensor("src");
  c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  if (i.rank() != x.rank() || src.rank() != x.rank()) c.fail("self ", x.str(), ", index ", i.str(), " and src ", src.str(), " must have one rank");
  if (!is_integral(i.dtype, false)) c.fail("index must be an integer tensor, got ", i.str());
  if (src.dtype != x.dtype) c.fail("src ", src.str(), " must have self's dtype ", x.str());
  return {make_contiguous(x, x.dtype, x.sizes)};
}

// copy / copy_: src broadcast to self's sizes in self's dtype; self's type (the in-place form
// returns self).
std::vector<Type> copy(Ctx& c) {
  const Type &x = c.tensor("self"), &src = c.tensor("src");
  if (src.rank() > x.rank() || !(broadcast_shapes(c, x.sizes, src.sizes) == x.sizes)) c.fail("cannot copy ", src.str(), " into ", x.str());
  if (c.node.kind == OpKind::CopyInplace) return {x};
  return {make_contiguous(x, x.dtype, x.sizes)};
}

// fill / fill_: self's sizes and dtype, every element the (0-d tensor or scalar) value.
std::vector<Type> fill(Ctx& c) {
  const Type& x = c.tensor("self");
  if (c.node.kind == OpKind::FillTensor || c.node.kind == OpKind::FillTensorInplace) {
    const Type& v = c.tensor("value");
    if (v.rank() != 0) c.fail("fill takes a 0-d value tensor, got ", v.str());
  }
  if (c.node.kind == OpKind::FillScalarInplace || c.node.kind == OpKind::FillTensorInplace) return {x};
  return {make_contiguous(x, x.dtype, x.sizes)};
}

// slice_scatter / select_scatter: self with a slice (one index) of dim replaced by src; self's type.
std::vector<Type> slice_scatter(Ctx& c) {
  const Type &x = c.tensor("self"), &src = c.tensor("src");
  c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  const size_t want = c.node.kind == OpKind::SelectScatter ? x.rank() - 1 : x.rank();
  if (x.rank() == 0 || src.rank() != want) c.fail("src ", src.str(), " must have rank ", want, " to scatter into ", x.str());
  return {make_contiguous(x, x.dtype, x.sizes)};
}

// index_copy / index_copy_: self[.., index[i], ..] = source[.., i, ..] along dim; self's type.
std::vector<Type> index_copy(Ctx& c) {
  const Type &x = c.tensor("self"), &i = c.tensor("index"), &src = c.tensor("source");
  int64_t dim = c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  if (i.rank() > 1 || !is_integral(i.dtype, false)) c.fail("index must be a 1-d integer tensor, got ", i.str());
  if (src.rank() != x.rank()) c.fail("source ", src.str(), " must have self's rank ", x.str());
  if (src.dtype != x.dtype) c.fail("source ", src.str(), " must have self's dtype ", x.str());
  (void)dim;
  if (c.node.kind == OpKind::IndexCopyInplace) return {x};
  return {make_contiguous(x, x.dtype, x.sizes)};
}

// index_put / index_put_: self[indices] = values (or += with accumulate); self's type.
std::vector<Type> index_put(Ctx& c) {
  const Type &x = c.tensor("self"), &v = c.tensor("values");
  std::vector<const Type*> idx = c.tensors("indices");
  if (idx.size() > x.rank()) c.fail("has ", idx.size(), " indices for a tensor of rank ", x.rank());
  for (const Type* t : idx)
    if (t && !is_integral(t->dtype, false)) c.fail("index tensors must be integers, got ", t->str(), " (boolean masks are not supported)");
  if (v.dtype != x.dtype) c.fail("values ", v.str(), " must have self's dtype ", x.str());
  if (c.node.kind == OpKind::IndexPutInplace) return {x};
  return {make_contiguous(x, x.dtype, x.sizes)};
}

// im2col: [N, C, H, W] -> [N, C * KH * KW, OH * OW] (unbatched: without N).
std::vector<Type> im2col(Ctx& c) {
  const Type& x = c.tensor("self");
  if (x.rank() != 3 && x.rank() != 4) c.fail("self ", x.str(), " must be 3-d or 4-d");
  auto two = [&](const char* name) {
    std::vector<int64_t> v = c.ints(name);
    if (v.size() == 1) v.push_back(v[0]);
    if (v.size() != 2) c.fail(name, " must have 2 entries");
    return v;
  };
  auto k = two("kernel_size"), d = two("dilation"), p = two("padding"), s = two("stride");
  const size_t r = x.rank();
  Exprs out;
  if (r == 4) out.push_back(x.sizes[0]);
  sym::Expr L = 1;
  for (int j = 0; j < 2; ++j) {
    if (k[j] < 1 || d[j] < 1 || s[j] < 1 || p[j] < 0) c.fail("kernel, dilation and stride must be positive, padding non-negative");
    L = L * (sym::floordiv(x.sizes[r - 2 + j] + 2 * p[j] - d[j] * (k[j] - 1) - 1, sym::Expr(s[j])) + 1);
  }
  out.push_back(x.sizes[r - 3] * (k[0] * k[1]));
  out.push_back(L);
  return {make_contiguous(x, x.dtype, out)};
}

// max_pool2d_with_indices_backward: the input's shape.
// avg_pool2d_backward, _adaptive_avg_pool2d_backward: the input's shape too.
std::vector<Type> avg_pool2d_backward(Ctx& c) {
  const Type &g = c.tensor("grad_output"), &x = c.tensor("self");
  if (g.rank() != x.rank() || (x.rank() != 3 && x.rank() != 4)) c.fail("grad_output ", g.str(), " and self ", x.str(), " must be 3-d or 4-d");
  return {make_contiguous(x, g.dtype, x.sizes)};
}

std::vector<Type> max_pool2d_backward(Ctx& c) {
  const Type &g = c.tensor("grad_output"), &x = c.tensor("self");
  if (g.rank() != x.rank() || (x.rank() != 3 && x.rank() != 4)) c.fail("grad_output ", g.str(), " and self ", x.str(), " must be 3-d or 4-d");
  return {make_contiguous(x, x.dtype, x.sizes)};
}

std::vector<Type> embedding(Ctx& c) {
  const Type &w = c.tensor("weight"), &i = c.tensor("indices");
  if (w.rank() != 2) c.fail("weight must have rank 2, got ", w.str());
  if (!is_integral(i.dtype, false)) c.fail("indices must be an integer tensor, got ", i.str());
  Exprs sizes = i.sizes;
  sizes.push_back(w.sizes[1]);
  return {make_contiguous(w, w.dtype, sizes)};
}

// ---- pooling

std::vector<int64_t> pair_arg(const Ctx& c, const char* name, const std::vector<int64_t>& dflt) {
  std::vector<int64_t> v = c.ints(name);
  if (v.empty()) v = dflt;
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) c.fail("argument '", name, "' must have 1 or 2 entries, got ", v.size());
  return v;
}

Expr pool_out(const Ctx& c, Expr in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil_mode) {
  if (k <= 0 || s <= 0 || d <= 0) c.fail("kernel size, stride and dilation must be positive");
  if (p < 0 || p > (d * (k - 1) + 1) / 2) c.fail("padding ", p, " must be at most half of the effective kernel size");
  Expr o = sym::floordiv(in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), Expr(s)) + 1;
  if (ceil_mode) {
    // The last window must start inside the input (or the left padding).
    Expr last = (o - 1) * s, limit = in + p;
    if (sym::prove_ge(last, limit)) o = o - 1;
  }
  if (sym::prove_le(o, 0)) c.fail("the output would be empty: input size ", in.str(), ", kernel ", k, ", stride ", s);
  return o;
}

Type pool_type(const Ctx& c, const Type& x, const Exprs& spatial, DType dt) {
  Exprs sizes(x.sizes.begin(), x.sizes.end() - static_cast<long>(spatial.size()));
  sizes.insert(sizes.end(), spatial.begin(), spatial.end());
  (void)c;
  MemoryFormat fmt = x.rank() == 4 ? suggest_memory_format(x) : MemoryFormat::Contiguous;
  return make_tensor(x, dt, sizes, format_strides(sizes, fmt));
}

const Type& pool_input(const Ctx& c, const char* name, size_t nd) {
  const Type& x = c.tensor(name);
  if (x.rank() != nd + 1 && x.rank() != nd + 2)
    c.fail("expects a ", nd + 1, "-d or ", nd + 2, "-d input, got ", x.str());
  return x;
}

std::vector<Type> pool2d(Ctx& c, bool has_dilation) {
  const Type& x = pool_input(c, "self", 2);
  std::vector<int64_t> k = pair_arg(c, "kernel_size", {});
  std::vector<int64_t> s = pair_arg(c, "stride", k), p = pair_arg(c, "padding", {0});
  std::vector<int64_t> d = has_dilation ? pair_arg(c, "dilation", {1}) : std::vector<int64_t>{1, 1};
  bool ceil_mode = c.bool_("ceil_mode");
  Exprs sp;
  for (size_t i = 0; i < 2; ++i)
    sp.push_back(pool_out(c, x.sizes[x.rank() - 2 + i], k[i], p[i], s[i], d[i], ceil_mode));
  return {pool_type(c, x, sp, x.dtype)};
}

std::vector<Type> max_pool2d(Ctx& c) { return pool2d(c, true); }
std::vector<Type> avg_pool2d(Ctx& c) { return pool2d(c, false); }

std::vector<Type> max_pool2d_with_indices(Ctx& c) {
  Type out = pool2d(c, true)[0];
  Type idx = out;
  idx.dtype = DType::Int64;
  return {out, idx};
}

std::vector<Type> adaptive_avg_pool2d(Ctx& c) {
  const Type& x = pool_input(c, "self", 2);
  Exprs o = c.syms("output_size");
  if (o.size() == 1) o.push_back(o[0]);
  if (o.size() != 2) c.fail("output_size must have 2 entries, got ", sizes_str(o));
  for (const Expr& e : o)
    if (sym::prove_lt(e, 0)) c.fail("output_size ", sizes_str(o), " has a negative entry");
  return {pool_type(c, x, o, x.dtype)};
}

std::vector<Type> adaptive_avg_pool1d(Ctx& c) {
  const Type& x = pool_input(c, "self", 1);
  std::vector<int64_t> o = c.ints("output_size");
  if (o.size() != 1) c.fail("output_size must have 1 entry, got ", o.size());
  Exprs sizes(x.sizes.begin(), x.sizes.end() - 1);
  sizes.push_back(o[0]);
  return {make_contiguous(x, x.dtype, sizes)};
}

// ---- upsampling

// (.vec: input, output_size or scale_factors; the default overloads TorchScript records: self,
// output_size, scales_h / scales_w.)
std::vector<Type> upsample2d(Ctx& c) {
  const bool vec = c.node.kind == OpKind::UpsampleNearest2dVec || c.node.kind == OpKind::UpsampleBilinear2dVec;
  const Type& x = c.tensor(vec ? "input" : "self");
  if (x.rank() != 4) c.fail("expects a 4-d input (N, C, H, W), got ", x.str());
  Exprs out;
  if (auto o = c.opt_syms("output_size")) {
    out = *o;
    if (out.size() != 2) c.fail("output_size must have 2 entries, got ", sizes_str(out));
  } else if (auto sf = c.opt_floats("scale_factors")) {
    if (sf->size() == 1) sf->push_back((*sf)[0]);
    if (sf->size() != 2) c.fail("scale_factors must have 2 entries");
    for (size_t i = 0; i < 2; ++i) {
      Expr in = x.sizes[2 + i];
      double f = (*sf)[i];
      if (!(f > 0)) c.fail("scale factor ", f, " must be positive");
      if (auto k = in.as_const()) {
        out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(*k) * f)));
      } else if (std::floor(f) == f) {
        out.push_back(in * static_cast<int64_t>(f));
      } else {
        c.fail("scales the symbolic size ", in.str(), " by the non-integer ", f,
               ": the output size is not an integer expression ptc can represent");
      }
    }
  } else {
    c.fail("needs either output_size or scale_factors");
  }
  return {pool_type(c, x, out, x.dtype)};
}

// upsample_nearest2d_backward / upsample_bilinear2d_backward: input_size, the gradient's dtype;
// the gradient must have the forward's output size.
std::vector<Type> upsample2d_backward(Ctx& c) {
  const Type& g = c.tensor("grad_output");
  const Exprs out = c.syms("output_size"), in = c.syms("input_size");
  if (g.rank() != 4 || out.size() != 2 || in.size() != 4)
    c.fail("expects a 4-d grad_output, 2 output sizes and 4 input sizes, got ", g.str(), ", ", sizes_str(out), " and ", sizes_str(in));
  if (!(g.sizes[0] == in[0]) || !(g.sizes[1] == in[1]) || !(g.sizes[2] == out[0]) || !(g.sizes[3] == out[1]))
    c.fail("grad_output ", g.str(), " is not the output of upsampling ", sizes_str(in), " to ", sizes_str(out));
  return {make_contiguous(g, g.dtype, in)};
}

}  // namespace

void add_data_rules(RuleTable& t) {
  using K = OpKind;
  set_rule(t, K::Cat, cat);
  set_rule(t, K::Stack, stack);
  set_rule(t, K::ConstantPadNd, pad);
  set_rule(t, K::Pad, pad);
  set_rule(t, K::Repeat, repeat);
  set_rule(t, K::Roll, roll);
  set_rule(t, K::Flip, flip);
  set_rule(t, K::IndexTensor, index);
  set_rule(t, K::IndexSelect, index_select);
  set_rule(t, K::Gather, gather);
  set_rule(t, K::ScatterAdd, scatter_add);
  for (K k : {K::ScatterSrc, K::ScatterValue}) set_rule(t, k, scatter);
  for (K k : {K::Copy, K::CopyInplace}) set_rule(t, k, copy);
  for (K k : {K::IndexCopy, K::IndexCopyInplace}) set_rule(t, k, index_copy);
  for (K k : {K::FillScalar, K::FillTensor, K::FillScalarInplace, K::FillTensorInplace}) set_rule(t, k, fill);
  for (K k : {K::SliceScatter, K::SelectScatter}) set_rule(t, k, slice_scatter);
  for (K k : {K::IndexPut, K::IndexPutInplace}) set_rule(t, k, index_put);
  set_rule(t, K::Im2col, im2col);
  set_rule(t, K::MaxPool2dWithIndicesBackward, max_pool2d_backward);
  set_rule(t, K::AvgPool2dBackward, avg_pool2d_backward);
  set_rule(t, K::UnderscoreAdaptiveAvgPool2dBackward, avg_pool2d_backward);
  set_rule(t, K::Embedding, embedding);
  set_rule(t, K::MaxPool2d, max_pool2d);
  set_rule(t, K::MaxPool2dWithIndices, max_pool2d_with_indices);
  set_rule(t, K::AvgPool2d, avg_pool2d);
  set_rule(t, K::AdaptiveAvgPool2d, adaptive_avg_pool2d);
  set_rule(t, K::UnderscoreAdaptiveAvgPool2d, adaptive_avg_pool2d);
  set_rule(t, K::AdaptiveAvgPool1d, adaptive_avg_pool1d);
  set_rule(t, K::UpsampleNearest2dVec, upsample2d);
  set_rule(t, K::UpsampleBilinear2dVec, upsample2d);
  set_rule(t, K::UpsampleNearest2d, upsample2d);
  set_rule(t, K::UpsampleBilinear2d, upsample2d);
  set_rule(t, K::UpsampleNearest2dBackward, upsample2d_backward);
  set_rule(t, K::UpsampleBilinear2dBackward, upsample2d_backward);
}

}  // namespace ptc::shape
