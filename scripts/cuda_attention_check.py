#!/usr/bin/env python3
"""The CUDA fused attention kernel against PyTorch's scaled_dot_product_attention on the GPU.

Here (no GPU needed): export small SDPA modules covering the kernel's cases and compile them:

    .venv/bin/python scripts/cuda_attention_check.py --build out/attn

On the GPU machine (python3 with torch):

    python3 scripts/cuda_attention_check.py --check out/attn [--bench]

Cases: head sizes 4..256, sequence lengths that are not multiples of the 32-row tiles, Tq != Tk,
causal, bool (keep) and float (added) masks with broadcasting, rows with every key masked (NaN
as torch's math path gives), q/k/v as strided views (heads split out of [B, T, H*D]), rank 3.
The reference is torch's math SDPA in float64; max |ptc - ref| must be within 1e-4 (+ 1e-4 rel).

--tf32 (with --build and --check): the libraries are compiled with `ptc compile --tf32`, whose
attention runs on TF32 tensor cores for head sizes up to 128. TF32 rounds q, k, p and v to 10-bit
mantissas: the error must be within TF32_TOL of (1 + max |ref|), and the row also reports torch's
own error with TF32 matmuls (its math backend with allow_tf32) for comparison.

--half bf16|fp16 (with --build and --check): the modules are exported in that dtype (inputs and a
float mask too), so ptc's half-precision tensor-core kernel runs them. --autocast bf16|fp16: the
float32 modules are compiled with `ptc compile --precision bf16 / fp16` (autocast's policy: q, k
and v rounded to the half dtype, a float mask kept float32, the output widened back). Either way
the reference is float64 math on the inputs ptc receives, torch's own result in the same precision
(its default SDPA backend, in the half dtype or under torch.autocast) is measured against it too,
and ptc's max error must be within HALF_WORSE times torch's plus HALF_ATOL of (1 + max |ref|).
"""
import argparse
import concurrent.futures
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the ptc package

# name: (B, H, Tq, Tk, D, Dv, causal, mask: None | "bool" | "float" | "bool_allmasked" | "bool_prefix" | "causal_bool",
# split_heads)
CASES = {
    "d64": (2, 4, 37, 37, 64, 64, False, None, False),
    "causal_d64": (2, 3, 100, 100, 64, 64, True, None, False),
    "causal_d128": (1, 2, 257, 257, 128, 128, True, None, False),
    "bool_d32": (2, 2, 45, 45, 32, 32, False, "bool", False),
    "float_d80": (1, 3, 50, 70, 80, 80, False, "float", False),
    "d256": (1, 2, 65, 65, 256, 256, False, None, False),
    "tq5_tk300": (2, 2, 5, 300, 64, 64, False, None, False),
    "dv_ne_d": (1, 2, 33, 40, 48, 96, False, None, False),
    "odd_heads": (2, 3, 50, 45, 33, 20, False, "bool", False),  # scalar staging (head sizes not multiples of 4)
    "allmasked": (1, 2, 20, 20, 32, 32, False, "bool_allmasked", False),
    "split_heads": (2, 4, 61, 61, 64, 64, True, None, True),
    # Enough (b, h, 64-row) blocks for the TF32 kernel's 4-warp variant (two per multiprocessor).
    "many_heads": (16, 16, 100, 100, 64, 64, False, "float", False),
    "many_heads_d128": (8, 16, 130, 130, 128, 96, True, None, False),
    # The shapes of the acceptance models' attention (for --bench): BERT-base b8, ViT-S/16 b8, GPT-2 b4.
    "bert_b8": (8, 12, 128, 128, 64, 64, False, "float", True),
    "vit_s_b8": (8, 6, 197, 197, 64, 64, False, None, True),
    "gpt2_b4": (4, 12, 128, 128, 64, 64, True, None, True),
    # Long sequences, where attention is a large part of the run: BERT-base 16x512, GPT-2 8x1024.
    "bert_b16_t512": (16, 12, 512, 512, 64, 64, False, None, True),
    "gpt2_b8_t1024": (8, 12, 1024, 1024, 64, 64, True, None, True),
    # A causal mask given as a bool tensor (a transformers export's), which the half kernel reads
    # per tile: whole tiles it drops are skipped.
    "gpt2_b8_t1024_bool": (8, 12, 1024, 1024, 64, 64, False, "causal_bool", True),
    # Small heads (the half kernel's 16- and 32-wide variants): a diffusion UNet's 4 channels per
    # head, split out of [B, T, C]; 16 under a causal mask.
    "unet_d4": (2, 8, 256, 256, 4, 4, False, None, True),
    "d16_causal": (1, 2, 70, 70, 16, 8, True, None, False),
    # Grouped-query attention (enable_gqa): k and v with H / GROUPS[case] heads.
    "gqa_d64": (2, 8, 70, 70, 64, 64, True, None, False),
    "gqa_d128": (1, 8, 33, 90, 128, 128, False, "float", False),
    # At most 4 query rows (the row kernel of a decode step): a static cache of 512 positions
    # filled to 200 (a bool mask keeping a prefix), grouped heads; causal over more keys than
    # queries; a float mask at head size 256; a row with every key masked; odd head sizes.
    "decode_gqa_prefix": (1, 12, 1, 512, 64, 64, False, "bool_prefix", False),
    "decode_tq3_causal_d128": (2, 4, 3, 300, 128, 128, True, None, True),
    "decode_float_d256": (1, 2, 1, 77, 256, 256, False, "float", False),
    "decode_allmasked": (1, 2, 4, 20, 32, 32, False, "bool_allmasked", False),
    "decode_odd_heads": (2, 3, 2, 45, 33, 20, False, "bool", False),
}
GROUPS = {"gqa_d64": 4, "gqa_d128": 2, "decode_gqa_prefix": 3}


