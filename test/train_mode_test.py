#!/usr/bin/env python3
"""Training-mode layers under `ptc compile --train`: models exported in train() mode (both export
flavours: torch.export's training IR and its core-aten decomposition), compiled, and checked
against torch.

Dropout (the library's counter-based RNG cannot reproduce torch's generator, so the reference
uses ptc's masks, read off the outputs the fixture returns):
  - masks: every element either dropped (0) or scaled by 1/(1-p) (within 1e-5); the dropped fraction
    within 5 sigma of p; two dropouts of one call draw different masks; the next call draws new
    ones; ptc_manual_seed replays them;
  - the outputs and every parameter's gradient against torch.autograd on the same model with
    those masks (tolerance 1e-4 relative to max(1, max|torch|)), so the backward applied the
    forward's masks (recomputed from the seed in the min-cut split, saved with --save-all);
  - an inference compile of the same export is refused with a sentence.

Batch norm (BatchNorm2d with and without affine, BatchNorm1d with another momentum, a dynamic
batch): against the same nn.Module in train() mode, per batch size:
  - outputs and every parameter's gradient (tolerance 1e-4 relative to max(1, max|torch|); a
    gradient outside it passes only if it is no further from float64 torch than twice torch's own
    fp32 gradient: a batch norm over two values amplifies rounding noise, and a bias before a
    batch norm has an exact gradient of 0, i.e. noise only);
  - the running statistics and num_batches_tracked the library holds after each forward
    (ptc_buffer_data), against the module's buffers (1e-5);
  - 3 steps of SGD with momentum: parameters and buffers after every step.

    .venv/bin/python test/train_mode_test.py [--ptc-binary build/ptc] [-v]
"""
import argparse
import copy
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "python"))  # the ptc package (train_device.py)
sys.path.insert(0, str(ROOT / "test"))
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from python_package_test import Runner  # noqa: E402
from train_device import trainer  # noqa: E402

TOL = 1e-4
DEVICE = "cpu"  # --device cuda
P1, P2 = 0.3, 0.5


