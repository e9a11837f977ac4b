#!/usr/bin/env python3
"""Training libraries (`ptc compile --train`) against torch.autograd and torch.optim.

For each fixture and export flavour, compiles a training library twice (min-cut partition and
--save-all) and checks, on every recorded input shape of the fixture:
  - the outputs of ptc_forward_train against eager,
  - the gradients of every parameter (and of inputs that require grad) after ptc_backward with
    random output gradients, against torch.autograd.backward on the same .pt2 module,
  - gradient accumulation over two backward calls,
  - 5 steps of SGD (momentum, dampening, weight decay, Nesterov) and of AdamW against
    torch.optim on the same loss, parameters compared after every step,
  - that min-cut saves no more bytes than --save-all (the compile's report).
Tolerances (fp32): outputs and gradients max|ptc - torch| <= 1e-4 * max(1, max|torch|) (ATOL_REL);
parameters after optimizer steps (the torch optimizer fed ptc's gradients, which are first
checked against torch's): 2e-5 * max(1, max|param|).
Real models (--models-dir models/cache): --f64-ref judges gradients against float64 torch (ptc at
most twice torch fp32's own error), and --sensitivity N also accepts twice the float64 gradient's
spread over N runs on inputs with rounding-sized noise (a deep ReLU network at 224x224 has
activations within rounding distance of 0, whose decision flips move the gradient by ~1e-3).
--device cuda runs the libraries on the GPU; --build-only / --libs split compiling from checking.

    .venv/bin/python test/train_test.py [--ptc-binary build/ptc] [--models mlp tiny_tfm] [-v]
"""
import argparse
import json
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

from python_package_test import Runner  # noqa: E402  (one check line each, pass/fail counts)
from train_device import trainer  # noqa: E402

GRAD_TOL = 1e-4
STEP_TOL = 2e-5
DEFAULT_MODELS = ["mlp", "mlp_dyn", "small_cnn", "tiny_tfm", "tfm_dyn", "index_ops", "mha", "mbv2_dyn", "cnn_pool"]


F64_REF = False  # --f64-ref: judge gradients against float64 torch (ill-conditioned real models)
SENSITIVITY = 0  # --sensitivity N: perturbed float64 runs per check
SENS_EPS = 4e-6  # their relative input noise (ptc's and torch's fp32 forward errors are ~1e-6)
PREBUILT = False
DEVICE = "cpu"   # --device cuda: the libraries run on the GPU (torch's reference stays on the CPU)


