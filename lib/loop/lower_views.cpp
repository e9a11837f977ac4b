// View lowerings: every view is an index rewrite (and stays a strided View of a buffer when its
// source is one), never a copy. Also cat/stack/split/pad and the identity ops.
#include <algorithm>
#include <functional>

#include "lower_internal.h"

namespace ptc::loop {
namespace {

// A tensor whose element `idx` is the source's element `map(idx)`; `view_map` gives the strided
// view when the source is one (nullopt: not expressible as a strided view).
TensorRef remap(Lowering& L, const TensorRef& x, Index sizes, std::function<Index(const Index&)> map,
                std::function<std::optional<View>(const View&)> view_map) {
  if (x.view && view_map)
    if (auto v = view_map(*x.view)) return L.of_view(*v, x.dtype);
  TensorRef src = x;
  return L.pointwise(x.dtype, std::move(sizes), [src, map](const Index& idx) { return src.at(map(idx)); });
}

bool is_contiguous(const View& v) { return v.strides == row_major_strides(v.sizes); }

std::vector<TensorRef> one(TensorRef t) { return {std::move(t)}; }

}  // namespace

TensorRef narrow(Lowering& L, const TensorRef& x, int64_t dim, sym::Expr start, sym::Expr step, sym::Expr len) {
  Index sizes = x.sizes;
  sizes[dim] = len;
  size_t d = static_cast<size_t>(dim);
  return remap(L, x, sizes,
               [=](const Index& idx) {
                 Index in = idx;
                 in[d] = start + idx[d] * step;
                 return in;
               },
               [=](const View& v) {
                 View o = v;
                 o.sizes = sizes;
                 o.offset = v.offset + start * v.strides[d];
                 o.strides[d] = v.strides[d] * step;
                 return std::optional<View>(o);
               });
}

namespace {

// constant_pad_nd / F.pad(mode="constant"): pad holds (before, after) pairs from the last dim
// backwards; positions outside the input read `value`.
TensorRef constant_pad(Lowering& L, const TensorRef& x, const std::vector<int64_t>& pad, DType dt, ExprRef value, const Index& sizes) {
  return L.pointwise(dt, sizes, [=](const Index& idx) {
    Index in = idx;
    ExprRef inside;
    for (size_t p = 0; p + 1 < pad.size() && p / 2 < x.rank(); p += 2) {
      const size_t d = x.rank() - 1 - p / 2;
      in[d] = idx[d] - pad[p];
      if (pad[p] == 0 && pad[p + 1] == 0) continue;  // an unpadded dim needs no test (a lane-independent test vectorizes)
      ExprRef ok = binary(Op::And, binary(Op::Ge, index_value(in[d]), index_value(0)),
                          binary(Op::Lt, index_value(in[d]), index_value(x.sizes[d])));
      inside = inside ? binary(Op::And, inside, ok) : ok;
    }
    return inside ? where(inside, cast(x.at(in), dt), value) : cast(x.at(in), dt);
  });
}

// Clamps a slice bound like Python: negative counts from the end, then into [0, size].
sym::Expr slice_bound(const sym::Expr& b, const sym::Expr& size) {
  if (auto c = b.as_const()) {
    if (*c < 0) {
      sym::Expr e = size + *c;
      return sym::prove_ge(e, 0) ? e : sym::Expr(0);
    }
    if (auto s = size.as_const()) return std::min(*c, *s);
    return sym::prove_le(b, size) ? b : size;
  }
  return b;
}

}  // namespace

namespace {

// Dimension groups of a reshape: old dims [o0, o1) hold exactly the elements of new dims
// [n0, n1). Size-1 dims form groups of their own. nullopt when the groups cannot be proven
// (symbolic sizes whose products are not comparable).
struct DimGroup {
  size_t o0, o1, n0, n1;
};

std::optional<std::vector<DimGroup>> reshape_groups(const Index& old_sizes, const Index& new_sizes) {
  std::vector<DimGroup> groups;
  size_t i = 0, j = 0;
  const sym::Expr one(1);
  while (i < old_sizes.size() || j < new_sizes.size()) {
    if (i < old_sizes.size() && old_sizes[i] == one) {
      groups.push_back({i, i + 1, j, j});
      ++i;
      continue;
    }
    if (j < new_sizes.size() && new_sizes[j] == one) {
      groups.push_back({i, i, j, j + 1});
      ++j;
      continue;
    }
    if (i >= old_sizes.size() || j >= new_sizes.size()) return std::nullopt;
    size_t i1 = i + 1, j1 = j + 1;
    sym::Expr po = old_sizes[i], pn = new_sizes[j];
    // a < b, also when b is a multiple of a that interval arithmetic alone cannot order
    // (s0 < s0*s1 for s1 >= 2).
    auto less = [](const sym::Expr& a, const sym::Expr& b) {
      if (sym::prove_lt(a, b)) return true;
      if (!sym::prove_ge(a, 1)) return false;
      sym::Expr q = sym::floordiv(b, a);
      return q * a == b && sym::prove_ge(q, 2);
    };
    while (!(po == pn)) {
      bool grow_old;
      if (less(po, pn)) grow_old = true;
      else if (less(pn, po)) grow_old = false;
      else return std::nullopt;
      if (grow_old) {
        if (i1 >= old_sizes.size()) return std::nullopt;
        po = po * old_sizes[i1++];
      } else {
        if (j1 >= new_sizes.size()) return std::nullopt;
        pn = pn * new_sizes[j1++];
      }
    }
    groups.push_back({i, i1, j, j1});
    i = i1;
    j = j1;
  }
  return groups;
}

}  // namespace

TensorRef reshape(Lowering& L, const TensorRef& x, const Index& sizes) {
  if (x.sizes == sizes) return x;
  // An empty tensor: no element is ever read, and the index split below would divide by zero.
  auto is_zero = [](const sym::Expr& e) { return e.as_const() && *e.as_const() == 0; };
  if (std::any_of(x.sizes.begin(), x.sizes.end(), is_zero) || std::any_of(sizes.begin(), sizes.end(), is_zero)) {
    const DType dt = x.dtype;
    return L.pointwise(dt, sizes, [dt](const Index&) { return constant(0, dt); });
  }
  Index in_sizes = x.sizes;
  Index in_strides = row_major_strides(in_sizes), out_strides = row_major_strides(sizes);
  auto groups = reshape_groups(in_sizes, sizes);
  // Element map: per group, flatten the new indices and split them over the old dims, so merges
  // and splits give simple index expressions (x0 // s1, x0 % s1) rather than a whole-tensor
  // flatten/unflatten.
  auto map = [=](const Index& idx) {
    Index in(in_sizes.size(), sym::Expr(0));
    if (!groups) {
      sym::Expr flat = flat_index(idx, out_strides, 0);
      for (size_t d = 0; d < in_sizes.size(); ++d) in[d] = sym::mod(sym::floordiv(flat, in_strides[d]), in_sizes[d]);
      return in;
    }
    for (const DimGroup& gr : *groups) {
      sym::Expr flat = 0;
      for (size_t k = gr.n0; k < gr.n1; ++k) flat = flat * sizes[k] + idx[k];
      sym::Expr stride = 1;
      for (size_t d = gr.o1; d-- > gr.o0;) {
        sym::Expr q = sym::floordiv(flat, stride);
        in[d] = d == gr.o0 ? q : sym::mod(q, in_sizes[d]);
        stride = stride * in_sizes[d];
      }
    }
    return in;
  };
  auto view_map = [=](const View& v) -> std::optional<View> {
    if (is_contiguous(v)) return View{v.buffer, sizes, out_strides, v.offset};
    if (!groups) return std::nullopt;
    View o{v.buffer, sizes, Index(sizes.size(), sym::Expr(0)), v.offset};
    for (const DimGroup& gr : *groups) {
      if (gr.n0 == gr.n1) continue;  // old size-1 dims: no new dims
      // The old dims must merge into one run: each stride is the next one times its size.
      sym::Expr inner;
      bool have = false;
      for (size_t d = gr.o1; d-- > gr.o0;) {
        if (in_sizes[d] == sym::Expr(1)) continue;
        if (have && !(v.strides[d] == inner)) return std::nullopt;
        inner = v.strides[d] * in_sizes[d];
        have = true;
      }
      sym::Expr stride = 1;
      for (size_t d = gr.o1; d-- > gr.o0;)
        if (!(in_sizes[d] == sym::Expr(1))) {
          stride = v.strides[d];
          break;
        }
      for (size_t k = gr.n1; k-- > gr.n0;) {
        o.strides[k] = stride;
        stride = stride * sizes[k];
      }
    }
    return o;
  };
  TensorRef r = remap(L, x, sizes, map, view_map);
  if (!x.view) r.reshaped_from = x.reshaped_from ? x.reshaped_from : std::make_shared<const TensorRef>(x);
  return r;
}

TensorRef permute(Lowering& L, const TensorRef& x, const std::vector<int64_t>& perm) {
  Index sizes;
  for (int64_t p : perm) sizes.push_back(x.sizes[p]);
  TensorRef r = remap(L, x, sizes,
               [perm](const Index& idx) {
                 Index in(idx.size());
                 for (size_t d = 0; d < perm.size(); ++d) in[perm[d]] = idx[d];
                 return in;
               },
               [perm, sizes](const View& v) {
                 View o = v;
                 o.sizes = sizes;
                 for (size_t d = 0; d < perm.size(); ++d) o.strides[d] = v.strides[perm[d]];
                 return std::optional<View>(o);
               });
  if (!x.view) {
    r.permuted_from = std::make_shared<const TensorRef>(x);
    r.perm = perm;
  }
  return r;
}

Lowered lower_view(Lowering& L, const Node& n, const Args& a) {
  switch (n.kind) {
    case OpKind::View: case OpKind::Reshape: case OpKind::UnderscoreUnsafeView:
    case OpKind::FlattenUsingInts: case OpKind::UnflattenInt: case OpKind::Unsqueeze:
    case OpKind::SqueezeDim: case OpKind::SqueezeDims: case OpKind::Squeeze:
      return one(reshape(L, a.tensor("self"), a.out_sizes()));
    case OpKind::Flip: {  // element i of a flipped dim reads size - 1 - i: an index remap
      TensorRef x = a.tensor("self");
      std::vector<bool> flipped(x.rank(), false);
      for (int64_t d : a.ints("dims")) flipped[static_cast<size_t>(normalize_dim(L, d, x.rank()))] = true;
      Index sizes = x.sizes;
      return one(remap(L, x, sizes,
                       [flipped, sizes](const Index& idx) {
                         Index in = idx;
                         for (size_t d = 0; d < in.size(); ++d)
                           if (flipped[d]) in[d] = sizes[d] - 1 - idx[d];
                         return in;
                       },
                       nullptr));
    }
    case OpKind::Repeat: {  // self tiled: out[..., i, ...] reads self[..., i mod size, ...]; leading repeats are new dims
      TensorRef x = a.tensor("self");
      const Index rep = a.syms("repeats");
      if (rep.size() < x.rank()) L.fail("repeat: ", rep.size(), " repeats for an input of rank ", x.rank());
      const size_t lead = rep.size() - x.rank();
      const Index xs = x.sizes;
      return one(remap(L, x, a.out_sizes(),
                       [lead, xs](const Index& idx) {
                         Index in(xs.size());
                         for (size_t d = 0; d < xs.size(); ++d) in[d] = xs[d] == sym::Expr(1) ? sym::Expr(0) : sym::mod(idx[lead + d], xs[d]);
                         return in;
                       },
                       nullptr));
    }
    case OpKind::Roll: {  // element i of a rolled dim reads (i - shift) mod size: an index remap
      TensorRef x = a.tensor("self");
      const std::vector<int64_t> dims = a.ints("dims");
      const Index shifts = a.syms("shifts");
      if (dims.empty()) {  // no dims: the flattened tensor rolled, then given self's shape back
        if (shifts.size() != 1) L.fail("roll without dims takes one shift, got ", shifts.size());
        sym::Expr n = 1;
        for (const auto& s : x.sizes) n = n * s;
        const sym::Expr shift = shifts[0];
        TensorRef flat = reshape(L, x, {n});
        TensorRef r = remap(L, flat, {n}, [n, shift](const Index& i) { return Index{sym::mod(i[0] - shift, n)}; }, nullptr);
        return one(reshape(L, r, x.sizes));
      }
      if (dims.size() != shifts.size()) L.fail("roll: shifts and dims must have the same length");
      std::vector<sym::Expr> shift(x.rank(), sym::Expr(0));  // a dim named twice rolls by the sum
      for (size_t k = 0; k < dims.size(); ++k) {
        const size_t d = static_cast<size_t>(normalize_dim(L, dims[k], x.rank()));
        shift[d] = shift[d] + shifts[k];
      }
      const Index sizes = x.sizes;
      return one(remap(L, x, sizes,
                       [shift, sizes](const Index& idx) {
                         Index in = idx;
                         for (size_t d = 0; d < in.size(); ++d)
                           if (!(shift[d] == sym::Expr(0))) in[d] = sym::mod(idx[d] - shift[d], sizes[d]);
                         return in;
                       },
                       nullptr));
    }
    case OpKind::Permute: {
      TensorRef x = a.tensor("self");
      std::vector<int64_t> perm = a.ints("dims");
      for (auto& p : perm) p = normalize_dim(L, p, x.rank());
      return one(permute(L, x, perm));
    }
    case OpKind::TransposeInt: case OpKind::T: {
      TensorRef x = a.tensor("self");
      std::vector<int64_t> perm(x.rank());
      for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
      if (x.rank() >= 2) {
        int64_t d0 = n.kind == OpKind::T ? 0 : normalize_dim(L, a.i("dim0"), x.rank());
        int64_t d1 = n.kind == OpKind::T ? 1 : normalize_dim(L, a.i("dim1"), x.rank());
        std::swap(perm[d0], perm[d1]);
      }
      return one(permute(L, x, perm));
    }
    case OpKind::Expand: case OpKind::ExpandAs: return one(L.broadcast_to(a.tensor("self"), a.out_sizes()));
    case OpKind::SliceTensor: {
      TensorRef x = a.tensor("self");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      sym::Expr start = a.is_none("start") ? sym::Expr(0) : slice_bound(a.syms("start")[0], x.sizes[dim]);
      return one(narrow(L, x, dim, start, a.syms("step")[0], a.out_sizes()[dim]));
    }
    case OpKind::SliceScatter: case OpKind::SelectScatter: {  // self, with src in a slice / at one index of dim
      TensorRef x = a.tensor("self"), src = a.tensor("src");
      const size_t dim = static_cast<size_t>(normalize_dim(L, a.i("dim"), x.rank()));
      const DType dt = a.out_dtype();
      sym::Expr start = 0, step = 1, len = 1;
      if (n.kind == OpKind::SliceScatter) {
        start = a.is_none("start") ? sym::Expr(0) : slice_bound(a.syms("start")[0], x.sizes[dim]);
        step = a.syms("step")[0];
        len = src.sizes[dim];
      } else {
        start = a.syms("index")[0];
        if (auto c = start.as_const(); c && *c < 0) start = x.sizes[dim] + *c;
      }
      const bool select = n.kind == OpKind::SelectScatter;
      return one(L.pointwise(dt, a.out_sizes(), [=](const Index& idx) {
        const sym::Expr j = idx[dim] - start;
        ExprRef inside = binary(Op::And, binary(Op::Ge, index_value(j), index_value(0)),
                                binary(Op::Lt, index_value(j), index_value(len * step)));
        if (!(step == sym::Expr(1)))
          inside = binary(Op::And, inside, binary(Op::Eq, binary(Op::Mod, index_value(j), index_value(step)), index_value(0)));
        Index in = idx;
        if (select)
          in.erase(in.begin() + static_cast<long>(dim));
        else
          in[dim] = step == sym::Expr(1) ? j : sym::floordiv(j, step);
        return where(inside, cast(src.at(in), dt), cast(x.at(idx), dt));
      }));
    }
    case OpKind::Narrow: {
      TensorRef x = a.tensor("self");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      return one(narrow(L, x, dim, a.syms("start")[0], 1, a.syms("length")[0]));
    }
    case OpKind::SelectInt: {
      TensorRef x = a.tensor("self");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      sym::Expr index = a.syms("index")[0];
      if (auto c = index.as_const(); c && *c < 0) index = x.sizes[dim] + *c;
      TensorRef one_row = narrow(L, x, dim, index, 1, 1);
      return one(reshape(L, one_row, a.out_sizes()));
    }
    case OpKind::SplitTensor: case OpKind::SplitWithSizes: case OpKind::Chunk: case OpKind::UnbindInt: {
      TensorRef x = a.tensor("self");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      // Parts of a computed (not yet stored) tensor would each recompute it, and each part that
      // feeds a GEMM would be stored on its own: store the whole once (e.g. a fused QKV
      // projection's bias add becomes that GEMM's epilogue) and let the parts be views.
      int used_parts = 0;
      for (const Value* o : n.outputs) used_parts += L.uses(o) > 0;
      if (!x.view && used_parts > 1) x = L.realize(x, n.name);
      std::vector<TensorRef> outs;
      sym::Expr start = 0;
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        Index sizes = a.out_sizes(i);
        sym::Expr len = n.kind == OpKind::UnbindInt ? sym::Expr(1) : sizes[dim];
        TensorRef part = narrow(L, x, dim, start, 1, len);
        outs.push_back(n.kind == OpKind::UnbindInt ? reshape(L, part, sizes) : part);
        start = start + len;
      }
      return outs;
    }
    case OpKind::Cat: case OpKind::Stack: {
      std::vector<TensorRef> xs = a.tensors("tensors");
      Index sizes = a.out_sizes();
      int64_t dim = normalize_dim(L, a.i("dim"), sizes.size());
      if (n.kind == OpKind::Stack)
        for (auto& x : xs) {
          Index s = x.sizes;
          s.insert(s.begin() + dim, 1);
          x = reshape(L, x, s);
        }
      xs.erase(std::remove_if(xs.begin(), xs.end(), [](const TensorRef& t) { return t.rank() == 1 && t.sizes[0] == sym::Expr(0); }), xs.end());
      DType dt = a.out_dtype();
      size_t d = static_cast<size_t>(dim);
      return one(L.pointwise(dt, sizes, [xs, d, dt](const Index& idx) {
        // Nested selects: only the chosen input's loads are evaluated.
        std::vector<sym::Expr> starts{0};
        for (const auto& x : xs) starts.push_back(starts.back() + x.sizes[d]);
        ExprRef e;
        for (size_t i = xs.size(); i-- > 0;) {
          Index in = idx;
          in[d] = idx[d] - starts[i];
          ExprRef v = cast(xs[i].at(in), dt);
          e = e ? where(binary(Op::Lt, index_value(idx[d]), index_value(starts[i + 1])), v, e) : v;
        }
        return e;
      }));
    }
    case OpKind::ConstantPadNd:
      return one(constant_pad(L, a.tensor("self"), a.ints("pad"), a.out_dtype(), a.scalar("value", a.out_dtype()), a.out_sizes()));
    case OpKind::Pad: {  // F.pad: constant (as constant_pad_nd), reflect, replicate, circular
      TensorRef x = a.tensor("self");
      const std::vector<int64_t> pad = a.ints("pad");
      const std::string mode = a.is_none("mode") ? "constant" : a.s("mode");
      const DType dt = a.out_dtype();
      const Index sizes = a.out_sizes();
      if (mode == "constant")
        return one(constant_pad(L, x, pad, dt, a.is_none("value") ? constant(0, dt) : a.scalar("value", dt), sizes));
      if (mode != "reflect" && mode != "replicate" && mode != "circular")
        L.fail("pad: unknown mode '", mode, "' (constant, reflect, replicate and circular lower)");
      // Each padded dim reads its source in three pieces (before, inside, after); Where picks the
      // piece, so only in-range loads are evaluated. j = i - before is the unpadded position.
      std::vector<size_t> dims;
      std::vector<int64_t> before;
      for (size_t p = 0; p + 1 < pad.size() && p / 2 < x.rank(); p += 2) {
        const size_t d = x.rank() - 1 - p / 2;
        if (pad[p] < 0 || pad[p + 1] < 0) L.fail("pad: negative padding in ", mode, " mode");
        if (mode == "reflect" && (!x.sizes[d].is_const() || pad[p] >= *x.sizes[d].as_const() || pad[p + 1] >= *x.sizes[d].as_const()))
          L.fail("pad: reflect padding must be smaller than the padded dim (dim ", d, " has ", x.sizes[d].str(), ")");
        if (mode == "circular" && (!x.sizes[d].is_const() || pad[p] > *x.sizes[d].as_const() || pad[p + 1] > *x.sizes[d].as_const()))
          L.fail("pad: circular padding may not exceed the padded dim (dim ", d, " has ", x.sizes[d].str(), ")");
        if (pad[p] == 0 && pad[p + 1] == 0) continue;
        dims.push_back(d);
        before.push_back(pad[p]);
      }
      return one(L.pointwise(dt, sizes, [=](const Index& idx) {
        Index in = idx;
        for (size_t k = 0; k < dims.size(); ++k) in[dims[k]] = idx[dims[k]] - before[k];
        std::function<ExprRef(size_t, Index)> piece = [&](size_t k, Index at) -> ExprRef {
          if (k == dims.size()) return cast(x.at(at), dt);
          const size_t d = dims[k];
          const sym::Expr j = at[d], n = x.sizes[d];
          sym::Expr lo, hi;  // the source of j < 0 and of j >= n
          if (mode == "reflect") { lo = sym::Expr(0) - j; hi = (n - 1) * 2 - j; }
          else if (mode == "replicate") { lo = 0; hi = n - 1; }
          else { lo = j + n; hi = j - n; }
          Index a_lo = at, a_hi = at;
          a_lo[d] = lo;
          a_hi[d] = hi;
          return where(binary(Op::Lt, index_value(j), index_value(0)), piece(k + 1, a_lo),
                       where(binary(Op::Ge, index_value(j), index_value(n)), piece(k + 1, a_hi), piece(k + 1, at)));
        };
        return piece(0, in);
      }));
    }
    case OpKind::Clone: case OpKind::Contiguous: case OpKind::Alias: case OpKind::Detach:
    case OpKind::LiftFreshCopy:
      return one(a.tensor("self"));
    case OpKind::Dropout:
      if (a.b("train") && a.f("p") > 0) L.fail("dropout in training mode is not supported for inference compiles (export the model in eval mode, or compile with --train)");
      return one(a.tensor("input"));
    case OpKind::DropoutInplace:
      if (a.b("train") && a.f("p") > 0) L.fail("dropout in training mode is not supported for inference compiles (export the model in eval mode, or compile with --train)");
      return one(a.tensor("self"));
    case OpKind::NativeDropout: {
      if (!a.is_none("train") && a.b("train") && a.f("p") > 0) L.fail("dropout in training mode is not supported for inference compiles (export the model in eval mode, or compile with --train)");
      TensorRef x = a.tensor("input");
      return std::vector<TensorRef>{x, L.pointwise(DType::Bool, x.sizes, [](const Index&) { return constant(1, DType::Bool); })};
    }
    default: return std::nullopt;
  }
}

}  // namespace ptc::loop
