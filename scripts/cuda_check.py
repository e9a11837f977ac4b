#!/usr/bin/env python3
"""Check and time ptc's CUDA libraries on a GPU machine, against PyTorch eager on the same GPU.

The libraries are compiled beforehand (nvcc needs no GPU), e.g. here:

    scripts/build_cuda_fixtures.sh out/cuda          # cuda_<model>_<flavour>.so for every fixture

and on the GPU machine (python3 with torch; fp32, TF32 off everywhere unless --tf32):

    python3 scripts/cuda_check.py --libs out/cuda [--bench] [--json results.json]

Correctness: every recorded case of each fixture (models/<name>.expect.json, inputs from
models/ref/) runs through the library and through the exported program (or TorchScript module)
on the GPU; max |ptc - eager| must be within atol = rtol = 1e-4 (and the recorded CPU eager
outputs are compared too).
--bench: for each model (.pt2 flavour, last recorded case), median latency over CUDA events of
eager, torch.compile (default and mode="reduce-overhead") and ptc, with ratios.
--tf32: torch runs with TF32 on too (torch.backends.cuda.matmul.allow_tf32 =
torch.backends.cudnn.allow_tf32 = True, in eager and torch.compile alike), for libraries compiled
with `ptc compile --precision tf32`. A library whose manifest's precision is tf32 or tf32-conv is
checked with TF32_TOL whatever the flag.
--tf32-conv: torch's own defaults, TF32 for cuDNN convolutions only (torch.backends.cudnn.allow_tf32
= True, torch.backends.cuda.matmul.allow_tf32 = False), for libraries compiled with
`ptc compile --precision tf32-conv`; they are checked as tf32 ones are.
--autocast bf16|fp16: eager and torch.compile run under torch.autocast("cuda", dtype), for libraries
compiled with `ptc compile --precision bf16 / fp16` (a library whose manifest names one of these is
checked by this rule whatever the flag; a model exported in float16 / bfloat16 is checked by the
half rule, as without the flag): ptc's error against exact-fp32 eager (the GPU's, and the
recorded CPU outputs), as an RMS relative to the output's RMS, is at most AUTOCAST_WORSE times
autocast eager's own, plus 1e-6.
--sizes MODEL:D0[,D1] ...: bench these models at these leading input dimensions instead (batch, or
batch and sequence length; random inputs), e.g. --sizes resnet50:32 bert:8,128; the geomean of
eager/ptc and of best-torch.compile/ptc over them is printed.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the ptc package
import ptc  # noqa: E402
from gpu_profile import gpu_profile  # noqa: E402

ATOL = RTOL = 1e-4
# Libraries built with --tf32 (their manifest's flags.tf32): TF32 rounds GEMM / convolution inputs to
# a 10-bit mantissa (~1e-3 relative per product): rtol TF32_TOL, and atol TF32_TOL times the output's
# largest magnitude.
TF32_TOL = 1e-2
# ... or, past that, at most this many times torch's own TF32 error against the exact record.
TF32_VS_TORCH = 1.5
FLAVOURS = {"pt2": ".pt2", "core_pt2": ".core.pt2", "pt": ".pt"}
AUTOCAST_WORSE = 1.5
AUTOCAST = None  # --autocast: torch.bfloat16 / torch.float16 for eager and torch.compile
HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_ctx(dtype):
    import contextlib
    return torch.autocast("cuda", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def rel_rms(got, ref):
    got, ref = got.double().cpu(), ref.double().cpu()
    scale = ref.pow(2).mean().sqrt().item() if ref.numel() else 0.0
    return (got - ref).pow(2).mean().sqrt().item() / (scale or 1.0) if ref.numel() else 0.0


def autocast_rule(got, auto, ref32):
    """(worst ptc error, worst autocast error, ok): ptc's relative RMS error against ref32 is at
    most AUTOCAST_WORSE times autocast eager's, plus 1e-6, on every output."""
    ok, wp, wa = True, 0.0, 0.0
    for g, a, r in zip(got, auto, ref32):
        ep, ea = rel_rms(g, r), rel_rms(a, r)
        ok = ok and ep <= AUTOCAST_WORSE * ea + 1e-6
        wp, wa = max(wp, ep), max(wa, ea)
    return wp, wa, ok


