// Data-dependent indexing (embedding, gather, index_select) through LoadAt — loads at a position
// read from another tensor, clamped into the source buffer — plus as_strided (a view with
// explicit strides) and diff.
#include <cmath>

#include "lower_internal.h"

namespace ptc::loop {
namespace {

std::vector<TensorRef> one(TensorRef t) { return {std::move(t)}; }

// The last element index a view can address (its storage extent - 1).
sym::Expr last_index(const View& v) {
  sym::Expr last = v.offset;
  for (size_t d = 0; d < v.sizes.size(); ++d) last = last + (v.sizes[d] - 1) * v.strides[d];
  return last;
}

// Python-style index (advanced indexing): negative counts from the end.
ExprRef wrap_index(ExprRef i, const sym::Expr& size) {
  i = cast(i, DType::Int64);
  return select(binary(Op::Lt, i, constant(0, DType::Int64)), binary(Op::Add, i, index_value(size)), i);
}

// self[..., idx, ...] along `dim` of the view `v`, with the other coordinates from `at`. As in
// torch (embedding, gather, index_select), idx must lie in [0, size): a negative or too large one
// fails the run (Op::CheckIndex).
ExprRef pick(const View& v, DType dt, const Index& at, size_t dim, ExprRef idx) {
  sym::Expr base = v.offset;
  for (size_t d = 0; d < at.size(); ++d)
    if (d != dim) base = base + at[d] * v.strides[d];
  ExprRef off = binary(Op::Mul, check_index(idx, v.sizes[dim]), index_value(v.strides[dim]));
  return load_at(v.buffer, dt, base, off, last_index(v));
}

// Where every index tensor's element is an index value provably inside its dim of x (an
// arange: transformers' masks index positions by aranges), those positions as expressions of
// the broadcast index's loop variables (loop_vars(bshape)); else nullopt.
std::optional<std::vector<sym::Expr>> index_positions(const std::vector<TensorRef>& bidx, const TensorRef& x, size_t first,
                                                      const Index& bshape) {
  const Index bvars = loop_vars(bshape);
  std::vector<sym::Expr> out;
  for (size_t k = 0; k < bidx.size(); ++k) {
    const sym::Expr& size = x.sizes[first + k];
    ExprRef p = wrap_index(bidx[k].at(bvars), size);
    if (p->op != Op::IndexVal && p->op != Op::Const) return std::nullopt;
    const sym::Expr at = p->op == Op::IndexVal ? p->index : sym::Expr(static_cast<int64_t>(p->value));
    // Inside [0, size): a loop variable of a broadcast dim of the same size, or by its range.
    bool inside = false;
    for (size_t d = 0; d < bvars.size() && !inside; ++d) inside = at == bvars[d] && bshape[d] == size;
    try {
      inside = inside || (sym::prove_ge(at, sym::Expr(0)) && sym::prove_lt(at, size));
    } catch (const std::exception&) {
    }
    if (!inside) return std::nullopt;
    out.push_back(at);
  }
  return out;
}

// Cumsums along dims of up to this many elements are one masked reduction (quadratic); longer
// ones are blocked (blocked_cumsum).
constexpr int64_t kDirectCumsum = 64;

// cumsum of x along dim d in blocks of b ~ sqrt(n) elements (n: the dim's upper bound): the sum
// of each block, the sum of the blocks before each block, and the sum within the block up to
// each element; O(n sqrt(n)) work instead of the direct form's O(n^2).
TensorRef blocked_cumsum(Lowering& L, const TensorRef& x, size_t d, DType dt, const std::string& origin) {
  const sym::Expr n = x.sizes[d];
  const int64_t b = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(sym::bounds(n).hi))));
  const sym::Expr B(b), nb = sym::ceildiv(n, B);
  const size_t last = x.rank();
  Index per_block = x.sizes;
  per_block[d] = nb;
  Index blocks_by_pos = per_block;
  blocks_by_pos.push_back(B);
  TensorRef in_block = L.pointwise(dt, blocks_by_pos, [=](const Index& idx) {  // [.., k, .., e]: element k b + e
    Index at(idx.begin(), idx.end() - 1);
    at[d] = idx[d] * B + idx.back();
    return where(binary(Op::Lt, index_value(at[d]), index_value(n)), cast(x.at(at), dt), constant(0, dt));
  });
  TensorRef sums = L.realize(L.reduce(in_block, {static_cast<int64_t>(last)}, false, ReduceOp::Sum, dt, origin), origin);
  Index blocks_by_block = per_block;
  blocks_by_block.push_back(nb);
  TensorRef earlier = L.pointwise(dt, blocks_by_block, [=](const Index& idx) {  // [.., k, .., k']: block k' if before k
    Index at(idx.begin(), idx.end() - 1);
    at[d] = idx.back();
    return select(binary(Op::Lt, index_value(idx.back()), index_value(idx[d])), sums.at(at), constant(0, dt));
  });
  TensorRef before = L.realize(L.reduce(earlier, {static_cast<int64_t>(last)}, false, ReduceOp::Sum, dt, origin), origin);
  Index pos_by_offset = x.sizes;
  pos_by_offset.push_back(B);
  TensorRef within = L.pointwise(dt, pos_by_offset, [=](const Index& idx) {  // [.., i, .., e]: element (i // b) b + e if <= i
    Index at(idx.begin(), idx.end() - 1);
    const sym::Expr i = idx[d];
    at[d] = sym::floordiv(i, B) * B + idx.back();
    return where(binary(Op::Le, index_value(at[d]), index_value(i)), cast(x.at(at), dt), constant(0, dt));
  });
  TensorRef partial = L.reduce(within, {static_cast<int64_t>(last)}, false, ReduceOp::Sum, dt, origin);
  return L.pointwise(dt, x.sizes, [=](const Index& idx) {
    Index at = idx;
    at[d] = sym::floordiv(idx[d], B);
    return binary(Op::Add, before.at(at), partial.at(idx));
  });
}

}  // namespace

