#!/usr/bin/env python3
"""Benchmark ptc-compiled models against PyTorch eager and torch.compile (Inductor), CPU, fp32 / bf16 / fp16.

For each model, in one process and with the same number of threads everywhere
(torch.set_num_threads(n); OMP_NUM_THREADS=n, set before torch or any library is loaded):
  - eager:        torch.export.load(NAME.pt2).module() under torch.inference_mode()
  - inductor:     torch.compile(that module) (default mode; specializes on the benched shapes)
  - inductor-frz: the same with torch._inductor.config.freezing = True
  - ptc:          `ptc compile NAME.pt2` (wall time, empty compile cache; then again: a cache hit),
                  then the library through the ptc package (python/ptc)
  - with --peers: ONNX Runtime (ORT_ENABLE_ALL, intra_op_num_threads = n) and OpenVINO (CPU, the
                  LATENCY hint, INFERENCE_NUM_THREADS = n, INFERENCE_PRECISION_HINT from
                  --peer-precision) on torch.onnx.export(the same ExportedProgram, dynamo=True);
                  their set-up time (session / compile_model), error and precision are reported
Latency = the best (over --rounds rounds) of the median of --reps calls (more when they take less
than --min-time s, fewer when more than --max-time s) after --warmup calls; the backends take turns within a round, and each round
first waits (up to --max-wait s) for other processes to leave the CPUs mostly idle. Compile time
of torch.compile = time of the first call (in a fresh, empty Inductor cache) minus the latency;
Inductor's one-time start-up (a trivial torch.compile first) is not counted. ptc's error =
max |ptc - eager| over all outputs (and whether it is within atol = rtol = 1e-4).

--precision bf16 / fp16 compiles ptc with `--precision bf16 / fp16` and runs eager and
torch.compile under torch.autocast("cpu", dtype) (OpenVINO gets the bf16 hint unless
--peer-precision says otherwise). Every error is then measured against exact fp32 eager, and ptc
passes when its error is at most 1.5 x autocast eager's own (the rule of test/precision_test.py);
the table's "ac err" column is autocast eager's error.

    .venv/bin/python scripts/bench.py                                # small fixtures, 2 threads
    .venv/bin/python scripts/bench.py --real resnet18 --json out.json
    .venv/bin/python scripts/bench.py --models mlp_dyn:256 tfm_dyn:4,64 --no-inductor
    .venv/bin/python scripts/bench.py --real bert --real-sizes 1,128
    .venv/bin/python scripts/bench.py --models --real resnet18 --peers --no-inductor
    .venv/bin/python scripts/bench.py --models --real bert --real-sizes 1,128 --precision bf16 --peers

Model specs: NAME (sizes of the export's example inputs) or NAME:V1,V2,... (values of the
symbolic sizes, in the order they first appear in the inputs: tfm_dyn:8,128 = batch 8, seq 128).
Symbols not given keep the sizes of the export's example inputs. NAME is looked up in models/, then
models/cache/. --real NAME adds NAME:B for each --real-sizes B (default 1 and 8; B,S for models
with a sequence dimension).
If `ptc compile NAME.pt2` fails and NAME.core.pt2 exists, ptc compiles the Core ATen flavour
instead (the failure is recorded); eager and torch.compile always use NAME.pt2.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
CACHE = MODELS / "cache"
DEFAULT_MODELS = ["mlp", "mlp_dyn:64", "small_cnn", "tiny_tfm", "tfm_dyn:8,128"]
ATOL = RTOL = 1e-4


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--models", nargs="*", default=None,
                    help=f"model specs (default: {' '.join(DEFAULT_MODELS)}; none: only --real)")
    ap.add_argument("--real", nargs="*", default=[],
                    help="real models from models/cache/ (e.g. resnet18), at each --real-sizes")
    ap.add_argument("--real-sizes", nargs="+", default=["1", "8"],
                    help="symbol values for --real models: B or B,S (default: 1 8)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=50, help="timed calls per round (median)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5,
                    help="more calls than --reps when they take less than this (seconds)")
    ap.add_argument("--max-time", type=float, default=10,
                    help="fewer calls (3 at least) when --reps would take longer (seconds)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the best median is kept")
    ap.add_argument("--quiet-threshold", type=float, default=0.3,
                    help="before each round wait until other processes use fewer cores than this")
    ap.add_argument("--max-wait", type=float, default=60,
                    help="longest wait for a quiet machine per round, seconds (0: never wait)")
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile (slow on 2 cores)")
    ap.add_argument("--no-freezing", action="store_true", help="skip the freezing Inductor variant")
    ap.add_argument("--peers", action="store_true",
                    help="also time ONNX Runtime and OpenVINO (scripts/requirements-bench.txt) on an ONNX export "
                         "(torch.onnx.export(..., dynamo=True)) of the same ExportedProgram")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="ptc compile --precision, and torch.autocast in this dtype for eager and torch.compile; "
                         "errors are then against exact fp32 eager")
    ap.add_argument("--peer-precision", choices=["fp32", "bf16"], default=None,
                    help="OpenVINO's inference precision hint (its default on AMX CPUs is bf16; default here: bf16 "
                         "with --precision bf16, else fp32); ONNX Runtime's CPU provider computes in fp32 either way")
    ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
    ap.add_argument("--ptc-flavour", choices=["auto", "export", "core"], default="auto",
                    help="which .pt2 ptc compiles (auto: NAME.pt2, else NAME.core.pt2)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--keep", help="keep the compiled libraries in this folder")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args()


ARGS = parse_args()
if ARGS.peer_precision is None:
    ARGS.peer_precision = "bf16" if ARGS.precision == "bf16" else "fp32"
# Before torch (which loads libgomp, the same runtime ptc's libraries use) reads it.
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
os.environ.setdefault("MKL_NUM_THREADS", str(ARGS.threads))
# A cold, private Inductor cache: compile times are what a first compile costs.
_INDUCTOR_CACHE = tempfile.mkdtemp(prefix="ptc_bench_inductor_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE

warnings.filterwarnings("ignore", message=".*non-writable.*")
warnings.filterwarnings("ignore", message=".*LeafSpec.*")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the ptc package
import ptc  # noqa: E402

AUTOCAST_RULE = 1.5  # --precision bf16 / fp16: ptc's error at most this times autocast eager's


def precision_ctx():
    """torch.autocast in --precision's dtype (a no-op context for fp32)."""
    import contextlib
    if ARGS.precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[ARGS.precision])


