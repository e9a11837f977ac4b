#!/usr/bin/env python3
"""Memory bandwidth of ptc's fused pointwise kernels, against a plain copy, on the CPU.

Each case is a small pointwise model over tensors far larger than the last-level cache, so it is
bound by memory traffic. For each, in one process with the same threads (default 2):
  - copy:  torch's `dst.copy_(src)` of one input-sized tensor (the memcpy reference),
  - eager: the model in PyTorch eager,
  - ptc:   `ptc compile` of the exported model, run through the ptc package (python/ptc) into a
           preallocated output.
Bandwidth = (bytes of every input read once + bytes of the output written) / median latency; the
headline is ptc's bandwidth as a fraction of the copy's (target: >= 0.70).

    .venv/bin/python scripts/bench_pointwise.py [--numel 33554432] [--threads 2] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                             formatter_class=argparse.RawDescriptionHelpFormatter,
                             epilog=__doc__.split("\n", 2)[2])
ap.add_argument("--numel", type=int, default=32 * 1024 * 1024, help="elements of each large tensor")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=20)
ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
ap.add_argument("--json", help="write the results here")
ARGS = ap.parse_args()
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the ptc package
import ptc  # noqa: E402

torch.set_num_threads(ARGS.threads)


class Affine(torch.nn.Module):  # 1 read + 1 write
    def forward(self, x):
        return x * 1.5 + 0.25


class Gelu(torch.nn.Module):  # 1 read + 1 write, transcendental math
    def forward(self, x):
        return torch.nn.functional.gelu(x)


class AddRelu(torch.nn.Module):  # 2 reads + 1 write
    def forward(self, x, y):
        return torch.relu(x + y) * 0.5


class BiasRows(torch.nn.Module):  # broadcast over rows: 1 read (+ a small vector) + 1 write
    def __init__(self, n):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        return torch.sigmoid(x + self.bias)


def cases(numel):
    cols = 1024
    rows = numel // cols
    x = torch.randn(numel)
    return [
        ("affine", Affine(), (x,)),
        ("gelu", Gelu(), (x,)),
        ("add_relu", AddRelu(), (x, torch.randn(numel))),
        ("bias_sigmoid", BiasRows(cols), (x.view(rows, cols),)),
    ]


def median_time(fn, reps):
    fn()
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    rows = []
    all_cases = cases(ARGS.numel)
    with tempfile.TemporaryDirectory(prefix="ptc_bench_pw_") as tmp, torch.inference_mode():
        for name, mod, inputs in all_cases:
            mod.eval()
            with torch.inference_mode(False):
                ep = torch.export.export(mod, inputs)
            pt2 = Path(tmp) / f"{name}.pt2"
            torch.export.save(ep, str(pt2))
            lib = Path(tmp) / f"{name}.so"
            subprocess.run([ARGS.ptc_binary, "compile", str(pt2), "-o", str(lib), "-q"], check=True)
            ref = mod(*inputs)
            out = torch.empty_like(ref)
            with ptc.Model(str(lib)) as m:
                m(*inputs, out=[out])
                err = (out - ref).abs().max().item()
                t_ptc = median_time(lambda: m(*inputs, out=[out]), ARGS.reps)
            t_eager = median_time(lambda: mod(*inputs), ARGS.reps)
            src = inputs[0]
            dst = torch.empty_like(src)
            t_copy = median_time(lambda: dst.copy_(src), ARGS.reps)
            moved = sum(t.numel() * t.element_size() for t in inputs) + ref.numel() * ref.element_size()
            copy_moved = 2 * src.numel() * src.element_size()
            bw = {k: moved / t / 1e9 for k, t in (("ptc", t_ptc), ("eager", t_eager))}
            bw["copy"] = copy_moved / t_copy / 1e9
            rows.append(dict(case=name, numel=ARGS.numel, bytes=moved, ms_ptc=t_ptc * 1e3, ms_eager=t_eager * 1e3,
                             ms_copy=t_copy * 1e3, gbs_ptc=bw["ptc"], gbs_eager=bw["eager"], gbs_copy=bw["copy"],
                             ptc_over_copy=bw["ptc"] / bw["copy"], eager_over_ptc=t_eager / t_ptc, max_abs_err=err))
    print(f"threads {ARGS.threads}, {ARGS.numel} elements per large tensor (fp32), median of {ARGS.reps}\n")
    print("| case | MB moved | copy GB/s | eager GB/s | ptc GB/s | ptc/copy | eager/ptc | ptc err |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['bytes'] / 1e6:.0f} | {r['gbs_copy']:.1f} | {r['gbs_eager']:.1f} | {r['gbs_ptc']:.1f} | "
              f"{r['ptc_over_copy']:.2f} | {r['eager_over_ptc']:.2f} | {r['max_abs_err']:.1e} |")
    if ARGS.json:
        Path(ARGS.json).write_text(json.dumps(dict(threads=ARGS.threads, rows=rows), indent=1))


if __name__ == "__main__":
    main()
