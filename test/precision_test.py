#!/usr/bin/env python3
"""`--precision bf16 / fp16` against eager under torch.autocast: small float32 modules (an MLP, a
CNN with batch norm, a transformer encoder layer, a GEMM-heavy attention written with matmuls)
are exported with a dynamic batch, compiled with each precision and run at several batch sizes;
and a small classifier trained with `--train --precision bf16 / fp16` against torch.autocast
training (fp16 with ptc.GradScaler against torch.amp.GradScaler).

The rule (the one the GPU bench states too): ptc's error against float32 eager, as an RMS over
each output relative to the output's RMS, must be at most 1.5x the error of eager under
torch.autocast(device, dtype), plus 1e-6. It holds for each output pooled over all batch sizes,
and for each (batch, output) with at least 64 elements: over fewer, one RMS is too noisy a
statistic to compare (a per-row sum at batch 1 is a single rounding error, which may land 5x
either side of autocast's). The worst of a module's errors must also be at least a
twentieth of autocast's worst, so that a library which ignored the flag and computed in float32
fails. (Single outputs may be far better than autocast's: ptc keeps the ops outside the library
operations in float32, where autocast runs them in the widest input dtype.) Outputs keep float32.

    .venv/bin/python test/precision_test.py [--ptc-binary build/ptc] [--device cpu|cuda] [-v]

Prints one line per check and 'N passed, N failed'; exit code 0 when all passed, 1 otherwise.
"""
import argparse
import json
import math
import os
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "test"))
warnings.filterwarnings("ignore", message=".*non-writable.*")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ptc  # noqa: E402
from python_package_test import Runner  # noqa: E402

WORSE = 1.5    # ptc's error may be up to this multiple of autocast's
FLOOR = 1e-6   # plus this (relative RMS)
BETTER = 20.0  # and at least autocast's divided by this (the flag took effect)
PER_BATCH_MIN = 64  # elements an output needs for its own per-batch comparison


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 128), torch.nn.Linear(128, 10)

    def forward(self, x):  # [b, 64]
        h = F.gelu(self.fc1(x))
        h = torch.relu(self.fc2(h)) + h[:, :128]
        return self.fc3(h), h.sum(-1)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32)
        self.c2, self.b2 = torch.nn.Conv2d(32, 32, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(32)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.pw = torch.nn.Conv2d(32, 64, 1)
        self.fc = torch.nn.Linear(64, 10)
        for bn in (self.b1, self.b2):
            with torch.no_grad():
                bn.running_mean.uniform_(-0.2, 0.2)
                bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):  # [b, 3, 16, 16]
        h = torch.relu(self.b1(self.c1(x)))
        h = torch.relu(self.b2(self.c2(h)))
        h = h + F.silu(self.dw(h))
        h = torch.relu(self.pw(h))
        return self.fc(h.mean((2, 3)))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, activation="gelu")

    def forward(self, x):  # [b, 12, 64]
        return self.layer(x)


class MatmulAttention(torch.nn.Module):
    """Attention written out with matmul and softmax (the scores go through autocast's fp32 softmax)."""

    def __init__(self):
        super().__init__()
        self.qkv, self.proj = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):  # [b, 10, 32]
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        s = torch.matmul(q, k.transpose(-1, -2)) * 32 ** -0.5
        p = torch.softmax(s, dim=-1)
        return x + self.proj(torch.bmm(p, v)), torch.log_softmax(s, dim=-1)


class GPT2MLP(torch.nn.Module):
    """GPT-2's MLP: the tanh-GELU written out (transformers' gelu_new), which reads the first
    linear layer's result three times; on the CPU it runs as that layer's oneDNN post-op."""

    def __init__(self):
        super().__init__()
        self.fc, self.proj = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x):  # [b, 10, 64]
        h = self.fc(x)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.proj(h)