def under_precision(fn):
    def run():
        with precision_ctx():
            return fn()
    return run


# --------------------------------------------------------------------------------------------
def find_model(name):
    for d in (MODELS, CACHE):
        if (d / f"{name}.pt2").exists():
            return d
    return None


def input_specs(folder, name):
    """[(dtype, sizes)] of the user inputs (sizes: ints and symbol names), example shapes."""
    exp = folder / f"{name}.expect.json"
    if exp.exists():
        d = json.loads(exp.read_text())
        ins = d["flavours"]["export"]["inputs"]
        example = [c["shape"] for c in d["cases"][0]["inputs"]]
        return [(getattr(torch, i["dtype"]), i["sizes"]) for i in ins], example
    ep = torch.export.load(str(folder / f"{name}.pt2"))
    specs, example = [], []
    user = set(ep.graph_signature.user_inputs)
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            v = node.meta["val"]
            specs.append((v.dtype, [int(s) if isinstance(s, int) or not hasattr(s, "node")
                                    else str(s) for s in v.shape]))
            example.append([int(s) if isinstance(s, int) else int(s.node.hint) for s in v.shape])
    return specs, example


def make_inputs(specs, example, values, gen):
    """Random inputs; `values` assigns the symbols in order of first appearance."""
    order = []
    for _, sizes in specs:
        for s in sizes:
            if isinstance(s, str) and s not in order and s.isidentifier():
                order.append(s)
    env = {}
    if values:
        if len(values) > len(order):
            raise ValueError(f"{len(values)} values for {len(order)} symbols {order}")
        env = dict(zip(order, values))
    tensors = []
    for k, (dtype, sizes) in enumerate(specs):
        shape = []
        for j, s in enumerate(sizes):
            if isinstance(s, int):
                shape.append(s)
            elif s in env:
                shape.append(env[s])
            else:  # a derived size ("2*s77") when its symbols are given, else the example's
                try:
                    shape.append(int(eval(s, {"__builtins__": {}}, dict(env))))
                except Exception:  # noqa: BLE001
                    shape.append(example[k][j])
        if dtype.is_floating_point:
            tensors.append(torch.randn(shape, generator=gen, dtype=dtype))
        elif dtype == torch.bool:
            tensors.append(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            tensors.append(torch.randint(0, 1000, shape, generator=gen, dtype=dtype))
    return tensors


def flat(out):
    leaves = pytree.tree_leaves(out)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def max_err(got, ref):
    g, r = flat(got), flat(ref)
    if len(g) != len(r):
        return float("inf"), False, f"{len(g)} outputs vs {len(r)}"
    err, ok = 0.0, True
    for a, b in zip(g, r):
        if a.shape != b.shape:
            return float("inf"), False, f"shape {list(a.shape)} vs {list(b.shape)}"
        a, b = a.double(), b.double()
        if a.numel():
            err = max(err, (a - b).abs().max().item())
        ok = ok and torch.allclose(a, b, atol=ATOL, rtol=RTOL)
    return err, ok, None


_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_ticks():
    """(busy ticks of the whole machine, ticks of this process) or None off Linux."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]  # user .. steal (guest is in user)
        busy = sum(v) - v[3] - (v[4] if len(v) > 4 else 0)  # minus idle and iowait
        with open("/proc/self/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        return busy, int(st[11]) + int(st[12])  # utime + stime (all threads)
    except (OSError, ValueError, IndexError):
        return None


class OtherLoad:
    """CPU cores used by other processes between start() and stop() (None off Linux)."""

    def start(self):
        self.t0, self.c0 = time.perf_counter(), _cpu_ticks()
        return self

    def stop(self):
        c1, dt = _cpu_ticks(), time.perf_counter() - self.t0
        if c1 is None or self.c0 is None or dt <= 0:
            return None
        return max((c1[0] - self.c0[0]) - (c1[1] - self.c0[1]), 0) / _HZ / dt


def wait_quiet(threshold, max_wait):
    """Waits (up to max_wait s) until other processes use less than `threshold` cores."""
    if max_wait <= 0:
        return None
    t0 = time.perf_counter()
    while True:
        o = OtherLoad().start()
        time.sleep(0.5)
        load = o.stop()
        if load is None or load < threshold or time.perf_counter() - t0 > max_wait:
            return load


def time_calls(fn, reps, warmup, min_time, max_time):
    """Median of n calls after up to `warmup` calls: n = --reps, raised to fill min_time seconds
    for fast calls, lowered (to 3 at least) to fit max_time seconds for slow ones."""
    with torch.inference_mode():
        t0 = time.perf_counter()
        done = 0
        while done < max(warmup, 1):
            fn()
            done += 1
            if time.perf_counter() - t0 > max_time / 2:
                break
        per_call = (time.perf_counter() - t0) / done
        n = max(reps, min(int(min_time / max(per_call, 1e-7)), 100000))
        n = max(3, min(n, int(max_time / max(per_call, 1e-7))))
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def first_call(fn):
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out


def short(e, n=400):
    s = f"{type(e).__name__}: {e}".strip()
    s = s.split("\n\nSet TORCH")[0]
    return s if len(s) <= n else s[:n] + " ..."


# --------------------------------------------------------------------------------------------
def ptc_compile(name, folder, libdir, cache):
    """Compiles (once per model file) and opens the library. Returns a dict."""
    if name in cache:
        return cache[name]
    res = {"flavour": None, "compile_s": None, "error": None, "fallback_reason": None}
    flavours = {"auto": ["", ".core"], "export": [""], "core": [".core"]}[ARGS.ptc_flavour]
    for fl in flavours:
        src = folder / f"{name}{fl}.pt2"
        if not src.exists():
            continue
        lib = libdir / f"{name}{fl}.{ARGS.precision}.so"
        prec = [] if ARGS.precision == "fp32" else ["--precision", ARGS.precision]
        for _ in range(60):  # someone may be rebuilding build/ptc right now
            if os.access(ARGS.ptc_binary, os.X_OK):
                break
            time.sleep(2)
        # Cold: a fresh, empty compile cache of this model's own (no objects from earlier models).
        # Then the same compile again: a compile-cache hit.
        env = dict(os.environ, PTC_CACHE_DIR=tempfile.mkdtemp(prefix="ptc-bench-cache-"))
        t0 = time.perf_counter()
        r = subprocess.run([ARGS.ptc_binary, "compile", str(src), "-o", str(lib), *prec],
                           capture_output=True, text=True, env=env)
        dt = time.perf_counter() - t0
        if r.returncode == 0:
            t1 = time.perf_counter()
            hit = subprocess.run([ARGS.ptc_binary, "compile", str(src), "-o", str(lib), *prec],
                                 capture_output=True, text=True, env=env)
            res["cached_compile_s"] = time.perf_counter() - t1
            if hit.returncode != 0 or "from the compile cache" not in hit.stderr:
                res["cached_compile_s"] = None
            shutil.rmtree(env["PTC_CACHE_DIR"], ignore_errors=True)
            try:
                res["model"] = ptc.Model(lib)
            except Exception as e:  # noqa: BLE001
                res["error"] = f"open {lib.name}: {short(e)}"
                break
            res.update(flavour="core" if fl else "export", compile_s=dt, error=None,
                       library_bytes=lib.stat().st_size)
            break
        msg = (r.stderr or r.stdout).strip().splitlines()
        msg = msg[-1] if msg else f"exit code {r.returncode}"
        why = f"{src.name}: {msg}"
        if res["error"] is None:
            res["fallback_reason"] = why
        res["error"] = why if res["error"] is None else f"{res['error']}; {why}"
    if res["error"] is None and res["compile_s"] is None:
        res["error"] = "no .pt2 for this flavour"
    if res["compile_s"] is not None:
        res["error"] = None
    cache[name] = res
    return res


def inductor(module_factory, inputs, freezing):
    """torch.compile of a fresh module, compiled (on the first call) in a fresh, empty Inductor
    cache. Returns (fn, first_call_s, output, error). No torch._dynamo.reset(): every compiled
    module keeps its own code, so both variants stay usable for the timed rounds."""
    import torch._inductor.config as icfg
    from torch._inductor.utils import fresh_cache
    old = icfg.freezing
    icfg.freezing = freezing
    try:
        compiled = torch.compile(module_factory())
        fn = under_precision(lambda: compiled(*inputs))
        with fresh_cache(dir=tempfile.mkdtemp(dir=_INDUCTOR_CACHE), delete=False):
            t, out = first_call(fn)
        return fn, t, out, None
    except Exception as e:  # noqa: BLE001
        return None, None, None, short(e)
    finally:
        icfg.freezing = old


def inductor_startup():
    """Compiles a trivial function once: Inductor's one-time start-up cost (imports, compiler
    checks), which would otherwise land on the first model's compile time."""
    try:
        t0 = time.perf_counter()
        f = torch.compile(lambda a: a * 2 + 1)
        with torch.inference_mode():
            f(torch.randn(8))
        return time.perf_counter() - t0, None
    except Exception as e:  # noqa: BLE001
        return None, short(e)


