#!/usr/bin/env python3
"""End-to-end test of the ptc Python package (python/ptc), no pytest needed.

With --install DIR the package is first installed the way users install it (`pip install
./python`, into DIR with --target) and imported from there; otherwise from python/ in this
checkout. Compiles models/mlp_dyn.pt2 and models/tfm_dyn.pt2 with `ptc compile` into a temporary
folder, runs them through ptc.load(...) on several batch sizes / sequence lengths and compares with
PyTorch eager on the same .pt2 (torch.export.load(...).module()), atol = rtol = 1e-4. Also checks
the reported signature, that bad inputs raise RuntimeError with a message, NumPy arrays in and
out, ptc.compile on an ExportedProgram and on a path (and its CompileError), and ptc.load on a
training library.

    .venv/bin/python test/python_package_test.py [--ptc-binary build/ptc] [--install DIR] [--keep DIR] [-v]

Prints one line per check and 'N passed, N failed'; exit code 0 when all passed, 1 otherwise.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

warnings.filterwarnings("ignore", message=".*non-writable.*")
warnings.filterwarnings("ignore", message=".*LeafSpec.*")

import torch  # noqa: E402

ptc = None  # the package, imported in main() (from --install's folder or from python/)

ATOL = 1e-4
RTOL = 1e-4


class Runner:
    def __init__(self, verbose):
        self.passed = 0
        self.failed = 0
        self.verbose = verbose

    def check(self, name, fn):
        try:
            msg = fn()
        except Exception as e:  # noqa: BLE001
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            if self.verbose:
                traceback.print_exc()
            return False
        self.passed += 1
        print(f"ok   {name}" + (f"  ({msg})" if msg else ""))
        return True


def wait_for(path, seconds=120):
    """Someone may be rebuilding build/ptc at this moment: wait for it to come back."""
    deadline = time.time() + seconds
    while not os.access(path, os.X_OK):
        if time.time() > deadline:
            raise FileNotFoundError(f"{path} not found (or not executable)")
        time.sleep(2)


def compile_model(ptc_bin, model, out):
    for attempt in range(3):
        wait_for(ptc_bin)
        r = subprocess.run([str(ptc_bin), "compile", str(model), "-o", str(out)],
                           capture_output=True, text=True)
        if r.returncode == 0 and out.exists():
            return
        if attempt < 2 and not os.access(ptc_bin, os.X_OK):  # binary replaced mid-run: retry
            continue
        raise RuntimeError(f"ptc compile {model.name} failed (rc {r.returncode}): "
                           f"{(r.stderr or r.stdout).strip()}")


def compare(got, ref):
    if got.shape != ref.shape:
        raise AssertionError(f"shape {list(got.shape)} != eager {list(ref.shape)}")
    if got.dtype != ref.dtype:
        raise AssertionError(f"dtype {got.dtype} != eager {ref.dtype}")
    err = (got - ref).abs().max().item() if got.numel() else 0.0
    if not torch.allclose(got, ref, atol=ATOL, rtol=RTOL):
        raise AssertionError(f"max abs error {err:.3g} over atol={ATOL} rtol={RTOL}")
    return f"max abs err {err:.2e}"


def expect_error(fn, exc=RuntimeError, contains=None):
    try:
        fn()
    except exc as e:
        msg = str(e)
        if not msg.strip():
            raise AssertionError(f"{exc.__name__} without a message")
        if contains and contains not in msg:
            raise AssertionError(f"message {msg!r} does not mention {contains!r}")
        return msg
    raise AssertionError(f"no {exc.__name__} raised")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ptc-binary", default=os.environ.get("PTC_BINARY", str(ROOT / "build" / "ptc")))
    ap.add_argument("--models-dir", default=str(ROOT / "models"))
    ap.add_argument("--keep", help="compile into this folder and keep it")
    ap.add_argument("--install", help="pip-install the package into this folder first and test that copy")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    global ptc
    if args.install:
        # As a user installs it: pip builds the package from python/ (setuptools from the venv,
        # no network) into a folder of its own.
        target = Path(args.install).resolve()
        shutil.rmtree(target, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                        str(target), str(ROOT / "python")], check=True)
        sys.path.insert(0, str(target))
    else:
        sys.path.insert(0, str(ROOT / "python"))
    import ptc as package
    ptc = package
    if args.install and Path(ptc.__file__).resolve().parent.parent != target:
        print(f"FAIL the installed package: imported {ptc.__file__}, not from {target}")
        return 1

    torch.manual_seed(0)
    ptc_bin = Path(args.ptc_binary).resolve()
    models = Path(args.models_dir)
    t = Runner(args.verbose)
    if args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="ptc_package_test_"))

    try:
        libs = {}
        for name in ("mlp_dyn", "tfm_dyn"):
            def build(name=name):
                start = time.perf_counter()
                compile_model(ptc_bin, models / f"{name}.pt2", work / f"{name}.so")
                libs[name] = ptc.load(work / f"{name}.so")
                return f"{time.perf_counter() - start:.1f} s"
            t.check(f"compile+open {name}", build)

        # ---- mlp_dyn: x [s77, 64], s77 in [1, 1024] ------------------------------------------
        if "mlp_dyn" in libs:
            m = libs["mlp_dyn"]
            eager = torch.export.load(str(models / "mlp_dyn.pt2")).module()

            def sig():
                assert len(m.inputs) == 1 and len(m.outputs) == 1, (m.inputs, m.outputs)
                x = m.inputs[0]
                assert x.dtype == torch.float32 and x.code == 7, x
                assert len(x.sizes) == 2 and isinstance(x.sizes[0], str) and x.sizes[1] == 64, x
                assert m.outputs[0].dtype == torch.float32 and m.outputs[0].sizes[1] == 64
                assert len(m.symbols) == 1, m.symbols
                s = m.symbols[0]
                assert s.name == x.sizes[0] and s.min == 1 and s.max == 1024, s
                return f"{x.name}: {x.sizes}, {s.name} in [{s.min}, {s.max}]"
            t.check("mlp_dyn signature", sig)

            for b in (1, 2, 4, 13, 64, 257, 1024):
                def run(b=b):
                    x = torch.randn(b, 64)
                    with torch.inference_mode():
                        ref = eager(x)
                    got = m(x)
                    assert isinstance(got, tuple) and len(got) == 1
                    return compare(got[0], ref)
                t.check(f"mlp_dyn batch {b}", run)

            def noncontig():
                x = torch.randn(64, 20).t()  # [20, 64], strides (1, 20)
                assert not x.is_contiguous()
                with torch.inference_mode():
                    ref = eager(x.contiguous())
                return compare(m(x)[0], ref)
            t.check("mlp_dyn non-contiguous input", noncontig)

            def out_arg():
                x = torch.randn(7, 64)
                y = torch.full((7, 64), float("nan"))
                (got,) = m(x, out=[y])
                assert got is y
                with torch.inference_mode():
                    return compare(y, eager(x))
            t.check("mlp_dyn out= tensors", out_arg)

            def shapes():
                s = m.output_shapes(torch.empty(33, 64))
                assert s == [(33, 64)], s
            t.check("mlp_dyn output_shapes", shapes)

            t.check("mlp_dyn wrong rank raises",
                    lambda: expect_error(lambda: m(torch.randn(64)), RuntimeError, "rank"))
            t.check("mlp_dyn wrong rank (3) raises",
                    lambda: expect_error(lambda: m(torch.randn(2, 3, 64)), RuntimeError))
            t.check("mlp_dyn static size mismatch raises",
                    lambda: expect_error(lambda: m(torch.randn(4, 63)), RuntimeError))
            t.check("mlp_dyn batch over range raises",
                    lambda: expect_error(lambda: m(torch.randn(1025, 64)), RuntimeError))
            t.check("mlp_dyn wrong dtype raises",
                    lambda: expect_error(lambda: m(torch.randn(4, 64, dtype=torch.float64)),
                                         TypeError))
            t.check("mlp_dyn wrong input count raises",
                    lambda: expect_error(lambda: m(torch.randn(4, 64), torch.randn(4, 64))))

            def after_error():  # an error leaves the model usable
                x = torch.randn(5, 64)
                with torch.inference_mode():
                    return compare(m(x)[0], eager(x))
            t.check("mlp_dyn runs after an error", after_error)

        # ---- tfm_dyn: x [b, s, 64], b in [1, 64], s in [2, 512] ------------------------------
        if "tfm_dyn" in libs:
            m = libs["tfm_dyn"]
            eager = torch.export.load(str(models / "tfm_dyn.pt2")).module()

            def sig():
                x = m.inputs[0]
                assert len(m.inputs) == 1 and len(x.sizes) == 3 and x.sizes[2] == 64, x
                assert all(isinstance(d, str) for d in x.sizes[:2]), x
                rng = {s.name: (s.min, s.max) for s in m.symbols}
                assert rng.get(x.sizes[0]) == (1, 64), rng
                assert rng.get(x.sizes[1]) == (2, 512), rng
                return f"{x.name}: {x.sizes}, {rng}"
            t.check("tfm_dyn signature", sig)

            for b, s in ((1, 2), (2, 16), (3, 37), (1, 128), (8, 128), (4, 255), (2, 512), (64, 8)):
                def run(b=b, s=s):
                    x = torch.randn(b, s, 64)
                    with torch.inference_mode():
                        ref = eager(x)
                    return compare(m(x)[0], ref)
                t.check(f"tfm_dyn batch {b} seq {s}", run)

            t.check("tfm_dyn wrong rank raises",
                    lambda: expect_error(lambda: m(torch.randn(16, 64)), RuntimeError, "rank"))
            t.check("tfm_dyn seq below range raises",
                    lambda: expect_error(lambda: m(torch.randn(2, 1, 64)), RuntimeError))

        # scaled_dot_product_attention with masks: rows whose keys are all masked give zeros
        # (torch's safe softmax), through the fused kernel (rank 4) and the GEMM + softmax path
        # (rank 5: not fused).
        class Sdpa(torch.nn.Module):  # rank 4 with scale 1 (T5's): a literal the generated code must spell right
            def forward(self, q, k, v, mask):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                        scale=1.0 if q.dim() == 4 else None)

        for lead in ((2, 2), (2, 1, 2)):
            def sdpa(lead=lead):
                g = torch.Generator().manual_seed(3)
                q, k, v = (torch.randn(*lead, 9, 16, generator=g) for _ in range(3))
                mask = torch.rand(*lead[:-1], 1, 9, 9, generator=g) > 0.4
                mask[0, ..., 4, :] = False  # a row with no key
                fmask = torch.where(mask, 0.0, float("-inf"))
                msgs = []
                for m_in in (mask, fmask):
                    ep = torch.export.export(Sdpa(), (q, k, v, m_in))
                    name = f"sdpa_rank{len(lead) + 2}_{'bool' if m_in.dtype == torch.bool else 'float'}"
                    torch.export.save(ep, str(work / f"{name}.pt2"))
                    compile_model(ptc_bin, work / f"{name}.pt2", work / f"{name}.so")
                    with ptc.load(str(work / f"{name}.so")) as lib:
                        got = lib(q, k, v, m_in)[0]
                    ref = Sdpa()(q, k, v, m_in)
                    assert not ref[0, ..., 4, :].any(), "torch's fully masked row is not zeros"
                    msgs.append(compare(got, ref))
                return "; ".join(msgs)
            t.check(f"scaled_dot_product_attention with a fully masked row (rank {len(lead) + 2})", sdpa)

        # An embedding gathered inside a GEMM's epilogue (linear(x) + emb(ids)): the index check
        # is shared with the epilogue; an id out of range fails the run with a message.
        class LinEmb(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin, self.emb = torch.nn.Linear(16, 16), torch.nn.Embedding(10, 16)

            def forward(self, x, ids):
                return self.lin(x) + self.emb(ids)

        def lin_emb():
            torch.manual_seed(4)
            model = LinEmb().eval()
            x, ids = torch.randn(3, 5, 16), torch.randint(0, 10, (3, 5))
            torch.export.save(torch.export.export(model, (x, ids)), str(work / "lin_emb.pt2"))
            compile_model(ptc_bin, work / "lin_emb.pt2", work / "lin_emb.so")
            with ptc.load(str(work / "lin_emb.so")) as lib, torch.inference_mode():
                msg = compare(lib(x, ids)[0], model(x, ids))
                bad = ids.clone()
                bad[2, 4] = 10
                expect_error(lambda: lib(x, bad), RuntimeError, "index 10 is out of range for a dimension of size 10")
            return msg
        t.check("an embedding in a GEMM epilogue, and its index check", lin_emb)

        # ---- the package's own API: NumPy, ptc.compile, CompileError, training libraries ----
        if "mlp_dyn" in libs:
            m = libs["mlp_dyn"]

            def numpy_io():
                import numpy as np
                x = np.random.default_rng(1).standard_normal((6, 64), dtype=np.float32)
                (y,) = m(x)
                assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (6, 64), type(y)
                with torch.inference_mode():
                    ref = torch.export.load(str(models / "mlp_dyn.pt2")).module()(torch.from_numpy(x))
                return compare(torch.from_numpy(y), ref)
            t.check("NumPy arrays in, NumPy arrays out", numpy_io)

        class Small(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.l1, self.l2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

            def forward(self, x):
                return self.l2(torch.relu(self.l1(x)))

        def compile_exported():
            torch.manual_seed(5)
            model = Small().eval()
            x = torch.randn(3, 8)
            batch = torch.export.Dim("batch", min=1, max=64)
            ep = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
            lib = ptc.compile(ep, work / "small.so", ptc=ptc_bin)
            assert Path(lib).is_file() and Path(lib).with_suffix(".h").is_file(), lib
            msgs = []
            with ptc.load(lib) as sm, torch.inference_mode():
                assert type(sm) is ptc.Model, type(sm)
                for b in (1, 3, 17):
                    xb = torch.randn(b, 8)
                    msgs.append(compare(sm(xb)[0], model(xb)))
            return "; ".join(msgs)
        t.check("ptc.compile(ExportedProgram) at three batch sizes", compile_exported)

        class Roll(torch.nn.Module):  # torch.roll along dims, and flattened (no dims)
            def forward(self, x):
                return torch.roll(x, shifts=(2, -1), dims=(1, 2)) * 2, torch.roll(x, 5)

        def roll():
            x = torch.randn(2, 5, 6)
            batch = torch.export.Dim("batch", min=1, max=16)
            lib = ptc.compile(torch.export.export(Roll(), (x,), dynamic_shapes=({0: batch},)), work / "roll.so", ptc=ptc_bin)
            msgs = []
            with ptc.load(lib) as rm:
                for b in (1, 2, 7):
                    xb = torch.randn(b, 5, 6)
                    got, ref = rm(xb), Roll()(xb)
                    msgs += [compare(got[0], ref[0]), compare(got[1], ref[1])]
            return f"{len(msgs)} outputs match"
        t.check("torch.roll compiled (dims, and flattened) at three batch sizes", roll)

        def compile_path():
            lib = ptc.compile(models / "mlp_dyn.pt2", ptc=ptc_bin, precision="fp32", report=work / "mlp_report.json")
            assert (work / "mlp_report.json").is_file()
            try:
                with ptc.load(lib) as mm:
                    assert mm.manifest["flags"]["precision"] == "fp32", mm.manifest["flags"]
            finally:
                shutil.rmtree(os.path.dirname(lib), ignore_errors=True)  # the fresh folder ptc.compile chose
            return os.path.basename(lib)
        t.check("ptc.compile(path) with --precision and --report", compile_path)

        def compile_error():
            try:
                ptc.compile(models / "mlp.pt2", work / "never.so", precision="tf32", ptc=ptc_bin)
            except ptc.CompileError as e:
                assert e.returncode == 1 and "--precision tf32 is not available for --device cpu" in str(e), str(e)
                assert not (work / "never.so").exists()
                return str(e)[:80]
            raise AssertionError("no CompileError")
        t.check("ptc.compile raises CompileError with ptc's sentence", compile_error)

        def trainer():
            lib = ptc.compile(models / "mlp.pt2", work / "mlp_train.so", train=True, ptc=ptc_bin)
            tr = ptc.load(lib)
            try:
                assert isinstance(tr, ptc.Trainer), type(tr)
                eager = torch.export.load(str(models / "mlp.pt2")).module()
                x = torch.randn(*tr.inputs[0].sizes)
                tr.zero_grad()
                (y,), saved = tr.forward_train(x)
                with torch.no_grad():
                    msg = compare(y, eager(x))
                tr.backward(saved, [torch.ones_like(y)])
                saved.free()
                assert any(g.abs().sum() > 0 for g in tr.grads.values()), "no gradient"
                return msg
            finally:
                tr.close()
        t.check("ptc.load on a --train library gives a Trainer", trainer)

        def close_all():
            for lib in libs.values():
                lib.close()
                lib.close()  # twice is fine
            for lib in libs.values():
                expect_error(lambda: lib(torch.randn(4, 64)), RuntimeError, "closed")
        t.check("close", close_all)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print(f"{t.passed} passed, {t.failed} failed")
    return 0 if t.failed == 0 and t.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
