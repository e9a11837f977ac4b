// Extern lowerings: GEMM (linear, addmm, mm, bmm, matmul), convolution, and attention as GEMMs
// around a softmax (the fused flash-style kernel comes later).
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "lower_internal.h"

namespace ptc::loop {
namespace {

std::vector<TensorRef> one(TensorRef t) { return {std::move(t)}; }

TensorRef transpose_last(Lowering& L, const TensorRef& x) {
  std::vector<int64_t> perm(x.rank());
  for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return permute(L, x, perm);
}

TensorRef add_bias(Lowering& L, const TensorRef& y, const TensorRef& bias, DType dt, ExprRef beta = nullptr) {
  return map2(L, y, bias, dt, [dt, beta](ExprRef p, ExprRef q) {
    q = cast(q, dt);
    if (beta) q = binary(Op::Mul, q, beta);
    return binary(Op::Add, p, q);
  });
}

// matmul with torch's rank rules.
TensorRef matmul(Lowering& L, TensorRef a, TensorRef b, DType dt, const Index& out_sizes) {
  bool a1 = a.rank() == 1, b1 = b.rank() == 1;
  if (a1) a = reshape(L, a, {1, a.sizes[0]});
  if (b1) b = reshape(L, b, {b.sizes[0], 1});
  if (b.rank() == 2 && a.rank() > 2) {  // fold a's batch dims into M
    Index s = a.sizes;
    sym::Expr m = 1;
    for (size_t d = 0; d + 1 < s.size(); ++d) m = m * s[d];
    TensorRef y = gemm(L, reshape(L, a, {m, s.back()}), b, dt);
    return reshape(L, y, out_sizes);
  }
  Index ba(a.sizes.begin(), a.sizes.end() - 2), bb(b.sizes.begin(), b.sizes.end() - 2);
  auto batch = broadcast_shapes(ba, bb);
  if (!batch) L.fail("matmul batch dimensions do not broadcast");
  Index sa = *batch, sb = *batch;
  sa.insert(sa.end(), a.sizes.end() - 2, a.sizes.end());
  sb.insert(sb.end(), b.sizes.end() - 2, b.sizes.end());
  TensorRef y = gemm(L, L.broadcast_to(a, sa), L.broadcast_to(b, sb), dt);
  return reshape(L, y, out_sizes);
}

// dy [N, O, OH, OW] regrouped to [G, O/G, N, OH, OW]: per group, the positions of every image in
// a row (the inner dimension of the convolution gradients' GEMMs).
TensorRef regroup(Lowering& L, const TensorRef& g, int64_t G) {
  const Index& s = g.sizes;
  return permute(L, reshape(L, g, {s[0], sym::Expr(G), sym::floordiv(s[1], sym::Expr(G)), s[2], s[3]}), {1, 2, 0, 3, 4});
}
// The same, realized densely.
TensorRef by_group(Lowering& L, const TensorRef& g, int64_t G) { return L.realize(regroup(L, g, G), L.origin()); }

// cuDNN's operands (LowerOptions::cudnn_conv): one element type throughout, float32 or (where
// library_ops_f32 left the convolution in half precision: Backend::half_native) bfloat16 /
// float16; the weight contiguous (a filter descriptor is packed), the others any view without
// broadcast (zero) strides.
bool cudnn_types(const Lowering& L, std::initializer_list<DType> dts) {
  if (!L.options.cudnn_conv) return false;
  const DType first = *dts.begin();
  if (first != DType::Float32 && !dtype_is_half(first)) return false;
  for (DType d : dts)
    if (d != first) return false;
  return true;
}
// (channels_last) A forward convolution in NHWC: cuDNN's types (CUDA), or float32 or bfloat16
// throughout (the CPU's oneDNN path; bfloat16 where library_ops_f32 left the convolution so:
// Backend::half_native).
bool nhwc_conv_types(const Lowering& L, std::initializer_list<DType> dts) {
  if (!L.options.channels_last) return false;
  if (L.options.cudnn_conv) return cudnn_types(L, dts);
  const DType first = *dts.begin();
  if (first != DType::Float32 && first != DType::BFloat16) return false;
  for (DType d : dts)
    if (d != first) return false;
  return true;
}
View dense_view(Lowering& L, const TensorRef& t) {
  return t.view && t.view->dense() ? *t.view : *L.realize(t, L.origin(), /*keep_layout=*/false).view;
}
// A KRSC weight ([O, C/g, KH, KW] stored O, KH, KW, C/g: channels_last_weights) as it is, else dense.
// (channels_last) The input of an NHWC convolution: cuDNN's NHWC kernels want x NHWC as well (it
// has no algorithm for an NCHW x with an NHWC y), so anything else is stored NHWC first: the
// model's input image is transposed once, as torch's x.contiguous(memory_format=channels_last).
View nhwc_input(Lowering& L, const TensorRef& x) {
  if (x.view && x.view->channels_last()) return *x.view;
  if (!x.view && L.reads_nhwc(x)) {
    TensorRef r = L.realize(x, L.origin());
    if (r.view && r.view->channels_last()) return *r.view;
  }
  TensorRef stored = L.realize(permute(L, x, {0, 2, 3, 1}), L.origin(), /*keep_layout=*/false);
  PTC_CHECK(stored.view, "a realized tensor is no view");
  L.nhwc_buffers.insert(stored.view->buffer);
  return *L.nhwc_view(stored.view->buffer, x.dtype).view;
}
View filter_view(Lowering& L, const TensorRef& w) {
  return L.options.channels_last && w.view && w.view->channels_last() ? *w.view : dense_view(L, w);
}
// Whether cuDNN takes a view as it is stored: no broadcast (zero) strides, and the batch
// dimension (`batch`: 0 of [N, C, H, W], 2 of a regrouped [G, C/G, N, H, W]) outermost, above
// every other dimension's extent (NCHW, NHWC, or a channel slice of either). cuDNN found no
// algorithm for a transposed convolution's input stored [C, N, H, W] (a group norm's output,
// normalized per channel).
bool cudnn_layout(const View& v, size_t batch) {
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    auto st = v.strides[d].as_const(), n = v.sizes[d].as_const();
    if (st && *st == 0 && !(n && *n == 1)) return false;
  }
  if (batch >= v.sizes.size() || v.sizes[batch] == sym::Expr(1)) return true;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (d == batch || v.sizes[d] == sym::Expr(1)) continue;
    try {
      if (!sym::prove_ge(v.strides[batch] - v.strides[d] * v.sizes[d], sym::Expr(0))) return false;
    } catch (const std::exception&) {
      return false;
    }
  }
  return true;
}
// A cuDNN operand: the tensor's view where cuDNN takes it, else stored densely (NCHW).
View cudnn_view(Lowering& L, const TensorRef& t) {
  View v = L.as_view(t, L.origin());
  return cudnn_layout(v, 0) ? v : dense_view(L, t);
}
// The regrouping [G, C/G, N, H, W] of g as a view (cuDNN merges the groups and channels back into
// its strides), of g stored densely where g's own layout is not one cuDNN takes.
View group_view(Lowering& L, const TensorRef& g, int64_t G) {
  View v = L.as_view(regroup(L, g, G), L.origin());
  if (cudnn_layout(v, 2)) return v;
  return L.as_view(regroup(L, L.realize(g, L.origin(), /*keep_layout=*/false), G), L.origin());
}

}  // namespace

