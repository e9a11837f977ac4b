#!/usr/bin/env python3
"""The real-model suite: export (random weights), compile with ptc, run, compare with PyTorch eager.

For each model (scripts/export_models.py's REAL list, exported into models/cache/ on first use,
with its .core.pt2 and, where torch.jit.trace works, .pt), each flavour is compiled with
`ptc compile` and every recorded case (two batch sizes / sequence lengths, from one compile)
runs through the library (the ptc package, python/ptc) and is compared with the outputs PyTorch eager
recorded at export (tolerances from NAME.expect.json: atol = rtol = 1e-3 for the real models).
Writes a pass/fail table with the reason of each failure, as markdown and JSON.

--dtypes bfloat16 float16 runs the models with their parameters and inputs in that dtype
(exported as NAME_bf16 / NAME_f16). Eager in half precision rounds after every op and ptc
computes in float32 between loads and stores, so both are judged against the float32
computation of the same rounded weights and inputs (ref32), torch._dynamo's accuracy rule with
float32 as the reference: a case passes when ptc's RMS error against ref32 is at most
HALF_RMS_FACTOR (2) times eager's own RMS error in that dtype, plus 1e-4 of ref32's RMS.

    .venv/bin/python scripts/suite.py                       # every model (exports what is missing)
    .venv/bin/python scripts/suite.py --models resnet18 bert --flavours pt2
    .venv/bin/python scripts/suite.py --out suite-results   # suite.md + suite.json there
    .venv/bin/python scripts/suite.py --models mobilenet_v3_small distilbert --flavours pt2 --require-pass   # the CI subset
    .venv/bin/python scripts/suite.py --flavours pt2 --dtypes bfloat16 float16  # every model in half precision
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "models" / "cache"
FLAVOURS = {"pt2": ".pt2", "core": ".core.pt2", "pt": ".pt"}
SUFFIX = {"float32": "", "bfloat16": "_bf16", "float16": "_f16"}
HALF_RMS_FACTOR = 2.0

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                             epilog=__doc__.split("\n", 2)[2])
ap.add_argument("--models", nargs="*", help="default: every model of export_models.py's REAL list")
ap.add_argument("--flavours", nargs="*", default=list(FLAVOURS), choices=list(FLAVOURS))
ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
ap.add_argument("--dtypes", nargs="*", default=["float32"], choices=["float32", "bfloat16", "float16"],
                help="the models' dtypes (default float32)")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--out", default=str(ROOT / "suite-results"), help="folder for suite.md and suite.json")
ap.add_argument("--no-export", action="store_true", help="only models already in models/cache/")
ap.add_argument("--require-pass", action="store_true", help="exit 1 unless every row passes (for tests)")
ARGS = ap.parse_args()
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the ptc package
import ptc  # noqa: E402


def real_models():
    sys.path.insert(0, str(ROOT / "scripts"))
    import export_models  # noqa: E402
    return list(export_models.REAL)


def first_line(text, limit=300):
    for line in text.strip().splitlines():
        line = line.strip()
        if line.startswith("error:"):
            return line[len("error:"):].strip()[:limit]
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return (lines[-1] if lines else "").strip()[:limit]


def ensure_exported(name, dtype):
    if (CACHE / f"{name}{SUFFIX[dtype]}.pt2").exists():
        return None
    if ARGS.no_export:
        return "not exported (--no-export)"
    t0 = time.time()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_models.py"), "--real", name, "--core", "--dtype", dtype],
                       capture_output=True, text=True)
    print(f"  exported {name} in {time.time() - t0:.0f} s (exit {r.returncode})", flush=True)
    if r.returncode != 0 or not (CACHE / f"{name}{SUFFIX[dtype]}.pt2").exists():
        return "export failed: " + first_line(r.stderr + r.stdout)
    return None


def recorded(entry):
    """A recorded array as a tensor of its recorded dtype (half ones are stored as float32)."""
    return torch.from_numpy(np.load(CACHE / entry["file"])).to(getattr(torch, entry["dtype"]))


def rms(t):
    return t.double().pow(2).mean().sqrt().item() if t.numel() else 0.0


def run_flavour(name, flavour, tmp, dtype="float32"):
    model = CACHE / f"{name}{FLAVOURS[flavour]}"
    row = dict(model=name, dtype=dtype, flavour=flavour, status="", reason="", compile_s=None, cases=0, max_err=None)
    if not model.exists():
        row.update(status="no model", reason=f"{model.name} was not written by the export (see its log)")
        return row
    lib = Path(tmp) / f"{name}_{flavour}.so"
    t0 = time.time()
    r = subprocess.run([ARGS.ptc_binary, "compile", str(model), "-o", str(lib), "-q"], capture_output=True, text=True)
    row["compile_s"] = round(time.time() - t0, 2)
    if r.returncode != 0:
        row.update(status="compile error", reason=first_line(r.stderr + r.stdout))
        return row
    expect = json.loads((CACHE / f"{name}.expect.json").read_text())
    atol, rtol = expect["tolerance"]["atol"], expect["tolerance"]["rtol"]
    try:
        with ptc.Model(str(lib)) as m:
            worst, ok, why = 0.0, True, ""
            for case in expect["cases"]:
                ins = [recorded(f) for f in case["inputs"]]
                outs = m(*ins)
                for j, (got, f) in enumerate(zip(outs, case["outputs"])):
                    want = recorded(f)
                    if got.shape != want.shape:
                        raise RuntimeError(f"output shape {list(got.shape)}, eager {list(want.shape)}")
                    if got.dtype != want.dtype:
                        raise RuntimeError(f"output dtype {got.dtype}, eager {want.dtype}")
                    d = (got.double() - want.double()).abs()
                    worst = max(worst, d.max().item() if d.numel() else 0.0)
                    if "ref32" in case:  # half precision: against the float32 computation
                        ref = recorded(case["ref32"][j]).double()
                        e_ptc, e_eager = rms(got.double() - ref), rms(want.double() - ref)
                        bound = HALF_RMS_FACTOR * e_eager + 1e-4 * rms(ref)
                        row["rms_ptc"] = max(row.get("rms_ptc", 0.0), e_ptc / max(rms(ref), 1e-30))
                        row["rms_eager"] = max(row.get("rms_eager", 0.0), e_eager / max(rms(ref), 1e-30))
                        if not e_ptc <= bound:
                            ok = False
                            why = f"RMS error vs float32 {e_ptc:.2e} over {HALF_RMS_FACTOR} x eager's {e_eager:.2e}"
                    elif not torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol):
                        ok = False
                        why = f"max abs error {worst:.2e} over atol={atol} rtol={rtol}"
                row["cases"] += 1
        row["max_err"] = worst
        row["status"] = "pass" if ok else "mismatch"
        row["reason"] = why
    except Exception as exc:  # noqa: BLE001
        row.update(status="run error", reason=f"{type(exc).__name__}: {str(exc)[:300]}")
    return row


def main():
    names = ARGS.models or real_models()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ptc_suite_") as tmp:
        for dtype in ARGS.dtypes:
            for name in names:
                print(f"== {name} ({dtype})", flush=True)
                err = ensure_exported(name, dtype)
                if err:
                    rows.append(dict(model=name, dtype=dtype, flavour="-", status="export failed", reason=err))
                    continue
                for flavour in ARGS.flavours:
                    row = run_flavour(name + SUFFIX[dtype], flavour, tmp, dtype)
                    print(f"   {flavour}: {row['status']} {row['reason']}", flush=True)
                    rows.append(row)
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    passed = sum(r["status"] == "pass" for r in rows)
    lines = [f"ptc model suite: {passed} of {len(rows)} passed (threads {ARGS.threads}, torch {torch.__version__})", "",
             "| model | dtype | flavour | result | cases | max abs err vs eager | rel. RMS err vs fp32: ptc / eager | ptc compile s | reason |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['max_err']:.1e}" if r.get("max_err") is not None else "-"
        cs = f"{r['compile_s']:.1f}" if r.get("compile_s") is not None else "-"
        rel = f"{r['rms_ptc']:.1e} / {r['rms_eager']:.1e}" if "rms_ptc" in r else "-"
        lines.append(f"| {r['model']} | {r.get('dtype', 'float32')} | {r['flavour']} | {r['status']} | {r.get('cases', 0)} | {err} | {rel} | {cs} "
                     f"| {r.get('reason', '')} |")
    (out / "suite.md").write_text("\n".join(lines) + "\n")
    (out / "suite.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))
    if ARGS.require_pass and passed != len(rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
