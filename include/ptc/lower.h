// Lowering: graph IR -> loop IR, and the loop IR's reference interpreter.
//
// lower_to_loops: precondition: every tensor value has a known type (run shape propagation on
// TorchScript graphs first). Pointwise ops are composed into their consumers (vertical fusion);
// buffers are created for reductions, externs (GEMM, convolution), values with several users
// and graph outputs. Views never copy. Throws UserError naming the node for ops ptc cannot lower.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ptc/graph.h"
#include "ptc/loop.h"

namespace ptc {

struct LowerOptions {
  // Attention (scaled_dot_product_attention, the fused multi-head attention) as one fused
  // flash-style extern; false: GEMMs around a softmax.
  bool fused_attention = true;
  // The largest head size (of q/k and of v) the fused kernel takes; 0: any. Larger or symbolic
  // head sizes lower as GEMMs around a softmax.
  int64_t max_fused_head = 0;
  // The fused extern also takes bfloat16 / float16 q, k and v (of one dtype; a float mask stays
  // float32) and writes its output in that dtype; false: float32 q, k and v only (half operands
  // lower as GEMMs around a float32 softmax).
  bool half_attention = false;
  // Ungrouped float32 2-d convolutions as im2col columns (a gather) times the weight (a GEMM per
  // image); false: the backend's convolution extern.
  bool conv_as_gemm = false;
  // float32 2-d convolutions and their weight and input gradients as the convolution externs
  // with the operand layouts cuDNN takes (ExternKind Convolution, ConvWeightGrad, ConvInputGrad;
  // a contiguous weight, grad_output as a view); takes precedence over conv_as_gemm.
  bool cudnn_conv = false;
  // The fused attention extern over [B, H, T, D] writes its output as [B, T, H, Dv]
  // (AttentionAttrs::heads_inner; the result is a permuted view): merging the heads back,
  // [B, T, H*Dv] for the output projection, is then a view instead of a copy.
  bool attention_heads_inner = false;
  // The same, but the stored order follows q's: [B, T, H, Dv] (heads_inner) or [T, B, H, Dv]
  // (time_outer) where q's strides fall in that order, else [B, H, T, Dv]. The output then has
  // the layout the model's q projection had, which is the one its output projection reads.
  bool attention_layout_like_q = false;
  // Forward convolutions write NHWC buffers (domain [N, OH, OW, O], ConvAttrs::nhwc; the result
  // is a permuted view) and read their input as it is laid out; a 4-d value realized from an NHWC
  // buffer is stored NHWC too (realize), so the pointwise kernels between convolutions run in
  // NHWC order. Weights in KRSC come from the channels_last_weights pass. With cudnn_conv (CUDA)
  // 1x1 convolutions become GEMMs and depthwise ones pointwise taps; without it (the CPU, on
  // oneDNN) every float32 forward convolution is the NHWC extern.
  bool channels_last = false;
  // Arg-reductions (argmax, argmin, max.dim's indices) as ReduceOp::ArgMax / ArgMin; false: as
  // two reductions the backend has, the max / min and then the first position holding it (Min
  // over positions), with torch's answers for ties and NaN.
  bool arg_reductions = true;
  // max_pool2d_with_indices_backward, when its indices come from max_pool2d_with_indices of the
  // same input and geometry, as one extern (ExternKind::MaxPoolGrad) that finds each window's
  // maximum and adds its gradient there, per plane; false: a gather over the windows covering
  // each input element, comparing the stored indices (CUDA's, where planes run in parallel).
  bool max_pool_grad_extern = false;
  // 2-d float32 GEMMs whose right operand is a weight (a linear layer's) are marked
  // GemmAttrs::library: the backend runs them on its matrix library where their epilogue suits
  // it (the CPU: oneDNN's matmul, with bias, residual and activation as post-ops).
  bool library_gemm = false;
  // (A backend's options: Backend::lower_options, ptc/backend.h.)
};
loop::Program lower_to_loops(const Graph& g, const LowerOptions& opts = {});

// A node that lowering refuses, with its one-sentence reason.
struct Unlowerable {
  const Node* node = nullptr;
  std::string reason;
};
// Every node of `g` that lower_to_loops with `opts` would refuse (an operator without a lowering,
// a form of one it does not take), in graph order: the lowering goes on past each with zeros in
// place of its outputs. It stops at a refused node whose outputs have no known tensor type
// (what it found so far is returned). `ptc inspect` lists these.
std::vector<Unlowerable> find_unlowerable(const Graph& g, const LowerOptions& opts = {});

// Runs a loop program on the CPU, slowly and simply (double precision arithmetic, rounded to
// each buffer's dtype on store): the reference for lowering and scheduling tests.
// `inputs` are the user inputs (contiguous, in order, as raw little-endian bytes of their
// dtype); `symbols` gives each size symbol's value; weights are read from `g`.
std::vector<std::vector<std::byte>> interpret(const loop::Program& p, const Graph& g,
                                              const std::vector<std::vector<std::byte>>& inputs,
                                              const std::map<std::string, int64_t>& symbols);

}  // namespace ptc
