// Constant folding: nodes whose tensor inputs are all weights (parameters, buffers, constants)
// or already folded values are evaluated at compile time by a small evaluator over TensorData.
//
// The evaluator keeps a value as a strided view (sizes, strides, offset in elements) of either a
// weight's storage or a vector of doubles it computed (already rounded to the value's dtype).
// Views (permute, transpose, unsqueeze, expand, slice, ...) only change the view; pointwise ops
// and dtype conversions compute every element in double precision and round to the output dtype.
//
// Only the "frontier" is materialized: a folded value that some kept node reads becomes a
// Constant input; folded values read only by other folded nodes just disappear. A frontier value that is a plain view of a weight shares the weight's storage
// (no byte copied, and the CPU weight layout stores one storage once); any other folded value
// gets freshly owned bytes in the layout of the value's recorded type.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ptc/error.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"

namespace ptc {
namespace {

using rewrite::StaticLayout;

constexpr int64_t kMaxFoldedBytes = int64_t(16) << 20;
// A dtype or layout conversion may fold larger values: a float16 / bfloat16 weight that a GEMM or
// a convolution reads is converted to float32 once here rather than on every run
// (library_ops_f32.cpp; GPT-2's tied 50257 x 768 embedding is 154 MB in float32), and a
// convolution weight is laid out KRSC (channels_last_weights).
constexpr int64_t kMaxConvertedBytes = int64_t(512) << 20;
constexpr double kExactIntLimit = 9007199254740992.0;  // 2^53

// A constant tensor: a strided view of a weight's storage or of computed doubles.
struct CVal {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  const TensorData* weight = nullptr;                  // view of this weight's storage, or
  std::shared_ptr<const std::vector<double>> data;     // view of computed elements
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  size_t rank() const { return sizes.size(); }
};

std::vector<int64_t> row_major(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

// Calls f(k, idx) for every index of `sizes` in row-major order (k = 0, 1, ...).
template <class F>
void for_each_index(const std::vector<int64_t>& sizes, F f) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<int64_t> idx(sizes.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    f(k, idx);
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
}

// The element at storage position `pos` of v's storage.
double element(const CVal& v, int64_t pos) {
  if (v.data) return (*v.data)[static_cast<size_t>(pos)];
  const size_t item = dtype_size(v.dtype);
  PTC_CHECK(static_cast<size_t>(pos + 1) * item <= v.weight->storage_bytes, "folded read past a weight's storage");
  return rewrite::read_element(v.weight->storage + static_cast<size_t>(pos) * item, v.dtype);
}

// Elements of `v` in row-major order.
std::vector<double> elements(const CVal& v) {
  std::vector<double> out(static_cast<size_t>(v.numel()));
  if (!out.empty() && rewrite::row_major_dense(v.sizes, v.strides)) {  // one block
    const size_t at = static_cast<size_t>(v.offset), n = out.size();
    if (v.data) {
      PTC_CHECK(at + n <= v.data->size(), "folded read past computed elements");
      std::copy(v.data->begin() + static_cast<std::ptrdiff_t>(at), v.data->begin() + static_cast<std::ptrdiff_t>(at + n), out.begin());
    } else {
      const size_t item = dtype_size(v.dtype);
      PTC_CHECK((at + n) * item <= v.weight->storage_bytes, "folded read past a weight's storage");
      rewrite::read_elements(v.weight->storage + at * item, v.dtype, out.data(), n);
    }
    return out;
  }
  for_each_index(v.sizes, [&](int64_t k, const std::vector<int64_t>& idx) {
    int64_t pos = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) pos += idx[d] * v.strides[d];
    out[static_cast<size_t>(k)] = element(v, pos);
  });
  return out;
}

// Whether a folded value can share its weight's storage as a value of type `t`.
bool aliasable(const CVal& v, const Type& t) {
  if (!v.weight) return false;
  auto l = rewrite::static_layout(t);
  if (!l || l->sizes != v.sizes || (l->offset != v.offset && v.numel() != 0)) return false;
  for (size_t d = 0; d < v.rank(); ++d)
    if (v.sizes[d] != 1 && l->strides[d] != v.strides[d]) return false;
  return true;
}

// Bytes of owned storage a value of type `t` needs (row-major when its layout is not static).
int64_t owned_bytes(const Type& t) {
  auto l = rewrite::static_layout(t);
  const int64_t item = static_cast<int64_t>(dtype_size(t.dtype));
  if (!l) {
    int64_t n = 1;
    for (const auto& s : t.sizes) n *= s.as_const().value_or(0);
    return n * item;
  }
  if (l->numel() == 0) return 0;
  int64_t extent = l->offset + 1;
  for (size_t d = 0; d < l->sizes.size(); ++d) extent += (l->sizes[d] - 1) * l->strides[d];
  return extent * item;
}

bool is_contiguous(const CVal& v) {
  auto rm = row_major(v.sizes);
  for (size_t d = 0; d < v.rank(); ++d)
    if (v.sizes[d] != 1 && v.strides[d] != rm[d]) return false;
  return true;
}

class Evaluator {
 public:
  explicit Evaluator(const Graph& g) {
    for (const GraphInput& in : g.inputs) {
      // (a buffer the program updates is state: its contents change from run to run)
      if (std::find(g.updated_buffers.begin(), g.updated_buffers.end(), in.target) != g.updated_buffers.end()) continue;
      if (const TensorData* td = rewrite::weight_of(g, in.value)) weights_[in.value] = td;
    }
  }