def peers(name, folder, ep, inputs, libdir, cache):
    """ONNX Runtime and OpenVINO on an ONNX export of `ep` (once per model): {key: (fn, info)}."""
    import numpy as np
    res = {}
    onnx_path = libdir / f"{name}.onnx"
    if name not in cache:
        t0 = time.perf_counter()
        try:
            torch.onnx.export(ep, tuple(inputs), str(onnx_path), dynamo=True, optimize=True, verbose=False)
            cache[name] = {"export_s": time.perf_counter() - t0, "error": None}
        except Exception as e:  # noqa: BLE001
            cache[name] = {"error": f"torch.onnx.export: {short(e)}"}
    if cache[name]["error"]:
        return {"ort": (None, {"error": cache[name]["error"]}), "ov": (None, {"error": cache[name]["error"]})}
    feeds_np = [t.numpy() for t in inputs]
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = ARGS.threads
        so.inter_op_num_threads = 1
        t0 = time.perf_counter()
        sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
        setup = time.perf_counter() - t0
        names = [i.name for i in sess.get_inputs()]
        feeds = dict(zip(names, feeds_np))
        res["ort"] = (lambda: sess.run(None, feeds), {"setup_s": setup, "precision": "fp32", "version": ort.__version__})
    except Exception as e:  # noqa: BLE001
        res["ort"] = (None, {"error": f"onnxruntime: {short(e)}"})
    try:
        import openvino as ov
        core = ov.Core()
        prec = {"fp32": "f32", "bf16": "bf16"}[ARGS.peer_precision]
        t0 = time.perf_counter()
        cm = core.compile_model(str(onnx_path), "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": ARGS.threads,
                                                        "INFERENCE_PRECISION_HINT": prec})
        setup = time.perf_counter() - t0
        req = cm.create_infer_request()
        hint = cm.get_property("INFERENCE_PRECISION_HINT")  # what it runs in (an ov.Type: f32, bf16)
        ran = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)

        def run_ov():
            req.infer(feeds_np)
            return [req.get_output_tensor(i).data.copy() for i in range(len(cm.outputs))]
        res["ov"] = (run_ov, {"setup_s": setup, "precision": ran, "version": ov.__version__})
    except Exception as e:  # noqa: BLE001
        res["ov"] = (None, {"error": f"openvino: {short(e)}"})
    del np
    return res


