#!/usr/bin/env python3
"""A model with more than 2 GiB of weights (CTest `big_weights_over_2gib`, label `long`).

Exports a stack of N Linear(8192, 8192) layers with random fp32 weights (default 9: 2.25 GiB)
and checks:
  - embedded weights that large are refused with one sentence naming --weights external;
  - `ptc compile --weights external` writes the library and its weights file, and the library's
    output is as close to the exact result (the model evaluated in float64) as eager float32 is:
    within max(4 x eager's error, 1e-4 of the output's scale) + 1e-5. The stack amplifies
    rounding (eager float32 is ~3e-5 from exact), so the exact result, not one float32 rounding
    of it, is the reference;
  - ptc_open maps the weights file: the process's anonymous memory grows by < 64 MiB;
  - a weights file with one byte changed, and a truncated one, are refused by ptc_open with a
    message (checksum / size).

    .venv/bin/python test/big_weights_test.py --ptc-binary build/ptc --work DIR [--layers 9]

Disk: the archive is re-written with deflate and each weight row repeats a random 256-value
period (different in every row and layer), so big.pt2 takes ~100 MiB and the test needs about
1 x the weights on disk (the .weights file); when the work folder's disk has less free, the test
says so and exits 77, which CTest reports as skipped. Memory: ~3 x the weights briefly.
"""
import argparse
import io
import os
import shutil
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "python"))  # the ptc package
warnings.filterwarnings("ignore")

import torch  # noqa: E402

import ptc  # noqa: E402

WIDTH = 8192
PERIOD = 256  # each weight row repeats a random run of this many values: compressible, yet every row differs
SKIP = 77     # CTest's SKIP_RETURN_CODE for this test


class Stack(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers))
        for layer in self.layers:
            period = torch.randn(WIDTH, PERIOD) / WIDTH**0.5
            layer.weight.copy_(period.repeat(1, WIDTH // PERIOD))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x)) * 2.0
        return x


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def anon_kib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    ap.add_argument("--work", required=True)
    ap.add_argument("--layers", type=int, default=9)
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    failures = []
    nbytes = a.layers * WIDTH * WIDTH * 4
    need = nbytes + (512 << 20)  # the .weights file, the deflated archive, the library
    free = shutil.disk_usage(work).free
    if free < need:
        print(f"SKIP: {work} has {free / 2**30:.2f} GiB free on its disk; this test needs {need / 2**30:.2f} GiB",
              flush=True)
        return SKIP

    def check(ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            failures.append(what)

    t0 = time.time()
    torch.manual_seed(0)
    with torch.no_grad():
        model = Stack(a.layers).eval()
        x = torch.randn(2, WIDTH)
        want = model(x)
        exact = x.double()
        for layer in model.layers:  # float64 one layer at a time: memory for one layer's copy
            exact = torch.tanh(exact @ layer.weight.double().T) * 2.0
        stored = io.BytesIO()
        torch.export.save(torch.export.export(model, (x,)), stored)
    del model
    pt2 = work / "big.pt2"
    with zipfile.ZipFile(stored) as src, zipfile.ZipFile(pt2, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    del stored
    print(f"exported {nbytes / 2**30:.2f} GiB of weights in {time.time() - t0:.1f} s "
          f"(deflated archive: {pt2.stat().st_size / 2**20:.0f} MiB)", flush=True)

    def run_ptc(*args):
        return subprocess.run([a.ptc_binary, *args], capture_output=True, text=True)

    r = run_ptc("compile", "-q", str(pt2), "-o", str(work / "embedded.so"), "--no-cache")
    check(r.returncode == 1 and "--weights external" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          f"embedded weights over 2 GiB are refused with one sentence: {r.stderr.strip()[:200]}")

    t0 = time.time()
    lib = work / "big.so"
    r = run_ptc("compile", "-q", str(pt2), "-o", str(lib), "--weights", "external", "--no-cache")
    check(r.returncode == 0, f"compile --weights external ({time.time() - t0:.1f} s) {r.stderr.strip()[:300]}")
    weights = work / "big.weights"
    check(weights.exists() and weights.stat().st_size >= nbytes, "the weights file holds every weight")
    pt2.unlink()  # disk: the archive is no longer needed

    before = anon_kib()
    t0 = time.time()
    m = ptc.Model(str(lib))
    opened = time.time() - t0
    grown = anon_kib() - before
    check(grown < 64 * 1024, f"ptc_open maps the weights: anonymous memory +{grown / 1024:.1f} MiB ({opened:.1f} s to open "
                             "and verify the checksum)")
    got = m(x)[0]
    scale = exact.abs().max().item()
    err = (got.double() - exact).abs().max().item()
    eager_err = (want.double() - exact).abs().max().item()
    tol = max(4 * eager_err, 1e-4 * scale) + 1e-5
    check(err <= tol, f"output matches the exact result: max err {err:.2e}, eager float32's {eager_err:.2e}, "
                      f"ptc vs eager {(got - want).abs().max().item():.2e} (tolerance {tol:.2e}; {cpu_model()})")
    m.close()

    def expect_open_error(fragment, what):
        try:
            ptc.Model(str(lib)).close()
            check(False, what + ": opened anyway")
        except RuntimeError as e:
            check(fragment in str(e), f"{what}: {e}")

    with open(weights, "r+b") as f:  # one byte in the last layer's weights
        f.seek(weights.stat().st_size - 12345)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x40]))
    expect_open_error("checksum", "a changed byte is refused")
    with open(weights, "r+b") as f:
        f.seek(weights.stat().st_size - 12345)
        f.write(byte)
    os.truncate(weights, weights.stat().st_size // 2)
    expect_open_error("truncated", "a truncated file is refused")
    weights.unlink()
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
