// The precision policy (library_class) and autocast: torch.autocast's CUDA policy for an fp32
// model compiled with --precision bf16 / fp16. Library operations (GEMMs, convolutions,
// attention) take half-precision operands and accumulate in float32; everything else stays
// float32 because its inputs are float32 (each library result is converted back right away, so
// the ops on autocast's fp32 list, and those it runs in the widest input type, compute in
// float32 as they read it). See passes.h.
#include <unordered_map>

#include "ptc/error.h"
#include "ptc/node_builder.h"
#include "ptc/passes.h"
#include "ptc/rewrite.h"
#include "convert_operands.h"

namespace ptc {

LibraryClass library_class(OpKind k) {
  switch (k) {
    case OpKind::Linear:
    case OpKind::Addmm:
    case OpKind::Baddbmm:
    case OpKind::Mm:
    case OpKind::Bmm:
    case OpKind::Matmul: return LibraryClass::Gemm;
    case OpKind::Conv2d:
    case OpKind::Convolution:
    case OpKind::UnderscoreConvolution:
    case OpKind::PtcConv2dWeightGrad:  // (autodiff's convolution gradients)
    case OpKind::PtcConv2dInputGrad: return LibraryClass::Conv;
    case OpKind::ScaledDotProductAttention:
    case OpKind::UnderscoreScaledDotProductFlashAttentionForCpu:
    case OpKind::UnderscoreNativeMultiHeadAttention: return LibraryClass::Attention;
    default: return LibraryClass::None;
  }
}

namespace {

bool is_f32_tensor(const Value* v) { return v && v->type.is_tensor() && v->type.dtype == DType::Float32; }

}  // namespace

bool library_f32_arg(const Node& n, size_t arg) {
  if (library_class(n.kind) != LibraryClass::Attention) return false;
  const Arg* a = &n.args[arg];
  return a == n.arg("attn_mask") || a == n.arg("mask");
}

std::unique_ptr<Graph> autocast(const Graph& g, DType half) {
  PTC_CHECK(dtype_is_half(half), "autocast to ", dtype_name(half));
  rewrite::GraphRewriter rw(g);
  NodeBuilder b(rw.graph(), &g, "_half");
  std::unordered_map<const Value*, Value*> narrowed;  // new-graph value -> its conversion to `half`
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    bool reads_f32 = false;
    for (const Value* v : n.inputs()) reads_f32 = reads_f32 || is_f32_tensor(v);
    if (library_class(n.kind) != LibraryClass::None && reads_f32)
      convert_operands(rw, b, n, half, [&](const Value* v, size_t arg) { return is_f32_tensor(v) && !library_f32_arg(n, arg); }, is_f32_tensor,
                       narrowed, "_half");
    else
      rw.copy_node(n);
  }
  return rw.finish();
}

}  // namespace ptc
