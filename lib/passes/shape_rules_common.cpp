// Shape rules: shared helpers: torch's stride rules (contiguity tests, elementwise output
// layout, view strides), broadcasting, view sizes with -1 and type promotion.
#include <algorithm>
#include <stdexcept>

#include "shape_rules.h"

namespace ptc::shape {

// ---------------------------------------------------------------- sizes and strides

bool is_one(Expr e) { return e.as_const() == std::optional<int64_t>(1); }
bool is_zero(Expr e) { return e.as_const() == std::optional<int64_t>(0); }

Expr numel(const Exprs& sizes) {
  Expr n = 1;
  for (const Expr& s : sizes) n = n * s;
  return n;
}

std::string sizes_str(const Exprs& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + sizes[i].str();
  return s + "]";
}

Exprs dense_strides(const Exprs& sizes) {
  Exprs st(sizes.size());
  Expr acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc = acc * (is_zero(sizes[i]) ? Expr(1) : sizes[i]);
  }
  return st;
}

// total / known for a known exact division: a divisor k*m (constant times monomial) is divided
// in two steps, which sym simplifies ((128*a*b) // (128*a) == b).
Expr exact_quotient(Expr total, Expr known) {
  if (known.kind() == sym::Kind::Add && known.add_constant() == 0 && known.operands().size() == 1) {
    Expr q = sym::floordiv(total, Expr(known.coeffs()[0]));
    return sym::floordiv(q, known.operands()[0]);
  }
  return sym::floordiv(total, known);
}

