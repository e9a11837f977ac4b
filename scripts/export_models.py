#!/usr/bin/env python3
"""Export the model fixtures that ptc's C++ tests read (see models/README.md).

    . .venv/bin/activate
    python scripts/export_models.py                 # all small fixtures -> models/, then verify
    python scripts/export_models.py --only tfm_dyn  # one small fixture
    python scripts/export_models.py --list          # names of small and real fixtures
    python scripts/export_models.py --real resnet18 bert [--core]   # -> models/cache/ (git-ignored)
    python scripts/export_models.py --verify-only   # re-check what is already in models/

For every fixture NAME it writes, into the output folder:
  NAME.pt2         torch.export.export(...) saved with torch.export.save   ("export" flavour)
  NAME.core.pt2    the same ExportedProgram after run_decompositions()      ("core" flavour)
  NAME.pt          torch.jit.trace(...) saved with extra file ptc_inputs.json ("torchscript")
  ref/NAME.caseK.inJ.npy / ref/NAME.caseK.outJ.npy   eager fp32 reference data
  NAME.expect.json what the export produced (op histograms, signatures, weights, cases, tolerance)

Everything is CPU-only, seeded, and uses random weights (nothing is downloaded).
"""
import argparse
import collections
import inspect
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
import zipfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.export import Dim

warnings.filterwarnings("ignore", message=".*LeafSpec.*")
warnings.filterwarnings("ignore", message=".*non-writable tensors.*")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(REPO, "models")
CACHE_DIR = os.path.join(MODELS_DIR, "cache")
TORCH_SITE = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
SEED = 0
EXPECT_VERSION = 1


# --------------------------------------------------------------------------------------------
# Small fixture models (same structure as /work/shared/samples/*.pt2)
# --------------------------------------------------------------------------------------------
class MLP(nn.Module):
    """x -> ln(x + l2(gelu(l1(x)))), 64 -> 256 -> 64."""

    def __init__(self, d=64, h=256):
        super().__init__()
        self.l1 = nn.Linear(d, h)
        self.l2 = nn.Linear(h, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(x + self.l2(F.gelu(self.l1(x))))


class SmallCNN(nn.Module):
    """conv3x3 -> batchnorm -> relu -> conv3x3/s2 -> relu -> global avg pool -> linear -> softmax."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn(self.c1(x)))
        x = torch.relu(self.c2(x))
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return torch.softmax(self.fc(x), dim=-1)


class CnnPool(nn.Module):
    """ResNet-stem-like: conv3x3 -> batchnorm -> relu -> max pool 3x3/2 pad 1 -> conv3x3 -> relu ->
    max pool 2x2/2 -> global avg pool -> linear (odd sizes: windows over the border)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn(self.c1(x))), 3, stride=2, padding=1)
        x = F.max_pool2d(torch.relu(self.c2(x)), 2)
        x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        return self.fc(x)


class TinyTfm(nn.Module):
    """Pre-norm transformer block: causal SDPA (4 heads of 16) + SiLU feed-forward, d=64."""

    def __init__(self, d=64, heads=4, ff=256):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, T, self.h, D // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, D // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, D // self.h).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        return x + self.ff2(F.silu(self.ff1(self.ln2(x))))