  // The constant for a tensor value, if it is one (a weight with a static layout in a supported
  // dtype, or an evaluated value).
  const CVal* constant(const Value* v) {
    auto it = env_.find(v);
    if (it != env_.end()) return &it->second;
    auto w = weights_.find(v);
    if (w == weights_.end() || !rewrite::dtype_supported(w->second->type.dtype)) return nullptr;
    const TensorData* td = w->second;
    auto l = rewrite::static_layout(td->type);
    if (!l) return nullptr;
    CVal c;
    c.dtype = td->type.dtype;
    c.sizes = l->sizes;
    c.strides = l->strides;
    c.offset = l->offset;
    c.weight = td;
    return &env_.emplace(v, std::move(c)).first->second;
  }

  // Evaluates `n` when it can be folded; records and returns its value.
  const CVal* evaluate(const Node& n) {
    if (n.outputs.size() != 1 || n.kind == OpKind::Unknown) return nullptr;
    const Value* out = n.outputs[0];
    out_ = rewrite::static_layout(out->type);
    if (!out_ || !rewrite::dtype_supported(out->type.dtype)) return nullptr;
    out_dtype_ = out->type.dtype;
    inexact_ = false;
    // (contiguous: channels_last_weights' KRSC convolution weights, of any size)
    const bool conversion = n.kind == OpKind::UnderscoreToCopy || n.kind == OpKind::ToDtype || n.kind == OpKind::Contiguous;
    limit_ = conversion ? kMaxConvertedBytes : kMaxFoldedBytes;
    std::optional<CVal> r;
    try {
      r = eval(n);
    } catch (const Unsupported&) {
      return nullptr;
    }
    if (!r || inexact_ || r->sizes != out_->sizes || r->dtype != out_dtype_) return nullptr;
    if (r->data && out_->numel() * static_cast<int64_t>(dtype_size(out_dtype_)) > limit_) return nullptr;
    // Every folded value must be storable: as a view of its weight, or in bounded owned bytes.
    if (!aliasable(*r, out->type) && owned_bytes(out->type) > limit_) return nullptr;
    return &env_.emplace(out, std::move(*r)).first->second;
  }

 private:
  struct Unsupported {};