class Classifier(torch.nn.Module):
    """A small CNN with its loss, for --train --precision bf16."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc1, self.fc2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 10)

    def forward(self, x, target):  # [b, 3, 12, 12], [b] class ids
        h = torch.relu(self.c2(torch.relu(self.c1(x)))).mean((2, 3))
        logp = torch.log_softmax(self.fc2(F.gelu(self.fc1(h))), dim=-1)
        return -logp.gather(1, target[:, None]).mean()


TRAIN_STEPS, TRAIN_LR = 30, 0.1
LOSS_TOL = 0.02  # the loss curve within 2% of eager's under autocast, step by step


def check_training(args, work, precision):
    """--train --precision bf16 / fp16 against torch.autocast training: fp32 master weights,
    half-precision GEMMs and convolutions; the first step's weight gradients by the autocast
    rule, then the loss over TRAIN_STEPS SGD steps within LOSS_TOL of eager's. fp16 scales the
    loss (ptc.GradScaler against torch.amp.GradScaler, both from 2**16), and a scale that
    overflows float16 must skip the step and halve the scale."""
    torch.manual_seed(0)
    model = Classifier()
    x, t = torch.randn(16, 3, 12, 12), torch.randint(0, 10, (16,))
    pt2, so = os.path.join(work, "classifier.pt2"), os.path.join(work, f"classifier_train_{precision}.so")
    if not os.path.exists(pt2):
        torch.export.save(torch.export.export(model, (x, t)), pt2)
    ptc.compile(pt2, so, device=args.device, precision=precision, train=True, ptc=args.ptc_binary)
    tr = ptc.load(so)
    dev, dtype, fp16 = args.device, DTYPES[precision], precision == "fp16"
    eager = Classifier().to(dev)
    eager.load_state_dict(model.state_dict())
    exact = Classifier().to(dev)
    exact.load_state_dict(model.state_dict())
    x, t = x.to(dev), t.to(dev)
    notes = []
    if fp16:  # an overflowing scale: the step is skipped, the scale backs off
        big = ptc.GradScaler(init_scale=2.0 ** 40)
        before = {n: p.clone() for n, p in tr.params.items()}
        tr.zero_grad()
        (_,), saved = tr.forward_train(x, t)
        tr.backward(saved, [big.loss_grad(dev)])
        saved.free()
        if big.step(tr, lambda: tr.sgd_step(TRAIN_LR)) or not big.found_inf:
            raise AssertionError("a loss scale of 2**40 did not overflow float16's gradients")
        big.update()
        if big.scale != 2.0 ** 39 or any(not torch.equal(before[n], p) for n, p in tr.params.items()):
            raise AssertionError("the skipped step changed the parameters or did not halve the scale")
        notes.append("2**40 skipped")
    opt = torch.optim.SGD(eager.parameters(), lr=TRAIN_LR)
    scaler, ref_scaler = ptc.GradScaler(), torch.amp.GradScaler(dev, enabled=fp16)
    worst = 0.0
    for step in range(TRAIN_STEPS):
        tr.zero_grad()
        (loss,), saved = tr.forward_train(x, t)
        tr.backward(saved, [scaler.loss_grad(dev) if fp16 else torch.ones((), device=dev)])
        saved.free()
        opt.zero_grad()
        with torch.autocast(dev, dtype=dtype):
            ref = eager(x, t)
        ref_scaler.scale(ref).backward()
        if step == 0:  # the gradients against exact fp32's, as the inference rule (autocast's unscaled)
            exact(x, t).backward()
            probe = Classifier().to(dev)
            probe.load_state_dict(model.state_dict())
            with torch.autocast(dev, dtype=dtype):
                probe_loss = probe(x, t)
            probe_loss.backward()
            grads = dict(probe.named_parameters())
            s = scaler.scale if fp16 else 1.0
            e_ptc = max(rel_rms(tr.grads[n] / s, p.grad) for n, p in exact.named_parameters())
            e_auto = max(rel_rms(grads[n].grad, p.grad) for n, p in exact.named_parameters())
            if not (e_auto == e_auto and e_ptc == e_ptc) or e_ptc > WORSE * e_auto + FLOOR or e_ptc < e_auto / BETTER:
                raise AssertionError(f"first step's gradients: error {e_ptc:.3g}, autocast's {e_auto:.3g}")
            notes.append(f"first gradients: error {e_ptc:.2e}, autocast {e_auto:.2e}")
        rel = abs(loss.item() - ref.item()) / abs(ref.item())
        worst = max(worst, rel)
        if rel > LOSS_TOL:
            raise AssertionError(f"step {step}: loss {loss.item():.5f}, eager under autocast {ref.item():.5f}")
        if fp16:
            scaler.step(tr, lambda: tr.sgd_step(TRAIN_LR))
            scaler.update()
        else:
            tr.sgd_step(TRAIN_LR)
        ref_scaler.step(opt)
        ref_scaler.update()
    tr.close()
    notes.append(f"loss over {TRAIN_STEPS} steps within {worst:.2%} of autocast's (last {ref.item():.4f})")
    return "; ".join(notes)


# name -> (module, input shape without the batch, batch sizes)
CASES = {
    "mlp": (MLP, (64,), (1, 5, 16, 40)),
    "cnn": (CNN, (3, 16, 16), (1, 4)),
    "encoder": (Encoder, (12, 64), (1, 3)),
    "matmul_attention": (MatmulAttention, (10, 32), (2, 5)),
    "gpt2_mlp": (GPT2MLP, (10, 64), (1, 3)),
}
# Ops that must run inside a GEMM kernel (as its epilogue) on the CPU, per case.
FUSED_INTO_GEMM = {"gpt2_mlp": "aten::tanh"}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def rel_rms(got, ref):
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    scale = ref.pow(2).mean().sqrt().item() or 1.0
    return (got - ref).pow(2).mean().sqrt().item() / scale


def outputs(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def check(args, name, precision, libs, work):
    make, shape, batches = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    pt2 = os.path.join(work, f"{name}.pt2")
    if name not in libs:
        x = torch.randn(2, *shape)
        ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
        torch.export.save(ep, pt2)
        libs[name] = {}
    so = os.path.join(work, f"{name}_{precision}.so")
    report = os.path.join(work, f"{name}_{precision}.json")
    ptc.compile(pt2, so, device=args.device, precision=precision, ptc=args.ptc_binary, report=report)
    if args.device == "cpu" and name in FUSED_INTO_GEMM:
        with open(report) as f:
            for k in json.load(f)["kernels"]:
                if any(n["op"] == FUSED_INTO_GEMM[name] for n in k.get("nodes", [])) and k["kind"] != "gemm":
                    raise AssertionError(f"{FUSED_INTO_GEMM[name]} runs in {k['kind']} kernel {k['name']}, not in a GEMM's epilogue")
    lib = ptc.load(so)
    dev = args.device
    model = model.to(dev)
    worst = []
    pooled = {}  # output -> [sum (ptc - ref)^2, sum (autocast - ref)^2, sum ref^2]
    for b in batches:
        x = torch.randn(b, *shape, device=dev)
        with torch.no_grad():
            ref = outputs(model(x))
            with torch.autocast(dev, dtype=DTYPES[precision]):
                auto = outputs(model(x))
        got = outputs(lib(x))
        if len(got) != len(ref):
            raise AssertionError(f"{len(got)} outputs, eager has {len(ref)}")
        for i, (g, r, a) in enumerate(zip(got, ref, auto)):
            if g.dtype != r.dtype or g.shape != r.shape:
                raise AssertionError(f"output {i}: {g.dtype} {list(g.shape)}, eager {r.dtype} {list(r.shape)}")
            e_ptc, e_auto = rel_rms(g, r), rel_rms(a, r)
            if r.numel() >= PER_BATCH_MIN and e_ptc > WORSE * e_auto + FLOOR:
                raise AssertionError(f"batch {b} output {i}: error {e_ptc:.3g} > {WORSE} x autocast's {e_auto:.3g}")
            g, r, a = (t.detach().double().cpu() for t in (g, r, a))
            sums = pooled.setdefault(i, [0.0, 0.0, 0.0])
            for k, v in enumerate(((g - r).pow(2).sum(), (a - r).pow(2).sum(), r.pow(2).sum())):
                sums[k] += v.item()
    for i, (se_ptc, se_auto, s_ref) in pooled.items():
        e_ptc, e_auto = (se_ptc / (s_ref or 1.0)) ** 0.5, (se_auto / (s_ref or 1.0)) ** 0.5
        if e_ptc > WORSE * e_auto + FLOOR:
            raise AssertionError(f"output {i} over batches {list(batches)}: error {e_ptc:.3g} > {WORSE} x autocast's {e_auto:.3g}")
        worst.append((e_ptc, e_auto))
    e_ptc, e_auto = max(w[0] for w in worst), max(w[1] for w in worst)
    if e_ptc < e_auto / BETTER:
        raise AssertionError(f"worst error {e_ptc:.3g} < autocast's {e_auto:.3g} / {BETTER}: the library computes in float32")
    return f"worst relative RMS {e_ptc:.2e}, autocast {e_auto:.2e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--only", nargs="*", help="case names (and 'train' for the training checks)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    r = Runner(args.verbose)
    libs = {}
    with tempfile.TemporaryDirectory(prefix="ptc-precision-") as work:
        for name in args.only or CASES:
            if name == "train":
                continue
            for precision in DTYPES:
                r.check(f"{name} --precision {precision} ({args.device})", lambda: check(args, name, precision, libs, work))
        if not args.only or "train" in args.only:
            for precision in DTYPES:
                r.check(f"--train --precision {precision} ({args.device})", lambda: check_training(args, work, precision))
    print(f"{r.passed} passed, {r.failed} failed")
    return 0 if r.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