def eager_on(ep, device):
    """An ExportedProgram as a module for eager runs on `device`. The export ran on the CPU:
    move_to_device_pass moves its weights and constants, the device arguments of factory ops
    (arange, ones, `to.device`) are rewritten too, and the tensor-metadata asserts, which
    torch.compile trips on once moved (GPT-2), are dropped. A `view` runs as `reshape`: eager
    CUDA kernels may return other strides than the CPU ones the export traced
    (nn.MultiheadAttention's output), where a view fails."""
    from torch.export.passes import move_to_device_pass
    from torch.fx.node import map_aggregate
    mod = move_to_device_pass(ep, device).module()
    target = torch.device(device)
    move = lambda a: target if isinstance(a, torch.device) else a
    # Every graph: the module's, and those of higher-order ops' bodies (torch.no_grad() blocks).
    for gm in [m for m in mod.modules() if isinstance(m, torch.fx.GraphModule)]:
        for node in list(gm.graph.nodes):
            if node.target is torch.ops.aten._assert_tensor_metadata.default:
                gm.graph.erase_node(node)  # they check nothing a run needs
                continue
            node.args = map_aggregate(node.args, move)
            node.kwargs = map_aggregate(node.kwargs, move)
            if node.target is torch.ops.aten.view.default:
                node.target = torch.ops.aten.reshape.default
        gm.recompile()
    return mod


def load_eager(name, flavour, models=MODELS):
    path = models / f"{name}{FLAVOURS[flavour]}"
    if flavour == "pt":
        return torch.jit.load(str(path), map_location="cuda").eval()
    return eager_on(torch.export.load(str(path)), "cuda")


def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    res = []
    for o in out:
        res.extend(flat(o))
    return res


def recorded(models, entry):
    """A recorded array as a tensor of its recorded dtype (float16 / bfloat16 are stored as float32)."""
    return torch.from_numpy(np.load(models / entry["file"])).to(getattr(torch, entry["dtype"]))


def half_rule(got, eager, ref32, factor=2.0):
    """float16 / bfloat16 real models (scripts/suite.py's rule): ptc's RMS error against the float32
    computation of the same weights (ref32) is at most `factor` times eager's own, plus 1e-4 of
    ref32's RMS."""
    def rms(t):
        return t.double().pow(2).mean().sqrt().item() if t.numel() else 0.0
    ok = True
    for g, e, r in zip(got, eager, ref32):
        g, e, r = g.double().cpu(), e.double().cpu(), r.double().cpu()
        ok = ok and rms(g - r) <= factor * rms(e - r) + 1e-4 * rms(r)
    return ok


def err_of(got, want, atol=ATOL, rtol=RTOL, tf32=False, both=False):
    e, ok = 0.0, True
    for a, b in zip(got, want):
        a, b = a.double().cpu(), b.double().cpu()
        if a.shape != b.shape:
            return float("inf"), False
        if a.numel():
            d = (a - b).abs().max().item()
            e = max(e, float("inf") if d != d else d)  # a NaN where the other has a number is no small error
        if tf32:
            k = 2 if both else 1
            atol, rtol = k * TF32_TOL * (b.abs().max().item() if b.numel() else 0.0), k * TF32_TOL
        ok = ok and torch.allclose(a, b, atol=atol, rtol=rtol)
    return e, ok