// A stable sort by ranks: rank[i] = how many elements go before element i (smaller, or equal and
// earlier; NaN after everything, as in torch, and NaNs equal to each other), a sum over the dim;
// then indices[r] = the i whose rank is r (a sum over the dim) and the values read there.
// Quadratic in the dim's size, so it lowers for dims up to kMaxSorted elements.
std::vector<TensorRef> sort_along(Lowering& L, TensorRef x, size_t dim, bool descending, const std::string& origin) {
  constexpr int64_t kMaxSorted = 4096;
  const sym::Expr len = x.sizes[dim];
  if (sym::prove_gt(len, sym::Expr(kMaxSorted)))
    L.fail("sorting along a dimension of ", len.str(), " elements does not lower yet (at most ", kMaxSorted, ": the sort is quadratic)");
  if (!x.view) x = L.realize(x, origin);
  const bool nan = dtype_is_float(x.dtype);
  // [..., i, ..., j]: whether element j goes before element i
  Index pairs = x.sizes;
  pairs.push_back(len);
  const size_t j_dim = pairs.size() - 1;
  TensorRef before = L.pointwise(DType::Int64, pairs, [=](const Index& idx) {
    Index at_i(idx.begin(), idx.end() - 1), at_j = at_i;
    at_j[dim] = idx[j_dim];
    ExprRef xi = x.at(at_i), xj = x.at(at_j);
    ExprRef first = binary(descending ? Op::Gt : Op::Lt, xj, xi);
    if (nan) {  // NaN is the largest: first when descending, last otherwise
      ExprRef nan_first = descending ? binary(Op::And, unary(Op::IsNan, xj), unary(Op::Not, unary(Op::IsNan, xi)))
                                     : binary(Op::And, unary(Op::IsNan, xi), unary(Op::Not, unary(Op::IsNan, xj)));
      first = binary(Op::Or, first, nan_first);
    }
    ExprRef tie = binary(Op::And, nan ? same_or_both_nan(xj, xi) : binary(Op::Eq, xj, xi),
                         binary(Op::Lt, index_value(idx[j_dim]), index_value(idx[dim])));
    return cast(binary(Op::Or, first, tie), DType::Int64);
  });
  TensorRef rank = L.realize(L.reduce(before, {static_cast<int64_t>(j_dim)}, false, ReduceOp::Sum, DType::Int64, origin), origin);
  // [..., r, ..., i]: i where element i has rank r
  TensorRef at_rank = L.pointwise(DType::Int64, pairs, [=](const Index& idx) {
    Index at_i(idx.begin(), idx.end() - 1);
    at_i[dim] = idx[j_dim];
    return select(binary(Op::Eq, rank.at(at_i), index_value(idx[dim])), index_value(idx[j_dim]), constant(0, DType::Int64));
  });
  TensorRef indices = L.realize(L.reduce(at_rank, {static_cast<int64_t>(j_dim)}, false, ReduceOp::Sum, DType::Int64, origin), origin);
  View xv = L.as_view(x, origin);
  const DType dt = x.dtype;
  TensorRef values = L.pointwise(dt, x.sizes, [=](const Index& idx) { return pick(xv, dt, idx, dim, indices.at(idx)); });
  return {values, indices};
}

