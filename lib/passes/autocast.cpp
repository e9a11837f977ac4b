// The precision policy (library_class) and autocast: torch.autocast's CUDA policy for an fp32
// model compiled with --precision bf16 / fp16. Library operations (GEMMs, convolutions,
// attention) take half-precision operands and accumulate in float32. The ops on autocast's
// float32 list compute in float32. The rest run, as under torch.autocast, in the dtype of their
// inputs: an op whose floating inputs all hold half-precision values (a library result, or such
// an op's result) rounds its result to the half dtype, so that value too is stored in half
// precision. See passes.h.
#include <unordered_map>
#include <unordered_set>

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

bool autocast_f32_op(OpKind k) {
  switch (k) {
    // torch.autocast's CUDA fp32 list (and the ops it gives dtype=float32: sum, softmax, cumsum)
    case OpKind::LayerNorm: case OpKind::NativeLayerNorm: case OpKind::GroupNorm: case OpKind::NativeGroupNorm:
    case OpKind::RmsNorm: case OpKind::Softplus: case OpKind::Exp: case OpKind::Log: case OpKind::Log1p:
    case OpKind::Rsqrt: case OpKind::Reciprocal: case OpKind::PowTensorScalar: case OpKind::PowTensorTensor:
    case OpKind::SoftmaxInt: case OpKind::UnderscoreSoftmax: case OpKind::LogSoftmaxInt: case OpKind::UnderscoreLogSoftmax:
    case OpKind::SumDimIntList: case OpKind::Sum: case OpKind::Cumsum: case OpKind::UpsampleNearest2dVec:
    case OpKind::UpsampleBilinear2dVec: case OpKind::UpsampleNearest2d: case OpKind::UpsampleBilinear2d:
    case OpKind::UpsampleNearest2dBackward: case OpKind::UpsampleBilinear2dBackward:
    // explicit conversions: the model asked for their dtype
    case OpKind::UnderscoreToCopy: case OpKind::ToDtype: case OpKind::ToDtypeLayout: case OpKind::TypeAs:
      return true;
    default: return false;
  }
}

namespace {

// Whether `k` computed on half-precision values gives half-precision values exactly (it selects,
// moves or negates elements), so its result needs no rounding.
bool keeps_half_values(OpKind k) {
  if (op_rearranges(k)) return true;
  switch (k) {
    case OpKind::Relu: case OpKind::ReluInplace: case OpKind::Relu6: case OpKind::Neg: case OpKind::Abs:
    case OpKind::MaxPool2d: case OpKind::MaxPool2dWithIndices: case OpKind::Cat: case OpKind::Stack:
    case OpKind::Maximum: case OpKind::Minimum: case OpKind::Amax: case OpKind::Amin: case OpKind::MaxDim:
    case OpKind::WhereSelf: case OpKind::Roll: case OpKind::Flip: case OpKind::Repeat:
      return true;
    default: return false;
  }
}

}  // namespace

bool library_f32_arg(const Node& n, size_t arg) {
  if (library_class(n.kind) != LibraryClass::Attention) return false;
  const Arg* a = &n.args[arg];
  return a == n.arg("attn_mask") || a == n.arg("mask");
}

std::unique_ptr<Graph> autocast(const Graph& g, DType half, bool round_fallthrough) {
  PTC_CHECK(dtype_is_half(half), "autocast to ", dtype_name(half));
  rewrite::GraphRewriter rw(g);
  NodeBuilder b(rw.graph(), &g, "_half");
  std::unordered_map<const Value*, Value*> narrowed;  // new-graph value -> its conversion to `half`
  // New-graph float32 values that hold `half` values (a library result converted back, or a
  // fall-through op's rounded result): what torch.autocast would hold in `half`.
  std::unordered_set<const Value*> half_values;
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    bool reads_f32 = false;
    for (const Value* v : n.inputs()) reads_f32 = reads_f32 || is_f32_tensor(v);
    if (library_class(n.kind) != LibraryClass::None && reads_f32) {
      convert_operands(rw, b, n, half, [&](const Value* v, size_t arg) { return is_f32_tensor(v) && !library_f32_arg(n, arg); }, is_f32_tensor,
                       narrowed, "_half");
      for (const Value* o : n.outputs)
        if (is_f32_tensor(o)) half_values.insert(rw.map(o));
      continue;
    }
    rw.copy_node(n);
    if (!round_fallthrough || autocast_f32_op(n.kind) || library_class(n.kind) != LibraryClass::None) continue;
    // Runs in its inputs' dtype: half when every floating input with dimensions holds half values
    // (0-d ones are scalars to torch's type promotion), else float32 (promoted, as torch does).
    bool any_half = false, every_input_half = true, dims_half = true, any_dims = false;
    for (const Value* v : n.inputs()) {
      if (!v->type.is_tensor() || !dtype_is_float(v->type.dtype)) continue;
      const bool h = half_values.count(rw.map(v)) > 0;
      any_half = any_half || h;
      every_input_half = every_input_half && h;
      if (v->type.rank() > 0) any_dims = true, dims_half = dims_half && h;
    }
    if (!any_half || !(any_dims ? dims_half : every_input_half)) continue;
    // (a 0-d float32 input, such as a where's fill value, may hold no half value: then round)
    const bool exact = keeps_half_values(n.kind) && every_input_half;
    b.set_origin(&n);
    for (const Value* o : n.outputs) {
      if (!is_f32_tensor(o)) continue;
      Value* now = rw.map(o);
      if (!exact) {
        now = b.cast(b.cast(now, half), DType::Float32);
        rw.replace(o, now);
      }
      half_values.insert(now);
    }
  }
  return rw.finish();
}

}  // namespace ptc
