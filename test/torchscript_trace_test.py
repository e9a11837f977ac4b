#!/usr/bin/env python3
"""Traced TorchScript modules whose size arithmetic feeds both sizes and tensor math.

torch.jit.trace records `B, H, W, C = x.shape` as 0-dim tensors (prim::NumToTensor) and the
arithmetic on them as aten ops on tensors: padding amounts computed with %, rsub and a floor
division (swin_t's window padding), a scale computed from a size ((C // heads) ** -0.5, swin_t's
attention), and a true division of sizes, which stays float32. Each
module is traced at two shapes, inspected (no unknown op may be listed), compiled with
`ptc compile --input-shape`, and run against the trace (dtypes equal, max abs error within 1e-5).

    .venv/bin/python test/torchscript_trace_test.py [--ptc-binary build/ptc]

Exit code 0 when every case passed.
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
import ptc  # noqa: E402


class WindowPad(torch.nn.Module):
    """Pads H and W up to multiples of 7 and scales by the head size, as swin_t's window attention."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(12, 12)

    def forward(self, x):  # [B, H, W, C]
        B, H, W, C = x.shape
        extra = torch.div(W, 4, rounding_mode="floor") % 2  # traced as div(rounding_mode="floor")
        x = F.pad(x, (0, 0, 0, (7 - W % 7) % 7 + extra, 0, (7 - H % 7) % 7))
        q = self.fc(x) * (C // 3) ** -0.5 * (C / 8)
        # A true division of sizes is a float32 0-dim tensor, even where it is exact.
        return q.reshape(B, -1, C).softmax(-1), C / 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    args = ap.parse_args()
    torch.manual_seed(0)
    model = WindowPad().eval()
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        for shape in [(2, 10, 12, 12), (1, 14, 9, 12)]:
            x = torch.randn(shape)
            tag = "_".join(map(str, shape))  # a library path per shape (dlopen keeps one open per path)
            pt, so = f"{work}/m_{tag}.pt", f"{work}/m_{tag}.so"
            with torch.no_grad():
                traced = torch.jit.trace(model, (x,))
                traced.save(pt)
                want = traced(x)  # (eager returns C / 4 as a Python float; the trace, as a tensor)
            dims = "x".join(map(str, shape))
            # inspect lists no unknown op: the size nodes left dead by the constants do not count.
            ins = subprocess.run([args.ptc_binary, "inspect", pt, "--input-shape", dims], capture_output=True, text=True)
            if "unknown ops: none" not in ins.stdout:
                print(f"FAIL {shape}: ptc inspect lists unknown ops:\n{ins.stdout}{ins.stderr}")
                failed += 1
                continue
            r = subprocess.run([args.ptc_binary, "compile", pt, "-o", so, "-q", "--input-shape", dims],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"FAIL {shape}: {r.stderr.strip()}")
                failed += 1
                continue
            with ptc.Model(so) as m:
                got = m(x)
            ok = len(got) == len(want) and all(g.shape == w.shape and g.dtype == w.dtype for g, w in zip(got, want))
            err = max((g - w).abs().max().item() for g, w in zip(got, want)) if ok else float("nan")
            ok = ok and err <= 1e-5
            print(f"{'ok  ' if ok else 'FAIL'} {shape}: max abs error {err:.2e}")
            failed += not ok
    print(f"{2 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
