#!/usr/bin/env python3
"""Benchmark ptc's CPU fp32 GEMM (lib/runtime/cpu/ptc_gemm.h) against torch.mm, side by side.

Compiles tools/bench_gemm.cpp with the flags generated code uses (g++ -O3 -march=native
-fopenmp), then for each shape times ptc (the driver, a subprocess) and torch.mm (in this
process, out= preallocated) with the same thread count (torch.set_num_threads and
OMP_NUM_THREADS). Each measurement is the median of several samples, each sample repeating the
call for at least --min-sample seconds; ptc and torch alternate for --rounds rounds and the best
round of each is reported (robust to other load on a shared machine).

    .venv/bin/python scripts/bench_gemm.py                # default shapes, 2 threads
    .venv/bin/python scripts/bench_gemm.py --threads 1 --shapes 1024x1024x1024
"""
import argparse
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
    (1024, 768, 768, 0, 1, "linear x@W^T"),
    (1024, 3072, 768, 0, 1, "linear x@W^T"),
    (1024, 768, 3072, 0, 1, "linear x@W^T"),
    (1024, 768, 768, 0, 0, "x@B"),
    (1024, 3072, 768, 0, 0, "x@B"),
]


def compile_driver(out: Path, cxx: str, extra: list) -> None:
    cmd = [cxx, "-std=c++17", "-O3", "-march=native", "-fopenmp", f"-I{ROOT / 'lib'}",
           str(ROOT / "tools" / "bench_gemm.cpp"), "-o", str(out)] + extra
    subprocess.run(cmd, check=True)


def time_ptc(exe: Path, shape, threads: int, samples: int, min_s: float) -> float:
    m, n, k, at, bw = shape[:5]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([str(exe), str(m), str(n), str(k), str(at), str(bw), str(samples),
                          str(min_s)], check=True, capture_output=True, text=True, env=env)
    return float(out.stdout.split()[6])


def time_torch(torch, shape, samples: int, min_s: float) -> float:
    m, n, k, at, bw = shape[:5]
    g = torch.Generator().manual_seed(0)
    a = torch.rand(k, m, generator=g).t() if at else torch.rand(m, k, generator=g)
    b = torch.rand(n, k, generator=g).t() if bw else torch.rand(k, n, generator=g)
    c = torch.empty(m, n)
    run = lambda: torch.mm(a, b, out=c)  # noqa: E731
    run()
    t0 = time.perf_counter()
    run()
    one = time.perf_counter() - t0
    reps = max(1, int(min_s / max(one, 1e-7)))
    ts = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            run()
        ts.append((time.perf_counter() - t0) / reps)
    return 2.0 * m * n * k / statistics.median(ts) * 1e-9


def parse_shape(s: str):
    parts = s.split(":")
    m, n, k = (int(x) for x in parts[0].split("x"))
    flags = parts[1] if len(parts) > 1 else ""
    return (m, n, k, int("t" in flags), int("w" in flags), flags or "custom")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--min-sample", type=float, default=0.05, help="seconds per sample")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    ap.add_argument("--cxxflags", default="", help="extra flags for the driver (e.g. -DPTC_GEMM_KC=384)")
    ap.add_argument("--shapes", nargs="*", help="MxNxK[:t][w] (t: A column-major, w: B as W[N,K])")
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch  # after OMP_NUM_THREADS
    torch.set_num_threads(args.threads)

    shapes = [parse_shape(s) for s in args.shapes] if args.shapes else DEFAULT_SHAPES
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "bench_gemm"
        compile_driver(exe, args.cxx, args.cxxflags.split())
        print(f"fp32 GEMM, {args.threads} thread(s), torch {torch.__version__}, "
              f"median of {args.samples} samples, best of {args.rounds} rounds")
        print(f"{'M':>6} {'N':>6} {'K':>6}  {'layout':<14} {'ptc GF/s':>9} {'torch GF/s':>10} {'ptc/torch':>9}")
        ratios = []
        for shape in shapes:
            p = t = 0.0
            for _ in range(args.rounds):
                p = max(p, time_ptc(exe, shape, args.threads, args.samples, args.min_sample))
                t = max(t, time_torch(torch, shape, args.samples, args.min_sample))
            ratios.append(p / t)
            m, n, k, _, _, label = shape
            print(f"{m:>6} {n:>6} {k:>6}  {label:<14} {p:>9.1f} {t:>10.1f} {p / t:>9.2f}", flush=True)
        print(f"geomean ptc/torch: {statistics.geometric_mean(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