namespace {

// A convolution's attributes from its (two-element) stride, padding and dilation.
ConvAttrs conv_attrs(const std::vector<int64_t>& st, const std::vector<int64_t>& pd, const std::vector<int64_t>& dl, int64_t groups,
                     bool nhwc = false) {
  ConvAttrs c;
  c.stride = {st[0], st[1]};
  c.padding = {pd[0], pd[1]};
  c.dilation = {dl[0], dl[1]};
  c.groups = groups;
  c.nhwc = nhwc;
  return c;
}

}  // namespace

TensorRef emit_extern(Lowering& L, ExternKind kind, DType dt, const Index& out, std::vector<View> operands,
                      std::optional<ExternAttrs> attrs) {
  int buf = L.new_buffer("buf", dt, out);
  Computation c;
  c.kind = Computation::Kind::Extern;
  c.extern_kind = kind;
  c.out = buf;
  c.domain = out;
  c.operands = std::move(operands);
  c.attrs = attrs ? std::move(*attrs) : default_attrs(kind);
  PTC_CHECK(attrs_match(kind, c.attrs), "extern ", extern_name(kind), " built with another kind's attributes");
  L.emit(std::move(c));
  return L.of_view(View{buf, out, L.prog_.buffers[buf].strides, 0}, dt);
}

namespace {

// softmax(q k^T * scale + mask) v over the last two dimensions. A bool mask keeps the positions
// where it is true (bool_mask_keeps, as scaled_dot_product_attention) or where it is false (the
// fused multi-head attention's convention); a float mask is added to the scores. A query row
// whose keys are all masked gives zeros when masked_rows_zero (scaled_dot_product_attention's
// "safe softmax" since torch 2.5), else NaN (the fused multi-head attention, a plain softmax).
// With need_probs false and LowerOptions::fused_attention, one fused attention extern (probs
// is then empty); otherwise GEMMs around a softmax.
struct Attention {
  TensorRef out;
  std::optional<TensorRef> probs;
};
// kv_group > 1 (rank 4): grouped-query attention, k and v with H / kv_group heads, query head h
// reading head h / kv_group.
Attention attention(Lowering& L, const TensorRef& q, const TensorRef& k, const TensorRef& v, std::optional<TensorRef> mask,
                    bool bool_mask_keeps, bool causal, double scale, DType compute, bool masked_rows_zero,
                    bool need_probs = false, int64_t kv_group = 1);

// A GEMM operand's view. A computed tensor read with its last two dims swapped (x^T of a weight
// gradient) is stored in its own order and read through swapped strides: the GEMM takes either
// layout, and storing the transpose would read its producers with a stride along the row.
View gemm_operand(Lowering& L, const TensorRef& t) {
  const size_t r = t.rank();
  if (!t.view && t.permuted_from && r >= 2 && t.perm.size() == r) {
    bool swap_last = t.perm[r - 2] == static_cast<int64_t>(r - 1) && t.perm[r - 1] == static_cast<int64_t>(r - 2);
    for (size_t d = 0; d + 2 < r; ++d) swap_last = swap_last && t.perm[d] == static_cast<int64_t>(d);
    if (swap_last) {
      TensorRef src = L.realize(*t.permuted_from, L.origin(), /*keep_layout=*/false);
      if (src.view && src.view->sizes.size() == r) {
        View v = *src.view;
        std::swap(v.sizes[r - 2], v.sizes[r - 1]);
        std::swap(v.strides[r - 2], v.strides[r - 1]);
        if (v.sizes == t.sizes) return v;
      }
    }
  }
  return L.as_view(t, L.origin());
}

// repeat_kv as transformers writes it: x [B, Hkv, T, D] -> unsqueeze(x, 2) -> expand to
// [B, Hkv, g, T, D] (-> clone, in the Core ATen form) -> reshape / view / _unsafe_view to
// [B, Hkv * g, T, D]; returns x and sets *group to g when `v` is that, else nullptr.
struct GroupedHeads {
  const Value *k = nullptr, *v = nullptr;
  int64_t group = 1;
};
const Value* repeated_heads(const Value* v, int64_t* group) {
  auto producer = [](const Value* x, std::initializer_list<OpKind> kinds) -> const Node* {
    if (!x || !x->producer) return nullptr;
    for (OpKind k : kinds)
      if (x->producer->kind == k) return x->producer;
    return nullptr;
  };
  auto first = [](const Node* n) { return std::get<Value*>(n->args.at(0)); };
  const Node* r = producer(v, {OpKind::Reshape, OpKind::View, OpKind::UnderscoreUnsafeView});
  const Value* ex = r ? first(r) : nullptr;
  if (const Node* c = producer(ex, {OpKind::Clone, OpKind::Contiguous})) ex = first(c);  // (Core ATen: clone + _unsafe_view)
  const Node* e = producer(ex, {OpKind::Expand});
  const Node* u = e ? producer(first(e), {OpKind::Unsqueeze}) : nullptr;
  if (!u) return nullptr;
  const Value* x = first(u);
  const Type &xt = x->type, &et = e->outputs[0]->type, &vt = v->type;
  const Arg* dim = u->arg("dim");
  if (xt.rank() != 4 || et.rank() != 5 || vt.rank() != 4 || !dim || !std::holds_alternative<int64_t>(*dim) || std::get<int64_t>(*dim) != 2)
    return nullptr;
  auto g = et.sizes[2].as_const();
  if (!g || *g < 1 || !(et.sizes[1] == xt.sizes[1]) || !(vt.sizes[1] == xt.sizes[1] * *g)) return nullptr;
  for (size_t d : {size_t(0), size_t(2), size_t(3)})
    if (!(vt.sizes[d] == xt.sizes[d]) || !(et.sizes[d == 0 ? 0 : d + 1] == xt.sizes[d])) return nullptr;
  *group = *g;
  return x;
}
std::optional<GroupedHeads> grouped_heads(Lowering& L, const Node& n) {
  const Arg *ka = n.arg("key"), *va = n.arg("value");
  if (!ka || !va || !std::holds_alternative<Value*>(*ka) || !std::holds_alternative<Value*>(*va)) return std::nullopt;
  GroupedHeads h;
  int64_t gk = 0, gv = 0;
  h.k = repeated_heads(std::get<Value*>(*ka), &gk);
  h.v = repeated_heads(std::get<Value*>(*va), &gv);
  if (!h.k || !h.v || gk != gv || gk < 2) return std::nullopt;
  (void)L;
  h.group = gk;
  return h;
}

}  // namespace