  std::unordered_map<const Value*, const TensorData*> weights_;
  std::unordered_map<const Value*, CVal> env_;
  std::vector<std::shared_ptr<TensorData>> converted_;  // weights converted to another dtype (convert)
  std::optional<StaticLayout> out_;
  DType out_dtype_ = DType::Float32;
  bool inexact_ = false;
  int64_t limit_ = kMaxFoldedBytes;  // of the node being evaluated

  double read(const CVal& v, int64_t pos) {
    double x = element(v, pos);
    if (!v.data && v.dtype == DType::Int64 && std::fabs(x) >= kExactIntLimit) inexact_ = true;
    return x;
  }
  std::vector<double> checked_elements(const CVal& v) {
    if (v.dtype == DType::Int64 && !v.data) {
      std::vector<double> e = elements(v);
      for (double x : e) inexact_ = inexact_ || std::fabs(x) >= kExactIntLimit;
      return e;
    }
    return elements(v);
  }

  static CVal computed(DType dt, std::vector<int64_t> sizes, std::vector<double> values) {
    CVal c;
    c.dtype = dt;
    c.strides = row_major(sizes);
    c.sizes = std::move(sizes);
    c.data = std::make_shared<const std::vector<double>>(std::move(values));
    return c;
  }

  static double round_to(double v, DType dt) {
    switch (dt) {
      case DType::Float64: return v;
      case DType::Float32: return static_cast<float>(v);
      case DType::Float16:
      case DType::BFloat16: {  // through the storage format: round to nearest even
        std::byte b[2];
        write_element(b, dt, v);
        return read_element(b, dt);
      }
      case DType::Bool: return v != 0 ? 1 : 0;
      default: {
        if (std::isnan(v)) return 0;
        double t = std::trunc(v);
        if (dt == DType::UInt8) {  // wraps, like an integer cast
          double m = std::fmod(t, 256.0);
          return m < 0 ? m + 256.0 : m;
        }
        return t;
      }
    }
  }

  // ---- argument access ----
  const CVal& tensor_arg(const Node& n, const char* name) {
    const Arg* a = n.arg(name);
    auto v = a ? std::get_if<Value*>(a) : nullptr;
    if (!v || !*v || !(*v)->type.is_tensor()) throw Unsupported{};
    const CVal* c = constant(*v);
    if (!c) throw Unsupported{};
    return *c;
  }
  static double scalar_arg(const Node& n, const char* name) {
    const Arg* a = n.arg(name);
    if (!a) throw Unsupported{};
    auto v = arg_number(*a);
    if (!v) throw Unsupported{};
    return *v;
  }
  static int64_t int_arg(const Node& n, const char* name) {
    const Arg* a = n.arg(name);
    if (!a) throw Unsupported{};
    if (auto i = std::get_if<int64_t>(a)) return *i;
    if (auto e = std::get_if<sym::Expr>(a))
      if (auto c = e->as_const()) return *c;
    throw Unsupported{};
  }
  static std::optional<int64_t> opt_int_arg(const Node& n, const char* name) {
    const Arg* a = n.arg(name);
    if (!a || std::holds_alternative<std::monostate>(*a)) return std::nullopt;
    return int_arg(n, name);
  }
  static std::vector<int64_t> ints_arg(const Node& n, const char* name) {
    const Arg* a = n.arg(name);
    if (!a) throw Unsupported{};
    if (auto v = std::get_if<std::vector<int64_t>>(a)) return *v;
    if (auto v = std::get_if<std::vector<sym::Expr>>(a)) {
      std::vector<int64_t> out;
      for (const auto& e : *v) {
        auto c = e.as_const();
        if (!c) throw Unsupported{};
        out.push_back(*c);
      }
      return out;
    }
    if (auto i = std::get_if<int64_t>(a)) return {*i};
    throw Unsupported{};
  }
  static int64_t norm_dim(int64_t d, size_t rank) {
    int64_t r = static_cast<int64_t>(std::max<size_t>(rank, 1));
    if (d < -r || d >= r) throw Unsupported{};
    return d < 0 ? d + r : d;
  }

