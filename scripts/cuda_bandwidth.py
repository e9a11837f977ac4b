#!/usr/bin/env python3
"""Bandwidth of ptc's fused pointwise CUDA kernels against a device-to-device copy (issue 5's
"fused pointwise kernels reach >= 80% of copy bandwidth"). On a GPU machine, with torch and a ptc
binary:

    python3 scripts/cuda_bandwidth.py --ptc-binary build/ptc --work /tmp/bw [--elems 67108864]

It exports small elementwise models at one fixed large shape, compiles them with
`ptc compile --device cuda`, and times one library call (CUDA events, median) against torch's
`dst.copy_(src)` of the same element count and against eager torch on the same model. Effective
bandwidth = bytes the kernel must move (each input read once, each output written once) / time;
the copy moves 2 x 4 bytes per element. Prints one row per model and the ratio to the copy.
"""
import argparse
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the ptc package
import ptc  # noqa: E402
from cuda_check import time_cuda  # noqa: E402


class Scale(torch.nn.Module):  # 1 read, 1 write: the copy's traffic
    def forward(self, x):
        return x * 2.0 + 1.0


class AddRelu(torch.nn.Module):  # 2 reads, 1 write (a residual add + activation)
    def forward(self, a, b):
        return torch.relu(a + b)


class Gelu(torch.nn.Module):  # 1 read, 1 write, more math per element
    def forward(self, x):
        return torch.nn.functional.gelu(x)


class BiasSilu(torch.nn.Module):  # a [C] bias broadcast along rows: 1 read (+ the small bias), 1 write
    def __init__(self, c):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(c))

    def forward(self, x):
        return torch.nn.functional.silu(x + self.bias)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptc-binary", required=True)
    ap.add_argument("--work", type=Path, required=True, help="folder for the exports and libraries")
    ap.add_argument("--elems", type=int, default=1 << 26, help="elements per tensor (default 64M: 256 MB)")
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    args.work.mkdir(parents=True, exist_ok=True)
    cols = 1024
    rows = args.elems // cols
    shape = (rows, cols)
    n = rows * cols
    gen = torch.Generator().manual_seed(0)
    cases = [("scale", Scale(), 1, 1), ("add_relu", AddRelu(), 2, 1), ("gelu", Gelu(), 1, 1), ("bias_silu", BiasSilu(cols), 1, 1)]
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = time_cuda(lambda: dst.copy_(src), args.reps)
    copy_gbs = 2 * 4 * n / copy_ms / 1e6
    print(f"{n} float32 elements ({4 * n / 2**20:.0f} MiB per tensor); device-to-device copy: {copy_ms:.4f} ms, {copy_gbs:.0f} GB/s", flush=True)
    print("| kernel | ptc ms | ptc GB/s | ptc / copy bandwidth | eager ms | eager / ptc |")
    print("|---|---|---|---|---|---|")
    for name, mod, reads, writes in cases:
        ins = [torch.randn(shape, generator=gen) for _ in range(reads)]
        ep = torch.export.export(mod.eval(), tuple(ins))
        pt2 = args.work / f"{name}.pt2"
        torch.export.save(ep, str(pt2))
        lib = args.work / f"cuda_{name}.so"
        subprocess.run([args.ptc_binary, "compile", "-q", str(pt2), "-o", str(lib), "--device", "cuda", "--no-cache"], check=True)
        mod = mod.cuda()
        ins = [i.cuda() for i in ins]
        with torch.inference_mode(), ptc.Model(str(lib)) as m:
            outs = [torch.empty(s, dtype=i.dtype, device="cuda") for s, i in zip(m.output_shapes(*ins), m.outputs)]
            run = m.prepare(*ins, out=outs)
            ms = time_cuda(run, args.reps)
            want = mod(*ins)
            err = (outs[0] - want).abs().max().item()
            eager_ms = time_cuda(lambda: mod(*ins), args.reps)
        gbs = (reads + writes) * 4 * n / ms / 1e6
        print(f"| {name} | {ms:.4f} | {gbs:.0f} | {gbs / copy_gbs:.2f} | {eager_ms:.4f} | {eager_ms / ms:.2f} |  (max err {err:.1e})", flush=True)


if __name__ == "__main__":
    main()