TensorRef gemm(Lowering& L, const TensorRef& a, const TensorRef& b, DType dt) {
  if (a.rank() < 2 || a.rank() != b.rank()) L.fail("GEMM operands must have equal rank >= 2");
  const sym::Expr& k1 = a.sizes.back();
  const sym::Expr& k2 = b.sizes[b.rank() - 2];
  if (!(k1 == k2)) L.fail("GEMM inner sizes differ: ", k1.str(), " and ", k2.str());
  TensorRef ac = a.dtype == dt ? a : map1(L, a, dt, [dt](ExprRef v) { return cast(v, dt); });
  TensorRef bc = b.dtype == dt ? b : map1(L, b, dt, [dt](ExprRef v) { return cast(v, dt); });
  Index out = a.sizes;
  out.back() = b.sizes.back();
  View va = gemm_operand(L, ac), vb = gemm_operand(L, bc);
  GemmAttrs attrs;
  // (bfloat16 where library_ops_f32 left a linear layer so: Backend::half_native)
  attrs.library = L.options.library_gemm && out.size() == 2 && (dt == DType::Float32 || dt == DType::BFloat16) &&
                  L.prog_.buffers[vb.buffer].kind == Buffer::Kind::Weight && L.prog_.buffers[vb.buffer].dtype == dt;
  return emit_extern(L, ExternKind::Gemm, dt, out, {std::move(va), std::move(vb)}, attrs);
}