class Sdpa(torch.nn.Module):
    def __init__(self, causal, split_heads, heads, gqa=False):
        super().__init__()
        self.causal, self.split, self.heads, self.gqa = causal, split_heads, heads, gqa

    def forward(self, q, k, v, mask=None):
        if self.split:  # [B, T, H*D] -> [B, H, T, D]: strided views
            B, T, HD = q.shape
            q, k, v = (t.view(B, t.shape[1], self.heads, t.shape[2] // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.gqa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


def module_of(case):
    spec = CASES[case]
    return Sdpa(spec[6], spec[8], spec[1], case in GROUPS)


HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def inputs(case, seed=0, half=None):
    B, H, Tq, Tk, D, Dv, causal, mask, split = CASES[case]
    Hkv = H // GROUPS.get(case, 1)
    g = torch.Generator().manual_seed(seed)
    if split:
        q = torch.randn(B, Tq, H * D, generator=g)
        k = torch.randn(B, Tk, H * D, generator=g)
        v = torch.randn(B, Tk, H * Dv, generator=g)
    else:
        q = torch.randn(B, H, Tq, D, generator=g)
        k = torch.randn(B, Hkv, Tk, D, generator=g)
        v = torch.randn(B, Hkv, Tk, Dv, generator=g)
    args = [q, k, v]
    if mask == "bool":
        args.append(torch.rand(B, 1, Tq, Tk, generator=g) > 0.3)
    elif mask == "bool_allmasked":
        m = torch.rand(B, 1, Tq, Tk, generator=g) > 0.3
        m[:, :, 3] = False  # row 3: every key masked
        args.append(m)
    elif mask == "bool_prefix":  # keys up to 200 + i kept: a static cache filled that far
        args.append((torch.arange(Tk) <= 200 + torch.arange(Tq)[:, None]).expand(B, 1, Tq, Tk).contiguous())
    elif mask == "causal_bool":
        args.append(torch.ones(Tq, Tk, dtype=torch.bool).tril().expand(B, 1, Tq, Tk).contiguous())
    elif mask == "float":
        args.append(torch.randn(Tq, Tk, generator=g))
    if half:  # every floating input in the half dtype (torch wants a float mask in q's dtype)
        args = [a.to(HALF[half]) if a.is_floating_point() else a for a in args]
    return args


TF32_TOL = 5e-3
HALF_WORSE, HALF_ATOL = 2.0, 1e-3


def build(out, ptc, jobs, tf32=False, half=None, autocast=None):
    out.mkdir(parents=True, exist_ok=True)
    flags = ["--tf32"] if tf32 else ["--precision", autocast] if autocast else []

    def compile_case(case):
        lib = out / f"attn_{case}.so"
        subprocess.run([ptc, "compile", "-q", str(out / f"attn_{case}.pt2"), "-o", str(lib), "--device", "cuda"] + flags, check=True)
        return lib

    for case in CASES:
        module = module_of(case).eval()
        torch.export.save(torch.export.export(module, tuple(inputs(case, half=half))), str(out / f"attn_{case}.pt2"))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for lib in pool.map(compile_case, CASES):
            print(lib)


def check(out, bench, tf32=False, half=None, autocast=None):
    import ptc
    torch.backends.cuda.matmul.allow_tf32 = False
    failures, rows = 0, []
    for case in CASES:
        args = [a.cuda() for a in inputs(case, half=half)]
        spec = CASES[case]
        module = module_of(case)
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            ref = module(*[a.double() if a.is_floating_point() else a for a in args]).float()
        m = ptc.Model(str(out / f"attn_{case}.so"))
        got = m(*args)[0].float()
        torch.cuda.synchronize()
        nan_ok = bool(torch.equal(torch.isnan(got), torch.isnan(ref)))
        fin = ~torch.isnan(ref)
        err = (got[fin] - ref[fin]).abs().max().item() if fin.any() else 0.0
        scale = ref[fin].abs().max().item() if fin.any() else 0.0
        row = {"case": case, "shape": list(spec[:6]), "max_err": err, "nan_ok": nan_ok}
        if half or autocast:  # torch in the same precision, against the same reference
            if autocast:
                with torch.autocast("cuda", dtype=HALF[autocast]):
                    mine = module(*args)
            else:
                mine = module(*args)
            mine = mine.float()
            torch_err = (mine[fin] - ref[fin]).abs().max().item() if fin.any() else 0.0
            row["torch_err"] = torch_err
            # torch's half kernels give NaN or zeros for fully masked rows by backend: compare finite rows only
            nan_ok = bool(torch.equal(torch.isnan(got)[fin], torch.isnan(ref)[fin]))
            ok = nan_ok and err <= HALF_WORSE * torch_err + HALF_ATOL * (1 + scale)
        else:
            # TF32 only where the tensor-core kernel runs (head sizes up to 128); else the exact kernel.
            tc = tf32 and max(spec[4], spec[5]) <= 128
            ok = nan_ok and err <= (TF32_TOL * (1 + scale) if tc else 1e-4 + 1e-4 * scale)
        failures += not ok
        row["ok"] = ok
        if tf32:  # torch's math SDPA with TF32 matmuls, against the same float64 reference
            torch.backends.cuda.matmul.allow_tf32 = True
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                t32 = module(*args)
            torch.backends.cuda.matmul.allow_tf32 = False
            row["torch_tf32_err"] = (t32[fin] - ref[fin]).abs().max().item() if fin.any() else 0.0
        if bench:
            def t(fn, reps=50):
                for _ in range(5):
                    fn()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                s.record()
                for _ in range(reps):
                    fn()
                e.record()
                torch.cuda.synchronize()
                return s.elapsed_time(e) / reps
            outs = [torch.empty_like(m(*args)[0])]
            run = m.prepare(*args, out=outs)
            row["ptc_ms"] = t(run)
            torch.backends.cuda.matmul.allow_tf32 = tf32
            if autocast:
                def eager():
                    with torch.autocast("cuda", dtype=HALF[autocast]):
                        return module(*args)
                row["eager_ms"] = t(eager)
            else:
                row["eager_ms"] = t(lambda: module(*args))
            torch.backends.cuda.matmul.allow_tf32 = False
            B, H, Tq, Tk, D, Dv = spec[:6]
            flop = 2 * B * H * Tq * Tk * (D + Dv) / (2 if spec[6] or spec[7] == "causal_bool" else 1)  # a causal mask halves the work
            row["ptc_tflops"] = flop / row["ptc_ms"] / 1e9
            row["eager_tflops"] = flop / row["eager_ms"] / 1e9
        rows.append(row)
        print(json.dumps(row), flush=True)
        m.close()
    print(f"{len(rows) - failures} passed, {failures} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build")
    ap.add_argument("--check")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    ap.add_argument("--jobs", type=int, default=2, help="compiles at a time")
    ap.add_argument("--tf32", action="store_true", help="libraries compiled with --tf32, checked with TF32 tolerances")
    ap.add_argument("--half", choices=sorted(HALF), help="modules exported in this dtype (ptc's half-precision kernel)")
    ap.add_argument("--autocast", choices=sorted(HALF), help="float32 modules compiled with --precision in this dtype")
    a = ap.parse_args()
    if a.build:
        build(Path(a.build), a.ptc_binary, a.jobs, a.tf32, a.half, a.autocast)
    if a.check:
        return check(Path(a.check), a.bench, a.tf32, a.half, a.autocast)
    return 0


if __name__ == "__main__":
    sys.exit(main())
