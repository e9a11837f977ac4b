#!/usr/bin/env python3
"""Benchmark ptc's CPU fp32 GEMM (lib/runtime/cpu/ptc_gemm.h) against torch.mm, side by side.

Compiles tools/bench_gemm.cpp with the flags generated code uses (g++ -O3 -march=native
-fopenmp, plus -shared -fPIC) and loads it into this process next to torch. For each shape both
run on the same input tensors with the same thread count (torch.set_num_threads and
OMP_NUM_THREADS; the library shares torch's libgomp, so one OpenMP thread pool) in alternating
samples: ptc, torch, ptc, torch, ... Each sample repeats the call for at least --min-sample
seconds; the table shows the median sample of each, so load from other processes hits both
alike. The results are also compared (max |ptc - torch| relative to max |torch|).

    .venv/bin/python scripts/bench_gemm.py                # default shapes, 2 threads
    .venv/bin/python scripts/bench_gemm.py --threads 1 --shapes 1024x1024x1024 1024x768x768:w
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

# (M, N, K, a_trans, b_weight, label)
DEFAULT_SHAPES = [
    (256, 256, 256, 0, 0, "square"),
    (512, 512, 512, 0, 0, "square"),
    (1024, 1024, 1024, 0, 0, "square"),
    (2048, 2048, 2048, 0, 0, "square"),
    (1024, 768, 768, 0, 1, "x @ W^T"),
    (1024, 3072, 768, 0, 1, "x @ W^T"),
    (1024, 768, 3072, 0, 1, "x @ W^T"),
    (1024, 768, 768, 0, 0, "x @ B"),
    (1024, 3072, 768, 0, 0, "x @ B"),
    (1024, 768, 768, 1, 0, "A^T @ B"),
]


def compile_lib(out: Path, cxx: str, extra: list) -> None:
    cmd = [cxx, "-std=c++17", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
           "-DBENCH_GEMM_LIB", f"-I{ROOT / 'lib'}", str(ROOT / "tools" / "bench_gemm.cpp"),
           "-o", str(out)] + extra
    subprocess.run(cmd, check=True)


def bench_shape(torch, lib, shape, samples: int, min_s: float):
    m, n, k, at, bw = shape[:5]
    g = torch.Generator().manual_seed(0)
    # contiguous storage in the layout under test; a / b are the logical [M,K] / [K,N] views
    a = torch.rand(k, m, generator=g).t() if at else torch.rand(m, k, generator=g)
    b = torch.rand(n, k, generator=g).t() if bw else torch.rand(k, n, generator=g)
    c_torch = torch.empty(m, n)
    c_ptc = torch.empty(m, n)
    c_dnn = torch.empty(m, n)
    fp = ctypes.POINTER(ctypes.c_float)
    pa = ctypes.cast(a.data_ptr(), fp)
    pb = ctypes.cast(b.data_ptr(), fp)
    pc = ctypes.cast(c_ptc.data_ptr(), fp)

    def run_ptc(reps):
        return lib.ptc_bench_gemm(m, n, k, at, bw, pa, pb, pc, reps)

    def run_dnn(reps):
        return lib.onednn_bench_gemm(m, n, k, at, bw, pa, pb, ctypes.cast(c_dnn.data_ptr(), fp), reps)

    def run_torch(reps):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c_torch)
        return time.perf_counter() - t0

    def calibrate(fn):
        fn(1)
        one = fn(1)
        return max(1, int(min_s / max(one, 1e-7)))

    onednn = hasattr(lib, "onednn_bench_gemm")
    reps_p, reps_t = calibrate(run_ptc), calibrate(run_torch)
    reps_d = calibrate(run_dnn) if onednn else 0
    tp, tt, td = [], [], []
    for _ in range(samples):
        tp.append(run_ptc(reps_p) / reps_p)
        tt.append(run_torch(reps_t) / reps_t)
        if onednn:
            td.append(run_dnn(reps_d) / reps_d)
    flop = 2.0 * m * n * k
    err = float((c_ptc - c_torch).abs().max() / c_torch.abs().max().clamp_min(1e-30))
    if onednn:
        err = max(err, float((c_dnn - c_torch).abs().max() / c_torch.abs().max().clamp_min(1e-30)))
    gd = flop / statistics.median(td) * 1e-9 if onednn else float("nan")
    return flop / statistics.median(tp) * 1e-9, flop / statistics.median(tt) * 1e-9, gd, err


def parse_shape(s: str):
    parts = s.split(":")
    m, n, k = (int(x) for x in parts[0].split("x"))
    flags = parts[1] if len(parts) > 1 else ""
    label = {"": "x @ B", "w": "x @ W^T", "t": "A^T @ B", "tw": "A^T @ W^T"}.get(flags, flags)
    return (m, n, k, int("t" in flags), int("w" in flags), label)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--samples", type=int, default=9)
    ap.add_argument("--min-sample", type=float, default=0.05, help="seconds per sample")
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--cxxflags", default="",
                    help="extra flags for the library (e.g. -DPTC_GEMM_KC=512)")
    ap.add_argument("--onednn", action="store_true",
                    help="also time oneDNN's matmul (libdnnl; B reordered once into its layout)")
    ap.add_argument("--shapes", nargs="*",
                    help="MxNxK[:t][w]  (t: A stored column-major, w: B given as W[N,K])")
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch  # after OMP_NUM_THREADS, and before the library (it then uses torch's libgomp)
    torch.set_num_threads(args.threads)

    shapes = [parse_shape(s) for s in args.shapes] if args.shapes else DEFAULT_SHAPES
    with tempfile.TemporaryDirectory() as tmp:
        so = Path(tmp) / "libbench_gemm.so"
        extra = args.cxxflags.split() + (["-DBENCH_GEMM_ONEDNN", "-ldnnl"] if args.onednn else [])
        compile_lib(so, args.cxx, extra)
        lib = ctypes.CDLL(str(so))
        fp = ctypes.POINTER(ctypes.c_float)
        i64 = ctypes.c_int64
        lib.ptc_bench_gemm.restype = ctypes.c_double
        lib.ptc_bench_gemm.argtypes = [i64, i64, i64, ctypes.c_int, ctypes.c_int, fp, fp, fp, i64]
        if args.onednn:
            lib.onednn_bench_gemm.restype = ctypes.c_double
            lib.onednn_bench_gemm.argtypes = lib.ptc_bench_gemm.argtypes

        print(f"fp32 GEMM, {args.threads} thread(s), torch {torch.__version__} "
              f"(torch.mm via {'MKL' if torch.backends.mkl.is_available() else 'its BLAS'}), "
              f"median of {args.samples} alternating samples of >= {args.min_sample}s")
        print(f"{'M':>6} {'N':>6} {'K':>6}  {'layout':<10} {'ptc GF/s':>9} {'torch GF/s':>10} "
              f"{'ptc/torch':>9}" + (f" {'oneDNN GF/s':>11} {'ptc/oneDNN':>10}" if args.onednn else "") + f" {'max rel diff':>12}")
        ratios, vs_dnn = [], []
        for shape in shapes:
            p, t, d, err = bench_shape(torch, lib, shape, args.samples, args.min_sample)
            ratios.append(p / t)
            m, n, k, _, _, label = shape
            dnn = f" {d:>11.1f} {p / d:>10.2f}" if args.onednn else ""
            if args.onednn:
                vs_dnn.append(p / d)
            print(f"{m:>6} {n:>6} {k:>6}  {label:<10} {p:>9.1f} {t:>10.1f} {p / t:>9.2f}{dnn} "
                  f"{err:>12.1e}", flush=True)
        print(f"geomean ptc/torch: {statistics.geometric_mean(ratios):.2f}"
              + (f", ptc/oneDNN: {statistics.geometric_mean(vs_dnn):.2f}" if vs_dnn else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