  // An operand of a pointwise op: a constant tensor or a Python number.
  struct Operand {
    const CVal* t = nullptr;
    double s = 0;
  };
  Operand operand(const Node& n, const char* name) {
    const Arg* a = n.arg(name);
    if (!a) throw Unsupported{};
    if (std::holds_alternative<Value*>(*a)) return Operand{&tensor_arg(n, name), 0};
    auto v = arg_number(*a);
    if (!v) throw Unsupported{};
    return Operand{nullptr, *v};
  }

  // Elementwise f over operands broadcast to the output's sizes.
  template <class F>
  CVal pointwise(const std::vector<Operand>& ops, F f) {
    const auto& sizes = out_->sizes;
    const size_t rank = sizes.size();
    check_size(out_->numel(), out_dtype_);
    for (const Operand& o : ops)
      if (o.t && o.t->rank() > rank) throw Unsupported{};
    std::vector<double> out(static_cast<size_t>(out_->numel()));
    std::vector<double> x(ops.size());
    for_each_index(sizes, [&](int64_t k, const std::vector<int64_t>& idx) {
      for (size_t i = 0; i < ops.size(); ++i) {
        const CVal* t = ops[i].t;
        if (!t) { x[i] = ops[i].s; continue; }
        int64_t pos = t->offset;
        const size_t lead = rank - t->rank();
        for (size_t d = 0; d < t->rank(); ++d) {
          if (t->sizes[d] == 1) continue;
          if (t->sizes[d] != sizes[lead + d]) throw Unsupported{};
          pos += idx[lead + d] * t->strides[d];
        }
        x[i] = read(*t, pos);
      }
      double r = round_to(f(x), out_dtype_);
      if (out_dtype_ == DType::Int64 && std::fabs(r) >= kExactIntLimit) inexact_ = true;
      out[static_cast<size_t>(k)] = r;
    });
    return computed(out_dtype_, sizes, std::move(out));
  }

  template <class F>
  CVal unary(const Node& n, F f) {
    return pointwise({operand(n, "self")}, [&](const std::vector<double>& x) { return f(x[0]); });
  }
  template <class F>
  CVal binary(const Node& n, const char* b, F f) {
    return pointwise({operand(n, "self"), operand(n, b)}, [&](const std::vector<double>& x) { return f(x[0], x[1]); });
  }

  // Refuses (before any work) to compute more elements than a folded value may hold.
  void check_size(int64_t numel, DType dt) const {
    if (numel > limit_ / static_cast<int64_t>(dtype_size(dt))) throw Unsupported{};
  }
  CVal contiguous_copy(const CVal& v) {
    check_size(v.numel(), v.dtype);
    return computed(v.dtype, v.sizes, checked_elements(v));
  }

