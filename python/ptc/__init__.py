"""ptc from Python: compile an exported PyTorch model into a standalone shared library, and run
such libraries on torch tensors or NumPy arrays.

    import torch, ptc
    ep = torch.export.export(model, (x,))
    lib = ptc.compile(ep, "model.so")     # runs `ptc compile` (the CLI)
    m = ptc.load(lib)                     # ptc.Model (ptc.Trainer for a --train library)
    (y,) = m(x)                           # torch tensors in and out; NumPy arrays too (CPU)

ptc.compile finds the ptc executable through its `ptc=` argument, $PTC_BINARY, PATH, or the
build tree of the checkout it is installed from. ptc.load needs torch (not the CLI).
"""
from ._compile import CompileError, compile, find_ptc
from ._runtime import (CODE_TO_DTYPE, DTYPE_TO_CODE, GradScaler, Model, SymbolInfo, TensorInfo, Trainer, code_dtype,
                       dtype_code, load)

__version__ = "0.1.0"
__all__ = ["compile", "load", "find_ptc", "CompileError", "Model", "Trainer", "GradScaler", "TensorInfo", "SymbolInfo",
           "dtype_code", "code_dtype", "CODE_TO_DTYPE", "DTYPE_TO_CODE"]
