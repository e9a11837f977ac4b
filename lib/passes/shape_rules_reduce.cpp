// Shape rules: normalizations, softmax, reductions, cumsum, topk.
#include <algorithm>

#include "shape_rules.h"

namespace ptc::shape {
namespace {

void check_size(const Ctx& c, const Type* t, Expr want, const char* what) {
  if (!t) return;
  if (t->rank() != 1 || sym::prove_ne(t->sizes[0], want) ||
      (t->sizes[0].is_const() && want.is_const() && t->sizes[0] != want))
    c.fail(what, " must have size [", want.str(), "], got ", t->str());
}

// ---- normalizations

Expr channels(const Ctx& c, const Type& x) {
  if (x.rank() < 2) c.fail("input must have rank >= 2 (N, C, ...), got ", x.str());
  return x.sizes[1];
}

void check_bn_params(Ctx& c, const Type& x) {
  Expr ch = channels(c, x);
  check_size(c, c.opt_tensor("weight"), ch, "weight");
  check_size(c, c.opt_tensor("bias"), ch, "bias");
  check_size(c, c.opt_tensor("running_mean"), ch, "running_mean");
  check_size(c, c.opt_tensor("running_var"), ch, "running_var");
}

Type bn_out(const Type& x) { return make_tensor(x, x.dtype, x.sizes, empty_like_strides(x, MemoryFormat::Preserve)); }

std::vector<Type> batch_norm(Ctx& c) {
  const Type& x = c.tensor("input");
  check_bn_params(c, x);
  return {bn_out(x)};
}

std::vector<Type> native_batch_norm(Ctx& c) {
  const Type& x = c.tensor("input");
  check_bn_params(c, x);
  bool training = c.node.kind != OpKind::UnderscoreNativeBatchNormLegitNoTraining && c.bool_("training");
  Expr n = training ? x.sizes[1] : Expr(0);
  std::vector<Type> out{bn_out(x), make_contiguous(x, x.dtype, {n}), make_contiguous(x, x.dtype, {n})};
  if (c.node.kind == OpKind::UnderscoreNativeBatchNormLegitFunctional)  // the new running statistics
    for (const char* s : {"running_mean", "running_var"}) out.push_back(make_contiguous(c.tensor(s), c.tensor(s).dtype, c.tensor(s).sizes));
  return out;
}

// The number of leading (batch) dims of a layer norm over `normalized_shape`.
size_t check_normalized(Ctx& c, const Type& x, const Exprs& norm) {
  if (norm.empty()) c.fail("normalized_shape must not be empty");
  if (norm.size() > x.rank()) c.fail("normalized_shape ", sizes_str(norm), " has more dims than the input ", x.str());
  size_t lead = x.rank() - norm.size();
  for (size_t i = 0; i < norm.size(); ++i)
    if (sym::prove_ne(x.sizes[lead + i], norm[i]) ||
        (x.sizes[lead + i].is_const() && norm[i].is_const() && x.sizes[lead + i] != norm[i]))
      c.fail("input ", x.str(), " does not end with normalized_shape ", sizes_str(norm));
  for (const char* w : {"weight", "bias"}) {
    bool has = false;
    for (const auto& sa : c.node.op()->schema.args) has = has || sa.name == w;
    if (!has) continue;
    if (const Type* t = c.opt_tensor(w)) {
      bool ok = t->rank() == norm.size();
      for (size_t i = 0; ok && i < norm.size(); ++i) ok = !sym::prove_ne(t->sizes[i], norm[i]);
      if (!ok) c.fail(w, " ", t->str(), " must have normalized_shape ", sizes_str(norm));
    }
  }
  return lead;
}

std::vector<Type> layer_norm(Ctx& c) {  // also rms_norm: torch computes on input.contiguous()
  const Type& x = c.tensor("input");
  check_normalized(c, x, c.syms("normalized_shape"));
  return {make_contiguous(x, x.dtype, x.sizes)};
}

std::vector<Type> native_layer_norm(Ctx& c) {
  const Type& x = c.tensor("input");
  size_t lead = check_normalized(c, x, c.syms("normalized_shape"));
  Exprs stat(x.sizes.begin(), x.sizes.begin() + static_cast<long>(lead));
  stat.resize(x.rank(), Expr(1));
  return {make_contiguous(x, x.dtype, x.sizes), make_contiguous(x, x.dtype, stat), make_contiguous(x, x.dtype, stat)};
}

std::vector<Type> group_norm(Ctx& c) {
  const Type& x = c.tensor("input");
  Expr ch = channels(c, x);
  int64_t g = c.int_("num_groups");
  if (g <= 0) c.fail("num_groups must be positive, got ", g);
  if (sym::prove_ne(sym::mod(ch, Expr(g)), 0))
    c.fail("the channels (", ch.str(), ") are not divisible by num_groups ", g);
  check_size(c, c.opt_tensor("weight"), ch, "weight");
  check_size(c, c.opt_tensor("bias"), ch, "bias");
  return {make_tensor(x, x.dtype, x.sizes, format_strides(x.sizes, suggest_memory_format(x)))};
}

std::vector<Type> native_group_norm(Ctx& c) {
  const Type& x = c.tensor("input");
  Expr n = c.sym("N"), ch = c.sym("C"), hxw = c.sym("HxW");
  int64_t g = c.int_("group");
  if (g <= 0) c.fail("group must be positive, got ", g);
  if (sym::prove_ne(n * ch * hxw, numel(x.sizes)))
    c.fail("N*C*HxW = ", (n * ch * hxw).str(), " differs from the input's ", numel(x.sizes).str(), " elements");
  Type out = make_tensor(x, x.dtype, x.sizes, format_strides(x.sizes, suggest_memory_format(x)));
  return {out, make_contiguous(x, x.dtype, {n, g}), make_contiguous(x, x.dtype, {n, g})};
}

// ---- softmax

std::vector<Type> softmax(Ctx& c) {
  const Type& x = c.tensor("self");
  c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  DType dt = x.dtype;
  if (c.node.kind == OpKind::SoftmaxInt || c.node.kind == OpKind::LogSoftmaxInt) {
    if (auto d = c.opt_dtype("dtype")) dt = *d;
  } else if (c.bool_("half_to_float")) {
    dt = DType::Float32;
  }
  return {make_contiguous(x, dt, x.sizes)};
}

// ---- reductions

// The reduced dims (sorted, unique); none or empty means all.
std::vector<int64_t> reduce_dims(const Ctx& c, const Type& x, const std::optional<std::vector<int64_t>>& dims) {
  int64_t r = static_cast<int64_t>(x.rank());
  std::vector<int64_t> out;
  if (!dims || dims->empty()) {
    for (int64_t i = 0; i < r; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : *dims) {
    int64_t w = c.wrap_dim(d, r);
    if (std::find(out.begin(), out.end(), w) != out.end())
      c.fail("dim ", d, " appears more than once in the reduction");
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Exprs reduced_sizes(const Type& x, const std::vector<int64_t>& dims, bool keepdim) {
  Exprs out;
  for (size_t i = 0; i < x.rank(); ++i) {
    bool red = std::find(dims.begin(), dims.end(), static_cast<int64_t>(i)) != dims.end();
    if (!red)
      out.push_back(x.sizes[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

Type reduce(const Ctx& c, const Type& x, const std::optional<std::vector<int64_t>>& dims, bool keepdim, DType dt) {
  return make_contiguous(x, dt, reduced_sizes(x, reduce_dims(c, x, dims), keepdim));
}

DType sum_dtype(const Ctx& c, const Type& x) {
  if (auto d = c.opt_dtype("dtype")) return *d;
  return is_integral(x.dtype, true) ? DType::Int64 : x.dtype;
}

std::vector<Type> mean_dim(Ctx& c) {
  const Type& x = c.tensor("self");
  auto d = c.opt_dtype("dtype");
  if (!d && is_integral(x.dtype, true))
    c.fail("mean of a ", dtype_name(x.dtype), " tensor needs a floating dtype argument");
  return {reduce(c, x, c.opt_ints("dim"), c.bool_("keepdim"), d ? *d : x.dtype)};
}

std::vector<Type> mean_all(Ctx& c) {
  const Type& x = c.tensor("self");
  auto d = c.opt_dtype("dtype");
  if (!d && is_integral(x.dtype, true))
    c.fail("mean of a ", dtype_name(x.dtype), " tensor needs a floating dtype argument");
  return {make_contiguous(x, d ? *d : x.dtype, {})};
}

std::vector<Type> sum_dim(Ctx& c) {
  const Type& x = c.tensor("self");
  return {reduce(c, x, c.opt_ints("dim"), c.bool_("keepdim"), sum_dtype(c, x))};
}

std::vector<Type> sum_all(Ctx& c) {
  const Type& x = c.tensor("self");
  return {make_contiguous(x, sum_dtype(c, x), {})};
}

std::vector<Type> amax(Ctx& c) {
  const Type& x = c.tensor("self");
  return {reduce(c, x, c.ints("dim"), c.bool_("keepdim"), x.dtype)};
}

std::vector<Type> max_dim(Ctx& c) {
  const Type& x = c.tensor("self");
  std::vector<int64_t> d{c.int_("dim")};
  bool keep = c.bool_("keepdim");
  return {reduce(c, x, d, keep, x.dtype), reduce(c, x, d, keep, DType::Int64)};
}

std::vector<Type> argmax(Ctx& c) {
  const Type& x = c.tensor("self");
  bool keep = c.bool_("keepdim");
  auto d = c.opt_int("dim");
  if (!d) return {make_contiguous(x, DType::Int64, keep ? Exprs(x.rank(), Expr(1)) : Exprs{})};
  return {reduce(c, x, std::vector<int64_t>{*d}, keep, DType::Int64)};
}

DType real_of(DType t) {
  switch (t) {
    case DType::Complex32: return DType::Float16;
    case DType::Complex64: return DType::Float32;
    case DType::Complex128: return DType::Float64;
    default: return t;
  }
}

std::vector<Type> var(Ctx& c) {
  const Type& x = c.tensor("self");
  const OpKind k = c.node.kind;
  const bool is_std = k == OpKind::StdCorrection || k == OpKind::StdDim;
  if (is_integral(x.dtype, true)) c.fail(is_std ? "std" : "var", " needs a floating tensor, got ", x.str());
  Type v = reduce(c, x, c.opt_ints("dim"), c.bool_("keepdim"), real_of(x.dtype));
  if (k != OpKind::VarMeanCorrection && k != OpKind::VarMeanDim) return {v};
  Type m = v;
  m.dtype = x.dtype;
  return {v, m};
}

DType any_dtype(const Type& x) { return x.dtype == DType::UInt8 ? DType::UInt8 : DType::Bool; }

std::vector<Type> any_dim(Ctx& c) {  // any.dim, all.dim
  const Type& x = c.tensor("self");
  return {reduce(c, x, std::vector<int64_t>{c.int_("dim")}, c.bool_("keepdim"), any_dtype(x))};
}

std::vector<Type> any_dims(Ctx& c) {
  const Type& x = c.tensor("self");
  return {reduce(c, x, c.opt_ints("dim"), c.bool_("keepdim"), any_dtype(x))};
}

std::vector<Type> any_all(Ctx& c) {
  const Type& x = c.tensor("self");
  return {make_contiguous(x, any_dtype(x), {})};
}

std::vector<Type> cumsum(Ctx& c) {
  const Type& x = c.tensor("self");
  c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  return {make_contiguous(x, sum_dtype(c, x), x.sizes)};
}

std::vector<Type> topk(Ctx& c) {
  const Type& x = c.tensor("self");
  int64_t d = c.dim_arg("dim", static_cast<int64_t>(x.rank()));
  Expr k = c.sym("k");
  Expr size = x.rank() == 0 ? Expr(1) : x.sizes[static_cast<size_t>(d)];
  if (sym::prove_lt(k, 0) || sym::prove_gt(k, size))
    c.fail("k = ", k.str(), " is out of range for a dim of size ", size.str());
  Exprs out = x.sizes;
  if (x.rank() > 0) out[static_cast<size_t>(d)] = k;
  return {make_contiguous(x, x.dtype, out), make_contiguous(x, DType::Int64, out)};
}

// sort: values as self, int64 indices; argsort: the indices only.
std::vector<Type> sort(Ctx& c) {
  const Type& x = c.tensor("self");
  c.dim_arg("dim", static_cast<int64_t>(x.rank()));  // (checks the dim)
  if (c.node.kind == OpKind::Argsort || c.node.kind == OpKind::ArgsortStable) return {make_contiguous(x, DType::Int64, x.sizes)};
  return {make_contiguous(x, x.dtype, x.sizes), make_contiguous(x, DType::Int64, x.sizes)};
}

}  // namespace

void add_reduce_rules(RuleTable& t) {
  using K = OpKind;
  set_rule(t, K::BatchNorm, batch_norm);
  set_rule(t, K::UnderscoreNativeBatchNormLegitNoTraining, native_batch_norm);
  set_rule(t, K::NativeBatchNorm, native_batch_norm);
  set_rule(t, K::UnderscoreNativeBatchNormLegit, native_batch_norm);
  set_rule(t, K::UnderscoreNativeBatchNormLegitFunctional, native_batch_norm);
  set_rule(t, K::LayerNorm, layer_norm);
  set_rule(t, K::RmsNorm, layer_norm);
  set_rule(t, K::NativeLayerNorm, native_layer_norm);
  set_rule(t, K::GroupNorm, group_norm);
  set_rule(t, K::NativeGroupNorm, native_group_norm);
  for (K k : {K::SoftmaxInt, K::UnderscoreSoftmax, K::LogSoftmaxInt, K::UnderscoreLogSoftmax}) set_rule(t, k, softmax);
  set_rule(t, K::MeanDim, mean_dim);
  set_rule(t, K::SumDimIntList, sum_dim);
  set_rule(t, K::Sum, sum_all);
  set_rule(t, K::Mean, mean_all);
  set_rule(t, K::Amax, amax);
  set_rule(t, K::Amin, amax);
  set_rule(t, K::MaxDim, max_dim);
  for (K k : {K::Argmax, K::Argmin}) set_rule(t, k, argmax);
  set_rule(t, K::VarCorrection, var);
  set_rule(t, K::VarMeanCorrection, var);
  set_rule(t, K::StdCorrection, var);
  set_rule(t, K::VarDim, var);
  set_rule(t, K::VarMeanDim, var);
  set_rule(t, K::StdDim, var);
  set_rule(t, K::AnyDim, any_dim);
  set_rule(t, K::AllDim, any_dim);
  set_rule(t, K::AnyDims, any_dims);
  set_rule(t, K::Any, any_all);
  set_rule(t, K::Cumsum, cumsum);
  set_rule(t, K::Topk, topk);
  for (K k : {K::Sort, K::SortStable, K::Argsort, K::ArgsortStable}) set_rule(t, k, sort);
}

}  // namespace ptc::shape