  // ---- views ----
  static CVal with_view(const CVal& v, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
    CVal c = v;
    c.sizes = std::move(sizes);
    c.strides = std::move(strides);
    c.offset = offset;
    return c;
  }
  CVal reshape(const CVal& v, const std::vector<int64_t>& sizes) {
    CVal c = is_contiguous(v) ? v : contiguous_copy(v);
    return with_view(c, sizes, row_major(sizes), c.offset);
  }
  CVal permute(const CVal& v, const std::vector<int64_t>& dims) {
    if (dims.size() != v.rank()) throw Unsupported{};
    std::vector<int64_t> sz, st;
    std::vector<bool> used(v.rank(), false);
    for (int64_t d : dims) {
      int64_t k = norm_dim(d, v.rank());
      if (used[k]) throw Unsupported{};
      used[k] = true;
      sz.push_back(v.sizes[k]);
      st.push_back(v.strides[k]);
    }
    return with_view(v, sz, st, v.offset);
  }
  CVal transpose(const CVal& v, int64_t a, int64_t b) {
    if (v.rank() == 0) return v;
    std::vector<int64_t> dims(v.rank());
    for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(i);
    std::swap(dims[norm_dim(a, v.rank())], dims[norm_dim(b, v.rank())]);
    return permute(v, dims);
  }
  CVal expand(const CVal& v, const std::vector<int64_t>& sizes) {
    if (sizes.size() < v.rank()) throw Unsupported{};
    const size_t lead = sizes.size() - v.rank();
    std::vector<int64_t> st(sizes.size(), 0);
    for (size_t d = 0; d < v.rank(); ++d) {
      if (v.sizes[d] == sizes[lead + d]) st[lead + d] = v.strides[d];
      else if (v.sizes[d] != 1) throw Unsupported{};
    }
    return with_view(v, sizes, st, v.offset);
  }
  CVal squeeze(const CVal& v, std::vector<int64_t> dims) {
    std::vector<bool> drop(v.rank(), false);
    for (int64_t d : dims) {
      int64_t k = norm_dim(d, v.rank());
      if (v.rank() > 0 && v.sizes[k] == 1) drop[k] = true;
    }
    std::vector<int64_t> sz, st;
    for (size_t d = 0; d < v.rank(); ++d)
      if (!drop[d]) sz.push_back(v.sizes[d]), st.push_back(v.strides[d]);
    return with_view(v, sz, st, v.offset);
  }
  CVal slice(const CVal& v, int64_t dim, int64_t start, int64_t end, int64_t step) {
    if (v.rank() == 0 || step <= 0) throw Unsupported{};
    int64_t d = norm_dim(dim, v.rank());
    const int64_t size = v.sizes[d];
    auto clampi = [&](int64_t x) { return x < 0 ? std::max<int64_t>(x + size, 0) : std::min(x, size); };
    start = clampi(start);
    end = std::max(clampi(end), start);
    CVal c = v;
    c.sizes[d] = (end - start + step - 1) / step;
    c.offset = v.offset + start * v.strides[d];
    c.strides[d] = v.strides[d] * step;
    return c;
  }

  CVal convert(const CVal& v, DType to) {
    if (v.dtype == to) return v;
    check_size(v.numel(), to);
    auto floating = [](DType t) { return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16; };
    if (!v.data && floating(v.dtype) && floating(to) && v.numel() > 0 && rewrite::row_major_dense(v.sizes, v.strides)) {
      // A weight converted between float dtypes (--precision bf16's weights): straight into
      // bytes of the new dtype, which the folded value views (materialize then shares them),
      // instead of a double per element. The same rounding as round_to's.
      const size_t n = static_cast<size_t>(v.numel()), in_item = dtype_size(v.dtype), out_item = dtype_size(to);
      const size_t at = static_cast<size_t>(v.offset) * in_item;
      PTC_CHECK(at + n * in_item <= v.weight->storage_bytes, "folded read past a weight's storage");
      auto bytes = std::make_shared<std::string>(n * out_item, '\0');
      auto* dst = reinterpret_cast<std::byte*>(bytes->data());
      std::vector<double> chunk(std::min<size_t>(n, 1 << 16));
      for (size_t i = 0; i < n; i += chunk.size()) {
        const size_t m = std::min(chunk.size(), n - i);
        rewrite::read_elements(v.weight->storage + at + i * in_item, v.dtype, chunk.data(), m);
        rewrite::write_elements(dst + i * out_item, to, chunk.data(), m);
      }
      auto td = std::make_shared<TensorData>();
      td->storage = dst;
      td->storage_bytes = bytes->size();
      td->owner = bytes;
      converted_.push_back(td);
      CVal c;
      c.dtype = to;
      c.sizes = v.sizes;
      c.strides = row_major(v.sizes);
      c.weight = td.get();
      return c;
    }
    std::vector<double> e = checked_elements(v);
    for (double& x : e) x = round_to(x, to);
    return computed(to, v.sizes, std::move(e));
  }