namespace {

// The fused extern applies to q, k, v of rank 2..4 with equal leading dims (and head sizes up to
// max_fused_head when that is set), all float32 (computing in float32), or all of one half dtype
// where the backend's extern takes it (LowerOptions::half_attention).
bool fusable(const LowerOptions& o, const TensorRef& q, const TensorRef& k, const TensorRef& v, DType compute, int64_t kv_group) {
  if (compute != DType::Float32 || q.rank() < 2 || q.rank() > 4 || k.rank() != q.rank() || v.rank() != q.rank()) return false;
  if (o.max_fused_head > 0)
    for (const TensorRef* t : {&q, &v}) {
      auto head = t->sizes.back().as_const();
      if (!head || *head > o.max_fused_head) return false;
    }
  const DType dt = q.dtype;
  if (dt != DType::Float32 && !(o.half_attention && dtype_is_half(dt))) return false;
  for (const TensorRef* t : {&k, &v})
    if (t->dtype != dt) return false;
  if (kv_group > 1 && q.rank() != 4) return false;
  for (size_t d = 0; d + 2 < q.rank(); ++d) {
    const sym::Expr kd = d == 1 && kv_group > 1 ? k.sizes[d] * kv_group : k.sizes[d];
    const sym::Expr vd = d == 1 && kv_group > 1 ? v.sizes[d] * kv_group : v.sizes[d];
    if (!(q.sizes[d] == kd) || !(q.sizes[d] == vd)) return false;
  }
  return true;
}

// k / v of grouped-query attention as the query heads see them: head h is kv head h / group.
TensorRef expand_heads(Lowering& L, const TensorRef& t, const sym::Expr& heads, int64_t group) {
  Index sizes = t.sizes;
  sizes[1] = heads;
  return L.pointwise(t.dtype, sizes, [t, group](const Index& i) {
    return t.at({i[0], sym::floordiv(i[1], sym::Expr(group)), i[2], i[3]});
  });
}

// The largest g such that computed [B, H, T, D] tensor t is the heads of a [B, H / g, T, D]
// tensor each repeated g times (transformers' repeat_kv: expand and reshape, the rotary
// embedding applied before or after): its element at head h is its element at head
// (h / g) g. 1 where there is none (or t is a view).
int64_t repeated_heads(Lowering& L, const TensorRef& t) {
  auto heads = t.sizes[1].as_const();
  if (t.view || t.rank() != 4 || !heads) return 1;
  const Index vars = loop_vars(t.sizes);
  const std::string at = print_expr(L.prog_, t.at(vars));
  for (int64_t g = *heads; g > 1; --g) {
    if (*heads % g) continue;
    Index grouped = vars;
    grouped[1] = sym::floordiv(vars[1], sym::Expr(g)) * sym::Expr(g);
    if (print_expr(L.prog_, t.at(grouped)) == at) return g;
  }
  return 1;
}

// Heads 0, g, 2g, ... of t: the tensor whose heads t repeats g times.
TensorRef distinct_heads(Lowering& L, const TensorRef& t, int64_t g) {
  Index sizes = t.sizes;
  sizes[1] = sym::floordiv(sizes[1], sym::Expr(g));
  return L.pointwise(t.dtype, sizes, [t, g](const Index& i) { return t.at({i[0], i[1] * sym::Expr(g), i[2], i[3]}); });
}

Attention attention(Lowering& L, const TensorRef& q, const TensorRef& k, const TensorRef& v, std::optional<TensorRef> mask,
                    bool bool_mask_keeps, bool causal, double scale, DType compute, bool masked_rows_zero, bool need_probs,
                    int64_t kv_group) {
  const size_t r = q.rank();
  if (kv_group == 1 && r == 4 && L.options.fused_attention && !need_probs) {
    // k and v with their heads repeated (grouped-query attention written as repeat_kv) are read
    // as grouped-query attention: the repeated copies are not stored.
    const int64_t gk = repeated_heads(L, k), gv = gk > 1 ? repeated_heads(L, v) : 1;
    const int64_t g = std::gcd(gk, gv);
    if (g > 1) {
      TensorRef k1 = distinct_heads(L, k, g), v1 = distinct_heads(L, v, g);
      if (fusable(L.options, q, k1, v1, compute, g))
        return attention(L, q, k1, v1, mask, bool_mask_keeps, causal, scale, compute, masked_rows_zero, need_probs, g);
    }
  }
  // A mask computed from its indices alone is examined through its expression (stored_from where
  // it was stored for its several users; see Lowering::run).
  auto expression = [&]() -> TensorRef { return mask->stored_from ? *mask->stored_from : *mask; };
  if (mask) {  // a mask that keeps every position (HF BERT's, from an arange >= 0) is no mask
    const std::optional<double> u = uniform_value(expression());
    if (u && (mask->dtype == DType::Bool ? (*u != 0) == bool_mask_keeps : *u == 0)) mask.reset();
  }
  if (mask && mask->dtype == DType::Bool && bool_mask_keeps && r >= 2) {
    // A bool mask computed as key <= query from the indices alone (transformers' causal mask over
    // aranges of positions) is the causal flag: no mask read, and tiles past the diagonal skipped.
    Index ms(q.sizes.begin(), q.sizes.end() - 1);
    ms.push_back(k.sizes[r - 2]);
    const TensorRef mb = L.broadcast_to(expression(), ms);
    if (!mb.view) {
      const Index vars = loop_vars(ms);
      const ExprRef e = mb.at(vars);
      auto is_var = [](const ExprRef& x, const sym::Expr& v) { return x->op == Op::IndexVal && x->index == v; };
      const sym::Expr &key = vars[r - 1], &query = vars[r - 2];
      if ((e->op == Op::Le && is_var(e->args[0], key) && is_var(e->args[1], query)) ||
          (e->op == Op::Ge && is_var(e->args[0], query) && is_var(e->args[1], key))) {
        causal = true;
        mask.reset();
      }
    }
  }
  const bool fuse = L.options.fused_attention && !need_probs && fusable(L.options, q, k, v, compute, kv_group);
  if (kv_group > 1 && !fuse)
    return attention(L, q, expand_heads(L, k, q.sizes[1], kv_group), expand_heads(L, v, q.sizes[1], kv_group), mask, bool_mask_keeps,
                     causal, scale, compute, masked_rows_zero, need_probs);
  if (fuse) {
    std::vector<View> ops{L.as_view(q, L.origin()), L.as_view(k, L.origin()), L.as_view(v, L.origin())};
    int64_t kind = 0;  // ptc_rt::kMaskNone / Keep / Drop / Add
    if (mask) {
      Index ms(q.sizes.begin(), q.sizes.end() - 1);
      ms.push_back(k.sizes[r - 2]);
      TensorRef m = *mask;
      if (m.dtype == DType::Bool) {
        kind = bool_mask_keeps ? 1 : 2;
      } else {
        kind = 3;
        if (m.dtype != DType::Float32) m = map1(L, m, DType::Float32, [](ExprRef e) { return cast(e, DType::Float32); });
      }
      ops.push_back(L.as_view(L.broadcast_to(m, ms), L.origin()));
    }
    Index out(q.sizes.begin(), q.sizes.end() - 1);
    out.push_back(v.sizes[r - 1]);
    AttentionAttrs attrs;
    attrs.mask_kind = kind;
    attrs.causal = causal;
    attrs.scale = scale;
    attrs.masked_rows_zero = masked_rows_zero;
    attrs.kv_group = kv_group;
    if (r == 4 && L.options.attention_layout_like_q) {  // q's dims by stride: [B, T, H, D] or [T, B, H, D]
      const std::vector<sym::Expr>& s = ops[0].strides;
      const bool h_inner = sym::prove_le(s[3], s[1]) && sym::prove_le(s[1], s[2]) && sym::prove_le(s[1], s[0]);
      attrs.time_outer = h_inner && sym::prove_le(s[0], s[2]);
      attrs.heads_inner = h_inner && !attrs.time_outer && sym::prove_le(s[2], s[0]);
    } else if (r == 4 && L.options.attention_heads_inner) {
      attrs.heads_inner = true;
    }
    if (attrs.heads_inner)  // stored [B, T, H, Dv], returned as [B, H, T, Dv]
      return {permute(L, emit_extern(L, ExternKind::Attention, q.dtype, {out[0], out[2], out[1], out[3]}, std::move(ops), attrs),
                      {0, 2, 1, 3}),
              std::nullopt};
    if (attrs.time_outer)  // stored [T, B, H, Dv], returned as [B, H, T, Dv]
      return {permute(L, emit_extern(L, ExternKind::Attention, q.dtype, {out[2], out[0], out[1], out[3]}, std::move(ops), attrs),
                      {1, 2, 0, 3}),
              std::nullopt};
    return {emit_extern(L, ExternKind::Attention, q.dtype, out, std::move(ops), attrs), std::nullopt};
  }
  TensorRef s = gemm(L, q, transpose_last(L, k), compute);
  if (mask) mask = L.broadcast_to(*mask, s.sizes);
  PTC_CHECK(s.rank() == r, "attention scores have rank ", s.rank());
  const double ninf = -std::numeric_limits<double>::infinity();
  TensorRef scores = L.pointwise(compute, s.sizes, [=](const Index& idx) {
    ExprRef e = binary(Op::Mul, s.at(idx), constant(scale, compute));
    if (mask) {
      ExprRef m = mask->at(idx);
      if (mask->dtype == DType::Bool)
        e = bool_mask_keeps ? select(m, e, constant(ninf, compute)) : select(m, constant(ninf, compute), e);
      else
        e = binary(Op::Add, e, cast(m, compute));
    }
    if (causal) e = select(binary(Op::Le, index_value(idx[r - 1]), index_value(idx[r - 2])), e, constant(ninf, compute));
    return e;
  });
  TensorRef p = softmax(L, scores, static_cast<int64_t>(r - 1), false, compute);
  if (masked_rows_zero) {  // rows whose scores are all -inf: zeros instead of softmax's NaN
    TensorRef mx = L.reduce(scores, {static_cast<int64_t>(r - 1)}, true, ReduceOp::Max, compute, L.origin());
    TensorRef soft = p;
    p = L.pointwise(compute, soft.sizes, [=](const Index& idx) {
      Index row = idx;
      row[r - 1] = sym::Expr(0);
      return select(binary(Op::Eq, mx.at(row), constant(ninf, compute)), constant(0, compute), soft.at(idx));
    });
  }
  return {gemm(L, p, v, compute), p};
}

// A convolution's input gradient dx [xs] (= the transposed convolution of g): per group the
// columns W_g^T [Cg KH KW, Og] x dy_g [Og, N OH OW] (dy regrouped densely to [G, Og, N, OH, OW]),
// then each input element gathers the columns of the taps that reach it: ih = oh s - p + kh d,
// i.e. (ih + p - kh d) divisible by s.
TensorRef conv_input_grad(Lowering& L, const TensorRef& g, const TensorRef& w, const std::vector<int64_t>& st,
                          const std::vector<int64_t>& pd, const std::vector<int64_t>& dl, int64_t G, const Index& xs, DType dt) {
  auto kh_ = w.sizes[2].as_const(), kw_ = w.sizes[3].as_const();
  if (!kh_ || !kw_) L.fail("a convolution's input gradient needs a static kernel size");
  const int64_t KH = *kh_, KW = *kw_;
  if (cudnn_types(L, {dt, w.dtype, g.dtype}))
    return emit_extern(L, ExternKind::ConvInputGrad, dt, xs, {dense_view(L, w), group_view(L, g, G)}, conv_attrs(st, pd, dl, G));
  const sym::Expr N = xs[0], OH = g.sizes[2], OW = g.sizes[3], Og = sym::floordiv(g.sizes[1], sym::Expr(G)), Cg = w.sizes[1];
  if (!L.options.conv_as_gemm && Og == sym::Expr(1) && Cg == sym::Expr(1) && dt == DType::Float32 && w.dtype == DType::Float32 &&
      g.dtype == DType::Float32) {
    // Depthwise (the columns' GEMM would have depth 1): ptc_conv.h's direct kernel, reading dy
    // through its strides.
    return emit_extern(L, ExternKind::ConvInputGrad, dt, xs, {L.as_view(w, L.origin()), L.as_view(regroup(L, g, G), L.origin())},
                       conv_attrs(st, pd, dl, G));
  }
  TensorRef gg = by_group(L, g, G);
  TensorRef wt = transpose_last(L, reshape(L, w, {sym::Expr(G), Og, Cg * (KH * KW)}));  // [G, Cg KH KW, Og]
  TensorRef cols = gemm(L, wt, reshape(L, gg, {sym::Expr(G), Og, N * OH * OW}), dt);
  TensorRef c7 = reshape(L, cols, {sym::Expr(G), Cg, sym::Expr(KH), sym::Expr(KW), N, OH, OW});
  auto iv = [](const sym::Expr& e) { return index_value(e); };
  return L.pointwise(dt, xs, [=](const Index& i) {
    ExprRef total = constant(0, dt);
    const sym::Expr gi = sym::floordiv(i[1], Cg), ci = sym::mod(i[1], Cg);
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw) {
        const sym::Expr th = i[2] + (pd[0] - kh * dl[0]), tw = i[3] + (pd[1] - kw * dl[1]);
        const sym::Expr oh = sym::floordiv(th, sym::Expr(st[0])), ow = sym::floordiv(tw, sym::Expr(st[1]));
        ExprRef ok = binary(Op::And, binary(Op::Ge, iv(th), iv(0)), binary(Op::Ge, iv(tw), iv(0)));
        if (st[0] > 1) ok = binary(Op::And, ok, binary(Op::Eq, iv(sym::mod(th, sym::Expr(st[0]))), iv(0)));
        if (st[1] > 1) ok = binary(Op::And, ok, binary(Op::Eq, iv(sym::mod(tw, sym::Expr(st[1]))), iv(0)));
        ok = binary(Op::And, ok, binary(Op::And, binary(Op::Lt, iv(oh), iv(OH)), binary(Op::Lt, iv(ow), iv(OW))));
        total = binary(Op::Add, total, where(ok, cast(c7.at({gi, ci, sym::Expr(kh), sym::Expr(kw), i[0], oh, ow}), dt), constant(0, dt)));
      }
    return total;
  });
}

}  // namespace

