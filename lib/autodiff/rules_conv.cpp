// Derivatives of 2-d convolution and of batch norm with running statistics (eval mode).
//
// x: [N, C, H, W], w: [O, C/G, KH, KW], dy: [N, O, OH, OW]:
//   dW: ptc::conv2d_weight_grad, the im2col columns of the input times dy, one GEMM per group
//       whose inner dimension runs over the positions of every image.
//   dX: at stride 1 on images over 16x16, 1x1 and depthwise: a valid convolution of dy padded by
//       d (K - 1) - p before and what makes H rows after, by the flipped, per-group transposed
//       weight with dilation d (Winograd applies to 3x3); otherwise ptc::conv2d_input_grad, the
//       columns W^T dy (one GEMM per group) folded back onto the input (col2im as a gather), or
//       for a depthwise convolution a direct kernel.
//   db: dy summed over batch and positions.
// conv_transpose2d: dx = conv2d(dy, w), dW = ptc::conv2d_weight_grad(input dy, grad_output x).
// Batch norm in eval mode is an affine map per channel: dx = dy w / sqrt(var + eps),
// dw = sum(dy xhat), db = sum(dy).
#include "rules.h"

namespace ptc::autodiff {
namespace {

using sym::Expr;

// A convolution's 2-d window argument (stride, padding, dilation): {} -> {dflt, dflt}, {a} -> {a, a}.
std::vector<int64_t> pair(const GradContext& c, const char* name, int64_t dflt) {
  std::vector<int64_t> v = c.ints(name);
  if (v.empty()) v = {dflt};
  if (v.size() == 1) v.push_back(v[0]);
  return v;
}

// conv_transpose2d (y = the input gradient of a convolution by w whose output gradient is x):
// dx is that convolution of dy, dw its weight gradient with dy as the input and x as the output
// gradient, db dy summed over batch and positions.
void conv_transpose(GradContext& c) {
  Builder& b = c.b;
  Value *x = c.in("input"), *w = c.in("weight"), *g = c.grad();
  if (x->type.rank() != 4) c.fail("--train differentiates 2-d transposed convolutions (rank-4 input) only yet");
  auto s = pair(c, "stride", 1), p = pair(c, "padding", 0), d = pair(c, "dilation", 1);
  const int64_t G = c.integer("groups");
  const auto& ws = w->type.sizes;
  if (!ws[2].as_const() || !ws[3].as_const()) c.fail("--train needs a static weight shape");
  if (!c.is_none("bias")) c.add_grad(c.in("bias"), b.sum(g, {0, 2, 3}, false));
  if (c.needs(w))
    c.add_grad(w, b.op(OpKind::PtcConv2dWeightGrad, {{"input", g}, {"grad_output", x},
                                                     {"kernel_size", std::vector<int64_t>{*ws[2].as_const(), *ws[3].as_const()}},
                                                     {"stride", s}, {"padding", p}, {"dilation", d}, {"groups", G}}));
  if (c.needs(x))
    c.add_grad(x, b.op(OpKind::Conv2d, {{"input", g}, {"weight", w}, {"stride", std::vector<Expr>{s[0], s[1]}},
                                        {"padding", std::vector<Expr>{p[0], p[1]}}, {"dilation", std::vector<Expr>{d[0], d[1]}},
                                        {"groups", Expr(G)}}));
}

void convolution(GradContext& c) {
  Builder& b = c.b;
  Value *x = c.in("input"), *w = c.in("weight"), *g = c.grad();
  if (c.n.kind != OpKind::Conv2d && c.flag("transposed")) c.fail("--train does not differentiate transposed convolution yet");
  if (x->type.rank() != 4) c.fail("--train differentiates 2-d convolutions (rank-4 input) only yet");
  auto s = pair(c, "stride", 1), p = pair(c, "padding", 0), d = pair(c, "dilation", 1);
  const int64_t G = c.integer("groups");
  const auto& xs = x->type.sizes;
  const auto& ws = w->type.sizes;
  auto K = [&](int i) { return *ws[2 + i].as_const(); };
  if (!ws[0].as_const() || !ws[1].as_const() || !ws[2].as_const() || !ws[3].as_const()) c.fail("--train needs a static weight shape");
  const int64_t O = *ws[0].as_const(), Cg = *ws[1].as_const(), Og = O / G;
  // dy = g0 * f[o] with a factor per output channel (the backward of an eval-mode batch norm
  // after the convolution, dy = g w / sqrt(var + eps)): the factor moves onto the weight-sized
  // results instead, dW[o] = f[o] dW0[o], db = f sum(g0), dX = the input gradient by the weight
  // f[o] w[o], so the scaled dy is never stored (MobileNet: two passes over each activation).
  Value* f = nullptr;  // [O, 1, 1, 1]
  if (Node* pn = g->producer; pn && pn->kind == OpKind::MulTensor && pn->outputs.size() == 1) {
    const std::vector<Expr> per_channel{Expr(1), Expr(O), Expr(1), Expr(1)};
    auto tensor_arg = [pn](const char* name) -> Value* {
      const Arg* a = pn->arg(name);
      Value* const* v = a ? std::get_if<Value*>(a) : nullptr;
      return v && *v && (*v)->type.is_tensor() ? *v : nullptr;
    };
    for (int swap = 0; swap < 2; ++swap) {
      Value* fv = tensor_arg(swap ? "self" : "other");
      Value* gv = tensor_arg(swap ? "other" : "self");
      if (fv && gv && fv->type.sizes == per_channel &&
          gv->type.sizes == g->type.sizes && fv->type.dtype == g->type.dtype && gv->type.dtype == g->type.dtype) {
        f = b.reshape(fv, {Expr(O), Expr(1), Expr(1), Expr(1)});
        g = gv;
        break;
      }
    }
  }
  if (!c.is_none("bias")) {
    Value* db = b.sum(g, {0, 2, 3}, false);
    c.add_grad(c.in("bias"), f ? b.mul(db, b.reshape(f, {Expr(O)})) : db);
  }
  if (c.needs(w)) {
    // dW[o, c, kh, kw] = sum over images and positions of dy[n, o, l] im2col(x)[n, (c, kh, kw), l]
    // (ptc::conv2d_weight_grad: per group one GEMM whose inner dimension runs over every image's
    // positions; the CPU gathers the columns into the GEMM's panels, CUDA stores them once).
    Value* dw = b.op(OpKind::PtcConv2dWeightGrad, {{"input", x}, {"grad_output", g}, {"kernel_size", std::vector<int64_t>{K(0), K(1)}},
                                                   {"stride", s}, {"padding", p}, {"dilation", d}, {"groups", G}});
    c.add_grad(w, f ? b.mul(dw, f) : dw);
  }
  if (f) w = b.mul(w, f);  // the input gradient's weight
  if (c.needs(x)) {
    // At stride 1, as a convolution: input row i gets dy[oh] w[kh] for i = oh - p + kh d: dy
    // padded by d (K - 1) - p before and (H - its rows) + p after (the convolution's own padding
    // when the two are equal), then a valid convolution by the flipped kernel gives exactly H
    // rows (likewise columns). Taken on images over 16 x 16 (Winograd), for depthwise
    // convolutions (one channel in and out per group: the columns' GEMM would have depth 1), and
    // for 1x1 ones (a GEMM per image straight from dy, where the columns path regroups dy and
    // folds the result back: two extra passes over MobileNet's 14x14 and 7x7 activations).
    // Otherwise (strided, small images, symbolic sizes, padding beyond the dilated kernel)
    // ptc::conv2d_input_grad: the columns W^T dy folded back, or for a depthwise convolution a
    // direct kernel (the CPU) or cuDNN's; no multiply-adds on zeros stuffed between dy's elements.
    const auto hw = (xs[2] * xs[3]).as_const();
    const bool depthwise = Cg == 1 && Og == 1;
    const bool pointwise = K(0) == 1 && K(1) == 1 && s[0] == 1 && s[1] == 1 && p[0] == 0 && p[1] == 0;
    bool as_conv = (depthwise && s[0] == 1 && s[1] == 1) || pointwise || (s[0] == 1 && s[1] == 1 && hw && *hw > 256);
    Value* gs = g;
    Expr before[2], after[2];
    for (int i = 0; i < 2; ++i) {
      before[i] = Expr(d[i] * (K(i) - 1) - p[i]);
      after[i] = xs[2 + i] - gs->type.sizes[2 + i] + p[i];
      for (const Expr& e : {before[i], after[i]})
        if (!e.as_const() || *e.as_const() < 0) as_conv = false;
    }
    if (!as_conv) {
      c.add_grad(x, b.op(OpKind::PtcConv2dInputGrad, {{"grad_output", g}, {"weight", w}, {"input_size", std::vector<Expr>(xs.begin(), xs.end())},
                                                      {"stride", s}, {"padding", p}, {"dilation", d}, {"groups", G}}));
      return;
    }
    // Equal padding before and after (a "same" convolution at stride 1) is the convolution's own
    // padding, so dy is not copied into a padded buffer first.
    Value* gp = gs;
    std::vector<Expr> conv_pad{0, 0};
    if (before[0] == after[0] && before[1] == after[1])
      conv_pad = {before[0], before[1]};
    else if (*before[0].as_const() || *before[1].as_const() || *after[0].as_const() || *after[1].as_const())
      gp = b.op(OpKind::ConstantPadNd, {{"self", gs}, {"pad", std::vector<Expr>{before[1], after[1], before[0], after[0]}}});
    Value* wt = b.reshape(b.permute(b.reshape(w, {Expr(G), Expr(Og), Expr(Cg), Expr(K(0)), Expr(K(1))}), {0, 2, 1, 3, 4}),
                          {Expr(G * Cg), Expr(Og), Expr(K(0)), Expr(K(1))});
    wt = b.op(OpKind::Flip, {{"self", wt}, {"dims", std::vector<int64_t>{2, 3}}});
    c.add_grad(x, b.op(OpKind::Conv2d, {{"input", gp}, {"weight", wt}, {"stride", std::vector<Expr>{1, 1}},
                                         {"padding", conv_pad}, {"dilation", std::vector<Expr>{d[0], d[1]}},
                                         {"groups", Expr(G)}}));
  }
}

void batch_norm_eval(GradContext& c) {
  Builder& b = c.b;
  if (c.n.kind != OpKind::UnderscoreNativeBatchNormLegitNoTraining && c.flag("training"))
    c.fail("--train does not differentiate batch norm in training mode yet (batch statistics); export the model in eval mode");
  if (c.n.outputs.size() > 1 && (c.grad(1) || c.grad(2))) c.fail("--train does not differentiate batch norm's saved statistics");
  Value *x = c.in("input"), *w = c.in("weight"), *rm = c.in("running_mean"), *rv = c.in("running_var"), *g = c.grad();
  if (!rm || !rv) c.fail("batch norm without running statistics in eval mode");
  const size_t r = x->type.rank();
  std::vector<Expr> cshape(r, Expr(1));
  cshape[1] = x->type.sizes[1];
  std::vector<int64_t> red{0};
  for (size_t i = 2; i < r; ++i) red.push_back(static_cast<int64_t>(i));
  Value* rstd = b.reshape(b.op(OpKind::Rsqrt, {{"self", b.add_scalar(rv, c.number("eps"))}}), cshape);
  if (c.needs(x)) c.add_grad(x, b.mul(g, w ? b.mul(rstd, b.reshape(w, cshape)) : rstd));
  if (w && c.needs(w)) {
    Value* xhat = b.mul(b.sub(x, b.reshape(rm, cshape)), rstd);
    c.add_grad(w, b.sum(b.mul(g, xhat), red, false));
  }
  if (c.needs(c.in("bias"))) c.add_grad(c.in("bias"), b.sum(g, red, false));
}

}  // namespace

void register_conv_rules(RuleTable& t) {
  set_rule(t, OpKind::Conv2d, convolution);
  set_rule(t, OpKind::Convolution, convolution);
  set_rule(t, OpKind::UnderscoreConvolution, convolution);
  set_rule(t, OpKind::ConvTranspose2dInput, conv_transpose);
  set_rule(t, OpKind::BatchNorm, batch_norm_eval);
  set_rule(t, OpKind::NativeBatchNorm, batch_norm_eval);
  set_rule(t, OpKind::UnderscoreNativeBatchNormLegitNoTraining, batch_norm_eval);
}

}  // namespace ptc::autodiff