class MHA(nn.Module):
    """nn.MultiheadAttention (batch first, 4 heads of 16) with a key padding mask computed from
    the input; returns the output and the head-averaged attention weights. Traced, it is the
    fused aten::_native_multi_head_attention."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        pad = x[:, :, 0] > 0.5  # [B, T]: True = this key is padding (about 1 in 3)
        y, w = self.attn(x, x, x, key_padding_mask=pad, need_weights=True)
        return y, w


class IndexOps(nn.Module):
    """Data-dependent indexing over token ids [batch, seq]: embedding, gather, index_select,
    advanced indexing, cumsum and diff (the ops language models' embeddings and masks use)."""

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.register_buffer("cols", torch.tensor([0, 3, 5, 15]))

    def forward(self, ids):
        B, S = ids.shape
        e = self.emb(ids)                                               # [B, S, 16]
        g = torch.gather(e, 2, (ids % 16).unsqueeze(-1).expand(B, S, 4))  # [B, S, 4]
        sel = torch.index_select(e, 2, self.cols)                       # [B, S, 4]
        rows = torch.arange(B).unsqueeze(1)
        picked = e[rows, (ids * 7) % S]                                 # [B, S, 16]
        c = torch.cumsum(ids, dim=1)                                    # int64
        d = torch.diff(ids, dim=1, prepend=ids[:, :1])                  # int64
        return e.sum(-1) + g.sum(-1) * sel.mean(-1) + picked.amax(-1) + c.float() * 0.01 + d.float() * 0.1


# Name the fixture classes like the reference samples do (TorchScript: __torch__.models.MLP,
# export: nn_module_stack "models.MLP") instead of after __main__.
for _cls in (MLP, SmallCNN, TinyTfm, MHA, IndexOps):
    _cls.__module__ = "models"


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand + BN + ReLU6, depthwise 3x3 + BN + ReLU6, 1x1 project + BN
    (+ the input when the shapes allow)."""

    def __init__(self, cin, cout, stride, expand=4):
        super().__init__()
        mid = cin * expand
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, stride=stride, padding=1, groups=mid, bias=False),
                                nn.BatchNorm2d(mid), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.dw(self.expand(x)))
        return x + y if self.residual else y


class MBv2(nn.Module):
    """conv3x3/s2 + BN + ReLU6 stem, two inverted residual blocks (stride 1 with the residual,
    stride 2), 1x1 conv + ReLU6, global avg pool, linear."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.b1 = InvertedResidual(16, 16, 1)
        self.b2 = InvertedResidual(16, 24, 2)
        self.head = nn.Sequential(nn.Conv2d(24, 64, 1), nn.ReLU6())
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.head(self.b2(self.b1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


for _cls in (InvertedResidual, MBv2):
    _cls.__module__ = "models"


def _clear_jit_class_registry():
    """TorchScript mangles a class name traced twice in one process (___torch_mangle_N); start
    every trace from a clean registry so each .pt is the same whichever fixtures ran before."""
    torch._C._jit_clear_class_registry()
    torch.jit._recursive.concrete_type_store = torch.jit._recursive.ConcreteTypeStore()
    torch.jit._state._clear_class_state()


def _randomize_bn(model, gen):
    """Give BatchNorm layers non-trivial running statistics and affine parameters."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
                if m.weight is not None:
                    m.weight.copy_(torch.rand(n, generator=gen) * 0.5 + 0.75)
                    m.bias.copy_(torch.randn(n, generator=gen) * 0.1)


def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


# A fixture spec: build() -> model; cases: list of tuples of input tensors (case 0 is the example
# used for export and trace); dynamic: dynamic_shapes for torch.export (None = static).
class Spec:
    """dtype: a float16 / bfloat16 fixture is the model and its float inputs converted to that
    dtype (parameters, buffers and inputs); its reference is eager in that dtype."""

    def __init__(self, name, build, make_cases, dynamic=None, tol=(1e-4, 1e-4), desc="",
                 trace=True, dtype=None):
        self.name, self.build, self.make_cases = name, build, make_cases
        self.dynamic, self.tol, self.desc, self.trace = dynamic, tol, desc, trace
        self.dtype = dtype


HALF_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
HALF_SUFFIX = {torch.float16: "f16", torch.bfloat16: "bf16"}
# Fixture tolerances against eager in the same dtype: about two units in the last place of each
# format (bfloat16 has 8 significant bits, float16 11); ptc computes in float32 between loads and
# stores, eager rounds after every op.
HALF_TOL = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


def in_dtype(spec, dtype):
    """`spec` with the model and its float inputs in `dtype` (named NAME_f16 / NAME_bf16)."""
    def cases(gen):
        return [tuple(t.to(dtype) if t.is_floating_point() else t for t in c) for c in spec.make_cases(gen)]
    return Spec(f"{spec.name}_{HALF_SUFFIX[dtype]}", spec.build, cases, dynamic=spec.dynamic, tol=HALF_TOL[dtype],
                desc=f"{spec.desc} (in {str(dtype).replace('torch.', '')})", trace=spec.trace, dtype=dtype)


def _small_cnn():
    m = SmallCNN()
    gen = torch.Generator().manual_seed(SEED + 1)
    _randomize_bn(m, gen)
    with torch.no_grad():  # larger logits, so the softmax output is far from uniform
        m.fc.weight.copy_(torch.randn(m.fc.weight.shape, generator=gen) * 2.0)
    return m


def _cnn_pool():
    m = CnnPool()
    _randomize_bn(m, torch.Generator().manual_seed(SEED + 3))
    return m


def _mbv2():
    m = MBv2()
    _randomize_bn(m, torch.Generator().manual_seed(SEED + 2))
    return m


def _cases(*shape_lists):
    """Cases of float32 randn inputs; each element is a list of input shapes."""
    def make(gen):
        return [tuple(_randn(gen, *s) for s in shapes) for shapes in shape_lists]
    return make


SMALL = collections.OrderedDict(
    (s.name, s)
    for s in [
        Spec("mlp", MLP, _cases([(4, 64)]), desc="MLP 64->256->64 with residual + layer-norm"),
        Spec("mlp_dyn", MLP, _cases([(4, 64)], [(13, 64)]),
             dynamic={"x": {0: Dim("batch", min=1, max=1024)}},
             desc="MLP with a dynamic batch dimension in [1, 1024]"),
        Spec("small_cnn", _small_cnn, _cases([(2, 3, 32, 32)]),
             desc="conv+batchnorm+relu, conv/s2+relu, global avg pool, linear, softmax"),
        Spec("cnn_pool", _cnn_pool, _cases([(2, 3, 19, 19)], [(5, 3, 19, 19)]),
             dynamic={"x": {0: Dim("batch", min=1, max=64)}},
             desc="conv+batchnorm+relu, max pool 3x3/2 pad 1, conv+relu, max pool 2x2, avg pool, linear; dynamic batch [1, 64]"),
        Spec("mbv2_dyn", _mbv2, _cases([(2, 3, 32, 32)], [(5, 3, 32, 32)]),
             dynamic={"x": {0: Dim("batch", min=1, max=64)}},
             desc="MobileNetV2-style: 1x1 / depthwise 3x3 / 1x1 inverted residual blocks, ReLU6, dynamic batch [1, 64]"),
        Spec("tiny_tfm", TinyTfm, _cases([(2, 16, 64)]),
             desc="pre-norm transformer block, causal SDPA, 4 heads, SiLU FFN"),
        Spec("index_ops", IndexOps,
             lambda gen: [(torch.randint(0, 50, (2, 9), generator=gen),), (torch.randint(0, 50, (5, 23), generator=gen),)],
             dynamic={"ids": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=2, max=512)}},
             desc="embedding, gather, index_select, advanced indexing, cumsum, diff over dynamic token ids",
             trace=False),  # the TorchScript reader does not follow its traced int arithmetic yet
        Spec("mha", MHA, _cases([(2, 11, 64)]),
             desc="nn.MultiheadAttention with a key padding mask, output + averaged weights"),
        Spec("tfm_dyn", TinyTfm, _cases([(2, 16, 64)], [(3, 37, 64)]),
             dynamic={"x": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=2, max=512)}},
             desc="tiny_tfm with dynamic batch [1, 64] and sequence length [2, 512]"),
    ]
)


# Half-precision fixtures: the same models with float16 / bfloat16 parameters and inputs.
for _base, _dt in (("mlp_dyn", torch.bfloat16), ("small_cnn", torch.float16), ("tfm_dyn", torch.bfloat16)):
    _s = in_dtype(SMALL[_base], _dt)
    SMALL[_s.name] = _s


# --------------------------------------------------------------------------------------------
# Real models (random weights), exported on demand into models/cache/
# --------------------------------------------------------------------------------------------
class HFWrapper(nn.Module):
    """Takes input_ids (int64 [batch, seq]) and returns one tensor."""

    def __init__(self, model, field):
        super().__init__()
        self.model, self.field = model, field

    def forward(self, input_ids):
        extra = {"use_cache": False} if self.field == "logits" else {}
        out = self.model(input_ids=input_ids, return_dict=True, **extra)
        return getattr(out, self.field)


def _fill_zero_weights(model, gen, std=0.02):
    """Random init leaves some weights at zero (torchvision ViT's classifier head, class token);
    give them small random values so that the output depends on the input."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen) * std)


def _calibrate_bn(model, gen, shape, steps=2):
    """Set BatchNorm running statistics from a few random batches (train-mode forward passes),
    as randomly initialized nets with mean 0 / var 1 statistics tend to produce outputs that
    barely depend on the input (mobilenet_v2's features are ~1e-8 otherwise)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
        if m.affine:  # distinct per-layer affine parameters instead of all ones / zeros
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(torch.randn(shape, generator=gen))
    for m, mom in zip(bns, saved):
        m.momentum = mom
    model.eval()


def _tv(name):
    def build():
        import torchvision.models as tvm
        m = getattr(tvm, name)(weights=None)
        gen = torch.Generator().manual_seed(SEED + 1)
        _fill_zero_weights(m, gen)
        _calibrate_bn(m, gen, (8, 3, 224, 224))
        return m
    return build


class DictOut(nn.Module):
    """Returns one field of a model's dict output (torchvision segmentation models: "out")."""

    def __init__(self, model, field):
        super().__init__()
        self.model, self.field = model, field

    def forward(self, x):
        return self.model(x)[self.field]


def _tv_seg(name):
    def build():
        import torchvision.models.segmentation as tvs
        m = getattr(tvs, name)(weights=None, weights_backbone=None, aux_loss=False)
        gen = torch.Generator().manual_seed(SEED + 1)
        _fill_zero_weights(m, gen)
        _calibrate_bn(m, gen, (8, 3, 224, 224))
        return DictOut(m.eval(), "out")
    return build


def _timm(name):
    def build():
        import timm
        m = timm.create_model(name, pretrained=False)
        gen = torch.Generator().manual_seed(SEED + 1)
        _fill_zero_weights(m, gen)
        _calibrate_bn(m, gen, (8, 3, 224, 224))
        return m
    return build


def _bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig()  # bert-base: 12 layers, 768 hidden
    return HFWrapper(BertModel(cfg, add_pooling_layer=False).eval(), "last_hidden_state")


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config()  # gpt2 small: 12 layers, 768 hidden, vocab 50257
    return HFWrapper(GPT2LMHeadModel(cfg).eval(), "logits")


def _t5_encoder():
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config()  # t5-small: 6 layers, d_model 512, relative position buckets
    return HFWrapper(T5EncoderModel(cfg).eval(), "last_hidden_state")


class Seq2SeqWrapper(nn.Module):
    """An encoder-decoder's forward: input_ids and decoder_input_ids (int64 [batch, seq] each,
    one batch) -> logits [batch, decoder seq, vocab]; no cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, decoder_input_ids):
        return self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False, return_dict=True).logits


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration
    cfg = T5Config()  # t5-small: 6 + 6 layers, cross-attention, relative position buckets, tied lm head
    return Seq2SeqWrapper(T5ForConditionalGeneration(cfg).eval())


def _seq2seq_cases(vocab, shapes):
    """(input_ids, decoder_input_ids) pairs of the given (batch, source length, target length)."""
    def make(gen):
        return [(torch.randint(0, vocab, (b, s), generator=gen, dtype=torch.int64),
                 torch.randint(0, vocab, (b, t), generator=gen, dtype=torch.int64)) for b, s, t in shapes]
    return make


def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel
    return HFWrapper(DistilBertModel(DistilBertConfig()).eval(), "last_hidden_state")


def _decoder(family):
    """A decoder LLM from transformers (random weights) in a small configuration with every
    feature of its family: grouped-query attention (Phi: multi-head), rotary embeddings (Phi:
    partial), RMSNorm + SwiGLU (Phi: LayerNorm + GELU), tied embeddings (Llama, Qwen2)."""
    def build():
        import transformers as tf
        common = dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                      max_position_embeddings=1024)
        cfg, cls = {
            "llama": (lambda: tf.LlamaConfig(num_key_value_heads=2, tie_word_embeddings=True, **common), tf.LlamaForCausalLM),
            "mistral": (lambda: tf.MistralConfig(num_key_value_heads=2, **common), tf.MistralForCausalLM),
            "qwen2": (lambda: tf.Qwen2Config(num_key_value_heads=2, tie_word_embeddings=True, **common), tf.Qwen2ForCausalLM),
            "phi": (lambda: tf.PhiConfig(num_key_value_heads=8, partial_rotary_factor=0.5, **common), tf.PhiForCausalLM),
        }[family]
        return HFWrapper(cls(cfg()).eval(), "logits")
    return build


class UNetWrapper(nn.Module):
    """A diffusers UNet2DConditionModel's noise prediction (its `sample` output) for a latent, a
    timestep per item and the text encoder's states."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, sample, timestep, encoder_hidden_states):
        return self.model(sample, timestep, encoder_hidden_states, return_dict=False)[0]


def _unet():
    """A small Stable-Diffusion-style UNet2DConditionModel (random weights): group norm, SiLU,
    cross-attention to the text states, nearest upsampling, skip concatenations; 0.8M parameters."""
    from diffusers import UNet2DConditionModel
    torch.manual_seed(SEED + 1)
    m = UNet2DConditionModel(sample_size=32, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
                             down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                             up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                             attention_head_dim=8, norm_num_groups=8)
    return UNetWrapper(m.eval())


def _unet_cases(batches):
    """Latents [b, 4, 32, 32], timesteps in [0, 1000), text states [b, 8, 32]."""
    def make(gen):
        return [(_randn(gen, b, 4, 32, 32), torch.rand(b, generator=gen) * 1000, _randn(gen, b, 8, 32)) for b in batches]
    return make


def _ids_cases(vocab, shapes):
    def make(gen):
        return [(torch.randint(0, vocab, s, generator=gen, dtype=torch.int64),) for s in shapes]
    return make


_IMG_DYN = {"x": {0: Dim("batch", min=1, max=64)}}
_IDS_DYN = {"input_ids": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=2, max=512)}}
# GPT-2's positions go to 1024 (n_positions).
_GPT2_DYN = {"input_ids": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=2, max=1024)}}
_S2S_BATCH = Dim("s2s_batch", min=1, max=64)
_S2S_DYN = {"input_ids": {0: _S2S_BATCH, 1: Dim("src", min=2, max=512)},
            "decoder_input_ids": {0: _S2S_BATCH, 1: Dim("tgt", min=2, max=512)}}
