"""ptc.compile: the `ptc compile` command line from Python."""
import os
import shutil
import subprocess
import tempfile


class CompileError(RuntimeError):
    """`ptc compile` refused the model or an option (its one-sentence message), or failed."""

    def __init__(self, message, returncode):
        super().__init__(message)
        self.returncode = returncode


def find_ptc(ptc=None):
    """The ptc executable: `ptc` when given, else $PTC_BINARY, else `ptc` on PATH, else the build
    tree of the checkout this package lies in (build/ptc)."""
    candidates = [ptc, os.environ.get("PTC_BINARY"), shutil.which("ptc"),
                  os.path.join(os.path.dirname(__file__), "..", "..", "build", "ptc")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise FileNotFoundError("ptc: no ptc executable found (pass ptc=..., set PTC_BINARY, or put ptc on PATH)")


def compile(model, output=None, *, device="cpu", precision="fp32", train=False, cuda_graphs=False, weights="embedded",
            report=None, package=None, cache=True, extra_args=(), ptc=None):
    """Compiles `model` with `ptc compile` and returns the library's path.

    model: a torch.export.ExportedProgram (saved to a temporary .pt2 first), or the path of a
        .pt2 / .pt archive.
    output: the library to write (its header goes beside it); default: a fresh temporary folder's
        MODEL.so.
    device, precision, train, cuda_graphs, weights, report, package: the CLI's --device,
        --precision, --train, --cuda-graphs, --weights, --report and --package (`ptc compile
        --help`); cache=False is --no-cache; extra_args: further CLI arguments.

    Raises CompileError with ptc's message when it refuses the model or an option.
    """
    exe = find_ptc(ptc)
    scratch = None
    try:
        if isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            stem = os.path.splitext(os.path.basename(path))[0]
        else:
            import torch
            if not isinstance(model, torch.export.ExportedProgram):
                raise TypeError(f"ptc.compile: expected a torch.export.ExportedProgram or a path, got {type(model).__name__}")
            scratch = tempfile.mkdtemp(prefix="ptc-export-")
            stem = "model"
            path = os.path.join(scratch, "model.pt2")
            torch.export.save(model, path)
        if output is None:
            output = os.path.join(tempfile.mkdtemp(prefix="ptc-lib-"), stem + ".so")
        cmd = [exe, "compile", "-q", path, "-o", os.fspath(output), "--device", device, "--precision", precision,
               "--weights", weights]
        if train:
            cmd.append("--train")
        if cuda_graphs:
            cmd.append("--cuda-graphs")
        if report:
            cmd += ["--report", os.fspath(report)]
        if package:
            cmd += ["--package", os.fspath(package)]
        if not cache:
            cmd.append("--no-cache")
        cmd += [str(a) for a in extra_args]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            msg = r.stdout.strip() or f"ptc compile exited with code {r.returncode}"
            if msg.startswith("error: "):
                msg = msg[len("error: "):]
            raise CompileError(msg, r.returncode)
        return os.path.abspath(output)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