namespace {

// upsample_nearest2d / upsample_bilinear2d: torch's scale for one spatial dim, in float32 as its
// kernels compute it (compute_scales_value; align_corners: (in - 1) / (out - 1)).
ExprRef upsample_scale(const std::optional<double>& factor, const sym::Expr& in, const sym::Expr& out, bool align_corners) {
  auto f = [](const sym::Expr& e) { return cast(index_value(e), DType::Float32); };
  if (align_corners)
    return select(binary(Op::Gt, index_value(out), index_value(1)),
                  binary(Op::Div, f(in - 1), f(out - 1)), constant(0, DType::Float32));
  if (factor && *factor > 0) return constant(static_cast<float>(1.0 / *factor), DType::Float32);
  return binary(Op::Div, f(in), f(out));
}

// The nearest source row of output row `dst` (torch's nearest_idx): itself when the sizes are
// equal, dst / 2 when the output is twice the input, else min(floor(dst * scale), in - 1) in float32.
ExprRef nearest_source(ExprRef dst, const sym::Expr& in, const sym::Expr& out, const std::optional<double>& factor) {
  if (out == in) return dst;
  if (out == in * 2) return binary(Op::FloorDiv, dst, index_value(2));
  ExprRef s = upsample_scale(factor, in, out, false);
  ExprRef src = cast(unary(Op::Floor, binary(Op::Mul, cast(dst, DType::Float32), s)), DType::Int64);
  return binary(Op::Min, src, index_value(in - 1));
}
// (of a loop index: the halving as an index expression, which simplifies with the loop's)
ExprRef nearest_source(const sym::Expr& dst, const sym::Expr& in, const sym::Expr& out, const std::optional<double>& factor) {
  if (!(out == in) && out == in * 2) return index_value(sym::floordiv(dst, sym::Expr(2)));
  return nearest_source(index_value(dst), in, out, factor);
}

// Bilinear taps along one dim (torch's area_pixel_compute_source_index and its neighbours): the
// first source row, the step to the second (0 at the last row) and the second row's weight.
struct LinearTaps {
  ExprRef i0, step, w1;
};
LinearTaps linear_taps(ExprRef dst, const sym::Expr& in, const sym::Expr& out, bool align_corners,
                       const std::optional<double>& factor) {
  const DType F = DType::Float32;
  ExprRef s = upsample_scale(factor, in, out, align_corners);
  ExprRef d = cast(dst, F);
  ExprRef real = align_corners ? binary(Op::Mul, s, d)
                               : binary(Op::Max, binary(Op::Sub, binary(Op::Mul, s, binary(Op::Add, d, constant(0.5, F))), constant(0.5, F)),
                                        constant(0, F));
  ExprRef i0 = cast(real, DType::Int64);  // real >= 0: truncation is the floor
  ExprRef step = select(binary(Op::Lt, i0, index_value(in - 1)), index_value(1), index_value(0));
  return {i0, step, binary(Op::Sub, real, cast(i0, F))};
}

// One spatial dim of an upsampling's gradient (upsample_nearest2d_backward,
// upsample_bilinear2d_backward), a gather_along: input row h gathers the output rows whose taps
// read it, each times its tap's weight (nearest: 1). Those rows lie in a window of the output that
// starts near h times the scale and whose length the scale bounds; each candidate is checked with
// the forward's own tap arithmetic (nearest_source, linear_taps), so the window only needs to be
// wide enough, not exact. Needs constant sizes along `dim` for that bound.
TensorRef upsample_grad_along(Lowering& L, const TensorRef& g, size_t dim, const sym::Expr& in, const sym::Expr& out, bool bilinear,
                              bool align, const std::optional<double>& factor, const std::string& origin, std::optional<DType> result_dtype) {
  if (out == in && (!bilinear || align || !factor || *factor == 1.0)) return g;  // every row reads itself
  const auto ic = in.as_const(), oc = out.as_const();
  if (!ic || !oc || *ic < 1 || *oc < 1)
    L.fail("--train differentiates upsampling whose spatial sizes are constants (or nearest upsampling by 1 or 2) only; got ", in.str(),
           " -> ", out.str());
  const double I = static_cast<double>(*ic), O = static_cast<double>(*oc);
  const bool by_factor = factor && *factor > 0 && !align;
  const double R = by_factor ? *factor : align ? (I > 1 && O > 1 ? (O - 1) / (I - 1) : 0) : O / I;  // output rows per input row
  // The window's first candidate, as a function of h (float32 h), and its length.
  std::function<ExprRef(ExprRef)> lo;
  int64_t K;
  const DType F = DType::Float32;
  auto floor_i = [=](ExprRef x) { return binary(Op::Sub, cast(unary(Op::Floor, x), DType::Int64), index_value(1)); };
  if (!bilinear) {  // rows o with floor(o / R) == h: [h R, (h + 1) R)
    lo = [=](ExprRef h) { return floor_i(binary(Op::Mul, h, constant(R, F))); };
    K = static_cast<int64_t>(std::ceil(R)) + 3;
  } else if (R == 0) {  // align_corners with one input or one output row: every output row reads row 0
    lo = [](ExprRef) { return index_value(0); };
    K = *oc;
  } else if (!align) {  // source (o + 0.5) / R - 0.5 in (h - 1, h + 1)
    lo = [=](ExprRef h) {
      return floor_i(binary(Op::Sub, binary(Op::Mul, binary(Op::Sub, h, constant(0.5, F)), constant(R, F)), constant(0.5, F)));
    };
    K = static_cast<int64_t>(std::ceil(2 * R)) + 3;
  } else {  // source o / R in (h - 1, h + 1)
    lo = [=](ExprRef h) { return floor_i(binary(Op::Mul, binary(Op::Sub, h, constant(1, F)), constant(R, F))); };
    K = static_cast<int64_t>(std::ceil(2 * R)) + 3;
  }
  if (K > 1024) L.fail("--train differentiates upsampling whose output rows read by one input row are at most 1024; got ", out.str(), " from ", in.str());
  auto weight = [=](ExprRef o, ExprRef h) {
    const ExprRef zero = constant(0, F);
    if (!bilinear) return select(binary(Op::Eq, nearest_source(o, in, out, factor), h), constant(1, F), zero);
    const LinearTaps tp = linear_taps(o, in, out, align, factor);
    return binary(Op::Add, select(binary(Op::Eq, tp.i0, h), binary(Op::Sub, constant(1, F), tp.w1), zero),
                  select(binary(Op::Eq, binary(Op::Add, tp.i0, tp.step), h), tp.w1, zero));
  };
  return gather_along(L, g, dim, in, out, K, [=](ExprRef h) { return lo(cast(h, F)); }, weight, origin, result_dtype);
}

}  // namespace