namespace {

// q with a == q * b exactly (as polynomials), when sym can find it.
std::optional<Expr> divide_exact(Expr a, Expr b) {
  if (is_zero(b)) return std::nullopt;
  try {
    Expr q = exact_quotient(a, b);
    if (q * b == a) return q;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// a >= 0 and b >= 0 are sizes or strides: a >= b, provably (ranges, or a = q * b with q >= 1).
bool sizes_ge(Expr a, Expr b) {
  if (sym::prove_ge(a, b)) return true;
  auto q = divide_exact(a, b);
  return q && sym::bounds(*q).lo >= 1 && sym::bounds(b).lo >= 0;
}

bool sizes_lt(Expr a, Expr b) {
  if (sym::prove_lt(a, b)) return true;
  auto q = divide_exact(b, a);
  return q && sym::bounds(*q).lo >= 2 && sym::bounds(a).lo >= 1;
}

const std::vector<int> kClOrder2d = {1, 3, 2, 0};
const std::vector<int> kClOrder3d = {1, 4, 3, 2, 0};

const std::vector<int>* cl_order(size_t rank) {
  if (rank == 4) return &kClOrder2d;
  if (rank == 5) return &kClOrder3d;
  return nullptr;
}

// Whether strides are "nested" (contiguous) in the order `order` (innermost first), skipping
// dimensions of size 1.
bool nested_in_order(const Type& t, const std::vector<int>& order) {
  Expr expected = 1;
  for (int d : order) {
    if (is_one(t.sizes[d])) continue;
    if (!sym::prove_eq(t.strides[d], expected)) return false;
    expected = expected * t.sizes[d];
  }
  return true;
}

bool fewer_than_two_elements(const Exprs& sizes) {
  for (const Expr& s : sizes)
    if (is_zero(s)) return true;
  for (const Expr& s : sizes)
    if (!is_one(s)) return false;
  return true;
}

// a >= b for sizes/strides (>= 0), as torch's "ge" in the elementwise stride sort.
bool known_ge(Expr a, Expr b) {
  if (sym::prove_eq(b, 0)) return true;
  if (sym::prove_eq(a, 0)) return false;
  return sizes_ge(a, b) || divide_exact(a, b).has_value();
}

// The logical-to-physical permutation (outermost first) that sorts dimensions by the strides of
// `strides_per_input` (each already broadcast to `shape`), as torch's
// compute_elementwise_output_logical_to_physical_perm.
std::vector<int> stride_order(const Exprs& shape, const std::vector<Exprs>& strides_per_input) {
  int ndim = static_cast<int>(shape.size());
  auto should_swap = [&](int a, int b) {
    for (const Exprs& st : strides_per_input) {
      Expr sa = st[a], sb = st[b];
      if (sym::prove_eq(sa, 0) || sym::prove_eq(sb, 0)) continue;
      if (sym::prove_eq(sa, sb)) {
        if (known_ge(shape[b], shape[a])) continue;
        return 1;
      }
      if (known_ge(sb, sa)) return -1;
      if (known_ge(sa, sb)) return 1;
    }
    return 0;
  };
  std::vector<int> perm(ndim);
  for (int i = 0; i < ndim; ++i) perm[i] = ndim - 1 - i;
  for (int i = 1; i < ndim; ++i) {
    int dim1 = i;
    for (int dim0 = i - 1; dim0 >= 0; --dim0) {
      int cmp = should_swap(perm[dim0], perm[dim1]);
      if (cmp > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (cmp < 0) {
        break;
      }
    }
  }
  std::reverse(perm.begin(), perm.end());
  return perm;
}

// Dense strides for `shape` with dimensions laid out in `perm` order (outermost first).
Exprs strides_in_order(const Exprs& shape, const std::vector<int>& perm) {
  Exprs physical;
  for (int p : perm) physical.push_back(shape[p]);
  Exprs ps = dense_strides(physical);
  Exprs out(shape.size());
  for (size_t k = 0; k < perm.size(); ++k) out[perm[k]] = ps[k];
  return out;
}

// Strides of `t` broadcast to `shape` (new leading dims and expanded size-1 dims get stride 0).
Exprs expanded_strides(const Type& t, const Exprs& shape) {
  Exprs st(shape.size(), Expr(0));
  size_t off = shape.size() - t.rank();
  for (size_t i = 0; i < t.rank(); ++i)
    st[off + i] = (is_one(t.sizes[i]) && !is_one(shape[off + i])) ? Expr(0) : t.strides[i];
  return st;
}

}  // namespace

Exprs format_strides(const Exprs& sizes, MemoryFormat fmt) {
  const std::vector<int>* order = nullptr;
  if (fmt == MemoryFormat::ChannelsLast && sizes.size() == 4) order = &kClOrder2d;
  if (fmt == MemoryFormat::ChannelsLast3d && sizes.size() == 5) order = &kClOrder3d;
  if (!order) return dense_strides(sizes);
  Exprs st(sizes.size());
  Expr m = 1;
  for (int d : *order) {
    st[d] = m;
    m = m * sizes[d];
  }
  return st;
}

bool is_contiguous(const Type& t) {
  if (fewer_than_two_elements(t.sizes)) return true;
  std::vector<int> order;
  for (int i = static_cast<int>(t.rank()) - 1; i >= 0; --i) order.push_back(i);
  return nested_in_order(t, order);
}

bool is_channels_last_contiguous(const Type& t) {
  const std::vector<int>* order = cl_order(t.rank());
  return order && nested_in_order(t, *order);
}

bool is_non_overlapping_and_dense(const Type& t) {
  if (fewer_than_two_elements(t.sizes)) return true;
  if (t.rank() == 1) return is_one(t.sizes[0]) || sym::prove_eq(t.strides[0], 1);
  // Sort (size, stride) pairs by stride, then check they nest.
  std::vector<std::pair<Expr, Expr>> ss;
  for (size_t i = 0; i < t.rank(); ++i) ss.emplace_back(t.sizes[i], t.strides[i]);
  auto less = [](const std::pair<Expr, Expr>& a, const std::pair<Expr, Expr>& b) {
    if (sizes_lt(a.second, b.second)) return true;
    bool divides = sym::prove_eq(a.second, 0) || divide_exact(b.second, a.second).has_value();
    return divides && !sym::prove_eq(a.second, b.second);
  };
  for (size_t i = 1; i < ss.size(); ++i)
    for (size_t j = i; j > 0 && less(ss[j], ss[j - 1]); --j) std::swap(ss[j], ss[j - 1]);
  Expr expected = 1;
  for (const auto& [size, stride] : ss) {
    if (is_one(size)) continue;
    if (!sym::prove_eq(stride, expected)) return false;
    expected = expected * size;
  }
  return true;
}

MemoryFormat suggest_memory_format(const Type& t) {
  const std::vector<int>* order = cl_order(t.rank());
  if (!order) return MemoryFormat::Contiguous;
  if (!sym::prove_ne(t.strides[1], 0)) return MemoryFormat::Contiguous;
  Expr min = 0;
  for (int d : *order) {
    if (!sym::prove_ne(t.sizes[d], 0)) return MemoryFormat::Contiguous;
    if (!sizes_ge(t.strides[d], min)) return MemoryFormat::Contiguous;
    if (d == 0 && sym::prove_eq(min, t.strides[1])) return MemoryFormat::Contiguous;
    min = t.strides[d] * t.sizes[d];
  }
  return t.rank() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d;
}

Exprs empty_like_strides(const Type& t, MemoryFormat fmt) {
  switch (fmt) {
    case MemoryFormat::Contiguous: return dense_strides(t.sizes);
    case MemoryFormat::ChannelsLast:
    case MemoryFormat::ChannelsLast3d: return format_strides(t.sizes, fmt);
    case MemoryFormat::Preserve: break;
  }
  if (is_non_overlapping_and_dense(t)) return t.strides;
  if (t.rank() <= 1) return dense_strides(t.sizes);
  return strides_in_order(t.sizes, stride_order(t.sizes, {t.strides}));
}

Exprs follow_layout_strides(const Type& t) {
  if (t.rank() <= 1) return dense_strides(t.sizes);
  bool contiguous = is_contiguous(t), channels_last = is_channels_last_contiguous(t);
  if (contiguous && !channels_last) return dense_strides(t.sizes);
  if (channels_last && !contiguous)
    return format_strides(t.sizes, t.rank() == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d);
  return strides_in_order(t.sizes, stride_order(t.sizes, {t.strides}));
}

Exprs elementwise_strides(const Exprs& out_sizes, const std::vector<const Type*>& inputs) {
  std::vector<const Type*> ins;
  for (const Type* t : inputs)
    if (t && t->is_tensor() && t->rank() > 0) ins.push_back(t);
  size_t ndim = out_sizes.size();
  if (ins.empty() || ndim <= 1) return dense_strides(out_sizes);
  std::vector<Type> expanded;
  for (const Type* t : ins) {
    Type e = *t;
    e.sizes = out_sizes;
    e.strides = expanded_strides(*t, out_sizes);
    expanded.push_back(std::move(e));
  }
  if (expanded.size() == 1) return empty_like_strides(expanded[0], MemoryFormat::Preserve);
  bool contiguous = true, channels_last = true;
  for (const Type& t : expanded) {
    contiguous = contiguous && is_contiguous(t);
    channels_last = channels_last && is_channels_last_contiguous(t);
  }
  if (contiguous && !channels_last) return dense_strides(out_sizes);
  if (channels_last && !contiguous)
    return format_strides(out_sizes, ndim == 4 ? MemoryFormat::ChannelsLast : MemoryFormat::ChannelsLast3d);
  std::vector<Exprs> st;
  for (const Type& t : expanded) st.push_back(t.strides);
  return strides_in_order(out_sizes, stride_order(out_sizes, st));
}

std::optional<Exprs> view_strides(const Exprs& oldshape, const Exprs& oldstride, const Exprs& newshape) {
  if (oldshape.empty()) return Exprs(newshape.size(), Expr(1));
  Expr total = numel(oldshape);
  if (is_zero(total)) {
    if (oldshape == newshape) return oldstride;
    return dense_strides(newshape);
  }
  Exprs newstride(newshape.size());
  int64_t view_d = static_cast<int64_t>(newshape.size()) - 1;
  Expr chunk_base_stride = oldstride.back();
  Expr tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(oldshape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel = tensor_numel * oldshape[tensor_d];
    if (tensor_d == 0 || (!is_one(oldshape[tensor_d - 1]) &&
                          !sym::prove_eq(oldstride[tensor_d - 1], tensor_numel * chunk_base_stride))) {
      // "view_numel < tensor_numel": the view consumes dims until it has the chunk's elements.
      while (view_d >= 0 && ((!sym::prove_eq(view_numel, tensor_numel) && !sym::prove_gt(view_numel, tensor_numel)) ||
                             is_one(newshape[view_d]))) {
        newstride[view_d] = view_numel * chunk_base_stride;
        view_numel = view_numel * newshape[view_d];
        --view_d;
      }
      if (!sym::prove_eq(view_numel, tensor_numel)) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = oldstride[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return newstride;
}

Exprs broadcast_shapes(const Ctx& c, const Exprs& a, const Exprs& b) {
  size_t n = std::max(a.size(), b.size());
  Exprs out(n);
  for (size_t i = 0; i < n; ++i) {
    bool has_a = i + a.size() >= n, has_b = i + b.size() >= n;
    Expr x = has_a ? a[i + a.size() - n] : Expr(1);
    Expr y = has_b ? b[i + b.size() - n] : Expr(1);
    if (!has_a || is_one(x)) {
      out[i] = y;
    } else if (!has_b || is_one(y) || sym::prove_eq(x, y)) {
      out[i] = x;
    } else if (x.is_const() && y.is_const()) {
      c.fail("shapes ", sizes_str(a), " and ", sizes_str(b), " do not broadcast (", x.str(), " vs ", y.str(),
             " in dim ", static_cast<int64_t>(i) - static_cast<int64_t>(n), ")");
    } else if (x.is_const()) {
      out[i] = x;  // the symbolic size must equal the constant
    } else if (y.is_const()) {
      out[i] = y;
    } else {
      if (sym::prove_ne(x, y) && sym::bounds(x).lo > 1 && sym::bounds(y).lo > 1)
        c.fail("shapes ", sizes_str(a), " and ", sizes_str(b), " do not broadcast (", x.str(), " vs ", y.str(),
               " can never be equal)");
      out[i] = x;  // two different symbols: torch guards them equal; keep the first
    }
  }
  return out;
}

Type elementwise(const Ctx& c, const std::vector<const Type*>& ins, DType dt) {
  Exprs shape;
  const Type* like = nullptr;
  for (const Type* t : ins) {
    if (!t) continue;
    shape = like ? broadcast_shapes(c, shape, t->sizes) : t->sizes;
    if (!like || (like->rank() == 0 && t->rank() > 0)) like = t;
  }
  PTC_CHECK(like, "elementwise() needs at least one tensor");
  return make_tensor(*like, dt, shape, elementwise_strides(shape, ins));
}

Exprs infer_size(const Ctx& c, const Exprs& shape, Expr total) {
  int infer = -1;
  Expr known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i].as_const() == std::optional<int64_t>(-1)) {
      if (infer >= 0) c.fail("shape ", sizes_str(shape), " has more than one -1");
      infer = static_cast<int>(i);
    } else if (sym::prove_lt(shape[i], 0)) {
      c.fail("shape ", sizes_str(shape), " has a negative size ", shape[i].str());
    } else {
      known = known * shape[i];
    }
  }
  Exprs out = shape;
  if (infer >= 0) {
    if (is_zero(known)) c.fail("shape ", sizes_str(shape), " is ambiguous: -1 with a size 0");
    Expr q = exact_quotient(total, known);
    if (sym::prove_ne(q * known, total))
      c.fail("shape ", sizes_str(shape), " is invalid for an input of ", total.str(), " elements");
    out[infer] = q;
  } else if (sym::prove_ne(known, total) || (known.is_const() && total.is_const() && known != total)) {
    c.fail("shape ", sizes_str(shape), " (", known.str(), " elements) is invalid for an input of ", total.str(),
           " elements");
  }
  return out;
}

// ---------------------------------------------------------------- dtypes

bool is_integral(DType t, bool include_bool) {
  switch (t) {
    case DType::Bool: return include_bool;
    case DType::UInt8:
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::UInt16: return true;
    default: return false;
  }
}

namespace {

// c10's promoteTypes table over the common types.
constexpr DType kPromoOrder[] = {DType::UInt8,      DType::Int8,    DType::Int16,   DType::Int32,     DType::Int64,
                                 DType::Float16,    DType::Float32, DType::Float64, DType::Complex32, DType::Complex64,
                                 DType::Complex128, DType::Bool,    DType::BFloat16};

int promo_index(DType t) {
  for (int i = 0; i < 13; ++i)
    if (kPromoOrder[i] == t) return i;
  return -1;
}

DType to_complex(DType t) {
  switch (t) {
    case DType::Float16: return DType::Complex32;
    case DType::Float64: return DType::Complex128;
    default: return DType::Complex64;
  }
}

}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  using D = DType;
  constexpr D u1 = D::UInt8, i1 = D::Int8, i2 = D::Int16, i4 = D::Int32, i8 = D::Int64, f2 = D::Float16,
              f4 = D::Float32, f8 = D::Float64, c2 = D::Complex32, c4 = D::Complex64, c8 = D::Complex128, b1 = D::Bool,
              bf = D::BFloat16;
  static constexpr D table[13][13] = {
      /*        u1  i1  i2  i4  i8  f2  f4  f8  c2  c4  c8  b1  bf */
      /* u1 */ {u1, i2, i2, i4, i8, f2, f4, f8, c2, c4, c8, u1, bf},
      /* i1 */ {i2, i1, i2, i4, i8, f2, f4, f8, c2, c4, c8, i1, bf},
      /* i2 */ {i2, i2, i2, i4, i8, f2, f4, f8, c2, c4, c8, i2, bf},
      /* i4 */ {i4, i4, i4, i4, i8, f2, f4, f8, c2, c4, c8, i4, bf},
      /* i8 */ {i8, i8, i8, i8, i8, f2, f4, f8, c2, c4, c8, i8, bf},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f4, f8, c2, c4, c8, f2, f4},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f8, c4, c4, c8, f4, f4},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, c8, c8, c8, f8, f8},
      /* c2 */ {c2, c2, c2, c2, c2, c2, c4, c8, c2, c4, c8, c2, c4},
      /* c4 */ {c4, c4, c4, c4, c4, c4, c4, c8, c4, c4, c8, c4, c4},
      /* c8 */ {c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8},
      /* b1 */ {u1, i1, i2, i4, i8, f2, f4, f8, c2, c4, c8, b1, bf},
      /* bf */ {bf, bf, bf, bf, bf, f4, f4, f8, c4, c4, c8, bf, bf},
  };
  int ia = promo_index(a), ib = promo_index(b);
  if (ia >= 0 && ib >= 0) return table[ia][ib];
  // uint16 and the float8 types: torch refuses most mixes; pick the wider category.
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  if (dtype_is_float(a) != dtype_is_float(b)) return dtype_is_float(a) ? a : b;
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