class DropMLP(nn.Module):
    """Two dropouts on one activation (different streams), both returned so masks are visible."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 64)
        self.d1 = nn.Dropout(P1)
        self.d2 = nn.Dropout(P2)
        self.l2 = nn.Linear(64, 4)

    def forward(self, x):
        t = torch.tanh(self.l1(x))
        h1, h2 = self.d1(t), self.d2(t)
        return self.l2(h1 + h2), h1, h2


class BNNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(8, affine=False)
        self.fc = nn.Linear(8, 16)
        self.bn3 = nn.BatchNorm1d(16, momentum=0.3)
        self.out = nn.Linear(16, 5)

    def forward(self, x):
        h = torch.relu(self.bn1(self.c1(x)))
        h = torch.relu(self.bn2(self.c2(h)))
        return self.out(torch.relu(self.bn3(self.fc(h.mean((2, 3))))))


def bn_model():
    torch.manual_seed(5)
    m = BNNet()
    with torch.no_grad():  # running statistics away from their defaults, so the update shows
        for mod in m.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                mod.running_mean.copy_(torch.randn(mod.num_features) * 0.1)
                mod.running_var.copy_(torch.rand(mod.num_features) + 0.5)
                mod.num_batches_tracked.fill_(3)
    return m.train()


def err64(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item())


def compare_buffers(t, ref, what):
    got = t.buffers()
    want = dict(ref.named_buffers())
    if set(got) != set(want):
        raise AssertionError(f"{what}: the library's buffers {sorted(got)} are not the module's {sorted(want)}")
    for n, b in want.items():
        ok, msg = close(got[n], b, 1e-5)
        if not ok:
            raise AssertionError(f"{what}: buffer {n}: {msg}")


def check_batch_norm(lib, model):
    t = trainer(lib, DEVICE)
    ref = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(11)
    compare_buffers(t, ref, "at open")
    ref64 = copy.deepcopy(model).double()
    for batch in (2, 5, 16):
        x = torch.randn(batch, 3, 12, 12, generator=gen)
        ref_state = copy.deepcopy(ref.state_dict())  # the float64 copy starts where this forward does
        ref.zero_grad(set_to_none=True)
        want = ref(x)
        t.zero_grad()
        (got,), saved = t.forward_train(x)
        ok, msg = close(got, want)
        if not ok:
            raise AssertionError(f"batch {batch}: output: {msg}")
        compare_buffers(t, ref, f"batch {batch}")
        g = torch.randn(want.shape, generator=gen)
        want.backward(g)
        t.backward(saved, [g])
        saved.free()
        ref64.zero_grad(set_to_none=True)
        ref64.load_state_dict(ref_state)
        ref64(x.double()).backward(g.double())
        g64 = dict(ref64.named_parameters())
        for n, p in ref.named_parameters():
            ok, msg = close(t.grads[n], p.grad)
            if not ok:  # fp32 noise amplified by a batch norm over few values: judge against float64
                e_p, e_t = err64(t.grads[n], g64[n].grad), err64(p.grad, g64[n].grad)
                if e_p > max(2 * e_t, TOL):
                    raise AssertionError(f"batch {batch}: grad of {n}: {msg}; vs float64: ptc {e_p:.2g}, torch fp32 {e_t:.2g}")
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(8, 3, 12, 12, generator=gen)
    w = torch.randn(8, 5, generator=gen)
    for step in range(3):
        opt.zero_grad()
        (ref(x) * w).sum().backward()
        t.zero_grad()
        _, saved = t.forward_train(x)
        t.backward(saved, [w])
        saved.free()
        opt.step()
        t.sgd_step(0.05, 0.9, 0.0, 0.0, False)
        for n, p in ref.named_parameters():
            ok, msg = close(t.params[n], p, 2e-5)
            if not ok:
                raise AssertionError(f"SGD step {step + 1}: parameter {n}: {msg}")
        compare_buffers(t, ref, f"SGD step {step + 1}")
    t.close()
    return "batches 2, 5, 16 and 3 SGD steps agree"


def check_manifest(ptc, lib):
    import json
    res = subprocess.run([ptc, "inspect", "--json", lib], capture_output=True, text=True)
    if res.returncode != 0:
        raise AssertionError(res.stderr.strip())
    m = json.loads(res.stdout)
    m = m.get("manifest", m)
    want = {f"bn{i}.{b}" for i in (1, 2, 3) for b in ("running_mean", "running_var", "num_batches_tracked")}
    if len(m["outputs"]) != 1 or set(m.get("updated_buffers", [])) != want:
        raise AssertionError(f"outputs {m['outputs']}, updated_buffers {m.get('updated_buffers')}")
    return f"1 output, {len(m['updated_buffers'])} updated buffers"


def export(model, args, path, core):
    ep = torch.export.export(model, args, dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=256)},))
    if core:
        ep = ep.run_decompositions()
    torch.export.save(ep, path)


def compile_lib(ptc, pt2, out, extra=()):
    r = subprocess.run([ptc, "compile", pt2, "-o", out, "--no-cache", *extra], capture_output=True, text=True)
    return r


def masked_reference(model, x, masks):
    """DropMLP's outputs with the given keep-masks instead of random ones (torch's arithmetic:
    x * mask * (1 / (1 - p)))."""
    t = torch.tanh(model.l1(x))
    h1 = t * masks[0] * (1 / (1 - P1))
    h2 = t * masks[1] * (1 / (1 - P2))
    return model.l2(h1 + h2), h1, h2


def close(a, b, tol=TOL):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    scale = max(1.0, b.abs().max().item())
    err = (a - b).abs().max().item()
    return err <= tol * scale, f"max err {err:.3g}"


def check_masks(lib):
    t = trainer(lib, DEVICE)
    x = torch.randn(128, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        tt = torch.tanh(torch.nn.functional.linear(x, t.params["l1.weight"], t.params["l1.bias"]))
    (y, h1, h2), s = t.forward_train(x)
    s.free()
    notes = []
    for h, p in ((h1, P1), (h2, P2)):
        kept = h != 0
        scaled = tt * (1 / (1 - p))
        ok, msg = close(h[kept], scaled[kept], 1e-5)
        if not ok:
            raise AssertionError(f"p={p}: kept elements are not x / (1 - p): {msg}")
        frac = 1 - kept.double().mean().item()
        sigma = (p * (1 - p) / h.numel()) ** 0.5
        if abs(frac - p) > 5 * sigma:
            raise AssertionError(f"p={p}: dropped fraction {frac:.3f}, more than 5 sigma from p")
        notes.append(f"p={p}: dropped {frac:.3f}")
    if torch.equal(h1 != 0, h2 != 0):
        raise AssertionError("the two dropouts drew the same mask")
    (_, h1b, _), s = t.forward_train(x)
    s.free()
    if torch.equal(h1 != 0, h1b != 0):
        raise AssertionError("the next forward call drew the same mask")
    t.manual_seed(1234)
    (_, a, _), s = t.forward_train(x)
    s.free()
    t.manual_seed(1234)
    (_, b, _), s = t.forward_train(x)
    s.free()
    if not torch.equal(a, b):
        raise AssertionError("ptc_manual_seed did not replay the masks")
    t.close()
    return "; ".join(notes)


def check_gradients(lib, model):
    t = trainer(lib, DEVICE)
    ref = DropMLP()
    ref.load_state_dict(model.state_dict())
    for n, p in ref.named_parameters():  # (the library was exported from the same model)
        if not torch.equal(t.params[n], p.detach()):
            raise AssertionError(f"the library's initial {n} is not the model's")
    gen = torch.Generator().manual_seed(3)
    notes = []
    for batch in (2, 8, 33):
        x = torch.randn(batch, 16, generator=gen)
        t.zero_grad()
        outs, saved = t.forward_train(x)
        masks = [outs[1] != 0, outs[2] != 0]
        ref.zero_grad(set_to_none=True)
        want = masked_reference(ref, x, masks)
        for k, (a, b) in enumerate(zip(outs, want)):
            ok, msg = close(a, b)
            if not ok:
                raise AssertionError(f"batch {batch}: output {k}: {msg}")
        gouts = [torch.randn(o.shape, generator=gen) for o in want]
        torch.autograd.backward(want, gouts)
        t.backward(saved, gouts)
        saved.free()
        for n, p in ref.named_parameters():
            ok, msg = close(t.grads[n], p.grad)
            if not ok:
                raise AssertionError(f"batch {batch}: grad of {n}: {msg}")
        notes.append(f"batch {batch} ok")
    t.close()
    return ", ".join(notes)


def main():
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="compile with --device cuda and run the libraries on the GPU (torch's reference on the CPU)")
    ap.add_argument("--build-only", help="only export and compile, into this directory")
    ap.add_argument("--libs", help="use what a --build-only run wrote here (a GPU machine without ptc)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    DEVICE = args.device
    torch.set_num_threads(2)
    r = Runner(args.verbose)
    work = args.libs or args.build_only or tempfile.mkdtemp(prefix="ptc-train-mode-")
    os.makedirs(work, exist_ok=True)
    checking = not args.build_only

    def build(pt2, out, extra):
        if args.libs:
            if not os.path.exists(out):
                raise AssertionError(f"{out} was not built")
            return "prebuilt"
        res = compile_lib(args.ptc_binary, pt2, out, [*extra, "--device", DEVICE])
        if res.returncode != 0:
            raise AssertionError(res.stderr.strip())
        return "compiled"

    def refused(pt2, tag, what):
        def run():
            res = compile_lib(args.ptc_binary, pt2, os.path.join(work, tag + ".infer.so"))
            if res.returncode == 0 or what not in res.stderr:
                raise AssertionError(f"inference compile: rc {res.returncode}: {res.stderr.strip()}")
            return res.stderr.strip().splitlines()[-1]
        if not args.libs:
            r.check(f"{tag}: an inference compile is refused", run)

    torch.manual_seed(0)
    model = DropMLP().train()
    bn = bn_model()
    for core in (False, True):
        tag = "dropout." + ("core" if core else "pt2")
        pt2 = os.path.join(work, tag + ".pt2")
        if not args.libs:
            export(model, (torch.randn(8, 16),), pt2, core)
        libs = {}
        for mode, extra in (("min_cut", ["--train"]), ("save_all", ["--train", "--save-all"])):
            out = os.path.join(work, f"{tag}.{mode}.so")
            if r.check(f"{tag} [{mode}]: compile", lambda out=out, extra=extra: build(pt2, out, extra)):
                libs[mode] = out
            if mode in libs and checking:
                r.check(f"{tag} [{mode}]: outputs and gradients vs torch.autograd with ptc's masks",
                        lambda mode=mode: check_gradients(libs[mode], model))
        if "min_cut" in libs and checking:
            r.check(f"{tag}: masks (rate, scale, streams, calls, manual_seed)", lambda: check_masks(libs["min_cut"]))
        refused(pt2, tag, "dropout in training mode")
    for core in (False, True):
        tag = "batch_norm." + ("core" if core else "pt2")
        pt2 = os.path.join(work, tag + ".pt2")
        if not args.libs:
            export(copy.deepcopy(bn), (torch.randn(4, 3, 12, 12),), pt2, core)
        for mode, extra in (("min_cut", ["--train"]), ("save_all", ["--train", "--save-all"])):
            out = os.path.join(work, f"{tag}.{mode}.so")
            if r.check(f"{tag} [{mode}]: compile", lambda out=out, extra=extra: build(pt2, out, extra)) and checking:
                r.check(f"{tag} [{mode}]: outputs, gradients, running statistics, SGD vs torch train()",
                        lambda out=out: check_batch_norm(out, bn))
                if not args.libs and mode == "min_cut":
                    r.check(f"{tag}: the manifest lists the model's output and the updated buffers",
                            lambda out=out: check_manifest(args.ptc_binary, out))
        refused(pt2, tag, "batch norm in training mode")
    print(f"{r.passed} passed, {r.failed} failed")
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