# The UNet's batch, shared by its three inputs (its export guards 2 <= batch <= 63).
_UNET_BATCH = Dim("unet_batch", min=2, max=63)
_UNET_DYN = {"sample": {0: _UNET_BATCH}, "timestep": {0: _UNET_BATCH}, "encoder_hidden_states": {0: _UNET_BATCH}}
# (Dim.AUTO for the decoders' length: a named Dim trips a guard of their causal mask in torch 2.11)
_DECODER_DYN = {"input_ids": {0: Dim("batch", min=1, max=64), 1: Dim.AUTO}}
_REAL_TOL = (1e-3, 1e-3)

REAL = collections.OrderedDict(
    (s.name, s)
    for s in [
        Spec("resnet18", _tv("resnet18"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision resnet18, random weights"),
        Spec("resnet50", _tv("resnet50"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision resnet50, random weights"),
        Spec("mobilenet_v2", _tv("mobilenet_v2"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision mobilenet_v2, random weights"),
        Spec("vit_b_16", _tv("vit_b_16"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision vit_b_16, random weights"),
        Spec("vit_small_patch16_224", _timm("vit_small_patch16_224"),
             _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="timm vit_small_patch16_224, random weights"),
        Spec("mobilenet_v3_small", _tv("mobilenet_v3_small"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision mobilenet_v3_small, random weights"),
        Spec("squeezenet1_1", _tv("squeezenet1_1"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision squeezenet1_1, random weights"),
        Spec("shufflenet_v2_x1_0", _tv("shufflenet_v2_x1_0"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision shufflenet_v2_x1_0, random weights"),
        Spec("densenet121", _tv("densenet121"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision densenet121, random weights"),
        Spec("convnext_tiny", _tv("convnext_tiny"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision convnext_tiny, random weights"),
        Spec("resnet50d", _timm("resnet50d"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="timm resnet50d, random weights"),
        Spec("efficientnet_b0", _timm("efficientnet_b0"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="timm efficientnet_b0, random weights"),
        Spec("bert", _bert, _ids_cases(30522, [(2, 16), (3, 40)]), dynamic=_IDS_DYN,
             tol=_REAL_TOL, desc="transformers BertModel(BertConfig()) -> last_hidden_state"),
        Spec("gpt2", _gpt2, _ids_cases(50257, [(2, 16), (3, 40)]), dynamic=_GPT2_DYN,
             tol=_REAL_TOL, desc="transformers GPT2LMHeadModel(GPT2Config()) -> logits"),
        Spec("t5_encoder", _t5_encoder, _ids_cases(32128, [(2, 16), (3, 40)]), dynamic=_IDS_DYN,
             tol=_REAL_TOL, desc="transformers T5EncoderModel(T5Config()) (t5-small) -> last_hidden_state"),
        Spec("t5", _t5, _seq2seq_cases(32128, [(2, 16, 7), (3, 40, 12)]), dynamic=_S2S_DYN, tol=_REAL_TOL,
             desc="transformers T5ForConditionalGeneration(T5Config()) (t5-small encoder-decoder) -> logits"),
        Spec("distilbert", _distilbert, _ids_cases(30522, [(2, 16), (3, 40)]), dynamic=_IDS_DYN,
             tol=_REAL_TOL, desc="transformers DistilBertModel(DistilBertConfig()) -> last_hidden_state"),
        Spec("swin_t", _tv("swin_t"), _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]),
             dynamic=_IMG_DYN, tol=_REAL_TOL, desc="torchvision swin_t (shifted windows: roll, window attention), random weights"),
        Spec("deeplabv3_mobilenet_v3_large", _tv_seg("deeplabv3_mobilenet_v3_large"),
             _cases([(2, 3, 224, 224)], [(1, 3, 224, 224)]), dynamic=_IMG_DYN, tol=_REAL_TOL,
             desc="torchvision deeplabv3_mobilenet_v3_large (bilinear upsampling) -> out, random weights"),
        Spec("unet2d_cond", _unet, _unet_cases([2, 5]), dynamic=_UNET_DYN, tol=_REAL_TOL,
             desc="diffusers UNet2DConditionModel, small (group norm, cross-attention, upsampling) -> noise prediction"),
    ] + [
        Spec(f, _decoder(f), _ids_cases(32000, [(2, 16), (3, 40)]), dynamic=_DECODER_DYN, tol=_REAL_TOL,
             desc=f"transformers {f} decoder (4 layers, hidden 512, random weights) -> logits; decode step: test/llm_test.py")
        for f in ["llama", "mistral", "qwen2", "phi"]
    ]
)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
def dtype_name(dt):
    return str(dt).replace("torch.", "")


def op_target_string(target):
    """The string torch.export's serializer writes as a node's `target` (serialize_operator)."""
    if isinstance(target, str):
        return target
    mod = target.__module__
    if mod.startswith("torch._ops"):
        return f"{mod.replace('torch._ops', 'torch.ops')}.{target.__name__}"
    return f"{mod}.{target.__name__}"


def sym_str(x):
    """int for a static size, else the sympy expression as a string ("s77", "s77*s27", ...)."""
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        expr = x.node.expr
        if expr.is_Integer:
            return int(expr)
        return str(expr)
    return int(x)


def bound(v):
    try:
        import sympy
        if v in (sympy.oo, -sympy.oo) or not getattr(v, "is_finite", True):
            return None
    except Exception:
        pass
    try:
        from torch.utils._sympy.numbers import int_oo
        if v in (int_oo, -int_oo):
            return None
    except Exception:
        pass
    try:
        return int(v)
    except Exception:
        return None


def tensor_desc(name, val):
    return {"name": name, "dtype": dtype_name(val.dtype), "sizes": [sym_str(s) for s in val.shape]}


def _tensor_stats(named):
    count = len(named)
    numel = sum(int(t.numel()) for _, t in named)
    nbytes = sum(int(t.numel()) * t.element_size() for _, t in named)
    return {"count": count, "numel": numel, "bytes": nbytes}


def sanitize_stack_traces(ep):
    """Make stack traces independent of where the repo / venv live (byte-stable archives).

    Also renumbers the graph ids (Python object ids) in the "from_node" provenance that
    run_decompositions() records, in order of first appearance.
    """
    repl = [(TORCH_SITE + os.sep, "<site-packages>/"),
            (os.path.relpath(TORCH_SITE) + os.sep, "<site-packages>/"),
            (REPO + os.sep, "")]
    ids = {}

    def renumber(src):
        info = getattr(src, "node_info", None)
        if info is not None:
            info.graph_id = ids.setdefault(info.graph_id, len(ids))
            src._dict = None
        for s in getattr(src, "from_node", []) or []:
            renumber(s)

    for gm in ep.graph_module.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            st = node.meta.get("stack_trace")
            if st:
                for a, b in repl:
                    st = st.replace(a, b)
                node.meta["stack_trace"] = st
            for src in node.meta.get("from_node", []) or []:
                renumber(src)


def read_model_json(pt2_path):
    with zipfile.ZipFile(pt2_path) as z:
        names = z.namelist()
        root = names[0].split("/")[0]
        return json.loads(z.read(f"{root}/models/model.json"))


def describe_ep(ep, pt2_path):
    """The "export"/"core" entry of expect.json."""
    g = ep.graph
    calls = [n for n in g.nodes if n.op == "call_function"]
    hist = collections.Counter(op_target_string(n.target) for n in calls)
    placeholders = {n.name: n for n in g.nodes if n.op == "placeholder"}
    sig = ep.graph_signature
    inputs = [tensor_desc(nm, placeholders[nm].meta["val"]) for nm in sig.user_inputs]
    out_node = next(n for n in g.nodes if n.op == "output")
    out_args = {a.name: a for a in out_node.args[0] if isinstance(a, torch.fx.Node)}
    outputs = [tensor_desc(nm, out_args[nm].meta["val"]) for nm in sig.user_outputs]

    symbols = {}
    for s, vr in sorted(ep.range_constraints.items(), key=lambda kv: str(kv[0])):
        symbols[str(s)] = [bound(vr.lower), bound(vr.upper)]

    sd, consts = ep.state_dict, ep.constants

    def lookup(name):
        return sd[name] if name in sd else consts[name]

    params = [(n, lookup(n)) for n in sig.parameters]
    buffers = [(n, lookup(n)) for n in sig.buffers]
    constants = [(n, lookup(n)) for n in sig.lifted_tensor_constants]
    weights = {
        "parameters": _tensor_stats(params),
        "buffers": _tensor_stats(buffers),
        "constants": _tensor_stats(constants),
        "total": _tensor_stats(params + buffers + constants),
    }
    # Tied weights (e.g. GPT-2's lm_head / wte) are one storage under two names: the archive
    # holds it once. storage_bytes = what the weight files hold in all.
    storages = {}
    for _, t in params + buffers + constants:
        st = t.untyped_storage()
        storages[(st.data_ptr(), st.nbytes())] = st.nbytes()
    weights["total"]["unique_storages"] = len(storages)
    weights["total"]["storage_bytes"] = sum(storages.values())

    # What model.json actually holds (getitem nodes are folded into their producer's outputs).
    mj = read_model_json(pt2_path)
    jnodes = mj["graph_module"]["graph"]["nodes"]
    jhist = collections.Counter(n["target"] for n in jnodes)
    # getitem nodes are not written (their producer lists one output per element), and their
    # number changes on a save/load round trip, so the histogram leaves them out.
    num_getitem = hist.pop("_operator.getitem", 0)
    if jhist != hist:
        raise RuntimeError(f"{pt2_path}: model.json targets {dict(jhist)} != graph {dict(hist)}")

    return {
        "file": os.path.basename(pt2_path),
        "num_call_function": len(calls),
        "num_getitem": num_getitem,
        "num_serialized_nodes": len(jnodes),
        "targets": dict(sorted(hist.items())),
        "inputs": inputs,
        "outputs": outputs,
        "symbols": symbols,
        "weights": weights,
        "schema_version": mj.get("schema_version"),
    }


def ts_input_info(model, example, ep):
    """ptc_inputs.json: user inputs with sizes (symbol names as in the .pt2) and symbol ranges."""
    params = list(inspect.signature(model.forward).parameters)
    desc = describe_inputs_from_ep(ep) if ep is not None else None
    inputs, symbols = [], {}
    for i, t in enumerate(example):
        name = params[i] if i < len(params) else f"input{i}"
        sizes = list(t.shape)
        if desc is not None:
            sizes = desc["inputs"][i]["sizes"]
        inputs.append({"name": name, "dtype": dtype_name(t.dtype), "sizes": sizes})
    if desc is not None:
        used = {s for inp in inputs for s in inp["sizes"] if isinstance(s, str)}
        for s in sorted(used):
            lo, hi = desc["symbols"].get(s, [None, None])
            symbols[s] = {"min": lo, "max": hi}
    return {"inputs": inputs, "symbols": symbols}


def describe_inputs_from_ep(ep):
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    inputs = [tensor_desc(nm, placeholders[nm].meta["val"]) for nm in ep.graph_signature.user_inputs]
    symbols = {str(s): [bound(vr.lower), bound(vr.upper)] for s, vr in ep.range_constraints.items()}
    return {"inputs": inputs, "symbols": symbols}


def describe_ts(pt_path):
    extra = {"ptc_inputs.json": ""}
    m = torch.jit.load(pt_path, _extra_files=extra)
    frozen = torch.jit.freeze(m.eval(), optimize_numerics=False)
    g = frozen.graph
    kinds = collections.Counter(n.kind() for n in g.nodes())
    ins = [i for i in g.inputs() if i.type().kind() != "ClassType"]
    outs = list(g.outputs())
    return {
        "file": os.path.basename(pt_path),
        "frozen": True,
        "num_nodes": sum(kinds.values()),
        "num_prim_nodes": sum(v for k, v in kinds.items() if k.startswith("prim::")),
        "num_aten_nodes": sum(v for k, v in kinds.items() if k.startswith("aten::")),
        "node_kinds": dict(sorted(kinds.items())),
        "num_inputs": len(ins),
        "num_outputs": len(outs),
        "output_types": [str(o.type()) for o in outs],
        "ptc_inputs": json.loads(extra["ptc_inputs.json"]),
    }


def to_json(v, indent=0):
    """json with one level per line, but lists/objects of scalars kept on one line."""
    def scalar(x):
        return not isinstance(x, (list, dict))
    pad, pad1 = " " * indent, " " * (indent + 2)
    if isinstance(v, dict):
        if not v:
            return "{}"
        if all(scalar(x) for x in v.values()) and len(json.dumps(v)) <= 72:
            return json.dumps(v)
        items = [f"{pad1}{json.dumps(k)}: {to_json(x, indent + 2)}" for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(v, list):
        if all(scalar(x) for x in v):
            return json.dumps(v)
        items = [f"{pad1}{to_json(x, indent + 2)}" for x in v]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(v)


def save_npy(path, t):
    """float16 / bfloat16 tensors are stored as float32 (exactly: NumPy has no bfloat16)."""
    if t.dtype in HALF_SUFFIX:
        t = t.float()
    a = t.detach().cpu().contiguous().numpy()
    a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<")))
    np.save(path, a, allow_pickle=False)


def _npy_dtype(t):
    return {"npy_dtype": "float32"} if t.dtype in HALF_SUFFIX else {}


def as_tuple(out):
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Export of one fixture
# --------------------------------------------------------------------------------------------
def export_one(spec, out_dir, core=True, ts=True):
    t0 = time.time()
    name = spec.name
    ref_dir = os.path.join(out_dir, "ref")
    os.makedirs(ref_dir, exist_ok=True)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    model = spec.build().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    model32 = None
    if spec.dtype is not None:  # the float32 computation of the same (rounded) weights: ref32
        model = model.to(spec.dtype)
        import copy
        model32 = copy.deepcopy(model).float()
    cases = spec.make_cases(torch.Generator().manual_seed(SEED))
    example = cases[0]
    notes = []

    # ---- reference data (eager fp32)
    case_entries = []
    with torch.no_grad():
        for ci, ins in enumerate(cases):
            outs = as_tuple(model(*ins))
            entry = {"inputs": [], "outputs": []}
            for j, t in enumerate(ins):
                fn = f"ref/{name}.case{ci}.in{j}.npy"
                save_npy(os.path.join(out_dir, fn), t)
                entry["inputs"].append({"file": fn, "dtype": dtype_name(t.dtype),
                                        "shape": list(t.shape), **_npy_dtype(t)})
            for j, t in enumerate(outs):
                fn = f"ref/{name}.case{ci}.out{j}.npy"
                save_npy(os.path.join(out_dir, fn), t)
                entry["outputs"].append({"file": fn, "dtype": dtype_name(t.dtype),
                                         "shape": list(t.shape),
                                         "abs_max": float(t.abs().max()), **_npy_dtype(t)})
            if model32 is not None:
                outs32 = as_tuple(model32(*[t.float() if t.is_floating_point() else t for t in ins]))
                entry["ref32"] = []
                for j, t in enumerate(outs32):
                    fn = f"ref/{name}.case{ci}.ref32_{j}.npy"
                    save_npy(os.path.join(out_dir, fn), t)
                    entry["ref32"].append({"file": fn, "dtype": dtype_name(t.dtype), "shape": list(t.shape)})
            case_entries.append(entry)

    # ---- torch.export (dynamic if requested; fall back to static for real models)
    dynamic = spec.dynamic
    try:
        ep = torch.export.export(model, example, dynamic_shapes=dynamic)
    except Exception as e:
        if dynamic is None or name in SMALL:
            raise
        msg = f"dynamic export failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); " \
              f"exported static"
        print(f"  [{name}] {msg}")
        notes.append(msg)
        dynamic = None
        ep = torch.export.export(model, example)
        case_entries = case_entries[:1]
        for fn in os.listdir(ref_dir):
            if fn.startswith(f"{name}.case") and not fn.startswith(f"{name}.case0."):
                os.remove(os.path.join(ref_dir, fn))
    sanitize_stack_traces(ep)
    pt2 = os.path.join(out_dir, f"{name}.pt2")
    torch.export.save(ep, pt2)
    flavours = {"export": describe_ep(ep, pt2)}
    print(f"  [{name}] export: {flavours['export']['num_call_function']} call_function nodes "
          f"({time.time() - t0:.1f}s)")

    core_pt2 = os.path.join(out_dir, f"{name}.core.pt2")
    if core:
        try:
            try:
                core_ep = ep.run_decompositions()
            except Exception as e:  # noqa: BLE001
                if name in SMALL:
                    raise
                # torch's decomposition of scaled_dot_product_attention can leave strides that a
                # later view rejects under symbolic shapes (GPT-2's Conv1D: x.view(-1, n) after
                # the attention). Core ATen with SDPA kept as one op is the usual remedy.
                table = torch.export.default_decompositions()
                table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
                core_ep = ep.run_decompositions(table)
                msg = (f"run_decompositions() failed ({type(e).__name__}: {str(e).splitlines()[0][:160]}); "
                       f"{name}.core.pt2 is Core ATen with scaled_dot_product_attention kept")
                print(f"  [{name}] {msg}")
                notes.append(msg)
            sanitize_stack_traces(core_ep)
            torch.export.save(core_ep, core_pt2)
            flavours["core"] = describe_ep(core_ep, core_pt2)
            print(f"  [{name}] core: {flavours['core']['num_call_function']} call_function "
                  f"nodes ({time.time() - t0:.1f}s)")
            # run_decompositions must not have touched the original program
            assert describe_ep(ep, pt2)["targets"] == flavours["export"]["targets"]
        except Exception as e:
            if name in SMALL:
                raise
            msg = f"run_decompositions failed: {type(e).__name__}: " \
                  f"{str(e).splitlines()[0][:200]}; no {name}.core.pt2"
            print(f"  [{name}] {msg}")
            notes.append(msg)
            if os.path.exists(core_pt2):
                os.remove(core_pt2)
    elif os.path.exists(core_pt2):
        os.remove(core_pt2)  # stale from an earlier run with --core

    # ---- TorchScript
    if ts and spec.trace:
        pt = os.path.join(out_dir, f"{name}.pt")
        try:
            info = ts_input_info(model, example, ep if dynamic is not None else None)
            _clear_jit_class_registry()
            with torch.no_grad():
                traced = torch.jit.trace(model, example, check_trace=False)
            torch.jit.save(traced, pt, _extra_files={
                "ptc_inputs.json": json.dumps(info, sort_keys=False)})
            flavours["torchscript"] = describe_ts(pt)
            print(f"  [{name}] torchscript: {flavours['torchscript']['num_nodes']} nodes "
                  f"({time.time() - t0:.1f}s)")
        except Exception as e:
            msg = f"torch.jit.trace failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(f"  [{name}] {msg}")
            notes.append(msg)
            if os.path.exists(pt):
                os.remove(pt)

    atol, rtol = spec.tol
    if name in REAL:  # deep nets: scale atol with the output magnitude
        out_max = max(o["abs_max"] for c in case_entries for o in c["outputs"])
        atol = float(f"{max(atol, 1e-4 * out_max):.2g}")
    elif spec.dtype is not None and name not in SMALL:
        # A real model in half precision: the flavours' eager runs round differently (a
        # decomposed op rounds after each of its parts), so the record's own check allows four
        # epsilons of the format, relative and of the output's magnitude. scripts/suite.py judges
        # ptc against the float32 computation (ref32) instead.
        out_max = max(o["abs_max"] for c in case_entries for o in c["outputs"])
        eps = torch.finfo(spec.dtype).eps
        atol, rtol = float(f"{4 * eps * max(1.0, out_max):.2g}"), float(f"{4 * eps:.2g}")
    expect = {
        "expect_version": EXPECT_VERSION,
        "name": name,
        "description": spec.desc,
        "torch_version": torch.__version__.split("+")[0],
        "dynamic": dynamic is not None,
        "flavours": flavours,
        "cases": case_entries,
        "tolerance": {"atol": atol, "rtol": rtol},
    }
    if notes:
        expect["notes"] = notes
    with open(os.path.join(out_dir, f"{name}.expect.json"), "w") as f:
        f.write(to_json(expect) + "\n")
    print(f"  [{name}] done in {time.time() - t0:.1f}s")
    return expect


# --------------------------------------------------------------------------------------------
# Verification of what is on disk
# --------------------------------------------------------------------------------------------
def _as_recorded(t):
    return (t.float() if t.dtype in HALF_SUFFIX else t).numpy()


def _close(a, b, tol):
    return np.allclose(a, b, atol=tol["atol"], rtol=tol["rtol"])


def verify_one(name, out_dir):
    with open(os.path.join(out_dir, f"{name}.expect.json")) as f:
        ex = json.load(f)
    tol = ex["tolerance"]
    def tensor(e):  # a recorded array as a tensor of its recorded dtype
        return torch.from_numpy(np.load(os.path.join(out_dir, e["file"]))).to(getattr(torch, e["dtype"]))
    cases = [([tensor(i) for i in c["inputs"]],
              [np.load(os.path.join(out_dir, o["file"])) for o in c["outputs"]])
             for c in ex["cases"]]
    problems = []
    for flav in ("export", "core"):
        if flav not in ex["flavours"]:
            continue
        path = os.path.join(out_dir, ex["flavours"][flav]["file"])
        ep = torch.export.load(path)
        d = describe_ep(ep, path)
        for key in ("targets", "inputs", "outputs", "symbols", "weights"):
            if d[key] != ex["flavours"][flav][key]:
                problems.append(f"{flav}: reloaded {key} differs: {d[key]} vs "
                                f"{ex['flavours'][flav][key]}")
        mod = ep.module()
        for ci, (ins, outs) in enumerate(cases):
            with torch.no_grad():
                got = as_tuple(mod(*ins))
            for j, (g, r) in enumerate(zip(got, outs)):
                g = _as_recorded(g)
                if not _close(g, r, tol):
                    problems.append(f"{flav} case{ci} out{j}: max abs diff "
                                    f"{np.abs(g - r).max()}")
    if "torchscript" in ex["flavours"]:
        path = os.path.join(out_dir, ex["flavours"]["torchscript"]["file"])
        extra = {"ptc_inputs.json": ""}
        m = torch.jit.load(path, _extra_files=extra)
        info = json.loads(extra["ptc_inputs.json"])
        if info != ex["flavours"]["torchscript"]["ptc_inputs"]:
            problems.append("torchscript: ptc_inputs.json differs from expect.json")
        for ci, (ins, outs) in enumerate(cases):
            with torch.no_grad():
                got = as_tuple(m(*ins))
            for j, (g, r) in enumerate(zip(got, outs)):
                g = _as_recorded(g)
                if not _close(g, r, tol):
                    problems.append(f"torchscript case{ci} out{j}: max abs diff "
                                    f"{np.abs(g - r).max()}")
        d = describe_ts(path)
        if d["node_kinds"] != ex["flavours"]["torchscript"]["node_kinds"]:
            problems.append("torchscript: node kinds differ on reload")
    for c in ex["cases"]:
        for e in c["inputs"] + c["outputs"]:
            a = np.load(os.path.join(out_dir, e["file"]))
            if list(a.shape) != e["shape"] or a.dtype.name != e.get("npy_dtype", e["dtype"]) or \
                    not a.flags.c_contiguous or a.dtype.byteorder == ">":
                problems.append(f"{e['file']}: shape/dtype/layout mismatch")
    status = "OK" if not problems else "FAILED"
    print(f"  verify {name}: {status} ({len(cases)} case(s), flavours "
          f"{', '.join(ex['flavours'])})")
    for p in problems:
        print(f"    - {p}")
    return not problems


def dir_size(path, skip=None):
    total = 0
    for root, dirs, files in os.walk(path):
        if skip:
            dirs[:] = [d for d in dirs if os.path.join(root, d) != skip]
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


# --------------------------------------------------------------------------------------------
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print fixture names and exit")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="export only these small fixtures")
    ap.add_argument("--real", nargs="+", metavar="NAME",
                    help="export these real models (random weights) into models/cache/")
    ap.add_argument("--core", action="store_true",
                    help="with --real: also write NAME.core.pt2 (small fixtures always do)")
    ap.add_argument("--no-trace", action="store_true", help="skip TorchScript (no NAME.pt)")
    ap.add_argument("--no-verify", action="store_true", help="skip reloading and checking")
    ap.add_argument("--verify-only", action="store_true",
                    help="only check the fixtures already on disk (small ones, or --real names)")
    ap.add_argument("--out", help="output folder (default models/ or models/cache/)")
    ap.add_argument("--dtype", choices=["float32"] + list(HALF_DTYPES), default="float32",
                    help="with --real: the model and its float inputs in this dtype, written as NAME_f16 / "
                         "NAME_bf16 (reference: eager in that dtype, and the float32 computation of the same "
                         "weights as ref32)")
    ap.add_argument("--in-process", action="store_true",
                    help="export several fixtures in this process (default: one child each)")
    args = ap.parse_args(argv)

    if args.list:
        print("small fixtures (models/):")
        for s in SMALL.values():
            print(f"  {s.name:24s} {s.desc}")
        print("real models (--real, models/cache/):")
        for s in REAL.values():
            print(f"  {s.name:24s} {s.desc}")
        return 0

    real = bool(args.real)
    table = REAL if real else SMALL
    if real and args.dtype != "float32":
        dt = HALF_DTYPES[args.dtype]
        base = list(REAL) if args.real == ["all"] else args.real
        table = collections.OrderedDict((n, in_dtype(REAL[n], dt)) for n in base if n in REAL)
        args.real = [n for n in base if n not in REAL] + [table[n].name for n in table]
        table = collections.OrderedDict((s.name, s) for s in table.values())
    out_dir = args.out or (CACHE_DIR if real else MODELS_DIR)
    names = (list(REAL) if args.real == ["all"] else args.real) if real else \
        (args.only or list(SMALL))
    unknown = [n for n in names if n not in table]
    if unknown:
        print(f"unknown {'real model' if real else 'fixture'}(s) {unknown}; --list shows the names")
        return 2
    os.makedirs(out_dir, exist_ok=True)

    ok = True
    if len(names) > 1 and not args.in_process:
        # One child process per fixture: TorchScript numbers the class names it mangles
        # (___torch_mangle_N) per process, so this keeps each .pt the same however the script
        # is invoked; it also frees the memory of a large model before the next one.
        for name in names:
            cmd = [sys.executable, os.path.abspath(__file__), "--in-process", "--out", out_dir,
                   "--real" if real else "--only", name]
            if real and args.dtype != "float32":
                # the child gets the base name back (it applies --dtype itself)
                cmd = cmd[:-1] + [name[: -len("_" + HALF_SUFFIX[HALF_DTYPES[args.dtype]])], "--dtype", args.dtype]
            cmd += [f for f, on in (("--core", args.core), ("--no-trace", args.no_trace),
                                    ("--no-verify", args.no_verify),
                                    ("--verify-only", args.verify_only)) if on]
            sys.stdout.flush()
            rc = subprocess.call(cmd)
            if rc != 0:
                ok = False
                print(f"  [{name}] FAILED (exit status {rc})" + ("; continuing" if real else ""))
                if not real:
                    break
    else:
        torch.set_num_threads(min(2, torch.get_num_threads()))
        for name in names:
            print(f"== {name}")
            try:
                if not args.verify_only:
                    export_one(table[name], out_dir, core=args.core or not real,
                               ts=not args.no_trace)
                if not args.no_verify:
                    ok &= verify_one(name, out_dir)
            except Exception as e:
                if not real:
                    raise
                ok = False
                print(f"  [{name}] FAILED: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                traceback.print_exc(limit=3)

    if not args.in_process:
        if real:
            print(f"total size of {out_dir}: {dir_size(out_dir) / 2**20:.2f} MiB")
        else:
            size = dir_size(out_dir, skip=os.path.join(out_dir, "cache"))
            print(f"total size of {out_dir} (without cache/): {size} bytes = "
                  f"{size / 2**20:.2f} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
