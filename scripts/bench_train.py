#!/usr/bin/env python3
"""One training step (forward + backward + SGD step), side by side: PyTorch eager,
torch.compile (default) and a ptc training library (`ptc compile --train`), same model, same
inputs, same threads. Prints a markdown table of median step times and ratios, and compile
seconds (ptc: the cold compile, no cache; torch.compile: its first step minus an eager step).

    .venv/bin/python scripts/bench_train.py --models tfm_dyn:8,64 small_cnn:8 resnet18:8 bert:4,128 \
        [--threads 2] [--steps 10] [--rounds 3] [--no-inductor] [--models-dir models/cache]

MODEL:DIMS: the fixture or real model (models/NAME.pt2, else --models-dir/NAME.pt2) and its
dynamic input sizes (batch, or batch,seq for token-id models; images keep their recorded size).
The loss is sum(output * w) for a fixed random w of unit norm, so its gradient input is w.
ptc's outputs go into tensors allocated once (a C++ loop's buffers; --fresh-outputs: new ones
each step, as torch's).

--precision bf16|fp16: mixed precision on both sides: ptc compiles with `--train --precision P`,
eager and torch.compile run their forward under torch.autocast(device, dtype). fp16 scales the
loss on both sides (ptc.GradScaler, torch.amp.GradScaler).
--loss-steps N: after the timing, train N SGD steps (momentum 0.9, --loss-lr) from the exported
weights again, eager (under autocast with --precision) against ptc, on the loss
0.5 * mean((output - target)^2) for a fixed random target, and report the largest relative
difference of the two losses over the steps (column "loss dev"), and the first and last loss.
With --precision, eager in float32 trains alongside: its difference from eager under autocast
is the size of the drift that rounding alone causes.
"""
import contextlib
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "python"))  # the ptc package
warnings.filterwarnings("ignore")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tfm_dyn:8,64", "small_cnn:8"])
    ap.add_argument("--models-dir", default=str(ROOT / "models" / "cache"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1,
                    help="time eager, torch.compile and ptc in this many rounds of --steps steps each, one after the other "
                         "within a round, so that a machine whose speed drifts slows all three alike (the medians are over "
                         "every round's steps; the row also lists each round's ptc / torch.compile ratio)")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="run everything on the GPU (ptc: compile with --device cuda; torch: the model moved to cuda)")
    ap.add_argument("--torch-tf32", action="store_true",
                    help="GPU: leave torch's default of TF32 cuDNN convolutions (ptc computes in exact fp32 unless --tf32; "
                         "by default torch does too: torch.backends.cudnn.allow_tf32 = False)")
    ap.add_argument("--tf32", action="store_true",
                    help="GPU: TF32 on both sides: ptc compile --tf32, and torch with TF32 matmuls and cuDNN convolutions")
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="GPU: compile ptc with --cuda-graphs (each part captured once per input shape, then replayed)")
    ap.add_argument("--gpu-profile", type=int, default=0, metavar="N",
                    help="GPU: also profile 3 steps of ptc and of torch.compile with torch.profiler and print their GPU "
                         "time per step and the N kernels that take most of it")
    ap.add_argument("--fresh-outputs", action="store_true",
                    help="ptc: new output tensors every step (by default it writes into ones allocated once, as a C++ caller would)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="mixed precision: ptc compile --precision P, torch under torch.autocast in that dtype")
    ap.add_argument("--loss-steps", type=int, default=0, metavar="N",
                    help="also train N steps from the same weights on both sides and compare the loss curves")
    ap.add_argument("--loss-lr", type=float, default=0.01,
                    help="the learning rate of --loss-steps (at 0.05 bf16 rounding alone moves mobilenet_v2's curve by 9%%: float32 eager against eager under autocast)")
    ap.add_argument("--build-only", action="store_true", help="only compile the ptc libraries (into --libs)")
    ap.add_argument("--libs", help="where the libraries are (NAME.so; with --build-only: where to write them); "
                                   "without it they are compiled into a temporary directory")
    return ap.parse_args()


def main():
    args = parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import torch

    import ptc
    from gpu_profile import gpu_profile

    torch.set_num_threads(args.threads)
    work = args.libs or tempfile.mkdtemp(prefix="ptc-bench-train-")
    os.makedirs(work, exist_ok=True)
    dev = args.device
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.torch_tf32 or args.tf32
    tf32_flag = ["--tf32"] if args.tf32 and dev == "cuda" else []
    graphs_flag = ["--cuda-graphs"] if args.cuda_graphs and dev == "cuda" else []
    graphs_flag += ["--precision", args.precision] if args.precision != "fp32" else []
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    fp16 = args.precision == "fp16"

    def amp():
        return torch.autocast(dev, dtype=half) if half is not None else contextlib.nullcontext()
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    rows = []
    for spec in args.models:
        name, _, dims = spec.partition(":")
        dims = [int(d) for d in dims.split(",")] if dims else []
        pt2 = ROOT / "models" / f"{name}.pt2"
        mdir = ROOT / "models"
        if not pt2.exists():
            pt2 = Path(args.models_dir) / f"{name}.pt2"
            mdir = Path(args.models_dir)
        lib = os.path.join(work, f"{name}.so")
        if args.build_only:
            t0 = time.perf_counter()
            subprocess.run([args.ptc_binary, "compile", str(pt2), "-o", lib, "--train", "--no-cache", "--device", dev] + tf32_flag + graphs_flag, check=True,
                           capture_output=True)
            print(f"{lib}: compiled in {time.perf_counter() - t0:.1f} s", flush=True)
            continue
        expect = json.load(open(mdir / f"{name}.expect.json"))
        if not expect.get("dynamic"):
            dims = []  # a static model runs at its exported sizes
        gen = torch.Generator().manual_seed(0)
        xs = []
        for i in expect["cases"][0]["inputs"]:
            shape = list(i["shape"])
            shape[:len(dims)] = dims
            if i["dtype"].startswith("float"):
                xs.append(torch.randn(*shape, generator=gen))
            else:
                ids = torch.from_numpy(np.load(mdir / i["file"]))
                xs.append(torch.randint(0, int(ids.max()) + 1, shape, generator=gen))
        def load_ref():
            if dev == "cuda":
                # Weights, constants and factory ops moved to the GPU (a plain .to("cuda") leaves the
                # export's CPU constants behind: BERT's and GPT-2's graphs mix devices).
                from cuda_check import load_eager
                r = load_eager(name, "pt2", mdir)
            else:
                r = torch.export.load(str(pt2)).module()
            for p in r.parameters():
                p.requires_grad_(p.dtype.is_floating_point)
            return r
        ref = load_ref()
        if dev == "cuda":
            xs = [x.cuda() for x in xs]
        with torch.no_grad():
            outs0 = ref(*xs)
        outs0 = outs0 if isinstance(outs0, (tuple, list)) else (outs0,)
        ws = [torch.randn(o.shape, generator=gen) / max(1, o.numel()) ** 0.5 for o in outs0]
        if dev == "cuda":
            ws = [w.cuda() for w in ws]

        def torch_step(mod, opt, scaler=None, loss_fn=None):
            opt.zero_grad(set_to_none=False)
            with amp():
                out = mod(*xs)
            out = out if isinstance(out, (tuple, list)) else (out,)
            loss = loss_fn(out) if loss_fn else sum((o.float() * w).sum() for o, w in zip(out, ws))
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            return loss

        samples = {}  # runner -> every timed step (seconds), over all rounds

        def run_steps(key, fn, steps):
            ts = samples.setdefault(key, [])
            for _ in range(steps):
                t0 = time.perf_counter()
                fn()
                sync()
                ts.append(time.perf_counter() - t0)
            return ts[-steps:]

        def timed(fn, steps, key):  # one untimed warm-up step, then the first round's steps
            fn()
            sync()
            return statistics.median(run_steps(key, fn, steps))

        row = {"model": name, "dims": dims}
        opt = torch.optim.SGD(ref.parameters(), lr=1e-4, momentum=0.9)
        tscaler = torch.amp.GradScaler(dev) if fp16 else None
        runners = {"eager": lambda: torch_step(ref, opt, tscaler)}
        row["eager_ms"] = timed(runners["eager"], args.steps, "eager") * 1e3
        if not args.no_inductor:
            try:
                cmod = torch.compile(ref)
                copt = torch.optim.SGD(ref.parameters(), lr=1e-4, momentum=0.9)
                t0 = time.perf_counter()
                cscaler = torch.amp.GradScaler(dev) if fp16 else None
                torch_step(cmod, copt, cscaler)
                sync()
                row["inductor_compile_s"] = time.perf_counter() - t0 - row["eager_ms"] / 1e3
                runners["inductor"] = lambda: torch_step(cmod, copt, cscaler)
                row["inductor_ms"] = timed(runners["inductor"], args.steps, "inductor") * 1e3
                if args.gpu_profile and dev == "cuda":
                    gpu_profile(f"{name} {dims} torch.compile", lambda: torch_step(cmod, copt, cscaler), sync, args.gpu_profile)
            except Exception as e:  # noqa: BLE001
                row["inductor_error"] = f"{type(e).__name__}: {str(e)[:120]}"
        if args.libs:
            row["ptc_compile_s"] = float("nan")  # compiled beforehand
        else:
            t0 = time.perf_counter()
            subprocess.run([args.ptc_binary, "compile", str(pt2), "-o", lib, "--train", "--no-cache", "--device", dev] + tf32_flag + graphs_flag, check=True,
                           capture_output=True)
            row["ptc_compile_s"] = time.perf_counter() - t0
        t = ptc.Trainer(lib)
        # ptc writes its outputs into buffers allocated once, as a C++ loop over the ABI does
        # (torch allocates its outputs every step, as it must); --fresh-outputs allocates them per
        # step too. On a machine where fresh memory costs a page fault per 4 KiB (a VM whose freed
        # pages go back to the host: GPT-2's 103 MB of logits cost up to ~0.5 s a step here), the
        # difference is that cost.
        ptc_outs = None if args.fresh_outputs else [o.detach().clone(memory_format=torch.contiguous_format) for o in outs0]

        pscaler = ptc.GradScaler() if fp16 else None

        def ptc_step():
            t.zero_grad()
            _, saved = t.forward_train(*xs, out=ptc_outs)
            t.backward(saved, [w * pscaler.scale for w in ws] if fp16 else ws)
            saved.free()
            if fp16:
                pscaler.step(t, lambda: t.sgd_step(1e-4, 0.9))
                pscaler.update()
            else:
                t.sgd_step(1e-4, 0.9)

        row["ptc_ms"] = timed(ptc_step, args.steps, "ptc")
        runners["ptc"] = ptc_step
        if args.rounds > 1:
            first = {k: statistics.median(v) for k, v in samples.items()}
            per_round = {k: [v] for k, v in first.items()}
            ratios = [first["inductor"] / first["ptc"]] if "inductor" in first else []
            for _ in range(args.rounds - 1):
                this = {k: statistics.median(run_steps(k, fn, args.steps)) for k, fn in runners.items()}
                for k, v in this.items():
                    per_round[k].append(v)
                if "inductor" in this:
                    ratios.append(this["inductor"] / this["ptc"])
            row["rounds_ms"] = {k: [round(x * 1e3, 1) for x in v] for k, v in per_round.items()}
            row["eager_ms"] = statistics.median(samples["eager"]) * 1e3
            if "inductor" in samples:
                row["inductor_ms"] = statistics.median(samples["inductor"]) * 1e3
                row["ptc_vs_inductor_rounds"] = [round(r, 3) for r in ratios]
            row["ptc_ms"] = statistics.median(samples["ptc"])
        if args.gpu_profile:
            # Where ptc's step spends its wall time, call by call (each call waits for its work).
            phases = {"zero_grad": [], "forward_train": [], "backward": [], "sgd_step": []}
            for _ in range(args.steps):
                t0 = time.perf_counter()
                t.zero_grad()
                t1 = time.perf_counter()
                _, saved = t.forward_train(*xs, out=ptc_outs)
                sync()
                t2 = time.perf_counter()
                t.backward(saved, ws)
                sync()
                t3 = time.perf_counter()
                saved.free()
                t.sgd_step(1e-4, 0.9)
                sync()
                t4 = time.perf_counter()
                for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                    phases[k].append(v)
            print("ptc wall per call (median ms): " + ", ".join(f"{k} {statistics.median(v) * 1e3:.2f}" for k, v in phases.items()))
        if args.gpu_profile and dev == "cuda":
            gpu_profile(f"{name} {dims} ptc", ptc_step, sync, args.gpu_profile)
        row["ptc_ms"] *= 1e3
        t.close()
        if args.loss_steps:
            row.update(loss_curves(args, torch, ptc, lib, load_ref, xs, outs0, gen, amp, fp16, dev, torch_step))
        row["ptc_vs_eager"] = row["eager_ms"] / row["ptc_ms"]
        if "inductor_ms" in row:
            row["ptc_vs_inductor"] = row["inductor_ms"] / row["ptc_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)

    if args.build_only:
        return
    where = (f"the GPU ({args.precision} under torch.autocast; ptc --precision {args.precision})" if half is not None and dev == "cuda" else
             f"the GPU (TF32 on both sides)" if args.tf32 else
             f"the GPU (torch: TF32 convolutions {'on' if args.torch_tf32 else 'off'}; ptc: exact fp32)") if dev == "cuda" else f"{args.threads} threads"
    rounds = f" in {args.rounds} interleaved rounds" if args.rounds > 1 else ""
    print(f"\n{where}, median of {args.steps} steps{rounds} (forward + backward + SGD momentum step)\n")
    loss_cols = " loss dev over %d steps (eager's first -> last) |" % args.loss_steps if args.loss_steps else ""
    print(f"| model | sizes | eager ms | torch.compile ms | ptc ms | ptc vs eager | ptc vs torch.compile |{loss_cols} ptc compile s | "
          "torch.compile compile s |")
    print("|---|---|---|---|---|---|---|" + ("---|" if args.loss_steps else "") + "---|---|")
    for r in rows:
        ind = f"{r['inductor_ms']:.1f}" if "inductor_ms" in r else r.get("inductor_error", "-")
        pvi = f"{r['ptc_vs_inductor']:.2f}x" if "ptc_vs_inductor" in r else "-"
        if "loss_dev" in r:
            pvi += f" | {r['loss_dev']:.2%} ({r['loss_first']:.4g} -> {r['loss_last']:.4g}"
            pvi += f"; fp32 eager {r['loss_drift_fp32']:.2%})" if r.get("loss_drift_fp32") is not None else ")"
        if "ptc_vs_inductor_rounds" in r:
            pvi += " (rounds " + " ".join(f"{x:.2f}" for x in r["ptc_vs_inductor_rounds"]) + ")"
        ics = f"{r['inductor_compile_s']:.1f}" if "inductor_compile_s" in r else "-"
        print(f"| {r['model']} | {r['dims']} | {r['eager_ms']:.1f} | {ind} | {r['ptc_ms']:.1f} | {r['ptc_vs_eager']:.2f}x | {pvi} | "
              f"{r['ptc_compile_s']:.1f} | {ics} |")
    if len(rows) > 1:
        geo = statistics.geometric_mean([r["ptc_vs_eager"] for r in rows])
        print(f"\ngeomean ptc vs eager: {geo:.2f}x")
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)


def loss_curves(args, torch, ptc, lib, load_ref, xs, outs0, gen, amp, fp16, dev, torch_step):
    """--loss-steps: eager (under autocast with --precision) and a fresh ptc Trainer, both from the
    exported weights, trained on 0.5 * mean((out - target)^2) with SGD (momentum 0.9); the largest
    relative difference of their losses over the steps."""
    targets = [torch.randn(o.shape, generator=gen).to(o.device) for o in outs0]

    def loss_of(out):
        return sum(0.5 * (o.float() - tg).pow(2).mean() for o, tg in zip(out, targets))
    ref = load_ref()
    opt = torch.optim.SGD(ref.parameters(), lr=args.loss_lr, momentum=0.9)
    scaler = torch.amp.GradScaler(dev) if fp16 else None
    # With --precision: eager in float32 too, for the size of autocast's own drift from it.
    ref32 = load_ref() if fp16 or args.precision == "bf16" else None
    opt32 = torch.optim.SGD(ref32.parameters(), lr=args.loss_lr, momentum=0.9) if ref32 is not None else None
    drift = 0.0
    t = ptc.Trainer(lib)
    pscaler = ptc.GradScaler() if fp16 else None
    worst, first, last = 0.0, None, None
    for _ in range(args.loss_steps):
        want = torch_step(ref, opt, scaler, loss_of).item()
        if ref32 is not None:
            opt32.zero_grad(set_to_none=False)
            out32 = ref32(*xs)
            l32 = loss_of(out32 if isinstance(out32, (tuple, list)) else (out32,))
            l32.backward()
            opt32.step()
            drift = max(drift, abs(l32.item() - want) / max(abs(want), 1e-12))
        t.zero_grad()
        outs, saved = t.forward_train(*xs)
        got = loss_of(outs).item()
        # d loss / d out = (out - target) / numel, times the loss scale for fp16.
        s = pscaler.scale if fp16 else 1.0
        t.backward(saved, [((o.float() - tg) * (s / o.numel())).to(o.dtype) for o, tg in zip(outs, targets)])
        saved.free()
        if fp16:
            pscaler.step(t, lambda: t.sgd_step(args.loss_lr, 0.9))
            pscaler.update()
        else:
            t.sgd_step(args.loss_lr, 0.9)
        worst = max(worst, abs(got - want) / max(abs(want), 1e-12))
        first = want if first is None else first
        last = want
    t.close()
    print(f"loss over {args.loss_steps} steps: eager {first:.5g} -> {last:.5g}, ptc within {worst:.2%}"
          + (f"; eager in float32 within {drift:.2%} of eager under autocast" if ref32 is not None else ""), flush=True)
    return {"loss_dev": worst, "loss_first": first, "loss_last": last, "loss_drift_fp32": drift if ref32 is not None else None}


if __name__ == "__main__":
    main()
