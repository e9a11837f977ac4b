#!/usr/bin/env python3
"""Regenerate the schema column of include/ptc/ops.def from the pinned torch.

    .venv/bin/python scripts/gen_op_table.py > include/ptc/ops.def

The list below is the set of aten overloads ptc knows (reads with schema defaults). Adding an op
means adding its overload here, regenerating, and giving the new row its functions in lib/.
`--check FILE` compares an existing table with torch's schemas and exits 1 on a difference
(run by the test suite, so a torch upgrade that changes a schema is caught).
"""
import re
import sys

import torch

# aten overloads, as "name.overload" ("name" alone means the default overload).
ATEN_OPS = """
linear matmul mm bmm addmm baddbmm t
conv1d conv2d conv3d convolution conv_transpose2d.input _convolution
batch_norm _native_batch_norm_legit_no_training native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_functional
layer_norm native_layer_norm group_norm native_group_norm rms_norm
relu relu_ gelu silu silu_ sigmoid tanh hardswish hardswish_ hardsigmoid hardtanh hardtanh_ mish
add_.Tensor sub_.Tensor mul_.Tensor mul_.Scalar div_.Tensor div_.Scalar sigmoid_ tanh_ gelu_ hardsigmoid_ clamp_ relu6
elu selu celu leaky_relu softplus erf exp log log1p sqrt rsqrt abs neg reciprocal sin cos floor ceil round sign
softmax.int _softmax log_softmax.int _log_softmax
dropout dropout_ native_dropout
add.Tensor add.Scalar sub.Tensor sub.Scalar rsub.Scalar mul.Tensor mul.Scalar div.Tensor div.Scalar div.Tensor_mode
pow.Tensor_Scalar pow.Tensor_Tensor maximum minimum min.other max.other clamp clamp.Tensor clamp_min diff
eq.Tensor eq.Scalar ne.Scalar lt.Scalar gt.Scalar le.Scalar ge.Scalar lt.Tensor gt.Tensor le.Tensor ge.Tensor ne.Tensor
logical_not logical_and logical_or bitwise_not bitwise_and.Tensor __and__.Tensor isnan isinf any.dim any.dims any all.dim
floor_divide remainder.Scalar fmod.Scalar tril triu
where.self where.ScalarSelf where.ScalarOther where.Scalar masked_fill.Scalar masked_fill.Tensor masked_fill_.Scalar masked_fill_.Tensor
mean mean.dim sum.dim_IntList sum amax amin max.dim argmax argmin var.correction var.dim var_mean.correction var_mean.dim std.correction std.dim cumsum topk sort sort.stable argsort argsort.stable
scaled_dot_product_attention _scaled_dot_product_flash_attention_for_cpu _native_multi_head_attention
view reshape _unsafe_view as_strided permute transpose.int expand expand_as contiguous clone alias
flatten.using_ints unflatten.int unsqueeze squeeze.dim squeeze.dims squeeze
slice.Tensor select.int narrow split.Tensor split_with_sizes chunk unbind.int
cat stack roll flip constant_pad_nd pad repeat index.Tensor index_select gather scatter_add scatter.src scatter.value embedding
im2col max_pool2d max_pool2d_with_indices max_pool2d_with_indices_backward avg_pool2d avg_pool2d_backward adaptive_avg_pool2d _adaptive_avg_pool2d _adaptive_avg_pool2d_backward adaptive_avg_pool1d
upsample_nearest2d.vec upsample_bilinear2d.vec upsample_nearest2d upsample_bilinear2d upsample_nearest2d_backward upsample_bilinear2d_backward
_to_copy to.dtype to.dtype_layout to.device type_as detach lift_fresh_copy _assert_tensor_metadata
copy copy_ index_copy index_copy_ index_put index_put_ fill.Scalar fill.Tensor fill_.Scalar fill_.Tensor slice_scatter select_scatter
full arange.start_step arange.default arange.start zeros ones zeros_like ones_like full_like new_zeros new_ones empty.memory_format scalar_tensor
sym_size.int sym_numel sym_stride.int size.int Int.Tensor ScalarImplicit
"""