def rel_err(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return (a - b).abs().max().item() / max(1.0, b.abs().max().item()) if b.numel() else 0.0


def grads64(ref, xs, gouts):
    """torch's gradients in float64 (the module copied and converted). With --sensitivity N, each
    gradient also carries .spread: the largest relative change of the float64 gradient over N
    runs on inputs perturbed by SENS_EPS relative noise (how far rounding-sized changes of the
    activations move it: a ReLU or max-pool decision within rounding distance of its threshold
    flips, and the gradient jumps)."""
    import copy
    r = copy.deepcopy(ref).double()

    def run(inputs):
        r.zero_grad(set_to_none=True)
        outs = r(*inputs)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        torch.autograd.backward(outs, [g.double() for g in gouts])
        return {n: p.grad.clone() for n, p in r.named_parameters(remove_duplicate=False)}

    base_in = [x.double() if x.is_floating_point() else x for x in xs]
    base = run(base_in)
    spread = {n: 0.0 for n in base}
    gen = torch.Generator().manual_seed(99)
    for _ in range(SENSITIVITY):
        noisy = [x * (1 + SENS_EPS * torch.randn(x.shape, generator=gen, dtype=torch.float64)) if x.is_floating_point() else x
                 for x in base_in]
        for n, g in run(noisy).items():
            spread[n] = max(spread[n], rel_err(g, base[n]))

    class G:
        def __init__(self, g, s):
            self.grad, self.spread = g, s
    return {n: G(base[n], spread[n]) for n in base}


def grad_check(name, got, t32, p64):
    """ptc's gradient against torch's: within GRAD_TOL, or (--f64-ref) no further from the float64
    gradient than twice torch's own float32 one (or GRAD_TOL), or (--sensitivity) than twice the
    float64 gradient's own spread under rounding-sized input noise."""
    if not F64_REF:
        return close(got, t32, GRAD_TOL)
    t64 = p64[name].grad
    e_p, e_t = rel_err(got, t64), rel_err(t32, t64)
    s = p64[name].spread
    return e_p <= max(2 * e_t, GRAD_TOL, 2 * s), f"vs float64: ptc {e_p:.2g}, torch fp32 {e_t:.2g}" + (
        f", float64 spread under {SENS_EPS:g} input noise {s:.2g}" if SENSITIVITY else "")


def close(a, b, tol):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if a.shape != b.shape:
        return False, f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
    scale = max(1.0, b.abs().max().item() if b.numel() else 1.0)
    err = (a - b).abs().max().item() if b.numel() else 0.0
    return err <= tol * scale, f"max err {err:.3g} (scale {scale:.3g})"


def compile_train(ptc, model, out, extra=()):
    report = out[:-3] + ".json"
    if PREBUILT:  # --libs: compiled beforehand (--build-only), e.g. for a GPU machine without ptc
        return json.load(open(report))["training"]
    cmd = [ptc, "compile", str(model), "-o", out, "--train", "--report", report, "--device", DEVICE, *EXTRA_FLAGS, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return json.load(open(report))["training"]


MODELS_DIR = ROOT / "models"
EXTRA_FLAGS = []  # --cuda-graphs


def cases(name):
    """Per recorded case: the input specs (shape, dtype, the recorded .npy for integer inputs)."""
    expect = json.load(open(MODELS_DIR / f"{name}.expect.json"))
    return [tuple((tuple(i["shape"]), i["dtype"], i["file"]) for i in c["inputs"]) for c in expect["cases"]]


def make_inputs(specs, gen):
    """Random float inputs; integer ones (token ids) are the fixture's recorded ones."""
    import numpy as np
    out = []
    for shape, dtype, file in specs:
        if dtype.startswith("float"):
            out.append(torch.randn(*shape, generator=gen))
        else:
            out.append(torch.from_numpy(np.load(MODELS_DIR / file)))
    return out


def load_ref(pt2):
    """The eager module of a .pt2, its float parameters requiring grad (the fixtures were exported
    under no_grad)."""
    ref = torch.export.load(str(pt2)).module()
    for p in ref.parameters():
        if p.dtype.is_floating_point:
            p.requires_grad_(True)
    return ref


def check_gradients(lib, pt2, shapes_list):
    torch.manual_seed(0)
    ref = load_ref(pt2)
    t = trainer(lib, DEVICE)
    names = [p.name for p in t.param_infos]
    ref_params = dict(ref.named_parameters(remove_duplicate=False))
    missing = [n for n in names if n not in ref_params]
    if missing:
        raise AssertionError(f"parameters {missing} not in the eager module")
    notes = []
    for shapes in shapes_list:
        gen = torch.Generator().manual_seed(sum(sum(spec[0]) for spec in shapes))
        xs = make_inputs(shapes, gen)
        ref.zero_grad(set_to_none=True)
        outs = ref(*xs)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        gouts = [torch.randn(o.shape, generator=gen) for o in outs]
        torch.autograd.backward(outs, gouts)
        t.zero_grad()
        got, saved = t.forward_train(*xs)
        for k, (a, b) in enumerate(zip(got, outs)):
            ok, msg = close(a, b, GRAD_TOL)
            if not ok:
                raise AssertionError(f"{shapes}: output {k}: {msg}")
        t.backward(saved, gouts)
        worst = 0.0
        p64 = grads64(ref, xs, gouts) if F64_REF else None
        for n in names:
            ok, msg = grad_check(n, t.grads[n], ref_params[n].grad, p64)
            if not ok:
                raise AssertionError(f"{shapes}: grad of {n}: {msg}")
            worst = max(worst, (t.grads[n] - ref_params[n].grad).abs().max().item())
        # Accumulation: a second backward of the same forward doubles the gradients.
        first = {n: t.grads[n].clone() for n in names[:2]}
        t.backward(saved, gouts)
        for n in names[:2]:
            ok, msg = close(t.grads[n], 2 * first[n], 1e-6)
            if not ok:
                raise AssertionError(f"{shapes}: accumulated grad of {n}: {msg}")
        saved.free()
        notes.append(f"{list(shapes[0][0])}: worst grad err {worst:.2g}")
    t.close()
    return "; ".join(notes)


def check_bad_calls(lib):
    t = trainer(lib, DEVICE)
    x = torch.randn(4, 64)
    before = {n: p.clone() for n, p in t.params.items()}
    msgs = []
    cases = [
        ("AdamW beta1 = 1", lambda: t.adamw_step(1e-3, (1.0, 0.999))),
        ("SGD lr < 0", lambda: t.sgd_step(-1.0)),
        ("backward with no gradients", lambda: t.backward(t.forward_train(x)[1], [])),
        ("forward_train with two inputs", lambda: t.forward_train(x, x)),
    ]
    if DEVICE == "cuda":
        def host_memory():  # host tensors past the Python side's device check: the library refuses them
            raw = t._t
            raw.device = "cpu"
            try:
                raw.forward_train(x)
            finally:
                raw.device = "cuda"
        cases.append(("forward_train with host memory", host_memory))
    for what, fn in cases:
        try:
            fn()
        except RuntimeError as e:
            msgs.append(str(e))
            if what.endswith("host memory") and "not CUDA device memory" not in str(e):
                raise AssertionError(f"{what}: unclear error: {e}")
            continue
        raise AssertionError(f"{what}: no error")
    if any(not torch.equal(before[n], t.params[n]) for n in before):
        raise AssertionError("a refused step changed the parameters")
    t.close()
    return msgs[0]


def check_out_buffers(lib):
    """forward_train(out=...) writes the outputs into the caller's tensors (bench_train.py's reused
    buffers) and gives the same results and gradients as new ones; wrong shapes are refused."""
    t = trainer(lib, DEVICE)
    x = torch.randn(4, 64)
    t.zero_grad()
    (y0,), s0 = t.forward_train(x)
    w = torch.randn(y0.shape)
    t.backward(s0, [w])
    s0.free()
    g0 = {n: g.clone() for n, g in t.grads.items()}
    buf = torch.full(tuple(y0.shape), float("nan"))
    t.zero_grad()
    (y1,), s1 = t.forward_train(x, out=[buf])
    t.backward(s1, [w])
    s1.free()
    if y1.data_ptr() != buf.data_ptr() or not torch.equal(y1.cpu(), y0.cpu()):
        raise AssertionError("forward_train(out=) did not write the same outputs into the given tensor")
    if any(not torch.equal(g0[n], t.grads[n]) for n in g0):
        raise AssertionError("the gradients after forward_train(out=) differ")
    try:
        t.forward_train(x, out=[torch.empty(3, 2)])
    except ValueError:
        pass
    else:
        raise AssertionError("forward_train(out=) took a tensor of the wrong shape")
    t.close()
    return "same outputs and gradients"


def check_optimizer(lib, pt2, shapes, kind, **hp):
    ref = load_ref(pt2)
    gen = torch.Generator().manual_seed(7)
    xs = make_inputs(shapes, gen)
    with torch.no_grad():
        outs0 = ref(*xs)
    outs0 = outs0 if isinstance(outs0, (tuple, list)) else (outs0,)
    # loss = sum(out * w) with w of unit norm: gradients of order one, so 5 steps stay in range.
    weights = [torch.randn(o.shape, generator=gen) / max(1, o.numel()) ** 0.5 for o in outs0]
    t = trainer(lib, DEVICE)
    # By ptc's names (a tied weight is one parameter under one of its names in both).
    every = dict(ref.named_parameters(remove_duplicate=False))
    params = {p.name: every[p.name] for p in t.param_infos}
    unique = list({id(p): p for p in params.values()}.values())  # (parameters the graph never reads are not ptc's)
    opt = (torch.optim.SGD if kind == "sgd" else torch.optim.AdamW)(unique, **hp)
    worst = 0.0
    for step in range(5):
        opt.zero_grad(set_to_none=False)
        outs = ref(*xs)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        loss = sum((o * w).sum() for o, w in zip(outs, weights))
        loss.backward()
        t.zero_grad()
        _, saved = t.forward_train(*xs)
        t.backward(saved, weights)  # d loss / d output = the weights
        saved.free()
        # Step for step: the gradients at the current parameters agree; the optimizers then get
        # the same gradients (ptc's), so that a gradient that is zero up to rounding noise (which
        # Adam normalizes to +-lr) cannot hide or fake a difference in the update itself.
        p64 = grads64(ref, xs, weights) if F64_REF else None
        with torch.no_grad():
            for n, p in params.items():
                ok, msg = grad_check(n, t.grads[n], p.grad, p64)
                if not ok:
                    raise AssertionError(f"step {step + 1}: gradient of {n}: {msg}")
                p.grad.copy_(t.grads[n])
        opt.step()
        if kind == "sgd":
            t.sgd_step(hp["lr"], hp.get("momentum", 0.0), hp.get("dampening", 0.0), hp.get("weight_decay", 0.0),
                       hp.get("nesterov", False))
        else:
            t.adamw_step(hp["lr"], hp.get("betas", (0.9, 0.999)), hp.get("eps", 1e-8), hp.get("weight_decay", 1e-2))
        for n, p in params.items():
            ok, msg = close(t.params[n], p, STEP_TOL)
            if not ok:
                raise AssertionError(f"step {step + 1}: parameter {n}: {msg}")
            worst = max(worst, (t.params[n] - p.detach()).abs().max().item())
    t.close()
    return f"5 steps, worst param err {worst:.2g}"


def main():
    global MODELS_DIR, GRAD_TOL, F64_REF, DEVICE, PREBUILT, SENSITIVITY
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("--flavours", nargs="+", default=["pt2", "core"])
    ap.add_argument("--modes", nargs="+", choices=["min_cut", "save_all"], default=["min_cut", "save_all"],
                    help="which partitions to build and check (the comparison of saved bytes needs both)")
    ap.add_argument("--models-dir", default=str(ROOT / "models"),
                    help="where NAME.pt2 / NAME.core.pt2 / NAME.expect.json are (models/cache for the real models "
                         "scripts/export_models.py --real exports)")
    ap.add_argument("--grad-tol", type=float, default=GRAD_TOL,
                    help="gradient tolerance relative to max(1, max|torch|) (default 1e-4; deep ReLU/max-pool networks "
                         "need more: a 1e-6 difference in an activation at exactly 0 or a max-pool near-tie flips a "
                         "mask, as between any two fp32 implementations)")
    ap.add_argument("--f64-ref", action="store_true",
                    help="judge gradients against torch in float64: ptc's error may be at most twice torch fp32's "
                         "own (for real models, whose fp32 gradients are ill-conditioned)")
    ap.add_argument("--sensitivity", type=int, default=0, metavar="N",
                    help="with --f64-ref: also accept a gradient no further from float64 torch than twice how far N "
                         f"float64 runs on inputs with {SENS_EPS:g} relative noise move it (decision flips at ReLU / "
                         "max-pool thresholds in deep CNNs at 224x224)")
    ap.add_argument("--keep", help="write the libraries here")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="compile with --device cuda and run the libraries on the GPU (torch's reference on the CPU)")
    ap.add_argument("--build-only", action="store_true", help="only compile the libraries (into --keep)")
    ap.add_argument("--libs", help="use the libraries a --build-only run wrote here instead of compiling (a GPU machine)")
    ap.add_argument("--cuda-graphs", action="store_true", help="compile with --cuda-graphs (with --device cuda)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(2)
    MODELS_DIR = Path(args.models_dir)
    GRAD_TOL = args.grad_tol
    F64_REF = args.f64_ref or args.sensitivity > 0
    SENSITIVITY = args.sensitivity
    DEVICE = args.device
    if args.cuda_graphs:
        EXTRA_FLAGS.append("--cuda-graphs")
    PREBUILT = bool(args.libs)
    if args.libs:
        args.keep = args.libs
    r = Runner(args.verbose)
    work = args.keep or tempfile.mkdtemp(prefix="ptc-train-")
    os.makedirs(work, exist_ok=True)
    for name in args.models:
        for flavour in args.flavours:
            # The archive compiled, and the .pt2 whose eager module is the reference (a TorchScript
            # fixture has the .pt2's weights).
            model = MODELS_DIR / {"pt2": f"{name}.pt2", "core": f"{name}.core.pt2", "pt": f"{name}.pt"}[flavour]
            pt2 = MODELS_DIR / (f"{name}.core.pt2" if flavour == "core" else f"{name}.pt2")
            if flavour == "pt" and not model.exists():
                continue
            tag = f"{name}.{flavour}"
            libs = {}

            def build(mode, model=model, tag=tag, libs=libs):
                out = os.path.join(work, f"{tag}.{mode}.so")
                info = compile_train(args.ptc_binary, model, out, ["--save-all"] if mode == "save_all" else [])
                libs[mode] = (out, info)
                return f"{info['saved_values']} saved, {info['saved_bytes_per_sample']:.0f} B/sample"

            if "min_cut" in args.modes:
                r.check(f"{tag}: compile --train", lambda: build("min_cut"))
            if "save_all" in args.modes:
                r.check(f"{tag}: compile --train --save-all", lambda: build("save_all"))
            if len(libs) < len(args.modes) or args.build_only:
                continue
            shapes_list = cases(name)
            for mode in args.modes:
                r.check(f"{tag} [{mode}]: outputs and gradients vs torch.autograd",
                        lambda mode=mode: check_gradients(libs[mode][0], pt2, shapes_list))

            def saved_less(libs=libs):
                a, b = libs["min_cut"][1]["saved_bytes_per_sample"], libs["save_all"][1]["saved_bytes_per_sample"]
                if a > b:
                    raise AssertionError(f"min-cut saves {a} B/sample, more than --save-all's {b}")
                return f"{a:.0f} <= {b:.0f} B/sample"

            if len(libs) == 2:
                r.check(f"{tag}: min-cut saves no more than --save-all", saved_less)
            if name == "mlp":
                r.check(f"{tag}: bad training calls raise errors with a message", lambda: check_bad_calls(libs["min_cut"][0]))
                if DEVICE == "cpu":  # (the CUDA side's wrapper hands back CPU copies)
                    r.check(f"{tag}: forward_train into the caller's output tensors", lambda: check_out_buffers(libs["min_cut"][0]))
            lib = libs[args.modes[0]][0]
            shapes = shapes_list[0]
            r.check(f"{tag}: SGD momentum+wd vs torch.optim.SGD",
                    lambda: check_optimizer(lib, pt2, shapes, "sgd", lr=1e-3, momentum=0.9, dampening=0.1,
                                            weight_decay=0.01))
            r.check(f"{tag}: SGD nesterov vs torch.optim.SGD",
                    lambda: check_optimizer(lib, pt2, shapes, "sgd", lr=1e-3, momentum=0.9, nesterov=True))
            r.check(f"{tag}: AdamW vs torch.optim.AdamW",
                    lambda: check_optimizer(lib, pt2, shapes, "adamw", lr=1e-2, betas=(0.9, 0.99), eps=1e-8,
                                            weight_decay=0.05))
    if "pt2" in args.flavours and not PREBUILT:
        r.check("a size only a forward input has (x / t.numel()): gradients vs torch.autograd",
                lambda: check_forward_only_size(args.ptc_binary, work))
    if "pt" in args.flavours and not PREBUILT:
        r.check("TorchScript --train refuses a parameter that freezing folds away", lambda: check_folded_parameter(args.ptc_binary, work))
    print(f"{r.passed} passed, {r.failed} failed")
    sys.exit(1 if r.failed else 0)


class SizeFromForwardInput(torch.nn.Module):
    """Uses t's sizes (a SymInt in a Tensor slot: aten::div.Tensor(y, sym_numel(t))) but never
    its values: the backward needs t's size symbol without reading t."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 4)

    def forward(self, x, t):
        y = self.lin(x)
        return y / t.numel() + y.mean() * t.size(0) - t.size(0)


def check_forward_only_size(ptc, work):
    torch.manual_seed(0)
    m = SizeFromForwardInput()
    x, t = torch.randn(4, 5), torch.randn(3, 2)
    dims = {"x": {0: torch.export.Dim("b", max=64)}, "t": {0: torch.export.Dim("n", max=64)}}
    path = os.path.join(work, "forward_only_size.pt2")
    torch.export.save(torch.export.export(m, (x, t), dynamic_shapes=dims), path)
    lib = os.path.join(work, "forward_only_size.so")
    compile_train(ptc, path, lib)
    ref = load_ref(path)
    tr = trainer(lib, DEVICE)
    params = dict(ref.named_parameters())
    worst = 0.0
    for b, n in [(4, 3), (7, 2), (2, 6)]:
        x, t = torch.randn(b, 5), torch.randn(n, 2)
        ref.zero_grad(set_to_none=True)
        out = ref(x, t)
        g = torch.randn(out.shape)
        out.backward(g)
        tr.zero_grad()
        got, saved = tr.forward_train(x, t)
        tr.backward(saved, [g])
        saved.free()
        ok, msg = close(got[0], out, GRAD_TOL)
        if not ok:
            raise AssertionError(f"b={b} n={n}: output: {msg}")
        for k in tr.grads:
            ok, msg = close(tr.grads[k], params[k].grad, GRAD_TOL)
            if not ok:
                raise AssertionError(f"b={b} n={n}: grad of {k}: {msg}")
            worst = max(worst, (tr.grads[k].cpu() - params[k].grad).abs().max().item())
    tr.close()
    return f"3 sizes, worst grad err {worst:.2g}"


class FoldedParameter(torch.nn.Module):
    """w reaches the frozen graph only as the constant 2 w (torch.jit.freeze folds it); b and c
    are equal zero biases, which freezing must not merge into one constant."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))
        self.b = torch.nn.Parameter(torch.zeros(4))
        self.c = torch.nn.Parameter(torch.zeros(4))

    def forward(self, x):
        return torch.mm(x, (self.w * 2).t()) + self.b + self.c


def check_folded_parameter(ptc, work):
    path = os.path.join(work, "folded.pt")
    torch.jit.script(FoldedParameter()).save(path)
    cmd = [ptc, "compile", path, "--input-shape", "2x3", "--train", "-o", os.path.join(work, "folded.so")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    want = "--train: torch.jit.freeze folded parameter 'w' into another constant"
    if r.returncode == 0 or want not in r.stderr + r.stdout:
        raise AssertionError(f"exit {r.returncode}, expected the message '{want}'; got:\n{r.stdout}{r.stderr}")
    return "one sentence, exit 1"


if __name__ == "__main__":
    main()
