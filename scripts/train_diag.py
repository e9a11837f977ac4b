#!/usr/bin/env python3
"""Per-parameter gradient errors of a training library against torch fp32 and float64, for one
input of a fixture or real model (a diagnostic for ill-conditioned models; not a test).

    python3 scripts/train_diag.py LIB.so MODEL.pt2 [--device cuda] [--seed 7] [--repeat]

Prints, per parameter, max|ptc - torch64| and max|torch32 - torch64| relative to
max(1, max|torch64|); --repeat runs the library twice and reports the largest difference
between the runs (0 for a deterministic library).
"""
import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "test"))
import train_test as tt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib")
    ap.add_argument("pt2")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeat", action="store_true")
    args = ap.parse_args()
    pt2 = Path(args.pt2)
    name = pt2.name.split(".")[0]
    tt.MODELS_DIR = pt2.parent
    torch.set_num_threads(2)
    ref = tt.load_ref(pt2)
    gen = torch.Generator().manual_seed(args.seed)
    xs = tt.make_inputs(tt.cases(name)[0], gen)
    with torch.no_grad():
        outs0 = ref(*xs)
    outs0 = outs0 if isinstance(outs0, (tuple, list)) else (outs0,)
    ws = [torch.randn(o.shape, generator=gen) / max(1, o.numel()) ** 0.5 for o in outs0]
    outs = ref(*xs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    sum((o * w).sum() for o, w in zip(outs, ws)).backward()
    t = tt.trainer(args.lib, args.device)

    def run():
        t.zero_grad()
        got, s = t.forward_train(*xs)
        t.backward(s, ws)
        s.free()
        return got, t.grads

    got, grads = run()
    for k, (a, b) in enumerate(zip(got, outs)):
        print(f"output {k}: max err {(a - b.detach()).abs().max().item():.3g} (max |torch| {b.abs().max().item():.3g})")
    if args.repeat:
        _, again = run()
        print("run-to-run max difference:", max((grads[n] - again[n]).abs().max().item() for n in grads))
    p64 = tt.grads64(ref, xs, ws)
    every = dict(ref.named_parameters(remove_duplicate=False))
    for p in t.param_infos:
        n = p.name
        print(f"{n:44s} ptc {tt.rel_err(grads[n], p64[n].grad):.2e}  torch32 {tt.rel_err(every[n].grad, p64[n].grad):.2e}")


if __name__ == "__main__":
    main()