TensorRef gather_along(Lowering& L, const TensorRef& g, size_t dim, const sym::Expr& in, const sym::Expr& out, int64_t K,
                       std::function<ExprRef(ExprRef)> first, std::function<ExprRef(ExprRef, ExprRef)> weight, const std::string& origin,
                       std::optional<DType> result_dtype) {
  View gv = L.as_view(g, origin);
  Index sizes = gv.sizes;
  sizes[dim] = in;
  const DType dt = g.dtype, acc = dtype_compute(dt), rdt = result_dtype.value_or(dt);
  const sym::Expr last = last_index(gv);
  return L.pointwise(dt, sizes, [=](const Index& i) {
    ExprRef h = index_value(i[dim]);
    ExprRef lo = first(h);
    sym::Expr base = gv.offset;
    for (size_t d = 0; d < i.size(); ++d)
      if (d != dim) base = base + i[d] * gv.strides[d];
    const ExprRef zero = constant(0, acc);
    ExprRef sum = zero;
    for (int64_t t = 0; t < K; ++t) {
      ExprRef o = binary(Op::Add, lo, index_value(t));
      ExprRef o_in = binary(Op::Min, binary(Op::Max, o, index_value(0)), index_value(out - 1));  // loaded only where o is in range
      ExprRef w = cast(weight(o_in, h), acc);
      ExprRef v = cast(load_at(gv.buffer, dt, base, binary(Op::Mul, o_in, index_value(gv.strides[dim])), last), acc);
      ExprRef take = binary(Op::And, binary(Op::Eq, o, o_in), binary(Op::Ne, w, zero));
      sum = binary(Op::Add, sum, select(take, binary(Op::Mul, w, v), zero));
    }
    return cast(sum, rdt);
  });
}

namespace {

// self with self[.., index[i], ..] = src[.., i, ..] (+= when accumulating) along `dim`: a Scatter
// extern whose index is the 1-d `index` broadcast over src's shape. The write goes straight into
// a state buffer when self is that buffer's current contents and this node its only reader (a
// KV-cache update: the cache is not copied).
TensorRef scatter_along(Lowering& L, const Node& n, const TensorRef& x, int64_t dim, const TensorRef& index, const TensorRef& src,
                        bool accumulate) {
  const size_t d = static_cast<size_t>(dim);
  if (index.rank() > 1) L.fail("the index must be 1-d, got ", index.rank(), " dimensions");
  if (src.rank() != x.rank()) L.fail("the source has rank ", src.rank(), ", self rank ", x.rank());
  for (size_t e = 0; e < x.rank(); ++e)
    if (e != d && !(src.sizes[e] == x.sizes[e]))
      L.fail("the source's size ", src.sizes[e].str(), " in dimension ", e, " differs from self's ", x.sizes[e].str());
  if (index.rank() == 1 && !(index.sizes[0] == src.sizes[d]))
    L.fail("the index has ", index.sizes[0].str(), " entries for ", src.sizes[d].str(), " source slices");
  if (src.dtype != x.dtype) L.fail("the source's dtype ", dtype_name(src.dtype), " differs from self's ", dtype_name(x.dtype));
  View iv = L.as_view(index, L.origin());
  View bi{iv.buffer, src.sizes, Index(src.rank(), sym::Expr(0)), iv.offset};
  if (index.rank() == 1) bi.strides[d] = iv.strides[0];
  View sv = L.as_view(src, L.origin());
  ScatterAttrs at{dim, accumulate, false};
  const Value* self = std::get<Value*>(n.args.at(0));
  auto st = L.state_values.find(self);
  if (st != L.state_values.end() && L.uses(self) == 1) {
    const int buf = st->second;
    const Buffer& b = L.prog_.buffers[static_cast<size_t>(buf)];
    Computation c;
    c.kind = Computation::Kind::Extern;
    c.extern_kind = ExternKind::Scatter;
    c.out = buf;
    c.domain = b.sizes;
    c.operands = {bi, sv};
    at.in_place = true;
    c.attrs = at;
    L.emit(std::move(c));
    L.state_values[n.outputs.at(0)] = buf;
    return L.of_view(View{buf, b.sizes, b.strides, b.offset}, b.dtype);
  }
  return emit_extern(L, ExternKind::Scatter, x.dtype, x.sizes, {L.as_view(x, L.origin()), bi, sv}, at);
}

}  // namespace