def bench_one(spec, libdir, ptc_cache, gen):
    name, _, vals = spec.partition(":")
    values = [int(v) for v in vals.replace("x", ",").split(",") if v] if vals else []
    row = {"spec": spec, "model": name}
    folder = find_model(name)
    if folder is None:
        row["error"] = f"{name}.pt2 not found in models/ or models/cache/"
        return row
    specs, example = input_specs(folder, name)
    inputs = make_inputs(specs, example, values, gen)
    row["input_shapes"] = [list(t.shape) for t in inputs]
    print(f"\n== {spec}: inputs {row['input_shapes']}", flush=True)

    ep = torch.export.load(str(folder / f"{name}.pt2"))
    factory = lambda: torch.export.load(str(folder / f"{name}.pt2")).module()  # noqa: E731
    eager_mod = ep.module()
    eager = lambda: eager_mod(*inputs)  # noqa: E731
    with torch.inference_mode():
        ref = eager()  # exact fp32: every error below is against this
    ac_err = None
    if ARGS.precision != "fp32":
        eager = under_precision(eager)
        with torch.inference_mode():
            ac_err, _, _ = max_err(eager(), ref)
        row["autocast_eager_max_abs_err"] = ac_err
        print(f"   eager under autocast {ARGS.precision}: max abs err {ac_err:.2e} (vs fp32 eager)", flush=True)
    fns = {"eager": eager}

    # ---- ptc
    p = ptc_compile(name, folder, libdir, ptc_cache)
    row["ptc_flavour"] = p["flavour"]
    row["ptc_compile_s"] = p["compile_s"]
    row["ptc_cached_compile_s"] = p.get("cached_compile_s")
    if p.get("fallback_reason") and p["flavour"]:
        row["ptc_note"] = f"compiled {name}.core.pt2; {p['fallback_reason']}"
    if p["error"]:
        row["ptc_error"] = p["error"]
        print(f"   ptc: FAILED: {p['error']}", flush=True)
    else:
        m = p["model"]
        try:
            with torch.inference_mode():
                got = m(*inputs)
            err, ok, why = max_err(got, ref)
            if ac_err is not None:
                ok = err <= AUTOCAST_RULE * ac_err + 1e-6
            row.update(ptc_max_abs_err=err, ptc_within_tol=ok)
            if why:
                row["ptc_error"] = why
            fns["ptc"] = lambda: m(*inputs)
            outs = [torch.empty_like(t) for t in got]
            fns["ptc_prealloc"] = lambda: m(*inputs, out=outs)
            print(f"   ptc: compile {p['compile_s']:.2f} s ({p['flavour']}), "
                  f"max abs err {err:.2e}", flush=True)
        except Exception as e:  # noqa: BLE001
            row["ptc_error"] = short(e)
            print(f"   ptc: run FAILED: {row['ptc_error']}", flush=True)

    # ---- peers: ONNX Runtime and OpenVINO
    if ARGS.peers:
        for key, (fn, info) in peers(name, folder, ep, inputs, libdir, PEER_CACHE).items():
            if fn is None:
                row[f"{key}_error"] = info["error"]
                print(f"   {key}: FAILED: {info['error']}", flush=True)
                continue
            with torch.inference_mode():
                out = [torch.from_numpy(o) for o in fn()]
            err, ok, why = max_err(out, ref)
            row.update({f"{key}_setup_s": info["setup_s"], f"{key}_precision": info["precision"],
                        f"{key}_version": info["version"], f"{key}_max_abs_err": err})
            fns[key] = fn
            print(f"   {key} {info['version']}: set-up {info['setup_s']:.2f} s, {info['precision']}, "
                  f"max abs err {err:.2e}", flush=True)

    # ---- torch.compile
    if not ARGS.no_inductor:
        variants = [("inductor", False)] + ([] if ARGS.no_freezing else [("inductor_freezing", True)])
        for key, frz in variants:
            t0 = time.perf_counter()
            fn, first, out, e = inductor(factory, inputs, frz)
            if e:
                row[f"{key}_error"] = e
                print(f"   {key}: FAILED ({time.perf_counter() - t0:.1f} s): {e}", flush=True)
                continue
            err, ok, _ = max_err(out, ref)
            row[f"{key}_first_call_s"] = first
            row[f"{key}_max_abs_err"] = err
            fns[key] = fn
            print(f"   {key}: first call {first:.1f} s, max abs err {err:.2e}", flush=True)

    # ---- timed rounds: the backends take turns
    best = {k: float("inf") for k in fns}
    loads = []
    for _ in range(ARGS.rounds):
        wait_quiet(ARGS.quiet_threshold, ARGS.max_wait)
        for k, fn in fns.items():
            try:
                o = OtherLoad().start()
                best[k] = min(best[k], time_calls(fn, ARGS.reps, ARGS.warmup, ARGS.min_time, ARGS.max_time))
                loads.append(o.stop())
            except Exception as e:  # noqa: BLE001
                row[f"{k}_error"] = short(e)
                best[k] = None
                fns[k] = None
        fns = {k: f for k, f in fns.items() if f is not None}
    loads = [x for x in loads if x is not None]
    row["other_load_cores"] = max(loads) if loads else None
    for k, v in best.items():
        if v is not None and v != float("inf"):
            row[f"{k}_ms"] = v * 1e3
    for key in ("inductor", "inductor_freezing"):
        if f"{key}_first_call_s" in row and f"{key}_ms" in row:
            row[f"{key}_compile_s"] = max(row[f"{key}_first_call_s"] - row[f"{key}_ms"] / 1e3, 0.0)
    print("   " + ", ".join(f"{k} {row[k + '_ms']:.3f} ms" for k in best if k + "_ms" in row),
          flush=True)
    return row