# Python operators torch.export emits for size arithmetic. torch gives them no schema, so the
# table states one in the same syntax.
PYTHON_OPS = [
    ("SymAdd", "_operator::add(SymInt a, SymInt b) -> SymInt"),
    ("SymSub", "_operator::sub(SymInt a, SymInt b) -> SymInt"),
    ("SymMul", "_operator::mul(SymInt a, SymInt b) -> SymInt"),
    ("SymFloorDiv", "_operator::floordiv(SymInt a, SymInt b) -> SymInt"),
    ("SymMod", "_operator::mod(SymInt a, SymInt b) -> SymInt"),
    ("SymNeg", "_operator::neg(SymInt a) -> SymInt"),
]

# ptc's own ops: nodes its passes write that no aten op expresses.
PTC_OPS = [
    # Training-mode dropout with the library's counter-based RNG (lib/autodiff/dropout.cpp): keeps
    # element i where philox_uniform(seed, i, stream) < 1 - p, scaled by 1 / (1 - p). The same
    # (seed, stream) gives the same mask, so the backward applies the op to the gradient.
    ("PtcDropout", "ptc::dropout(Tensor self, Tensor seed, float p, int stream) -> Tensor"),
    # A convolution's weight gradient (lib/autodiff/rules_conv.cpp): [O, C / groups, KH, KW] =
    # sum over images and positions of grad_output times the im2col columns of input. The CPU runs
    # it as an implicit GEMM that never stores the columns; CUDA as im2col columns and one GEMM.
    ("PtcConv2dWeightGrad", "ptc::conv2d_weight_grad(Tensor input, Tensor grad_output, int[2] kernel_size, int[2] stride, "
                            "int[2] padding, int[2] dilation, int groups) -> Tensor"),
    # A strided convolution's input gradient (lib/autodiff/rules_conv.cpp): the columns
    # W^T dy (one GEMM per group, exact multiply-adds) folded back onto the input positions
    # (col2im as a gather); stride 1 differentiates as a convolution of dy instead.
    ("PtcConv2dInputGrad", "ptc::conv2d_input_grad(Tensor grad_output, Tensor weight, SymInt[4] input_size, int[2] stride, "
                           "int[2] padding, int[2] dilation, int groups) -> Tensor"),
]


def camel(s):
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[_.]", s) if p)


def rows():
    out = []
    for spec in ATEN_OPS.split():
        name, _, overload = spec.partition(".")
        packet = getattr(torch.ops.aten, name)
        op = getattr(packet, overload or "default")
        schema = str(op._schema)
        enum = camel(name) + ("" if not overload else camel(overload))
        if name.endswith("_") and not name.startswith("_"):
            enum += "Inplace"
        if name.startswith("_"):
            enum = "Underscore" + enum
        out.append((enum, schema))
    out.extend(PYTHON_OPS)
    out.extend(PTC_OPS)
    return out


def render():
    lines = [
        "// The op table: one row per operator ptc knows. GENERATED by scripts/gen_op_table.py from",
        f"// torch {torch.__version__.split('+')[0]}'s schemas; edit the list there, not this file.",
        "//   PTC_OP(Enum, \"schema\")",
        "// The schema gives the aten name, overload, argument names, types and defaults.",
        "// No include guard: include after defining PTC_OP.",
    ]
    for enum, schema in rows():
        literal = schema.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'PTC_OP({enum}, "{literal}")')
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = render()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            old = f.read()
        if old != text:
            import difflib
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True)))
            print("op table differs from torch's schemas; regenerate it", file=sys.stderr)
            sys.exit(1)
        print("op table matches torch's schemas")
    else:
        sys.stdout.write(text)