  std::optional<CVal> eval(const Node& n) {
    // Every tensor argument must be a constant (Python numbers in Tensor slots are fine).
    for (const Value* in : n.inputs())
      if (!in->type.is_tensor() || !constant(in)) return std::nullopt;
    const auto& osz = out_->sizes;
    switch (n.kind) {
      // views
      case OpKind::Permute: return permute(tensor_arg(n, "self"), ints_arg(n, "dims"));
      case OpKind::TransposeInt: return transpose(tensor_arg(n, "self"), int_arg(n, "dim0"), int_arg(n, "dim1"));
      case OpKind::T: return transpose(tensor_arg(n, "self"), 0, tensor_arg(n, "self").rank() > 1 ? 1 : 0);
      case OpKind::View:
      case OpKind::Reshape:
      case OpKind::UnderscoreUnsafeView:
      case OpKind::FlattenUsingInts:
      case OpKind::UnflattenInt: return reshape(tensor_arg(n, "self"), osz);
      case OpKind::Unsqueeze: {
        const CVal& v = tensor_arg(n, "self");
        int64_t d = norm_dim(int_arg(n, "dim"), v.rank() + 1);
        CVal c = v;
        int64_t st = d < static_cast<int64_t>(v.rank()) ? v.sizes[d] * v.strides[d] : 1;
        c.sizes.insert(c.sizes.begin() + d, 1);
        c.strides.insert(c.strides.begin() + d, st);
        return c;
      }
      case OpKind::SqueezeDim: return squeeze(tensor_arg(n, "self"), {int_arg(n, "dim")});
      case OpKind::SqueezeDims: return squeeze(tensor_arg(n, "self"), ints_arg(n, "dim"));
      case OpKind::Squeeze: {
        const CVal& v = tensor_arg(n, "self");
        std::vector<int64_t> all;
        for (size_t d = 0; d < v.rank(); ++d) all.push_back(static_cast<int64_t>(d));
        return squeeze(v, all);
      }
      case OpKind::Expand:
      case OpKind::ExpandAs: return expand(tensor_arg(n, "self"), osz);
      case OpKind::SliceTensor: {
        const CVal& v = tensor_arg(n, "self");
        int64_t step = int_arg(n, "step");
        return slice(v, int_arg(n, "dim"), opt_int_arg(n, "start").value_or(0),
                     opt_int_arg(n, "end").value_or(INT64_MAX), step);
      }
      case OpKind::Narrow: {
        int64_t start = int_arg(n, "start");
        const CVal& v = tensor_arg(n, "self");
        if (start < 0) start += v.sizes.at(norm_dim(int_arg(n, "dim"), v.rank()));
        return slice(v, int_arg(n, "dim"), start, start + int_arg(n, "length"), 1);
      }
      case OpKind::SelectInt: {
        const CVal& v = tensor_arg(n, "self");
        if (v.rank() == 0) return std::nullopt;
        int64_t d = norm_dim(int_arg(n, "dim"), v.rank());
        int64_t i = int_arg(n, "index");
        if (i < 0) i += v.sizes[d];
        if (i < 0 || i >= v.sizes[d]) return std::nullopt;
        CVal c = v;
        c.offset += i * v.strides[d];
        c.sizes.erase(c.sizes.begin() + d);
        c.strides.erase(c.strides.begin() + d);
        return c;
      }
      // copies and conversions (the value's layout comes from its recorded type when stored)
      case OpKind::Alias:
      case OpKind::Detach:
      case OpKind::Clone:
      case OpKind::Contiguous:
      case OpKind::LiftFreshCopy:
      case OpKind::UnderscoreToCopy:
      case OpKind::ToDtype:
      case OpKind::TypeAs: {
        return convert(tensor_arg(n, "self"), out_dtype_);
      }
      // pointwise
      case OpKind::Neg: return unary(n, [](double x) { return -x; });
      case OpKind::Sqrt: return unary(n, [](double x) { return std::sqrt(x); });
      case OpKind::Rsqrt: return unary(n, [](double x) { return 1.0 / std::sqrt(x); });
      case OpKind::Reciprocal: return unary(n, [](double x) { return 1.0 / x; });
      case OpKind::Exp: return unary(n, [](double x) { return std::exp(x); });
      case OpKind::Log: return unary(n, [](double x) { return std::log(x); });
      case OpKind::Abs: return unary(n, [](double x) { return std::fabs(x); });
      case OpKind::Relu: return unary(n, [](double x) { return x > 0 ? x : (std::isnan(x) ? x : 0.0); });
      case OpKind::Sigmoid: return unary(n, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
      case OpKind::Tanh: return unary(n, [](double x) { return std::tanh(x); });
      case OpKind::AddTensor:
      case OpKind::AddScalar: {
        double alpha = scalar_arg(n, "alpha");
        return binary(n, "other", [&](double a, double b) { return a + alpha * b; });
      }
      case OpKind::SubTensor:
      case OpKind::SubScalar: {
        double alpha = scalar_arg(n, "alpha");
        return binary(n, "other", [&](double a, double b) { return a - alpha * b; });
      }
      case OpKind::RsubScalar: {
        double alpha = scalar_arg(n, "alpha");
        return binary(n, "other", [&](double a, double b) { return b - alpha * a; });
      }
      case OpKind::MulTensor:
      case OpKind::MulScalar: return binary(n, "other", [](double a, double b) { return a * b; });
      case OpKind::DivTensor:
      case OpKind::DivScalar: return binary(n, "other", [](double a, double b) { return a / b; });
      case OpKind::PowTensorScalar: return binary(n, "exponent", [](double a, double b) { return std::pow(a, b); });
      case OpKind::PowTensorTensor: return binary(n, "exponent", [](double a, double b) { return std::pow(a, b); });
      case OpKind::Maximum:
        return binary(n, "other", [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); });
      case OpKind::Minimum:
        return binary(n, "other", [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); });
      default: return std::nullopt;
    }
  }
};

// The TensorData for a folded value of recorded type `t`: the weight's own storage when `v` is a
// view of a weight laid out exactly as `t` says, else owned bytes in `t`'s layout (or row-major
// when `t`'s layout is not static).
TensorData materialize(const CVal& v, const Type& t) {
  Type type = t;
  type.requires_grad = false;
  if (aliasable(v, type)) {
    TensorData td = *v.weight;
    td.type = type;
    return td;
  }
  if (!rewrite::static_layout(type)) {
    type.strides = contiguous_strides(type.sizes);
    type.storage_offset = 0;
  }
  return rewrite::owned_tensor(type, elements(v));
}

}  // namespace