PEER_CACHE = {}


def ratio(a, b):
    return a / b if a is not None and b else None


def table(rows):
    cols = ["model", "inputs", "eager ms", "ind ms", "ind-frz ms", "ptc ms", "eager/ptc",
            "ind/ptc", "ind-frz/ptc", "ind c s", "ind-frz c s", "ptc c s", "ptc hit s", "ind c/ptc c",
            "ind-frz c/ptc c", "ptc err", "ac err", "load"]
    peers_on = any("ort_ms" in r or "ov_ms" in r for r in rows)
    if peers_on:
        cols += ["ort ms", "ov ms", "ort/ptc", "ov/ptc", "ort err", "ov err", "ort setup s", "ov setup s", "ov prec"]
    lines = []
    for r in rows:
        def f(v, fmt):
            return "-" if v is None else format(v, fmt)
        g = r.get
        ptc_ms = g("ptc_ms")
        err = g("ptc_max_abs_err")
        errs = "FAIL" if g("ptc_error") else ("-" if err is None else
                                            f"{err:.1e}" + ("" if g("ptc_within_tol") else "!"))
        lines.append([
            r["spec"], "x".join(str(s) for s in g("input_shapes", [[]])[0]) if g("input_shapes") else "-",
            f(g("eager_ms"), ".3f"), f(g("inductor_ms"), ".3f"), f(g("inductor_freezing_ms"), ".3f"),
            f(ptc_ms, ".3f"),
            f(ratio(g("eager_ms"), ptc_ms), ".2f"), f(ratio(g("inductor_ms"), ptc_ms), ".2f"),
            f(ratio(g("inductor_freezing_ms"), ptc_ms), ".2f"),
            f(g("inductor_compile_s"), ".1f"), f(g("inductor_freezing_compile_s"), ".1f"),
            f(g("ptc_compile_s"), ".2f"), f(g("ptc_cached_compile_s"), ".2f"),
            f(ratio(g("inductor_compile_s"), g("ptc_compile_s")), ".1f"),
            f(ratio(g("inductor_freezing_compile_s"), g("ptc_compile_s")), ".1f"),
            errs, f(g("autocast_eager_max_abs_err"), ".1e"), f(g("other_load_cores"), ".1f")] +
            ([f(g("ort_ms"), ".3f"), f(g("ov_ms"), ".3f"), f(ratio(g("ort_ms"), ptc_ms), ".2f"), f(ratio(g("ov_ms"), ptc_ms), ".2f"),
              f(g("ort_max_abs_err"), ".1e"), f(g("ov_max_abs_err"), ".1e"), f(g("ort_setup_s"), ".2f"), f(g("ov_setup_s"), ".2f"),
              g("ov_precision") or "-"] if peers_on else []))
    widths = [max(len(c), *(len(l[i]) for l in lines)) if lines else len(c) for i, c in enumerate(cols)]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for l in lines:
        out.append("| " + " | ".join(v.ljust(w) if i < 2 else v.rjust(w)
                                     for i, (v, w) in enumerate(zip(l, widths))) + " |")
    return "\n".join(out)


