// Shape rules: matrix products, convolutions, attention.
#include <variant>

#include "shape_rules.h"

namespace ptc::shape {
namespace {

// Two sizes that must agree (a contraction dim, a channel count).
void check_same(const Ctx& c, Expr a, Expr b, const char* what, const Type& ta, const Type& tb) {
  if ((a.is_const() && b.is_const() && a != b) || sym::prove_ne(a, b))
    c.fail(what, " do not match: ", a.str(), " vs ", b.str(), " (", ta.str(), " and ", tb.str(), ")");
}

void check_dtype(const Ctx& c, const Type& a, const Type& b) {
  if (a.dtype != b.dtype)
    c.fail("expects operands of one dtype, got ", dtype_name(a.dtype), " and ", dtype_name(b.dtype));
}

void check_rank(const Ctx& c, const Type& t, size_t rank, const char* what) {
  if (t.rank() != rank) c.fail(what, " must have rank ", rank, ", got ", t.str());
}

std::vector<Type> linear(Ctx& c) {
  const Type &x = c.tensor("input"), &w = c.tensor("weight");
  if (x.rank() < 1) c.fail("input must have rank >= 1, got ", x.str());
  if (w.rank() != 1 && w.rank() != 2) c.fail("weight must have rank 1 or 2, got ", w.str());
  check_dtype(c, x, w);
  check_same(c, x.sizes.back(), w.sizes.back(), "input features and weight columns", x, w);
  Exprs out(x.sizes.begin(), x.sizes.end() - 1);
  if (w.rank() == 2) out.push_back(w.sizes[0]);
  if (const Type* b = c.opt_tensor("bias")) broadcast_shapes(c, out, b->sizes);
  return {make_contiguous(x, x.dtype, out)};
}

std::vector<Type> matmul(Ctx& c) {
  const Type &a = c.tensor("self"), &b = c.tensor("other");
  size_t d1 = a.rank(), d2 = b.rank();
  if (d1 == 0 || d2 == 0) c.fail("both arguments must have rank >= 1, got ", a.str(), " and ", b.str());
  check_dtype(c, a, b);
  Expr k2 = d2 == 1 ? b.sizes[0] : b.sizes[d2 - 2];
  check_same(c, a.sizes.back(), k2, "the contracted sizes", a, b);
  Exprs batch_a = d1 > 2 ? Exprs(a.sizes.begin(), a.sizes.end() - 2) : Exprs{};
  Exprs batch_b = d2 > 2 ? Exprs(b.sizes.begin(), b.sizes.end() - 2) : Exprs{};
  Exprs out = broadcast_shapes(c, batch_a, batch_b);
  if (d1 > 1) out.push_back(a.sizes[d1 - 2]);
  if (d2 > 1) out.push_back(b.sizes[d2 - 1]);
  return {make_contiguous(a, a.dtype, out)};
}

std::vector<Type> mm(Ctx& c) {
  const Type &a = c.tensor("self"), &b = c.tensor("mat2");
  check_rank(c, a, 2, "self");
  check_rank(c, b, 2, "mat2");
  check_dtype(c, a, b);
  check_same(c, a.sizes[1], b.sizes[0], "the contracted sizes", a, b);
  return {make_contiguous(a, a.dtype, {a.sizes[0], b.sizes[1]})};
}

Exprs bmm_sizes(const Ctx& c, const Type& a, const Type& b) {
  check_rank(c, a, 3, "the first batch");
  check_rank(c, b, 3, "the second batch");
  check_dtype(c, a, b);
  check_same(c, a.sizes[0], b.sizes[0], "the batch sizes", a, b);
  check_same(c, a.sizes[2], b.sizes[1], "the contracted sizes", a, b);
  return {a.sizes[0], a.sizes[1], b.sizes[2]};
}

std::vector<Type> bmm(Ctx& c) {
  const Type &a = c.tensor("self"), &b = c.tensor("mat2");
  return {make_contiguous(a, a.dtype, bmm_sizes(c, a, b))};
}

std::vector<Type> addmm(Ctx& c) {
  const Type &s = c.tensor("self"), &a = c.tensor("mat1"), &b = c.tensor("mat2");
  check_rank(c, a, 2, "mat1");
  check_rank(c, b, 2, "mat2");
  check_dtype(c, a, b);
  check_same(c, a.sizes[1], b.sizes[0], "the contracted sizes", a, b);
  Exprs out{a.sizes[0], b.sizes[1]};
  Exprs bc = broadcast_shapes(c, s.sizes, out);
  if (bc.size() != 2) c.fail("self ", s.str(), " does not broadcast to ", sizes_str(out));
  return {make_contiguous(a, a.dtype, out)};
}

std::vector<Type> baddbmm(Ctx& c) {
  const Type &s = c.tensor("self"), &a = c.tensor("batch1"), &b = c.tensor("batch2");
  Exprs out = bmm_sizes(c, a, b);
  if (broadcast_shapes(c, s.sizes, out).size() != 3)
    c.fail("self ", s.str(), " does not broadcast to ", sizes_str(out));
  return {make_contiguous(a, a.dtype, out)};
}

// ---- convolution

// A per-spatial-dim list argument (a single value broadcasts).
Exprs spatial(const Ctx& c, const char* name, size_t nd) {
  Exprs v = c.syms(name);
  if (v.size() == 1 && nd > 1) v.assign(nd, v[0]);
  if (v.size() != nd) c.fail("argument '", name, "' must have ", nd, " entries, got ", sizes_str(v));
  return v;
}

std::vector<Type> conv(Ctx& c, bool transposed, const char* output_padding) {
  const Type &x = c.tensor("input"), &w = c.tensor("weight");
  if (w.rank() < 3) c.fail("weight must have rank >= 3, got ", w.str());
  size_t nd = w.rank() - 2;
  bool batched = x.rank() == nd + 2;
  if (!batched && x.rank() != nd + 1)
    c.fail("expects a ", nd + 1, "-d (unbatched) or ", nd + 2, "-d (batched) input for a ", w.rank(), "-d weight, got ",
           x.str());
  check_dtype(c, x, w);
  int64_t groups = c.int_("groups");
  if (groups <= 0) c.fail("groups must be positive, got ", groups);
  size_t cdim = batched ? 1 : 0;
  Expr cin = x.sizes[cdim], cout;
  if (transposed) {
    check_same(c, cin, w.sizes[0], "input channels and weight.size(0)", x, w);
    cout = w.sizes[1] * groups;
  } else {
    check_same(c, cin, w.sizes[1] * groups, "input channels and weight.size(1) * groups", x, w);
    cout = w.sizes[0];
  }
  Exprs stride = spatial(c, "stride", nd), dilation = spatial(c, "dilation", nd);
  const Arg& pad_arg = c.arg("padding");
  std::string pad_mode;
  if (auto s = std::get_if<std::string>(&pad_arg)) pad_mode = *s;
  Exprs padding = pad_mode.empty() ? spatial(c, "padding", nd) : Exprs(nd, Expr(0));
  Exprs opad = transposed && output_padding ? spatial(c, output_padding, nd) : Exprs(nd, Expr(0));
  Exprs out;
  if (batched) out.push_back(x.sizes[0]);
  out.push_back(cout);
  for (size_t i = 0; i < nd; ++i) {
    Expr in = x.sizes[cdim + 1 + i], k = w.sizes[2 + i];
    Expr s = stride[i], d = dilation[i], p = padding[i];
    if (sym::prove_le(s, 0)) c.fail("stride must be positive, got ", sizes_str(stride));
    Expr o;
    if (pad_mode == "same") {
      o = in;
    } else if (transposed) {
      o = (in - 1) * s - 2 * p + d * (k - 1) + opad[i] + 1;
    } else {
      o = sym::floordiv(in + 2 * p - d * (k - 1) - 1, s) + 1;
    }
    if (sym::prove_le(o, 0))
      c.fail("the output would be empty: input ", x.str(), " with kernel ", w.str(), ", stride ", sizes_str(stride),
             ", padding ", sizes_str(padding), " and dilation ", sizes_str(dilation), " gives size ", o.str());
    out.push_back(o);
  }
  if (const Type* b = c.opt_tensor("bias")) {
    if (b->rank() != 1) c.fail("bias must have rank 1, got ", b->str());
    check_same(c, b->sizes[0], cout, "bias size and output channels", *b, w);
  }
  MemoryFormat fmt = MemoryFormat::Contiguous;
  if (batched && (x.rank() == 4 || x.rank() == 5)) {
    MemoryFormat fx = suggest_memory_format(x), fw = suggest_memory_format(w);
    if (fx != MemoryFormat::Contiguous)
      fmt = fx;
    else if (fw != MemoryFormat::Contiguous)
      fmt = fw;
  }
  Exprs strides = format_strides(out, fmt);
  return {make_tensor(x, x.dtype, out, strides)};
}

std::vector<Type> conv_nd(Ctx& c) { return conv(c, false, nullptr); }
std::vector<Type> convolution(Ctx& c) { return conv(c, c.bool_("transposed"), "output_padding"); }
std::vector<Type> conv_transpose(Ctx& c) { return conv(c, true, "output_padding"); }

// ptc::conv2d_input_grad: input_size, grad_output's dtype, contiguous.
std::vector<Type> conv2d_input_grad(Ctx& c) {
  const Type &g = c.tensor("grad_output"), &w = c.tensor("weight");
  if (g.rank() != 4 || w.rank() != 4) c.fail("expects rank-4 grad_output and weight, got ", g.str(), " and ", w.str());
  check_dtype(c, g, w);
  Exprs size = c.syms("input_size");
  if (size.size() != 4) c.fail("input_size must have 4 entries, got ", sizes_str(size));
  if (c.int_("groups") <= 0) c.fail("groups must be positive, got ", c.int_("groups"));
  spatial(c, "stride", 2), spatial(c, "padding", 2), spatial(c, "dilation", 2);
  return {make_contiguous(g, g.dtype, size)};
}

// ptc::conv2d_weight_grad: [grad_output.size(1), input.size(1) / groups, KH, KW], contiguous.
std::vector<Type> conv2d_weight_grad(Ctx& c) {
  const Type &x = c.tensor("input"), &g = c.tensor("grad_output");
  if (x.rank() != 4 || g.rank() != 4) c.fail("expects rank-4 input and grad_output, got ", x.str(), " and ", g.str());
  check_dtype(c, x, g);
  int64_t groups = c.int_("groups");
  if (groups <= 0) c.fail("groups must be positive, got ", groups);
  Exprs k = spatial(c, "kernel_size", 2);
  spatial(c, "stride", 2), spatial(c, "padding", 2), spatial(c, "dilation", 2);
  return {make_contiguous(x, x.dtype, {g.sizes[1], sym::floordiv(x.sizes[1], Expr(groups)), k[0], k[1]})};
}

// ---- attention

bool last_stride_one(const Type& t) { return is_one(t.sizes.back()) || sym::prove_eq(t.strides.back(), 1); }

// Output strides: torch's CPU flash kernel allocates empty_like(query); the math fallback
// returns a contiguous matmul. Flash is chosen for 4-d inputs with equal head dims and heads,
// unit last strides, no dropout and a mask (if any) that does not require grad.
Exprs attention_strides(const Ctx& c, const Type& q, const Type& k, const Type& v, const Exprs& out) {
  const Type* mask = c.opt_tensor("attn_mask");
  bool flash = c.node.kind == OpKind::UnderscoreScaledDotProductFlashAttentionForCpu;
  flash = flash ||
          (q.rank() == 4 && k.rank() == 4 && v.rank() == 4 && sym::prove_eq(q.sizes[3], v.sizes[3]) &&
           sym::prove_eq(q.sizes[1], k.sizes[1]) && last_stride_one(q) && last_stride_one(k) && last_stride_one(v) &&
           dtype_is_float(q.dtype) && c.float_("dropout_p") == 0 && !(mask && mask->requires_grad));
  if (!flash) return dense_strides(out);
  Type like = q;
  like.sizes = out;
  return empty_like_strides(like, MemoryFormat::Preserve);
}

Exprs attention_sizes(const Ctx& c, const Type& q, const Type& k, const Type& v) {
  if (q.rank() < 2 || k.rank() < 2 || v.rank() < 2)
    c.fail("query, key and value must have rank >= 2, got ", q.str(), ", ", k.str(), " and ", v.str());
  check_same(c, q.sizes.back(), k.sizes.back(), "query and key head sizes", q, k);
  check_same(c, k.sizes[k.rank() - 2], v.sizes[v.rank() - 2], "key and value sequence lengths", k, v);
  Exprs out(q.sizes.begin(), q.sizes.end() - 1);
  out.push_back(v.sizes.back());
  return out;
}

std::vector<Type> sdpa(Ctx& c) {
  const Type &q = c.tensor("query"), &k = c.tensor("key"), &v = c.tensor("value");
  Exprs out = attention_sizes(c, q, k, v);
  return {make_tensor(q, q.dtype, out, attention_strides(c, q, k, v, out))};
}

std::vector<Type> flash_cpu(Ctx& c) {
  const Type &q = c.tensor("query"), &k = c.tensor("key"), &v = c.tensor("value");
  check_rank(c, q, 4, "query");
  Exprs out = attention_sizes(c, q, k, v);
  Type o = make_tensor(q, q.dtype, out, attention_strides(c, q, k, v, out));
  // logsumexp: empty([N, L, H]).transpose(1, 2)
  Expr n = q.sizes[0], h = q.sizes[1], l = q.sizes[2];
  Type lse = make_tensor(q, DType::Float32, {n, h, l}, {l * h, 1, h});
  return {o, lse};
}

// nn.MultiheadAttention's fused inference path (batch first): the projected attention output
// [B, T, E] and, with need_weights, the attention probabilities averaged over the heads
// [B, T, S] or per head [B, H, T, S] (without: an undefined tensor, here an empty one).
std::vector<Type> native_mha(Ctx& c) {
  const Type &q = c.tensor("query"), &k = c.tensor("key"), &v = c.tensor("value");
  check_rank(c, q, 3, "query");
  check_rank(c, k, 3, "key");
  check_rank(c, v, 3, "value");
  int64_t e = c.int_("embed_dim"), h = c.int_("num_head");
  if (h <= 0 || e % h != 0) c.fail("embed_dim ", e, " is not a multiple of num_head ", h);
  check_same(c, q.sizes[2], Expr(e), "query's last size and embed_dim", q, q);
  check_same(c, k.sizes[1], v.sizes[1], "key and value sequence lengths", k, v);
  Type out = make_contiguous(q, q.dtype, q.sizes);
  if (!c.bool_("need_weights")) return {out, make_contiguous(q, q.dtype, {Expr(0)})};
  Exprs w = c.bool_("average_attn_weights") ? Exprs{q.sizes[0], q.sizes[1], k.sizes[1]}
                                             : Exprs{q.sizes[0], Expr(h), q.sizes[1], k.sizes[1]};
  return {out, make_contiguous(q, q.dtype, w)};
}

}  // namespace

void add_linalg_rules(RuleTable& t) {
  using K = OpKind;
  set_rule(t, K::Linear, linear);
  set_rule(t, K::Matmul, matmul);
  set_rule(t, K::Mm, mm);
  set_rule(t, K::Bmm, bmm);
  set_rule(t, K::Addmm, addmm);
  set_rule(t, K::Baddbmm, baddbmm);
  for (K k : {K::Conv1d, K::Conv2d, K::Conv3d}) set_rule(t, k, conv_nd);
  set_rule(t, K::Convolution, convolution);
  set_rule(t, K::PtcConv2dWeightGrad, conv2d_weight_grad);
  set_rule(t, K::PtcConv2dInputGrad, conv2d_input_grad);
  set_rule(t, K::UnderscoreConvolution, convolution);
  set_rule(t, K::ConvTranspose2dInput, conv_transpose);
  set_rule(t, K::ScaledDotProductAttention, sdpa);
  set_rule(t, K::UnderscoreScaledDotProductFlashAttentionForCpu, flash_cpu);
  set_rule(t, K::UnderscoreNativeMultiHeadAttention, native_mha);
}

}  // namespace ptc::shape