std::unique_ptr<Graph> fold_constants(const Graph& g) {
  std::unordered_set<const Value*> is_output(g.outputs.begin(), g.outputs.end());
  Evaluator ev(g);
  std::unordered_set<const Node*> folded;  // evaluated and replaced by a constant or dropped
  for (const auto& n : g.nodes()) {
    const CVal* c = ev.evaluate(*n);
    if (c && !is_output.count(n->outputs[0])) folded.insert(n.get());
  }
  // A folded value is materialized when a kept node reads it.
  auto readers = rewrite::users(g);
  rewrite::GraphRewriter rw(g);
  int counter = 0;
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    if (!folded.count(&n)) {
      rw.copy_node(n);
      continue;
    }
    const Value* out = n.outputs[0];
    bool needed = false;
    for (const Node* u : readers[out]) needed = needed || !folded.count(u);
    if (!needed) continue;
    // The evaluator's value for `out` (recorded in evaluate()).
    const CVal* c = ev.constant(out);
    PTC_CHECK(c, "folded value %", out->name, " has no constant");
    TensorData td = materialize(*c, out->type);
    std::string target = rw.fresh_target("_folded_" + std::to_string(counter++));
    rw.replace(out, rw.add_constant(out->name, target, std::move(td), /*source_name=*/true));
  }
  return rw.finish();
}

}  // namespace ptc