def check(libs, only=None, ref_only=False, models=MODELS):
    rows = []
    for exp_file in sorted(models.glob("*.expect.json")):
        name = exp_file.name[: -len(".expect.json")]
        if only and name not in only:
            continue
        expect = json.loads(exp_file.read_text())
        for flavour in FLAVOURS:
            lib = libs / f"cuda_{name}_{flavour}.so"
            if not lib.exists():
                continue
            row = dict(model=name, flavour=flavour, cases=0, err_gpu=0.0, err_ref=0.0, ok=True, error=None)
            try:
                # The Core ATen flavour's module keeps CPU constants: the export flavour is its reference.
                eager = None if ref_only else load_eager(name, "pt2" if flavour == "core_pt2" else flavour, models)
                with ptc.Model(str(lib)) as m, torch.inference_mode():
                    flags = m.manifest.get("flags", {})
                    tf32 = flags.get("precision") in ("tf32", "tf32-conv")
                    row["tf32"] = tf32
                    half_precision = HALF.get(flags.get("precision"))
                    for case in expect["cases"]:
                        ins = [recorded(models, f).cuda() for f in case["inputs"]]
                        refs = [recorded(models, f) for f in case["outputs"]]
                        # float16 / bfloat16 models: eager on the GPU rounds after every op and ptc
                        # computes in float32 between loads and stores; the record's tolerance.
                        half = any(f["dtype"] in ("float16", "bfloat16") for f in case["outputs"])
                        tol = expect.get("tolerance", {})
                        got = list(m(*ins))
                        torch.cuda.synchronize()
                        e1, ok1 = 0.0, True
                        torch_tf32_err = None
                        # --precision bf16 / fp16 on a float32 model: the autocast rule. A model
                        # exported in half precision computes in its own dtype whatever the
                        # precision (torch.autocast leaves it alone too): the half rule below.
                        if half_precision is not None and not half:
                            want = flat(eager(*ins)) if eager is not None else refs
                            if eager is not None:
                                with autocast_ctx(half_precision):
                                    auto = flat(eager(*ins))
                                e1, ea1, ok1 = autocast_rule(got, auto, want)
                                e2, ea2, ok2 = autocast_rule(got, auto, refs)
                                row["err_autocast"] = max(row.get("err_autocast", 0.0), ea1)
                            else:
                                e1, ok1 = 0.0, True
                                e2, ok2 = err_of(got, refs, float("inf"), 0.0)[0], True
                            row["cases"] += 1
                            row["err_gpu"] = max(row["err_gpu"], e1)
                            row["err_ref"] = max(row["err_ref"], e2)
                            row["ok"] = row["ok"] and ok1 and ok2
                            row["autocast"] = True
                            continue
                        if eager is not None:
                            try:
                                want = flat(eager(*ins))
                                # TF32 on both sides: each carries its own rounding, so twice the tolerance.
                                if half and "ref32" in case:  # scripts/suite.py's rule, against ref32
                                    e1, ok1 = err_of(got, want, float("inf"), 0.0)
                                    ok1 = half_rule(got, want, [recorded(models, f) for f in case["ref32"]])
                                elif half:
                                    e1, ok1 = err_of(got, want, tol.get("atol", ATOL), tol.get("rtol", RTOL))
                                else:
                                    e1, ok1 = err_of(got, want, tf32=tf32, both=tf32)
                                    if tf32 and not ok1:
                                        # Both in TF32: two TF32 results may each be torch's error off the
                                        # exact result, in different directions; then fine when ptc's error
                                        # against the exact record is of the size of torch's own (the
                                        # TF32_VS_TORCH rule below: resnet50's 1x1 convolutions as TF32
                                        # GEMMs are 5.2e-2 from torch's TF32 result, both 4.3e-2 from the record).
                                        ok1 = err_of(got, refs, float("inf"), 0.0)[0] <= TF32_VS_TORCH * err_of([w.cpu() for w in want], refs, float("inf"), 0.0)[0]
                                if tf32:  # torch's own TF32 error against the exact record, for comparison
                                    torch_tf32_err = err_of([w.cpu() for w in want], refs)[0]
                                    row["err_eager_ref"] = max(row.get("err_eager_ref", 0.0), torch_tf32_err)
                            except RuntimeError as exc:  # e.g. a CPU constant baked into the export
                                row["eager_note"] = f"eager on the GPU failed ({str(exc)[:80]}); compared with the record only"
                                eager = None
                        if half and "ref32" in case:
                            e2, _ = err_of(got, refs, float("inf"), 0.0)
                            ok2 = half_rule(got, refs, [recorded(models, f) for f in case["ref32"]])
                        else:
                            e2, ok2 = err_of(got, refs, tol.get("atol", ATOL), tol.get("rtol", RTOL), tf32=tf32)
                            if tf32 and not ok2 and torch_tf32_err is not None:
                                # Deep nets amplify TF32's rounding past TF32_TOL (resnet50 with random
                                # weights: torch's own TF32 result is 4e-2 off the exact record): then
                                # ptc's error against the record must be of the size of torch's.
                                ok2 = e2 <= TF32_VS_TORCH * torch_tf32_err
                        row["cases"] += 1
                        row["err_gpu"] = max(row["err_gpu"], e1)
                        row["err_ref"] = max(row["err_ref"], e2)
                        row["ok"] = row["ok"] and ok1 and ok2
            except Exception as exc:  # noqa: BLE001
                row["ok"], row["error"] = False, f"{type(exc).__name__}: {exc}"
            rows.append(row)
    print("| model | flavour | cases | max err vs eager (GPU) | vs recorded CPU eager | result |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        res = ("pass" if r["ok"] else f"FAIL {r['error'] or ''}") + (f" ({r['eager_note']})" if r.get("eager_note") else "")
        if r.get("autocast"):
            res += f" (relative RMS errors; eager under autocast {r.get('err_autocast', 0.0):.1e})"
        res += " (TF32 library: TF32 tolerance" + (f"; torch TF32 vs record {r['err_eager_ref']:.1e}" if "err_eager_ref" in r else "") + ")" if r.get("tf32") else ""
        print(f"| {r['model']} | {r['flavour']} | {r['cases']} | {r['err_gpu']:.1e} | {r['err_ref']:.1e} | {res} |")
    return rows


def time_cuda(fn, reps, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


# Larger inputs for the dynamic fixtures (the recorded cases are tiny).
BIG = {"mlp_dyn": [(1024, 64)], "tfm_dyn": [(32, 256, 64)]}


def sized_inputs(models, name, dims, gen):
    """Random inputs shaped like the model's last recorded case with the leading dims replaced
    (floats: randn; integers: ids in the recorded range)."""
    case = json.loads((models / f"{name}.expect.json").read_text())["cases"][-1]
    xs = []
    for f in case["inputs"]:
        rec = recorded(models, f)
        shape = list(rec.shape)
        shape[: len(dims)] = dims
        if rec.dtype.is_floating_point:
            xs.append(torch.randn(shape, generator=gen).to(rec.dtype).cuda())
        else:
            xs.append(torch.randint(0, int(rec.max()) + 1, shape, generator=gen, dtype=rec.dtype).cuda())
    return xs


def bench(libs, reps, only=None, models=MODELS, sizes=None):
    rows = []
    gen = torch.Generator().manual_seed(0)
    if sizes:
        for spec in sizes:
            name, _, dims = spec.partition(":")
            dims = [int(d) for d in dims.split(",") if d]
            try:
                rows.append(bench_one(libs, name, libs / f"cuda_{name}_pt2.so", sized_inputs(models, name, dims, gen), reps, models))
            except Exception as exc:  # noqa: BLE001
                print(f"skipping {spec}: {str(exc)[:200]}", flush=True)
        return print_bench(rows)
    for exp_file in sorted(models.glob("*.expect.json")):
        name = exp_file.name[: -len(".expect.json")]
        lib = libs / f"cuda_{name}_pt2.so"
        if not lib.exists() or (only and name not in only):
            continue
        case = json.loads(exp_file.read_text())["cases"][-1]
        inputs = [[recorded(models, f).cuda() for f in case["inputs"]]]
        inputs += [[torch.randn(shape, generator=gen).to(inputs[0][0].dtype).cuda()] for shape in BIG.get(name, [])]
        for ins in inputs:
            try:
                rows.append(bench_one(libs, name, lib, ins, reps, models))
            except Exception as exc:  # noqa: BLE001  (e.g. an export whose eager module fails on the GPU)
                print(f"skipping {name}: {str(exc)[:200]}", flush=True)
    return print_bench(rows)


INDUCTOR_MODES = (("ind", {}), ("ind_ro", {"mode": "reduce-overhead"}))
PROFILE_TOP = 0  # --gpu-profile N: the top N kernels of eager and of ptc for each bench row


def bench_one(libs, name, lib, ins, reps, models=MODELS):
    row = dict(model=name, inputs="x".join(str(s) for s in ins[0].shape))
    with torch.inference_mode():
        eager32 = load_eager(name, "pt2", models)

        def eager(*xs):
            with autocast_ctx(AUTOCAST):
                return eager32(*xs)
        row["eager_ms"] = time_cuda(lambda: eager(*ins), reps)
        if PROFILE_TOP:
            gpu_profile(f"{name} {row['inputs']} eager", lambda: eager(*ins), torch.cuda.synchronize, PROFILE_TOP)
        for label, kw in INDUCTOR_MODES:
            try:
                torch._dynamo.reset()
                comp = torch.compile(eager, **kw)
                t0 = time.perf_counter()
                comp(*ins)
                torch.cuda.synchronize()
                row[f"{label}_compile_s"] = time.perf_counter() - t0
                row[f"{label}_ms"] = time_cuda(lambda: comp(*ins), reps)
            except Exception as exc:  # noqa: BLE001
                row[f"{label}_ms"] = float("nan")
                row[f"{label}_error"] = str(exc)[:200]
        for label, path in (("ptc", lib), ("ptc_graphs", libs / f"cuda_{name}_pt2_graphs.so")):
            if not path.exists():
                continue
            with ptc.Model(str(path)) as m:
                outs = [torch.empty(s, dtype=i.dtype, device="cuda") for s, i in zip(m.output_shapes(*ins), m.outputs)]
                run = m.prepare(*ins, out=outs)  # a C++ caller's per-run cost (no Python marshalling)
                row[f"{label}_ms"] = time_cuda(run, reps)
                if PROFILE_TOP and label == "ptc":
                    gpu_profile(f"{name} {row['inputs']} ptc", run, torch.cuda.synchronize, PROFILE_TOP)
                got = [o.clone() for o in outs]
                want = flat(eager(*ins))
                if AUTOCAST is not None:  # relative RMS against exact fp32, and autocast eager's own
                    ep, ea, _ = autocast_rule(got, want, flat(eager32(*ins)))
                    row[f"{label}_err"], row["autocast_err"] = ep, ea
                else:
                    row[f"{label}_err"] = err_of(got, want)[0]
    print(f"{name} {row['inputs']}: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                   for k, v in row.items() if k not in ("model", "inputs")), flush=True)
    return row


def print_bench(rows):
    print("ptc = the library (ptc_run_async per call); ptc-g = built with --cuda-graphs (replay); "
          "ratios use the better ptc; best-ind = the faster torch.compile mode")
    print("| model | input | eager ms | ind ms | ind-ro ms | ptc ms | ptc-g ms | eager/ptc | best-ind/ptc | ptc err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    nan = float("nan")
    vs_eager, vs_ind = [], []
    for r in rows:
        e, i, ro = r["eager_ms"], r.get("ind_ms", nan), r.get("ind_ro_ms", nan)
        p, pg = r.get("ptc_ms", nan), r.get("ptc_graphs_ms", nan)
        best = min((x for x in (p, pg) if x == x), default=nan)
        bi = min((x for x in (i, ro) if x == x), default=nan)
        err = max(r.get("ptc_err", 0.0), r.get("ptc_graphs_err", 0.0))
        vs_eager.append(e / best)
        vs_ind.append(bi / best)
        err_s = f"{err:.1e}" + (f" (autocast {r['autocast_err']:.1e})" if "autocast_err" in r else "")
        print(f"| {r['model']} | {r['inputs']} | {e:.3f} | {i:.3f} | {ro:.3f} | {p:.3f} | {pg:.3f} | {e / best:.2f} | {bi / best:.2f} | {err_s} |")
    geo = lambda xs: float(np.exp(np.mean(np.log(xs)))) if xs else nan  # noqa: E731
    print(f"geomean over {len(rows)} rows: eager/ptc {geo(vs_eager):.2f}, best-ind/ptc {geo(vs_ind):.2f}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--libs", required=True, help="folder with cuda_<model>_<flavour>.so")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--json")
    ap.add_argument("--only", nargs="*", help="only these fixtures")
    ap.add_argument("--sizes", nargs="*", help="bench MODEL:D0[,D1] (leading input dims) instead of the recorded cases")
    ap.add_argument("--no-inductor", action="store_true", help="bench without torch.compile")
    ap.add_argument("--inductor-modes", default="default,reduce-overhead",
                    help="the torch.compile modes to bench, comma-separated (default: both)")
    ap.add_argument("--no-check", action="store_true", help="skip the correctness check")
    ap.add_argument("--gpu-profile", type=int, default=0, metavar="N",
                    help="for each bench row, GPU time and the top N kernels of eager and of ptc")
    ap.add_argument("--models-dir", default=str(MODELS),
                    help="where NAME.expect.json and ref/ are (models/cache for the real models)")
    ap.add_argument("--tf32", action="store_true",
                    help="TF32 on in torch too (for libraries built with ptc compile --tf32)")
    ap.add_argument("--tf32-conv", action="store_true",
                    help="TF32 for torch's convolutions only, torch's defaults (for libraries built with ptc compile --tf32-conv)")
    ap.add_argument("--autocast", choices=list(HALF),
                    help="eager and torch.compile under torch.autocast in this dtype (libraries built with --precision bf16 / fp16)")
    ap.add_argument("--ref-only", action="store_true",
                    help="compare with the recorded outputs only (no eager run: for compute-sanitizer)")
    args = ap.parse_args()
    defaults = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32 or args.tf32_conv
    mode = "on" if args.tf32 else "convolutions only" if args.tf32_conv else "off"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, TF32 {mode} "
          f"(torch's defaults: matmul.allow_tf32 {defaults[0]}, cudnn.allow_tf32 {defaults[1]})")
    global INDUCTOR_MODES, PROFILE_TOP, AUTOCAST
    PROFILE_TOP = args.gpu_profile
    AUTOCAST = HALF.get(args.autocast)
    if AUTOCAST is not None:
        print(f"eager and torch.compile under torch.autocast('cuda', {AUTOCAST})")
    modes = args.inductor_modes.split(",")
    for m in modes:
        if m not in ("default", "reduce-overhead"):
            sys.exit(f"--inductor-modes: '{m}' is not a torch.compile mode this bench runs (default, reduce-overhead)")
    INDUCTOR_MODES = tuple(x for x in INDUCTOR_MODES if {"ind": "default", "ind_ro": "reduce-overhead"}[x[0]] in modes)
    if args.no_inductor:
        INDUCTOR_MODES = ()
    res = {"check": [] if args.no_check else check(Path(args.libs), args.only, args.ref_only, Path(args.models_dir))}
    if args.bench or args.sizes:
        res["bench"] = bench(Path(args.libs), args.reps, args.only, Path(args.models_dir), args.sizes)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    sys.exit(0 if all(r["ok"] for r in res["check"]) else 1)


if __name__ == "__main__":
    main()
