#!/usr/bin/env python3
"""The real-model suite: export (random weights), compile with ptc, run, compare with PyTorch eager.

For each model (scripts/export_models.py's REAL list, exported into models/cache/ on first use,
with its .core.pt2 and, where torch.jit.trace works, .pt), each flavour is compiled with
`ptc compile` and every recorded case (two batch sizes / sequence lengths, from one compile)
runs through the library (scripts/ptc_ctypes.py) and is compared with the outputs PyTorch eager
recorded at export (tolerances from NAME.expect.json: atol = rtol = 1e-3 for the real models).
Writes a pass/fail table with the reason of each failure, as markdown and JSON.

    .venv/bin/python scripts/suite.py                       # every model (exports what is missing)
    .venv/bin/python scripts/suite.py --models resnet18 bert --flavours pt2
    .venv/bin/python scripts/suite.py --out suite-results   # suite.md + suite.json there
    .venv/bin/python scripts/suite.py --models mobilenet_v3_small distilbert --flavours pt2 --require-pass   # the CI subset
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

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                             epilog=__doc__.split("\n", 2)[2])
ap.add_argument("--models", nargs="*", help="default: every model of export_models.py's REAL list")
ap.add_argument("--flavours", nargs="*", default=list(FLAVOURS), choices=list(FLAVOURS))
ap.add_argument("--ptc-binary", default=str(ROOT / "build" / "ptc"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--out", default=str(ROOT / "suite-results"), help="folder for suite.md and suite.json")
ap.add_argument("--no-export", action="store_true", help="only models already in models/cache/")
ap.add_argument("--require-pass", action="store_true", help="exit 1 unless every row passes (for tests)")
ARGS = ap.parse_args()
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ptc_ctypes  # noqa: E402


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


def ensure_exported(name):
    if (CACHE / f"{name}.pt2").exists():
        return None
    if ARGS.no_export:
        return "not exported (--no-export)"
    t0 = time.time()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_models.py"), "--real", name, "--core"],
                       capture_output=True, text=True)
    print(f"  exported {name} in {time.time() - t0:.0f} s (exit {r.returncode})", flush=True)
    if r.returncode != 0 or not (CACHE / f"{name}.pt2").exists():
        return "export failed: " + first_line(r.stderr + r.stdout)
    return None


def run_flavour(name, flavour, tmp):
    model = CACHE / f"{name}{FLAVOURS[flavour]}"
    row = dict(model=name, flavour=flavour, status="", reason="", compile_s=None, cases=0, max_err=None)
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
        with ptc_ctypes.PtcModel(str(lib)) as m:
            worst, ok = 0.0, True
            for case in expect["cases"]:
                ins = [torch.from_numpy(np.load(CACHE / f["file"])) for f in case["inputs"]]
                outs = m(*ins)
                for got, f in zip(outs, case["outputs"]):
                    want = torch.from_numpy(np.load(CACHE / f["file"]))
                    if got.shape != want.shape:
                        raise RuntimeError(f"output shape {list(got.shape)}, eager {list(want.shape)}")
                    d = (got.double() - want.double()).abs()
                    worst = max(worst, d.max().item() if d.numel() else 0.0)
                    ok = ok and torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol)
                row["cases"] += 1
        row["max_err"] = worst
        row["status"] = "pass" if ok else "mismatch"
        if not ok:
            row["reason"] = f"max abs error {worst:.2e} over atol={atol} rtol={rtol}"
    except Exception as exc:  # noqa: BLE001
        row.update(status="run error", reason=f"{type(exc).__name__}: {str(exc)[:300]}")
    return row


def main():
    names = ARGS.models or real_models()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ptc_suite_") as tmp:
        for name in names:
            print(f"== {name}", flush=True)
            err = ensure_exported(name)
            if err:
                rows.append(dict(model=name, flavour="-", status="export failed", reason=err))
                continue
            for flavour in ARGS.flavours:
                row = run_flavour(name, flavour, tmp)
                print(f"   {flavour}: {row['status']} {row['reason']}", flush=True)
                rows.append(row)
    out = Path(ARGS.out)
    out.mkdir(parents=True, exist_ok=True)
    passed = sum(r["status"] == "pass" for r in rows)
    lines = [f"ptc model suite: {passed} of {len(rows)} passed (threads {ARGS.threads}, torch {torch.__version__})", "",
             "| model | flavour | result | cases | max abs err | ptc compile s | reason |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['max_err']:.1e}" if r.get("max_err") is not None else "-"
        cs = f"{r['compile_s']:.1f}" if r.get("compile_s") is not None else "-"
        lines.append(f"| {r['model']} | {r['flavour']} | {r['status']} | {r.get('cases', 0)} | {err} | {cs} | {r.get('reason', '')} |")
    (out / "suite.md").write_text("\n".join(lines) + "\n")
    (out / "suite.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))
    if ARGS.require_pass and passed != len(rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