def git_rev():
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True)
        d = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
        return r.stdout.strip() + ("+dirty" if d.stdout.strip() else "")
    except Exception:  # noqa: BLE001
        return None


def main():
    torch.set_num_threads(ARGS.threads)
    gen = torch.Generator().manual_seed(ARGS.seed)
    specs = list(ARGS.models) if ARGS.models is not None else list(DEFAULT_MODELS)
    notes = []
    for name in ARGS.real:
        if not (CACHE / f"{name}.pt2").exists():
            notes.append(f"{name}: models/cache/{name}.pt2 not found (scripts/export_models.py "
                         f"--real {name}); skipped")
            print("note:", notes[-1])
            continue
        sizes = ARGS.real_sizes
        specs += [f"{name}:{s}" for s in sizes]
    libdir = Path(ARGS.keep) if ARGS.keep else Path(tempfile.mkdtemp(prefix="ptc_bench_"))
    libdir.mkdir(parents=True, exist_ok=True)
    try:
        ptc_version = subprocess.run([ARGS.ptc_binary, "--version"], capture_output=True,
                                     text=True).stdout.strip()
    except OSError:
        ptc_version = None

    startup = None
    if not ARGS.no_inductor:
        startup, err = inductor_startup()
        if err:
            notes.append(f"torch.compile start-up failed: {err}")
        else:
            print(f"Inductor start-up (first torch.compile in this process, not counted below): "
                  f"{startup:.1f} s", flush=True)

    ptc_cache, rows = {}, []
    try:
        for spec in specs:
            try:
                rows.append(bench_one(spec, libdir, ptc_cache, gen))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                rows.append({"spec": spec, "model": spec.split(":")[0], "error": short(e)})
    finally:
        for p in ptc_cache.values():
            if p.get("model"):
                p["model"].close()
        if not ARGS.keep:
            shutil.rmtree(libdir, ignore_errors=True)
        shutil.rmtree(_INDUCTOR_CACHE, ignore_errors=True)

    print(f"\n{ARGS.precision} (ptc compile --precision {ARGS.precision}" +
          ("" if ARGS.precision == "fp32" else f"; eager and torch.compile under torch.autocast; errors against fp32 eager; "
                                               f"'ac err' = autocast eager's; '!' = ptc's over {AUTOCAST_RULE} x it") +
          f"; OpenVINO hint {ARGS.peer_precision}), threads {ARGS.threads}, median of >= {ARGS.reps} calls / {ARGS.min_time} s (best of "
          f"{ARGS.rounds} rounds); "
          f"ratios > 1: ptc is faster; 'c s' = compile seconds (ptc: an empty compile cache); 'ptc hit s' = the same compile again (a compile-cache hit); ptc err = max |ptc - eager| "
          f"('!' = over atol=rtol=1e-4); load = most CPU cores other processes used while "
          f"a backend was timed\n")
    print(table(rows))
    failures = []
    for r in rows:
        for k, v in r.items():
            if k.endswith("error") and v:
                failures.append(f"{r['spec']}: {k}: {v}")
        if r.get("ptc_note"):
            failures.append(f"{r['spec']}: note: {r['ptc_note']}")
    if failures or notes:
        print()
        for f in notes + failures:
            print("-", f)

    if ARGS.json:
        meta = {
            "threads": ARGS.threads, "reps": ARGS.reps, "warmup": ARGS.warmup,
            "rounds": ARGS.rounds, "precision": ARGS.precision, "peer_precision": ARGS.peer_precision,
            "torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "cpu": _cpu_name(), "cpus": os.cpu_count(),
            "loadavg_end": os.getloadavg(), "ptc": ptc_version, "git": git_rev(),
            "ptc_binary": ARGS.ptc_binary, "ptc_binary_mtime": _mtime(ARGS.ptc_binary), "inductor_cache": "fresh_cache() per compile",
            "inductor_startup_s": startup,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "notes": notes,
        }
        Path(ARGS.json).write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
        print(f"\nwrote {ARGS.json}")
    return 0


def _mtime(path):
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(os.stat(path).st_mtime))
    except OSError:
        return None


def _cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