Lowered lower_extern(Lowering& L, const Node& n, const Args& a) {
  switch (n.kind) {
    case OpKind::Linear: {
      TensorRef x = a.tensor("input"), w = a.tensor("weight");
      DType dt = a.out_dtype();
      Index out = a.out_sizes();
      sym::Expr m = 1;
      for (size_t d = 0; d + 1 < x.rank(); ++d) m = m * x.sizes[d];
      TensorRef y = gemm(L, reshape(L, x, {m, x.sizes.back()}), transpose_last(L, w), dt);
      if (!a.is_none("bias")) y = add_bias(L, y, a.tensor("bias"), dt);
      return one(reshape(L, y, out));
    }
    case OpKind::Addmm: case OpKind::Baddbmm: {
      DType dt = a.out_dtype();
      TensorRef y = gemm(L, a.tensor(n.kind == OpKind::Addmm ? "mat1" : "batch1"), a.tensor(n.kind == OpKind::Addmm ? "mat2" : "batch2"), dt);
      ExprRef alpha = a.scalar("alpha", dt), beta = a.scalar("beta", dt);
      if (!(alpha->op == Op::Const && alpha->value == 1))
        y = map1(L, y, dt, [alpha](ExprRef v) { return binary(Op::Mul, v, alpha); });
      if (beta->op == Op::Const && beta->value == 0) return one(y);
      return one(add_bias(L, y, a.tensor("self"), dt, beta->op == Op::Const && beta->value == 1 ? nullptr : beta));
    }
    case OpKind::Mm: return one(gemm(L, a.tensor("self"), a.tensor("mat2"), a.out_dtype()));
    case OpKind::Bmm: return one(gemm(L, a.tensor("self"), a.tensor("mat2"), a.out_dtype()));
    case OpKind::Matmul: return one(matmul(L, a.tensor("self"), a.tensor("other"), a.out_dtype(), a.out_sizes()));
    case OpKind::Conv2d: case OpKind::Convolution: case OpKind::UnderscoreConvolution: {
      TensorRef x = a.tensor("input"), w = a.tensor("weight");
      if (x.rank() != 4) L.fail("ptc supports 2-D convolution (rank-4 input) so far");
      if (n.kind != OpKind::Conv2d && a.b("transposed")) L.fail("transposed convolution is not supported yet");
      auto st = two(a.ints("stride"), 1), pd = two(a.ints("padding"), 0), dl = two(a.ints("dilation"), 1);
      auto kh = w.sizes[2].as_const(), kw = w.sizes[3].as_const();
      // y + bias[o] as a pointwise op, which fuses into y's consumers (a folded batch norm's
      // bias then costs no pass of its own).
      auto plus_bias = [&](const TensorRef& y) {
        if (a.is_none("bias")) return y;
        TensorRef b = a.tensor("bias");
        const DType ydt = y.dtype;
        return L.pointwise(ydt, y.sizes, [=](const Index& i) { return binary(Op::Add, y.at(i), cast(b.at({i[1]}), ydt)); });
      };
      const Index out = a.out_sizes();
      const DType dt = a.out_dtype();
      // A convolution run as the GEMM [N OH OW, K] x [K, O]: its row-major result is the NHWC
      // output, read back as [N, O, OH, OW].
      auto nhwc_gemm = [&](View lhs, View rhs) {
        TensorRef y = emit_extern(L, ExternKind::Gemm, dt, {out[0] * out[2] * out[3], out[1]}, {std::move(lhs), std::move(rhs)},
                                  GemmAttrs{true});
        PTC_CHECK(y.view, "a GEMM result is no buffer");
        L.nhwc_buffers.insert(y.view->buffer);
        L.nhwc_shapes[y.view->buffer] = {out[0], out[2], out[3], out[1]};
        return one(plus_bias(L.nhwc_view(y.view->buffer, dt)));
      };
      const bool patchify = a.i("groups") == 1 && kh && kw && *kh * *kw > 1 && st[0] == *kh && st[1] == *kw && pd[0] == 0 && pd[1] == 0 &&
                            dl[0] == 1 && dl[1] == 1;
      if (nhwc_conv_types(L, {a.out_dtype(), x.dtype, w.dtype})) {
        const int64_t groups = a.i("groups");
        if (L.options.cudnn_conv && groups == 1 && kh == 1 && kw == 1 && st[0] == 1 && st[1] == 1 && pd[0] == 0 && pd[1] == 0) {
          // (CUDA) A 1x1 convolution is a GEMM over the NHWC activations: [N H W, C] x W^T [C, O]
          // (cuBLASLt, whose bias / residual / ReLU epilogues fuse as cuDNN's do). Its row-major
          // [N H W, O] result is the NHWC output. (The CPU runs it on oneDNN, whose 1x1 kernels
          // beat ptc's GEMM on resnet50's: 0.32 against 0.41 ms for 64 -> 256 channels on 56x56.)
          const View xv = nhwc_input(L, x), wv = filter_view(L, w);
          const sym::Expr m = out[0] * out[2] * out[3];
          // Dense NHWC (channels_last()): element (n, h, w, c) is at ((n H + h) W + w) C + c,
          // whatever strides its size-1 dimensions carry (a keepdim reduction's [N, C, 1, 1]).
          return nhwc_gemm(View{xv.buffer, {m, x.sizes[1]}, {x.sizes[1], sym::Expr(1)}, xv.offset},
                           View{wv.buffer, {w.sizes[1], w.sizes[0]}, {wv.strides[1], wv.strides[0]}, wv.offset});
        }
        // (On the CPU only in float32: its library GEMMs take float32 tensors.)
        if (patchify && (L.options.cudnn_conv || dt == DType::Float32) && w.view && w.view->channels_last() &&
            w.view->strides[0] == w.sizes[1] * (*kh * *kw)) {
          // A patchify convolution (stride = kernel, no padding: ViT's patch embedding) is a GEMM
          // over its non-overlapping patches: cols [N OH OW, KH KW C], gathered once with the
          // channel fastest, times the KRSC weight read as [KH KW C, O].
          const sym::Expr C = x.sizes[1], plane = out[2] * out[3], m = out[0] * plane, k = C * (*kh * *kw);
          const int64_t KH = *kh, KW = *kw;
          TensorRef cols = L.pointwise(dt, {m, k}, [=](const Index& i) {
            const sym::Expr n = sym::floordiv(i[0], plane), l = sym::mod(i[0], plane);
            const sym::Expr tap = sym::floordiv(i[1], C), c = sym::mod(i[1], C);
            return cast(x.at({n, c, sym::floordiv(l, out[3]) * KH + sym::floordiv(tap, sym::Expr(KW)),
                              sym::mod(l, out[3]) * KW + sym::mod(tap, sym::Expr(KW))}),
                        dt);
          });
          return nhwc_gemm(L.as_view(cols, L.origin()), View{w.view->buffer, {k, out[1]}, {sym::Expr(1), k}, w.view->offset});
        }
        if (L.options.cudnn_conv && groups > 1 && w.sizes[1] == sym::Expr(1) && kh && kw && x.sizes[1] == sym::Expr(groups)) {
          // (CUDA; the CPU runs oneDNN's NHWC depthwise kernels, which beat these generated taps
          // many times over there) A depthwise convolution as a pointwise computation over its KH x KW taps: it reads
          // its input through whatever computes it (a folded batch norm and activation of the
          // GEMM before it fuse into its loads) and is stored NHWC by its consumer's realize, so
          // the network stays NHWC (cuDNN's grouped NHWC kernels are slow; docs/cuda.md).
          auto mult = w.sizes[0].as_const();
          if (!mult || *mult % groups != 0) L.fail("a depthwise convolution needs a static channel multiplier");
          const int64_t per = *mult / groups;
          // Each input element is read by KH x KW taps: an input that is cheap to compute (a
          // folded batch norm and ReLU6 of the GEMM before it) is recomputed by each, one that
          // is not (EfficientNet's SiLU: 9 or 25 sigmoids per output) is stored once first,
          // NHWC like the GEMM it reads.
          x = stored_if_costly(L, x, L.origin(), /*max_loads=*/2, /*transcendental_ok=*/false, /*keep_layout=*/true);
          const sym::Expr H = x.sizes[2], W = x.sizes[3];
          auto iv = [](const sym::Expr& e) { return index_value(e); };
          TensorRef y = L.pointwise(dt, out, [=](const Index& i) {
            ExprRef total;
            const sym::Expr c = per == 1 ? i[1] : sym::floordiv(i[1], sym::Expr(per));
            for (int64_t r = 0; r < *kh; ++r)
              for (int64_t q = 0; q < *kw; ++q) {
                const sym::Expr ih = i[2] * st[0] + (r * dl[0] - pd[0]), iw = i[3] * st[1] + (q * dl[1] - pd[1]);
                ExprRef ok;
                auto both = [&ok](ExprRef e) { ok = ok ? binary(Op::And, ok, e) : e; };
                if (r * dl[0] - pd[0] < 0) both(binary(Op::Ge, iv(ih), iv(0)));
                if (q * dl[1] - pd[1] < 0) both(binary(Op::Ge, iv(iw), iv(0)));
                if (!sym::prove_ge(H - 1, ih)) both(binary(Op::Lt, iv(ih), iv(H)));
                if (!sym::prove_ge(W - 1, iw)) both(binary(Op::Lt, iv(iw), iv(W)));
                ExprRef tap = binary(Op::Mul, cast(x.at({i[0], c, ih, iw}), dt), cast(w.at({i[1], sym::Expr(0), sym::Expr(r), sym::Expr(q)}), dt));
                if (ok) tap = where(ok, tap, constant(0, dt));
                total = total ? binary(Op::Add, total, tap) : tap;
              }
            return total;
          });
          return one(plus_bias(y));
        }
        // NHWC: the result is stored [N, OH, OW, O] (ConvAttrs::nhwc) and read back as [N, O, OH,
        // OW]; an input computed from NHWC buffers is realized NHWC (Lowering::realize).
        std::vector<View> operands{nhwc_input(L, x), filter_view(L, w)};
        TensorRef y = emit_extern(L, ExternKind::Convolution, a.out_dtype(), {out[0], out[2], out[3], out[1]}, std::move(operands),
                                  conv_attrs(st, pd, dl, a.i("groups"), /*nhwc=*/true));
        PTC_CHECK(y.view, "a convolution result is no buffer");
        L.nhwc_buffers.insert(y.view->buffer);
        return one(plus_bias(L.nhwc_view(y.view->buffer, a.out_dtype())));
      }
      if (cudnn_types(L, {a.out_dtype(), x.dtype, w.dtype}) && patchify && w.view && w.view->dense()) {
        // NCHW, a patchify convolution (ViT's patch embedding; cuDNN's exact kernels took 76 us
        // for ViT-S's at batch 8 on an H200): the GEMM over its patches, cols [N OH OW, C KH KW]
        // gathered once in the KCRS weight's order, times the weight read as [C KH KW, O]. Its
        // NHWC result is what a ViT reads next ([N, OH OW, O] after flatten and transpose).
        const sym::Expr C = x.sizes[1], plane = out[2] * out[3], m = out[0] * plane, k = C * (*kh * *kw);
        const int64_t KH = *kh, KW = *kw;
        TensorRef cols = L.pointwise(dt, {m, k}, [=](const Index& i) {
          const sym::Expr n = sym::floordiv(i[0], plane), l = sym::mod(i[0], plane);
          const sym::Expr c = sym::floordiv(i[1], sym::Expr(KH * KW)), tap = sym::mod(i[1], sym::Expr(KH * KW));
          return cast(x.at({n, c, sym::floordiv(l, out[3]) * KH + sym::floordiv(tap, sym::Expr(KW)),
                            sym::mod(l, out[3]) * KW + sym::mod(tap, sym::Expr(KW))}),
                      dt);
        });
        return nhwc_gemm(L.as_view(cols, L.origin()), View{w.view->buffer, {k, out[1]}, {sym::Expr(1), k}, w.view->offset});
      }
      if (cudnn_types(L, {a.out_dtype(), x.dtype, w.dtype})) {
        std::vector<View> operands{cudnn_view(L, x), dense_view(L, w)};
        return one(plus_bias(emit_extern(L, ExternKind::Convolution, a.out_dtype(), a.out_sizes(), std::move(operands),
                                         conv_attrs(st, pd, dl, a.i("groups")))));
      }
      if (L.options.conv_as_gemm && a.i("groups") == 1 && kh && kw && a.out_dtype() == DType::Float32 && x.dtype == DType::Float32 &&
          w.dtype == DType::Float32) {
        // One GEMM for the whole batch: Y [O, N OH OW] = W [O, C KH KW] x cols [C KH KW, N OH OW]
        // (the im2col columns of every image side by side, gathered once; a 1x1 stride-1
        // convolution gathers x itself), then y[n, o, l] = Y[o, n L + l] as a strided view.
        const Index out = a.out_sizes();
        const sym::Expr ckk = x.sizes[1] * (*kh * *kw), l = out[2] * out[3], nl = x.sizes[0] * l;
        TensorRef per_image = im2col(L, x, {*kh, *kw}, {dl[0], dl[1]}, {pd[0], pd[1]}, {st[0], st[1]}, {x.sizes[0], ckk, l}, DType::Float32);
        TensorRef cols = L.pointwise(DType::Float32, {ckk, nl}, [per_image, l](const Index& i) {
          return per_image.at({sym::floordiv(i[1], l), i[0], sym::mod(i[1], l)});
        });
        TensorRef ym = gemm(L, reshape(L, w, {w.sizes[0], ckk}), cols, DType::Float32);  // [O, N L]
        PTC_CHECK(ym.view, "conv as GEMM: the GEMM result is no buffer");
        View v{ym.view->buffer, out, {l, nl, out[3], sym::Expr(1)}, ym.view->offset};
        return one(plus_bias(L.of_view(v, DType::Float32)));
      }
      std::vector<View> operands{L.as_view(x, L.origin()), L.as_view(w, L.origin())};
      if (!a.is_none("bias")) operands.push_back(L.as_view(a.tensor("bias"), L.origin()));
      return one(emit_extern(L, ExternKind::Convolution, a.out_dtype(), a.out_sizes(), std::move(operands),
                             conv_attrs(st, pd, dl, a.i("groups"))));
    }
    case OpKind::PtcConv2dWeightGrad: {
      // dw [O, Cg, KH, KW]: per group, dy_g [Og, N OH OW] times the im2col columns transposed.
      // Both walk the positions of every image: dy is regrouped densely to [G, Og, N, OH, OW].
      TensorRef x = a.tensor("input"), g = a.tensor("grad_output");
      auto k = two(a.ints("kernel_size"), 1), st = two(a.ints("stride"), 1), pd = two(a.ints("padding"), 0),
           dl = two(a.ints("dilation"), 1);
      const int64_t G = a.i("groups");
      const Index out = a.out_sizes();
      const DType dt = a.out_dtype();
      const sym::Expr N = x.sizes[0], OH = g.sizes[2], OW = g.sizes[3], Og = sym::floordiv(g.sizes[1], sym::Expr(G));
      if (cudnn_types(L, {dt, x.dtype, g.dtype}))
        return one(emit_extern(L, ExternKind::ConvWeightGrad, dt, out, {cudnn_view(L, x), group_view(L, g, G)},
                               conv_attrs(st, pd, dl, G)));
      if (!L.options.conv_as_gemm && dt == DType::Float32 && x.dtype == DType::Float32 && g.dtype == DType::Float32) {
        // Ungrouped over planes of 1024+ positions: dy as the forward wrote it ([N, O, OH, OW]
        // contiguous; the runtime takes one GEMM per image), not regrouped by a copy.
        const auto P = (OH * OW).as_const();
        if (G == 1 && P && *P >= 1024) {
          View v = L.as_view(regroup(L, g, 1), L.origin());  // [1, O, N, OH, OW]
          if (v.nchw_as_one_group())
            return one(emit_extern(L, ExternKind::ConvWeightGrad, dt, out, {L.as_view(x, L.origin()), v},
                                   conv_attrs(st, pd, dl, G)));
        }
        TensorRef gg = by_group(L, g, G);
        return one(emit_extern(L, ExternKind::ConvWeightGrad, dt, out, {L.as_view(x, L.origin()), *gg.view},
                               conv_attrs(st, pd, dl, G)));
      }
      TensorRef gg = by_group(L, g, G);
      // The columns, realized [G, Cg KH KW, N, OH, OW] (the gather reads along input rows), and
      // one GEMM per group taking them transposed (a strided view).
      const sym::Expr ckk = out[1] * out[2] * out[3], nl = N * OH * OW;
      TensorRef cols = im2col(L, x, {k[0], k[1]}, {dl[0], dl[1]}, {pd[0], pd[1]}, {st[0], st[1]}, {N, x.sizes[1] * k[0] * k[1], OH * OW}, dt);
      TensorRef cg = L.realize(permute(L, reshape(L, cols, {N, sym::Expr(G), ckk, OH, OW}), {1, 2, 0, 3, 4}), L.origin());
      TensorRef y = gemm(L, reshape(L, gg, {sym::Expr(G), Og, nl}), transpose_last(L, reshape(L, cg, {sym::Expr(G), ckk, nl})), dt);
      return one(reshape(L, y, out));
    }
    case OpKind::PtcConv2dInputGrad: {
      auto st = two(a.ints("stride"), 1), pd = two(a.ints("padding"), 0), dl = two(a.ints("dilation"), 1);
      return one(conv_input_grad(L, a.tensor("grad_output"), a.tensor("weight"), st, pd, dl, a.i("groups"), a.out_sizes(),
                                 a.out_dtype()));
    }
    case OpKind::ConvTranspose2dInput: {
      // The transposed convolution of x with w [C_in, C_out / groups, KH, KW] is the input
      // gradient of the convolution by w whose output gradient is x (output_padding only lengthens
      // the result: conv_input_grad gives the positions no tap reaches zero).
      TensorRef x = a.tensor("input"), w = a.tensor("weight");
      if (x.rank() != 4) L.fail("ptc supports 2-D transposed convolution (rank-4 input) so far");
      auto st = two(a.ints("stride"), 1), pd = two(a.ints("padding"), 0), dl = two(a.ints("dilation"), 1);
      const DType dt = a.out_dtype();
      TensorRef y = conv_input_grad(L, x, w, st, pd, dl, a.i("groups"), a.out_sizes(), dt);
      if (a.is_none("bias")) return one(y);
      TensorRef bias = a.tensor("bias");
      return one(L.pointwise(dt, y.sizes, [=](const Index& i) { return binary(Op::Add, y.at(i), cast(bias.at({i[1]}), dt)); }));
    }
    case OpKind::ScaledDotProductAttention: case OpKind::UnderscoreScaledDotProductFlashAttentionForCpu: {
      TensorRef q = a.tensor("query"), k = a.tensor("key"), v = a.tensor("value");
      if (a.f("dropout_p") != 0) L.fail("attention dropout is not supported for inference compiles");
      int64_t group = 1;
      if (n.arg("enable_gqa") && a.b("enable_gqa")) {  // k / v with fewer heads than q
        std::optional<int64_t> hq, hk;
        if (q.rank() == 4 && k.rank() == 4) {
          hq = q.sizes[1].as_const();
          hk = k.sizes[1].as_const();
        }
        if (!hq || !hk || *hk <= 0 || *hq % *hk) L.fail("grouped-query attention needs 4-d q, k, v with a whole number of query heads per key head");
        group = *hq / *hk;
      } else if (auto src = grouped_heads(L, n)) {  // k, v repeated over each head group (transformers' repeat_kv)
        k = L.ref(src->k);
        v = L.ref(src->v);
        group = src->group;
      }
      DType dt = a.out_dtype();
      DType compute = dtype_size(dt) < 4 ? DType::Float32 : dt;
      double scale = a.is_none("scale") ? 1.0 / std::sqrt(static_cast<double>(q.sizes.back().as_const().value_or(0))) : a.f("scale");
      if (a.is_none("scale") && !q.sizes.back().as_const()) L.fail("attention with a symbolic head size needs an explicit scale");
      std::optional<TensorRef> mask;
      if (!a.is_none("attn_mask")) mask = a.tensor("attn_mask");
      TensorRef out = attention(L, q, k, v, mask, /*bool_mask_keeps=*/true, a.b("is_causal"), scale, compute, /*masked_rows_zero=*/true,
                                /*need_probs=*/false, group)
                          .out;
      if (out.dtype != dt) out = map1(L, out, dt, [dt](ExprRef e) { return cast(e, dt); });
      if (n.outputs.size() == 1) return one(out);
      Lowering* lp = &L;
      return std::vector<TensorRef>{out, L.pointwise(DType::Float32, a.out_sizes(1), [lp](const Index&) -> ExprRef {
                                      lp->fail("the logsumexp output of attention is not supported yet");
                                    })};
    }
    case OpKind::UnderscoreNativeMultiHeadAttention: {
      // nn.MultiheadAttention's fused inference path: in-projections from the three row blocks
      // of qkv_weight, heads split, attention, heads merged, out-projection.
      TensorRef q = a.tensor("query"), k = a.tensor("key"), v = a.tensor("value");
      int64_t e = a.i("embed_dim"), h = a.i("num_head"), d = e / h;
      DType dt = a.out_dtype();
      DType compute = dtype_size(dt) < 4 ? DType::Float32 : dt;
      TensorRef w = a.tensor("qkv_weight"), b = a.tensor("qkv_bias");
      auto project = [&](const TensorRef& x, int64_t part) {  // [B, T, E] -> [B, H, T, D]
        sym::Expr bt = x.sizes[0] * x.sizes[1];
        TensorRef wp = narrow(L, w, 0, part * e, 1, e), bp = narrow(L, b, 0, part * e, 1, e);
        TensorRef y = add_bias(L, gemm(L, reshape(L, x, {bt, e}), transpose_last(L, wp), compute), bp, compute);
        return permute(L, reshape(L, y, {x.sizes[0], x.sizes[1], h, d}), {0, 2, 1, 3});
      };
      std::optional<TensorRef> mask;
      if (!a.is_none("mask")) {
        TensorRef m = a.tensor("mask");
        // As torch's fused path: any mask becomes bool, true = masked out.
        if (m.dtype != DType::Bool) m = map1(L, m, DType::Bool, [](ExprRef x) { return binary(Op::Ne, x, constant(0.0, x->dtype)); });
        // mask_type 1: a key padding mask [B, S]; 0 ([T, S]) and 2 (full) broadcast as they are.
        if (!a.is_none("mask_type") && a.i("mask_type") == 1) {
          if (m.rank() != 2) L.fail("a key padding mask (mask_type 1) must be [batch, source length]");
          m = reshape(L, m, {m.sizes[0], 1, 1, m.sizes[1]});
        }
        mask = m;
      }
      const bool need_weights = a.b("need_weights");
      Attention att = attention(L, project(q, 0), project(k, 1), project(v, 2), mask, /*bool_mask_keeps=*/false, false,
                                1.0 / std::sqrt(static_cast<double>(d)), compute, /*masked_rows_zero=*/false, need_weights);
      TensorRef merged = reshape(L, permute(L, att.out, {0, 2, 1, 3}), {q.sizes[0] * q.sizes[1], e});
      TensorRef out = add_bias(L, gemm(L, merged, transpose_last(L, a.tensor("proj_weight")), compute), a.tensor("proj_bias"), compute);
      out = reshape(L, out, {q.sizes[0], q.sizes[1], e});
      if (compute != dt) out = map1(L, out, dt, [dt](ExprRef x) { return cast(x, dt); });
      TensorRef weights;
      if (!need_weights) {
        weights = L.pointwise(dt, a.out_sizes(1), [dt](const Index&) { return constant(0.0, dt); });
      } else if (a.b("average_attn_weights")) {
        TensorRef sum = L.reduce(*att.probs, {1}, false, ReduceOp::Sum, compute, L.origin());
        weights = map1(L, sum, dt, [h, dt, compute](ExprRef x) { return cast(binary(Op::Div, x, constant(static_cast<double>(h), compute)), dt); });
      } else {
        weights = att.probs->dtype == dt ? *att.probs : map1(L, *att.probs, dt, [dt](ExprRef x) { return cast(x, dt); });
      }
      return std::vector<TensorRef>{out, weights};
    }
    default: return std::nullopt;
  }
}

}  // namespace ptc::loop