Lowered lower_index(Lowering& L, const Node& n, const Args& a) {
  switch (n.kind) {
    case OpKind::UpsampleNearest2dVec: case OpKind::UpsampleBilinear2dVec:
    case OpKind::UpsampleNearest2d: case OpKind::UpsampleBilinear2d: {
      // Each output element reads the source rows and columns torch's kernels compute, in float32:
      // loads at computed positions (in range by construction, so unchecked).
      const bool vec = n.kind == OpKind::UpsampleNearest2dVec || n.kind == OpKind::UpsampleBilinear2dVec;
      TensorRef x = a.tensor(vec ? "input" : "self");
      if (x.rank() != 4) L.fail("upsampling expects a 4-d input (N, C, H, W)");
      View xv = L.as_view(x, n.name);
      const Index out = a.out_sizes();
      std::optional<double> factor[2];
      if (!vec) {  // the default overloads: output_size, and the scales torch maps positions by when given
        if (!a.is_none("scales_h")) factor[0] = a.f("scales_h");
        if (!a.is_none("scales_w")) factor[1] = a.f("scales_w");
      } else if (a.is_none("output_size") && !a.is_none("scale_factors")) {
        const Arg& sf = a.raw("scale_factors");
        if (auto v = std::get_if<std::vector<double>>(&sf); v && !v->empty())
          for (size_t i = 0; i < 2; ++i) factor[i] = (*v)[std::min(i, v->size() - 1)];
      }
      const DType dt = x.dtype, acc = dtype_compute(dt);
      const sym::Expr last = last_index(xv);
      auto at = [=](const Index& i, ExprRef h, ExprRef w) {  // x[i0, i1, h, w]
        const sym::Expr base = xv.offset + i[0] * xv.strides[0] + i[1] * xv.strides[1];
        ExprRef off = binary(Op::Add, binary(Op::Mul, h, index_value(xv.strides[2])), binary(Op::Mul, w, index_value(xv.strides[3])));
        return cast(load_at(xv.buffer, dt, base, off, last), acc);
      };
      if (n.kind == OpKind::UpsampleNearest2dVec || n.kind == OpKind::UpsampleNearest2d)
        return one(L.pointwise(dt, out, [=](const Index& i) {
          return cast(at(i, nearest_source(i[2], x.sizes[2], out[2], factor[0]), nearest_source(i[3], x.sizes[3], out[3], factor[1])),
                      dt);
        }));
      const bool align = a.b("align_corners");
      return one(L.pointwise(dt, out, [=](const Index& i) {
        const LinearTaps h = linear_taps(index_value(i[2]), x.sizes[2], out[2], align, factor[0]);
        const LinearTaps w = linear_taps(index_value(i[3]), x.sizes[3], out[3], align, factor[1]);
        const ExprRef one_f = constant(1, acc);
        ExprRef h0w = cast(binary(Op::Sub, one_f, cast(h.w1, acc)), acc), h1w = cast(h.w1, acc);
        ExprRef w0w = cast(binary(Op::Sub, one_f, cast(w.w1, acc)), acc), w1w = cast(w.w1, acc);
        ExprRef h1 = binary(Op::Add, h.i0, h.step), w1 = binary(Op::Add, w.i0, w.step);
        auto row = [&](ExprRef hr) {
          return binary(Op::Add, binary(Op::Mul, w0w, at(i, hr, w.i0)), binary(Op::Mul, w1w, at(i, hr, w1)));
        };
        return cast(binary(Op::Add, binary(Op::Mul, h0w, row(h.i0)), binary(Op::Mul, h1w, row(h1))), dt);
      }));
    }
    case OpKind::UpsampleNearest2dBackward: case OpKind::UpsampleBilinear2dBackward: {
      // Separable: the gradient gathered along W ([N, C, Ho, Wi]), then along H.
      TensorRef g = a.tensor("grad_output");
      const Index in = a.syms("input_size"), out = a.syms("output_size");
      std::optional<double> factor[2];
      if (!a.is_none("scales_h")) factor[0] = a.f("scales_h");
      if (!a.is_none("scales_w")) factor[1] = a.f("scales_w");
      const bool bilinear = n.kind == OpKind::UpsampleBilinear2dBackward, align = bilinear && a.b("align_corners");
      // (the first pass kept in float32, so that half gradients round once)
      TensorRef gw = upsample_grad_along(L, g, 3, in[3], out[1], bilinear, align, factor[1], n.name, dtype_compute(g.dtype));
      TensorRef r = upsample_grad_along(L, gw, 2, in[2], out[0], bilinear, align, factor[0], n.name, g.dtype);
      if (r.dtype != g.dtype) r = map1(L, r, g.dtype, [dt = g.dtype](ExprRef v) { return cast(v, dt); });
      return one(r);
    }
    case OpKind::Embedding: {  // weight [V, D], indices [*] -> [*, D]
      TensorRef w = a.tensor("weight"), ids = a.tensor("indices");
      if (w.rank() != 2) L.fail("embedding needs a 2-D weight");
      View wv = L.as_view(w, n.name);
      DType dt = w.dtype;
      Index sizes = a.out_sizes();
      return one(L.pointwise(dt, sizes, [=](const Index& idx) {
        Index id_at(idx.begin(), idx.end() - 1);
        Index at{sym::Expr(0), idx.back()};
        return pick(wv, dt, at, 0, ids.at(id_at));
      }));
    }
    case OpKind::Sort: case OpKind::SortStable: case OpKind::Argsort: case OpKind::ArgsortStable: {
      TensorRef x = a.tensor("self");
      const bool argsort = n.kind == OpKind::Argsort || n.kind == OpKind::ArgsortStable;
      if (x.rank() == 0) {
        TensorRef zero = L.pointwise(DType::Int64, {}, [](const Index&) { return constant(0, DType::Int64); });
        return argsort ? one(zero) : std::vector<TensorRef>{x, zero};
      }
      std::vector<TensorRef> sorted = sort_along(L, x, static_cast<size_t>(normalize_dim(L, a.i("dim"), x.rank())), a.b("descending"), n.name);
      if (argsort) return one(sorted[1]);
      return sorted;
    }
    case OpKind::Gather: {  // out[i] = self[i with i[dim] = index[i]]
      TensorRef x = a.tensor("self"), index = a.tensor("index");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      if (index.rank() != x.rank()) L.fail("gather's index must have self's rank");
      View xv = L.as_view(x, n.name);
      DType dt = x.dtype;
      return one(L.pointwise(dt, a.out_sizes(), [=](const Index& idx) {
        return pick(xv, dt, idx, static_cast<size_t>(dim), index.at(idx));
      }));
    }
    case OpKind::ScatterAdd: {  // an extern: a data-dependent accumulation (ExternKind::Scatter)
      TensorRef x = a.tensor("self"), index = a.tensor("index"), src = a.tensor("src");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      for (size_t d = 0; d < x.rank(); ++d)
        if (index.sizes[d] != src.sizes[d]) L.fail("scatter_add needs index and src of one shape (got ", index.sizes[d].str(), " and ", src.sizes[d].str(), ")");
      return one(emit_extern(L, ExternKind::Scatter, x.dtype, x.sizes,
                             {L.as_view(x, L.origin()), L.as_view(index, L.origin()), L.as_view(src, L.origin())}, ScatterAttrs{dim}));
    }
    case OpKind::ScatterSrc: case OpKind::ScatterValue: {  // out = self; out[.., index[i], ..] = src[i] (or value)
      TensorRef x = a.tensor("self"), index = a.tensor("index");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      TensorRef src = index;
      if (n.kind == OpKind::ScatterSrc) {
        src = a.tensor("src");
      } else {
        ExprRef v = a.scalar("value", x.dtype);
        src = L.pointwise(x.dtype, index.sizes, [v](const Index&) { return v; });
      }
      for (size_t d = 0; d < x.rank(); ++d) {  // torch: the index no larger than src in any dimension
        auto ni = index.sizes[d].as_const(), ns = src.sizes[d].as_const();
        if (ni && ns && *ni > *ns) L.fail("scatter's index is larger than src in dimension ", d, " (", *ni, " > ", *ns, ")");
      }
      View sv = L.as_view(src, L.origin());
      sv.sizes = index.sizes;  // only the index's extent of src is read
      return one(emit_extern(L, ExternKind::Scatter, x.dtype, x.sizes,
                             {L.as_view(x, L.origin()), L.as_view(index, L.origin()), sv}, ScatterAttrs{dim, false, false}));
    }
    case OpKind::IndexCopy: case OpKind::IndexCopyInplace: {  // self[.., index[i], ..] = source[.., i, ..] along dim
      TensorRef x = a.tensor("self"), index = a.tensor("index"), src = a.tensor("source");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      if (x.rank() == 0) L.fail("index_copy of a 0-d tensor is not supported");
      return one(scatter_along(L, n, x, dim, index, src, false));
    }
    case OpKind::IndexPut: case OpKind::IndexPutInplace: {  // self[indices] = values (+= with accumulate)
      TensorRef x = a.tensor("self");
      const Arg& raw = a.raw("indices");
      const auto* list = std::get_if<std::vector<Value*>>(&raw);
      int64_t dim = -1;
      for (size_t d = 0; list && d < list->size(); ++d) {
        if (!(*list)[d]) continue;
        if (dim >= 0) L.fail("index_put with more than one index tensor is not supported yet (one index tensor, the other dimensions taken whole)");
        dim = static_cast<int64_t>(d);
      }
      if (dim < 0) L.fail("index_put needs an index tensor");
      TensorRef index = L.ref((*list)[static_cast<size_t>(dim)]);
      if (index.rank() > 1) L.fail("index_put with a ", index.rank(), "-d index tensor is not supported yet (a 1-d one is)");
      Index vsizes = x.sizes;
      vsizes[static_cast<size_t>(dim)] = index.rank() == 1 ? index.sizes[0] : sym::Expr(1);
      TensorRef values = L.broadcast_to(a.tensor("values"), vsizes);
      if (index.rank() == 0) {  // one position along dim: the values' dim has size 1
        index = L.pointwise(index.dtype, {sym::Expr(1)}, [index](const Index&) { return index.at({}); });
      }
      return one(scatter_along(L, n, x, dim, index, values, a.b("accumulate")));
    }
    case OpKind::IndexSelect: {  // out[..., k, ...] = self[..., index[k], ...]
      TensorRef x = a.tensor("self"), index = a.tensor("index");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      if (index.rank() > 1) L.fail("index_select's index must be 1-D");
      View xv = L.as_view(x, n.name);
      DType dt = x.dtype;
      return one(L.pointwise(dt, a.out_sizes(), [=](const Index& idx) {
        Index k = index.rank() == 1 ? Index{idx[static_cast<size_t>(dim)]} : Index{};
        return pick(xv, dt, idx, static_cast<size_t>(dim), index.at(k));
      }));
    }
    case OpKind::AsStrided: {
      TensorRef x = a.tensor("self");
      View v = L.as_view(x, n.name);
      Index size = a.syms("size"), stride = a.syms("stride");
      if (size.size() != stride.size()) L.fail("as_strided: ", size.size(), " sizes but ", stride.size(), " strides");
      View out{v.buffer, size, stride, a.is_none("storage_offset") ? v.offset : a.syms("storage_offset")[0]};
      // The view must stay inside the storage ptc has for self.
      const Buffer& b = L.prog_.buffers[v.buffer];
      sym::Expr extent = b.offset;
      for (size_t d = 0; d < b.sizes.size(); ++d) extent = extent + (b.sizes[d] - 1) * b.strides[d];
      if (!sym::prove_le(last_index(out), extent) || !sym::prove_ge(out.offset, 0))
        L.fail("as_strided reaches outside its input's storage (ptc supports it within the input only)");
      return one(L.of_view(out, x.dtype));
    }
    case OpKind::Diff: {
      TensorRef x = a.tensor("self");
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      int64_t times = a.i("n");
      DType dt = x.dtype;
      const size_t d = static_cast<size_t>(dim);
      // prepend / append: concatenated along dim first (lazily, each part behind a `where`).
      TensorRef cur = x;
      for (const char* side : {"prepend", "append"}) {
        if (a.is_none(side)) continue;
        TensorRef extra = a.tensor(side);
        if (extra.rank() != x.rank()) L.fail("diff's ", side, " must have self's rank");
        bool before = side[0] == 'p';
        TensorRef first = before ? extra : cur, second = before ? cur : extra;
        Index sizes = cur.sizes;
        sizes[d] = first.sizes[d] + second.sizes[d];
        sym::Expr split = first.sizes[d];
        cur = L.pointwise(dt, sizes, [=](const Index& idx) {
          Index j = idx;
          j[d] = idx[d] - split;
          return where(binary(Op::Lt, index_value(idx[d]), index_value(split)), cast(first.at(idx), dt), cast(second.at(j), dt));
        });
      }
      for (int64_t t = 0; t < times; ++t) {
        Index sizes = cur.sizes;
        sizes[static_cast<size_t>(dim)] = sizes[static_cast<size_t>(dim)] - 1;
        TensorRef prev = cur;
        cur = L.pointwise(dt, sizes, [=](const Index& idx) {
          Index next = idx;
          next[static_cast<size_t>(dim)] = next[static_cast<size_t>(dim)] + 1;
          // bool tensors: torch's diff is "differs" (xor); numbers subtract
          return dt == DType::Bool ? binary(Op::Ne, prev.at(next), prev.at(idx)) : binary(Op::Sub, prev.at(next), prev.at(idx));
        });
      }
      return one(cur);
    }
    case OpKind::IndexTensor: {  // advanced indexing by a block of adjacent index tensors
      TensorRef x = a.tensor("self");
      auto vs = std::get_if<std::vector<Value*>>(&a.raw("indices"));
      if (!vs) L.fail("index: indices must be a list");
      size_t first = vs->size(), count = 0;
      for (size_t d = 0; d < vs->size(); ++d)
        if ((*vs)[d]) {
          if (first == vs->size()) first = d;
          if (d != first + count) L.fail("indexing with non-adjacent index tensors is not supported yet");
          ++count;
        }
      if (count == 0) return one(x);
      std::vector<TensorRef> idx;
      for (size_t d = first; d < first + count; ++d) {
        idx.push_back(L.ref((*vs)[d]));
        if (idx.back().dtype == DType::Bool) L.fail("indexing with a bool mask is not supported yet");
      }
      Index bshape = idx[0].sizes;
      for (const auto& t : idx) {
        auto b = broadcast_shapes(bshape, t.sizes);
        if (!b) L.fail("index tensors do not broadcast");
        bshape = *b;
      }
      std::vector<TensorRef> bidx;
      for (const auto& t : idx) bidx.push_back(L.broadcast_to(t, bshape));
      DType dt = x.dtype;
      const size_t nb = bshape.size();
      if (auto at = index_positions(bidx, x, first, bshape)) {  // positions computed from indices: x composed, no gather
        const Index bvars = loop_vars(bshape);
        return one(L.pointwise(dt, a.out_sizes(), [=](const Index& o) {
          std::map<sym::Expr, sym::Expr> repl;
          for (size_t d = 0; d < nb; ++d) repl[bvars[d]] = o[first + d];
          Index xi;
          for (size_t d = 0; d < first; ++d) xi.push_back(o[d]);
          for (size_t k = 0; k < count; ++k) xi.push_back(sym::substitute((*at)[k], repl));
          for (size_t d = first + count; d < x.rank(); ++d) xi.push_back(o[d - count + nb]);
          return x.at(xi);
        }));
      }
      View xv = L.as_view(x, n.name);
      return one(L.pointwise(dt, a.out_sizes(), [=](const Index& o) {
        // o = [x dims before the block] + [broadcast dims] + [x dims after the block]
        Index bi(o.begin() + static_cast<long>(first), o.begin() + static_cast<long>(first + nb));
        sym::Expr base = xv.offset;
        for (size_t d = 0; d < first; ++d) base = base + o[d] * xv.strides[d];
        for (size_t d = first + count; d < xv.sizes.size(); ++d) base = base + o[d - count + nb] * xv.strides[d];
        ExprRef off = constant(0, DType::Int64);
        for (size_t k = 0; k < count; ++k)
          off = binary(Op::Add, off,
                       binary(Op::Mul, check_index(wrap_index(bidx[k].at(bi), xv.sizes[first + k]), xv.sizes[first + k]),
                              index_value(xv.strides[first + k])));
        return load_at(xv.buffer, dt, base, off, last_index(xv));
      }));
    }
    case OpKind::Cumsum: {  // out[.., i, ..] = sum over j <= i of x[.., j, ..]: a masked reduction (quadratic in the dim)
      TensorRef x = a.tensor("self");
      if (x.rank() == 0) return one(x);
      int64_t dim = normalize_dim(L, a.i("dim"), x.rank());
      const size_t d = static_cast<size_t>(dim);
      DType dt = a.out_dtype();
      Index sizes = x.sizes;
      sizes.push_back(x.sizes[d]);  // the summed position j, last
      TensorRef terms = L.pointwise(dt, sizes, [=](const Index& idx) {
        Index at(idx.begin(), idx.end() - 1);
        at[d] = idx.back();
        return select(binary(Op::Le, index_value(idx.back()), index_value(idx[d])), cast(x.at(at), dt), constant(0, dt));
      });
      // Every term zero (a cumsum of `diff(positions) != 1` over an arange, in transformers'
      // masks): zeros, no reduction.
      if (auto u = uniform_value(terms); u && *u == 0) return one(L.pointwise(dt, x.sizes, [dt](const Index&) { return constant(0, dt); }));
      const sym::Range len = sym::bounds(x.sizes[d]);
      if (!len.bounded_above() || len.hi <= kDirectCumsum)
        return one(L.reduce(terms, {static_cast<int64_t>(x.rank())}, false, ReduceOp::Sum, dt, n.name));
      return one(blocked_cumsum(L, x, d, dt, n.name));
    }
    default: return std::nullopt;
  }
}

}  // namespace ptc::loop
