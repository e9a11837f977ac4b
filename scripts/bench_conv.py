#!/usr/bin/env python3
"""Benchmark ptc's CPU fp32 convolution (lib/runtime/cpu/ptc_conv.h) against torch's, side by side.

Compiles tools/bench_conv.cpp with the flags generated code uses (g++ -O3 -march=native -fopenmp
-shared -fPIC) and loads it next to torch (one OpenMP pool, the same thread count). Each shape
runs ptc and torch.nn.functional.conv2d (oneDNN) on the same tensors in alternating samples of at
least --min-sample seconds; the table shows the median sample of each and the max relative
difference of the results. Default shapes: the distinct convolutions of resnet18 and
mobilenet_v2 at batch 1 and 8.

    .venv/bin/python scripts/bench_conv.py
    .venv/bin/python scripts/bench_conv.py --shapes 8,64,56,56,64,3,1,1   # N,C,H,W,O,K,stride,pad[,groups]
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (C, H, W, O, K, stride, pad, groups)
RESNET18 = [(3, 224, 224, 64, 7, 2, 3, 1), (64, 56, 56, 64, 3, 1, 1, 1), (64, 56, 56, 128, 3, 2, 1, 1),
            (64, 56, 56, 128, 1, 2, 0, 1), (128, 28, 28, 128, 3, 1, 1, 1), (128, 28, 28, 256, 3, 2, 1, 1),
            (256, 14, 14, 256, 3, 1, 1, 1), (256, 14, 14, 512, 3, 2, 1, 1), (512, 7, 7, 512, 3, 1, 1, 1)]
MOBILENET = [(32, 112, 112, 32, 3, 1, 1, 32), (96, 112, 112, 96, 3, 2, 1, 96), (144, 56, 56, 144, 3, 1, 1, 144),
             (144, 56, 56, 24, 1, 1, 0, 1), (24, 56, 56, 144, 1, 1, 0, 1), (384, 14, 14, 64, 1, 1, 0, 1)]


def compile_lib(out: Path, cxx: str, extra: list) -> None:
    cmd = [cxx, "-std=c++17", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
           f"-I{ROOT / 'lib'}", str(ROOT / "tools" / "bench_conv.cpp"), "-o", str(out)] + extra
    subprocess.run(cmd, check=True)


def bench(torch, lib, n, shape, samples, min_s):
    c, h, w, o, k, s, p, g = shape
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, h, w, generator=gen)
    wt = torch.randn(o, c // g, k, k, generator=gen) * (1.0 / (c // g * k * k) ** 0.5)
    b = torch.randn(o, generator=gen)
    ref = torch.nn.functional.conv2d(x, wt, b, s, p, 1, g)
    y = torch.empty_like(ref)
    fp = ctypes.POINTER(ctypes.c_float)
    params = (ctypes.c_int64 * 14)(n, c, h, w, o, k, k, s, s, p, p, 1, 1, g)
    args = [ctypes.cast(t.data_ptr(), fp) for t in (x, wt, b, y)]

    def run_ptc(reps):
        return lib.ptc_bench_conv(params, *args, reps)

    def run_torch(reps):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.nn.functional.conv2d(x, wt, b, s, p, 1, g)
        return time.perf_counter() - t0

    def calibrate(fn):
        fn(1)
        return max(1, int(min_s / max(fn(1), 1e-7)))

    rp, rt = calibrate(run_ptc), calibrate(run_torch)
    tp, tt = [], []
    for _ in range(samples):
        tp.append(run_ptc(rp) / rp)
        tt.append(run_torch(rt) / rt)
    flop = 2.0 * ref.numel() * (c // g) * k * k
    err = float((y - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    return statistics.median(tp), statistics.median(tt), flop, err


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--min-sample", type=float, default=0.05, help="seconds per sample")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--cxxflags", default="", help="extra flags for the library")
    ap.add_argument("--shapes", nargs="*", help="N,C,H,W,O,K,stride,pad[,groups]")
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch  # after OMP_NUM_THREADS, before the library (which then uses torch's libgomp)
    torch.set_num_threads(args.threads)

    cases = []
    if args.shapes:
        for spec in args.shapes:
            v = [int(t) for t in spec.split(",")]
            cases.append((v[0], tuple(v[1:8]) + (v[8] if len(v) > 8 else 1,)))
    else:
        cases = [(n, s) for n in args.batches for s in RESNET18 + MOBILENET]
    with tempfile.TemporaryDirectory() as tmp:
        so = Path(tmp) / "libbench_conv.so"
        compile_lib(so, args.cxx, args.cxxflags.split())
        lib = ctypes.CDLL(str(so))
        lib.ptc_bench_conv.restype = ctypes.c_double
        fp = ctypes.POINTER(ctypes.c_float)
        lib.ptc_bench_conv.argtypes = [ctypes.POINTER(ctypes.c_int64), fp, fp, fp, fp, ctypes.c_int64]
        print(f"fp32 conv2d, {args.threads} thread(s), torch {torch.__version__}, median of "
              f"{args.samples} alternating samples")
        print(f"{'N':>3} {'C':>4} {'HxW':>7} {'O':>4} {'K':>2} {'s':>2} {'g':>4} {'ptc ms':>8} "
              f"{'torch ms':>8} {'ptc GF/s':>8} {'torch/ptc':>9} {'rel diff':>8}")
        ratios = []
        tot_p = tot_t = 0.0
        for n, shape in cases:
            tp, tt, flop, err = bench(torch, lib, n, shape, args.samples, args.min_sample)
            ratios.append(tt / tp)
            tot_p += tp
            tot_t += tt
            c, h, w, o, k, s, p, g = shape
            print(f"{n:>3} {c:>4} {f'{h}x{w}':>7} {o:>4} {k:>2} {s:>2} {g:>4} {tp * 1e3:>8.3f} "
                  f"{tt * 1e3:>8.3f} {flop / tp * 1e-9:>8.1f} {tt / tp:>9.2f} {err:>8.1e}", flush=True)
        print(f"geomean torch/ptc: {statistics.geometric_mean(ratios):.2f}; "
              f"total ptc {tot_p * 1e3:.2f} ms, torch {tot_t * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