DType to_float(DType t) { return is_integral(t, true) ? kDefaultFloat : t; }

namespace {

using OptD = std::optional<DType>;

OptD promote_opt(OptD a, DType b) { return a ? promote_types(*a, b) : b; }

OptD combine_categories(OptD higher, OptD lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (dtype_is_complex(*higher)) return higher;
  if (dtype_is_complex(*lower)) return dtype_is_float(*higher) ? to_complex(*higher) : *lower;
  if (dtype_is_float(*higher)) return higher;
  if (*higher == DType::Bool || dtype_is_float(*lower)) return promote_types(*higher, *lower);
  return higher;
}

}  // namespace

DType result_type(const std::vector<const Type*>& tensors, const std::vector<ScalarArg>& scalars) {
  OptD dim, zero, wrapped;
  for (const Type* t : tensors) {
    if (!t) continue;
    if (t->rank() > 0)
      dim = promote_opt(dim, t->dtype);
    else
      zero = promote_opt(zero, t->dtype);
  }
  for (const ScalarArg& s : scalars) {
    switch (s.kind) {
      case ScalarArg::Bool: wrapped = promote_opt(wrapped, DType::Bool); break;
      case ScalarArg::Int: wrapped = promote_opt(wrapped, DType::Int64); break;
      case ScalarArg::Float: wrapped = promote_opt(wrapped, kDefaultFloat); break;
      case ScalarArg::Tensor: zero = promote_opt(zero, s.tensor->dtype); break;
    }
  }
  OptD r = combine_categories(dim, combine_categories(zero, wrapped));
  return r ? *r : kDefaultFloat;
}

}  // namespace ptc::shape
