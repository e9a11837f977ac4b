#!/usr/bin/env python3
"""GEMM throughput of a compiled model against cuBLAS on the same GEMMs alone (GPU machine).

For each model at the given sizes:
  1. the model's GEMMs: eager under torch.autocast, profiled with its input shapes recorded
     (aten::mm and aten::addmm: the linear layers; attention is a fused kernel on both sides);
  2. cuBLAS alone: each of those GEMMs timed by itself in the half dtype (torch.mm / torch.addmm,
     back to back in a loop), summed over the model's GEMMs: its FLOPs over that time is cuBLAS's
     throughput on them;
  3. ptc: the library (built with --precision bf16 / fp16) profiled; the FLOPs over the time of its
     GEMM kernels (cuBLASLt's), and the FLOPs over its whole GPU time per run.

Printed per model: the GEMM FLOPs, cuBLAS's TFLOP/s, ptc's GEMM-kernel TFLOP/s and its whole-run
TFLOP/s, each as a fraction of cuBLAS's. The stricter figure, the whole run's, charges ptc for
everything that is not a GEMM (attention, normalization, pointwise kernels).

    python3 scripts/cuda_gemm_check.py --libs WORK/bf16/libs --models-dir WORK/bf16/models \
        --precision bf16 --sizes bert:16,512 gpt2:8,1024
"""
import argparse
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cuda_check  # noqa: E402
from cuda_check import load_eager, sized_inputs  # noqa: E402
import ptc  # noqa: E402  (cuda_check put the package on the path)

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Kernel names of cuBLAS / cuBLASLt GEMMs (nvjet on Hopper, cutlass and xmma elsewhere).
GEMM_KERNEL = re.compile(r"nvjet|gemm|cutlass|xmma|sm\d+_.*(tn|nt|nn|tt)", re.IGNORECASE)


def gemm_shapes(fn):
    """Counter of (M, K, N, bias) over the aten::mm / aten::addmm calls of one run of fn."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    shapes = Counter()
    for e in prof.events():
        # (an op on autocast's list, aten::addmm under GPT-2's Conv1D, is recorded twice: the
        # autocast wrapper and, inside it, the op it calls)
        if e.cpu_parent is not None and e.cpu_parent.name == e.name:
            continue
        dims = [list(d) for d in e.input_shapes if d]
        if e.name == "aten::mm" and len(dims) >= 2:
            (m, k), (_, n) = dims[0], dims[1]
            shapes[(m, k, n, False)] += 1
        elif e.name == "aten::addmm" and len(dims) >= 3:
            (m, k), (_, n) = dims[1], dims[2]
            shapes[(m, k, n, True)] += 1
    return shapes


def cublas_ms(m, k, n, bias, dtype, reps=50):
    """Median ms of one torch.mm / torch.addmm of this shape in dtype (reps back to back per sample)."""
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t()  # a linear layer's weight, [N, K] transposed
    c = torch.randn(n, device="cuda", dtype=dtype)

    def one():
        return torch.addmm(c, a, b) if bias else torch.mm(a, b)
    for _ in range(5):
        one()
    torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            one()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / reps)
    return statistics.median(ts)


def ptc_times(run, top):
    """(GPU ms per run in GEMM kernels, GPU ms per run in all kernels and copies) of the library;
    prints its `top` kernels by time."""
    from torch.profiler import ProfilerActivity, profile
    run()
    torch.cuda.synchronize()
    steps = 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    total = sum(e.self_device_time_total for e in events) / steps / 1e3
    gemm = sum(e.self_device_time_total for e in events
               if GEMM_KERNEL.search(e.key) and not e.key.startswith("ptc_gen::") and "attention" not in e.key) / steps / 1e3
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:top]:  # where the rest goes
        print(f"  ptc {e.self_device_time_total / steps / 1e3:8.3f} ms  {e.count / steps:4.0f}x  {e.key[:100]}")
    return gemm, total


def check_one(libs, models, name, dims, dtype, gen, top):
    ins = sized_inputs(models, name, dims, gen)
    with torch.inference_mode():
        eager32 = load_eager(name, "pt2", models)

        def eager():
            with torch.autocast("cuda", dtype=dtype):
                return eager32(*ins)
        eager()
        shapes = gemm_shapes(eager)
        if not shapes:
            raise RuntimeError("eager ran no aten::mm / aten::addmm")
        flops = sum(2 * m * k * n * c for (m, k, n, _), c in shapes.items())
        cub = sum(cublas_ms(m, k, n, bias, dtype) * c for (m, k, n, bias), c in shapes.items())
        with ptc.Model(str(libs / f"cuda_{name}_pt2.so")) as lib:
            outs = [torch.empty(s, dtype=i.dtype, device="cuda") for s, i in zip(lib.output_shapes(*ins), lib.outputs)]
            run = lib.prepare(*ins, out=outs)
            gemm_ms, total_ms = ptc_times(run, top)
    tf = lambda ms: flops / ms / 1e9 if ms > 0 else float("nan")  # noqa: E731  (TFLOP/s)
    row = dict(model=name, dims="x".join(map(str, dims)), gemms=sum(shapes.values()), shapes=len(shapes), gflop=flops / 1e9,
               cublas_ms=cub, cublas_tf=tf(cub), ptc_gemm_ms=gemm_ms, ptc_gemm_tf=tf(gemm_ms), ptc_ms=total_ms, ptc_tf=tf(total_ms))
    print(f"{name} {row['dims']}: {row['gemms']} GEMMs of {row['shapes']} shapes, {row['gflop']:.1f} GFLOP; "
          f"cuBLAS alone {cub:.3f} ms; ptc's GEMM kernels {gemm_ms:.3f} ms of {total_ms:.3f} ms GPU time per run", flush=True)
    for (m, k, n, bias), c in sorted(shapes.items(), key=lambda x: -x[0][0] * x[0][1] * x[0][2] * x[1]):
        print(f"  {c:3d}x  M {m} K {k} N {n}{' +bias' if bias else ''}")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libs", required=True, help="folder of cuda_<model>_pt2.so built with --precision bf16 / fp16")
    ap.add_argument("--models-dir", default=str(cuda_check.MODELS))
    ap.add_argument("--precision", choices=sorted(HALF), default="bf16")
    ap.add_argument("--sizes", nargs="+", default=["bert:16,512", "gpt2:8,1024"], help="MODEL:D0[,D1] ...")
    ap.add_argument("--top", type=int, default=6, help="ptc kernels to list by GPU time")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.precision}")
    gen = torch.Generator().manual_seed(0)
    rows = []
    for spec in args.sizes:
        name, _, dims = spec.partition(":")
        rows.append(check_one(Path(args.libs), Path(args.models_dir), name, [int(d) for d in dims.split(",") if d],
                              HALF[args.precision], gen, args.top))
    print("| model | size | GEMM GFLOP | cuBLAS alone TFLOP/s | ptc GEMM kernels TFLOP/s | ratio | ptc whole run TFLOP/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['dims']} | {r['gflop']:.0f} | {r['cublas_tf']:.0f} | {r['ptc_gemm_tf']:.0f} | "
              f"{r['ptc_gemm_tf'] / r['cublas_tf']:.2f} | {r['ptc_tf']:.0f} | {r['ptc_tf'] / r['cublas_tf']:.2f} |")


if __name__ == "__main__":
    main()
