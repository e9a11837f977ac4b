"""The C ABI of a library written by `ptc compile` (include/ptc/runtime.h), through ctypes.

Inputs must be tensors of the model's dtypes on the library's device (CPU, or CUDA for libraries
compiled with --device cuda, which run on torch's current stream); non-contiguous ones are copied
to contiguous memory. Outputs are freshly allocated (or written into `out=` tensors). Errors from
the library (wrong rank, sizes out of a symbol's range, ...) raise RuntimeError(ptc_last_error()).

The library's OpenMP threads follow OMP_NUM_THREADS: set it before the library (or torch, which
loads an OpenMP runtime too) is loaded.
"""
import ctypes
import json
import os
from collections import namedtuple

import torch

PTC_OK = 0
PTC_ERROR = 1
PTC_ABI_VERSION = 1

# torch.export schema numbering (ScalarType in torch/_export/serde/schema.py), as in runtime.h.
CODE_TO_DTYPE = {
    1: torch.uint8,
    2: torch.int8,
    3: torch.int16,
    4: torch.int32,
    5: torch.int64,
    6: torch.float16,
    7: torch.float32,
    8: torch.float64,
    12: torch.bool,
    13: torch.bfloat16,
}
DTYPE_TO_CODE = {v: k for k, v in CODE_TO_DTYPE.items()}


def dtype_code(dtype):
    """torch.dtype -> ptc dtype code (ValueError for a dtype ptc has no code for)."""
    try:
        return DTYPE_TO_CODE[dtype]
    except KeyError:
        raise ValueError(f"ptc has no dtype code for {dtype}") from None


def code_dtype(code):
    """ptc dtype code -> torch.dtype (ValueError for an unknown code)."""
    try:
        return CODE_TO_DTYPE[code]
    except KeyError:
        raise ValueError(f"unknown ptc dtype code {code}") from None


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
    ]


class _TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
        ("dims", ctypes.POINTER(ctypes.c_char_p)),
    ]


_EMPTY = (ctypes.c_int64 * 1)()  # a valid pointer for tensors without elements

# sizes: ints for static sizes, strings ("s77", "s27*s77") for symbolic ones.
TensorInfo = namedtuple("TensorInfo", "name dtype code sizes")
SymbolInfo = namedtuple("SymbolInfo", "name min max")  # max None = unbounded


def _declare(lib):
    P = ctypes.c_void_p
    sigs = {
        "ptc_abi_version": (ctypes.c_int, []),
        "ptc_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(P)]),
        "ptc_close": (None, [P]),
        "ptc_num_inputs": (ctypes.c_int, [P]),
        "ptc_num_outputs": (ctypes.c_int, [P]),
        "ptc_input_info": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(_TensorInfo)]),
        "ptc_output_info": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(_TensorInfo)]),
        "ptc_num_symbols": (ctypes.c_int, [P]),
        "ptc_symbol_info": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                           ctypes.POINTER(ctypes.c_int64),
                                           ctypes.POINTER(ctypes.c_int64)]),
        "ptc_output_shape": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(_Tensor), ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_int64)]),
        "ptc_run": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(_Tensor), ctypes.c_int,
                                   ctypes.POINTER(_Tensor)]),
        "ptc_last_error": (ctypes.c_char_p, []),
        "ptc_run_async": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(_Tensor), ctypes.c_int,
                                         ctypes.POINTER(_Tensor), P]),
        "ptc_device": (ctypes.c_int, []),
    }
    T = ctypes.POINTER(_Tensor)
    sigs.update({  # training libraries (ptc compile --train)
        "ptc_num_params": (ctypes.c_int, [P]),
        "ptc_param_info": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(_TensorInfo)]),
        "ptc_param_data": (ctypes.c_void_p, [P, ctypes.c_int]),
        "ptc_grad_data": (ctypes.c_void_p, [P, ctypes.c_int]),
        "ptc_forward_train": (ctypes.c_int, [P, ctypes.c_int, T, ctypes.c_int, T, ctypes.POINTER(P)]),
        "ptc_backward": (ctypes.c_int, [P, P, ctypes.c_int, T, ctypes.c_int, T]),
        "ptc_saved_free": (None, [P]),
        "ptc_num_input_grads": (ctypes.c_int, [P]),
        "ptc_input_grad_index": (ctypes.c_int, [P, ctypes.c_int]),
        "ptc_zero_grad": (ctypes.c_int, [P]),
        "ptc_sgd_step": (ctypes.c_int, [P, ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_int]),
        "ptc_adamw_step": (ctypes.c_int, [P, ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_float,
                                          ctypes.c_float]),
        "ptc_unscale_grads": (ctypes.c_int, [P, ctypes.c_float, ctypes.POINTER(ctypes.c_int)]),
        "ptc_manual_seed": (ctypes.c_int, [P, ctypes.c_uint64]),
        "ptc_num_buffers": (ctypes.c_int, [P]),
        "ptc_buffer_info": (ctypes.c_int, [P, ctypes.c_int, ctypes.POINTER(_TensorInfo)]),
        "ptc_buffer_data": (ctypes.c_void_p, [P, ctypes.c_int]),
        "ptc_reset_state": (ctypes.c_int, [P]),
    })
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        fn.restype = res
        fn.argtypes = args


class Model:
    """A model in a library written by `ptc compile`, callable on torch tensors or NumPy arrays."""

    def __init__(self, path, weights_path=None):
        self.path = os.path.abspath(path)
        # ctypes.CDLL releases the GIL during calls; RTLD_LOCAL keeps two libraries apart.
        self._lib = ctypes.CDLL(self.path, mode=getattr(os, "RTLD_LOCAL", 0) | os.RTLD_NOW)
        _declare(self._lib)
        abi = self._lib.ptc_abi_version()
        if abi != PTC_ABI_VERSION:
            raise RuntimeError(f"{path}: ptc ABI version {abi}, this module knows {PTC_ABI_VERSION}")
        # Where the library runs (libraries from before ptc_device existed are CPU ones).
        self.device = "cuda" if getattr(self._lib, "ptc_device", None) and self._lib.ptc_device() == 1 else "cpu"
        handle = ctypes.c_void_p()
        wp = None if weights_path is None else os.fsencode(weights_path)
        self._check(self._lib.ptc_open(wp, ctypes.byref(handle)), "ptc_open")
        self._m = handle
        self.inputs = [self._info(self._lib.ptc_input_info, i)
                       for i in range(self._lib.ptc_num_inputs(self._m))]
        self.outputs = [self._info(self._lib.ptc_output_info, i)
                        for i in range(self._lib.ptc_num_outputs(self._m))]
        # The manifest linked into the library (ptc version, flags, ...), as a dict.
        fn = getattr(self._lib, "ptc_manifest", None)
        if fn is not None:
            fn.restype = ctypes.c_char_p
            fn.argtypes = []
            self.manifest = json.loads(fn().decode())
        else:
            self.manifest = {}
        self.symbols = []
        for i in range(self._lib.ptc_num_symbols(self._m)):
            name, lo, hi = ctypes.c_char_p(), ctypes.c_int64(), ctypes.c_int64()
            self._check(self._lib.ptc_symbol_info(self._m, i, ctypes.byref(name), ctypes.byref(lo),
                                                  ctypes.byref(hi)), "ptc_symbol_info")
            self.symbols.append(SymbolInfo(name.value.decode(), lo.value,
                                           None if hi.value < 0 else hi.value))

    # -- helpers -------------------------------------------------------------------------------
    def last_error(self):
        msg = self._lib.ptc_last_error()
        return msg.decode(errors="replace") if msg else "(no message)"

    def _check(self, rc, what):
        """RuntimeError(ptc_last_error()) when a call returns PTC_ERROR (`what` names the call
        only when the library gave no message)."""
        if rc != PTC_OK:
            msg = self._lib.ptc_last_error()
            raise RuntimeError(msg.decode(errors="replace") if msg else f"{what} failed")

    def _info(self, fn, i):
        info = _TensorInfo()
        self._check(fn(self._m, i, ctypes.byref(info)), fn.__name__)
        sizes = []
        for d in range(info.rank):
            s = info.sizes[d]
            if s >= 0:
                sizes.append(int(s))
            else:
                dim = info.dims[d] if info.dims else None
                sizes.append(dim.decode() if dim else "?")
        name = info.name.decode() if info.name else f"#{i}"
        return TensorInfo(name, CODE_TO_DTYPE.get(info.dtype), info.dtype, sizes)

    def _require_open(self):
        if self._m is None:
            raise RuntimeError(f"{self.path}: model is closed")

    @staticmethod
    def _sizes_array(t):
        n = max(t.dim(), 1)  # rank 0: pass a valid pointer anyway
        return (ctypes.c_int64 * n)(*t.shape) if t.dim() else (ctypes.c_int64 * 1)(0)

    def _c_tensor(self, t, what, keep):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != self.device:
            raise ValueError(f"{what}: tensor is on {t.device}, this library runs on the {self.device.upper()}")
        if t.layout != torch.strided:
            raise ValueError(f"{what}: layout {t.layout} is not supported (dense tensors only)")
        code = dtype_code(t.dtype)
        sizes = self._sizes_array(t)
        keep.append(sizes)
        ptr = t.data_ptr() or ctypes.addressof(_EMPTY)  # an empty tensor may have no storage
        return _Tensor(ctypes.c_void_p(ptr), code, t.dim(),
                       ctypes.cast(sizes, ctypes.POINTER(ctypes.c_int64)))

    def _prepare_inputs(self, tensors):
        if len(tensors) != len(self.inputs):
            raise RuntimeError(f"expected {len(self.inputs)} inputs "
                               f"({', '.join(i.name for i in self.inputs)}), got {len(tensors)}")
        keep, ins = [], []
        for k, (t, info) in enumerate(zip(tensors, self.inputs)):
            what = f"input {k} ({info.name})"
            if isinstance(t, torch.Tensor):
                if info.dtype is not None and t.dtype != info.dtype:
                    raise TypeError(f"{what}: dtype {t.dtype}, the model takes {info.dtype}")
                if not t.is_contiguous():
                    t = t.contiguous()
                if t.requires_grad:
                    t = t.detach()
            ins.append(t)
        arr = (_Tensor * max(len(ins), 1))()
        for k, t in enumerate(ins):
            arr[k] = self._c_tensor(t, f"input {k} ({self.inputs[k].name})", keep)
        keep.append(ins)  # contiguous copies stay alive until the call is done
        return arr, keep

    # -- API -----------------------------------------------------------------------------------
    def output_shapes(self, *tensors):
        """The sizes of every output for these inputs (checked like a run)."""
        self._require_open()
        arr, keep = self._prepare_inputs(tensors)
        return self._output_shapes(arr, len(tensors))

    def _output_shapes(self, arr, n_in):
        shapes = []
        for j, info in enumerate(self.outputs):
            buf = (ctypes.c_int64 * max(len(info.sizes), 1))()
            self._check(self._lib.ptc_output_shape(self._m, n_in, arr, j, buf), "ptc_output_shape")
            shapes.append(tuple(int(buf[d]) for d in range(len(info.sizes))))
        return shapes

    def __call__(self, *tensors, out=None):
        """Runs the model; returns a tuple of output tensors (the `out` tensors when given). NumPy
        arrays in (a CPU library, every input an array, no `out`) give NumPy arrays out."""
        if tensors and out is None and all(isinstance(t, _np_ndarray()) for t in tensors):
            return tuple(o.numpy() for o in self(*(_from_numpy(t) for t in tensors)))
        self._require_open()
        arr, keep = self._prepare_inputs(tensors)
        shapes = self._output_shapes(arr, len(tensors))
        if out is None:
            outs = []
            for info, shape in zip(self.outputs, shapes):
                if info.dtype is None:
                    raise RuntimeError(f"output {info.name}: unknown dtype code {info.code}")
                outs.append(torch.empty(shape, dtype=info.dtype, device=self.device))
        else:
            outs = list(out)
            if len(outs) != len(self.outputs):
                raise RuntimeError(f"expected {len(self.outputs)} out tensors, got {len(outs)}")
            for j, (t, info, shape) in enumerate(zip(outs, self.outputs, shapes)):
                if tuple(t.shape) != shape or t.dtype != info.dtype or not t.is_contiguous() \
                        or t.device.type != self.device:
                    raise RuntimeError(f"out[{j}] ({info.name}): need a contiguous {self.device.upper()} "
                                       f"{info.dtype} tensor of shape {list(shape)}, got "
                                       f"{t.dtype} {list(t.shape)} on {t.device}")
        out_arr = (_Tensor * max(len(outs), 1))()
        for j, t in enumerate(outs):
            out_arr[j] = self._c_tensor(t, f"output {j}", keep)
        if self.device == "cuda":  # queued on torch's current stream, like a torch operation
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            self._check(self._lib.ptc_run_async(self._m, len(tensors), arr, len(outs), out_arr, stream),
                        "ptc_run_async")
        else:
            self._check(self._lib.ptc_run(self._m, len(tensors), arr, len(outs), out_arr), "ptc_run")
        return tuple(outs)

    run = __call__

    def prepare(self, *tensors, out):
        """A zero-argument callable that runs the model on these inputs into `out` again and
        again with the call's arguments built once (the tensors must stay alive and keep their
        storage): what a C++ caller pays per run, without Python's argument marshalling."""
        self._require_open()
        arr, keep = self._prepare_inputs(tensors)
        outs = list(out)
        out_arr = (_Tensor * max(len(outs), 1))()
        for j, t in enumerate(outs):
            out_arr[j] = self._c_tensor(t, f"output {j}", keep)
        n_in, n_out, lib, m = len(tensors), len(outs), self._lib, self._m
        if self.device == "cuda":
            def run():
                stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
                if lib.ptc_run_async(m, n_in, arr, n_out, out_arr, stream) != PTC_OK:
                    self._check(PTC_ERROR, "ptc_run_async")
        else:
            def run():
                if lib.ptc_run(m, n_in, arr, n_out, out_arr) != PTC_OK:
                    self._check(PTC_ERROR, "ptc_run")
        run.keep = (keep, outs)
        return run

    # -- state -----------------------------------------------------------------------------------
    def buffers(self):
        """The buffers the library holds as state (a KV cache; batch-norm running statistics of a
        training library), as copies by state-dict name: each run updates them. Empty for a
        library without state."""
        out = {}
        if getattr(self._lib, "ptc_num_buffers", None) is None:
            return out
        for i in range(self._lib.ptc_num_buffers(self._m)):
            info = self._info(self._lib.ptc_buffer_info, i)
            ptr = self._lib.ptc_buffer_data(self._m, i)
            out[info.name] = _library_tensor(ptr, info.sizes, info.dtype, self.device).clone()
        return out

    def reset_state(self):
        """Sets every state buffer back to its exported value (a new sequence for a KV cache)."""
        if getattr(self._lib, "ptc_reset_state", None) is None:
            raise RuntimeError(f"{self.path}: this library has no ptc_reset_state")
        self._check(self._lib.ptc_reset_state(self._m), "ptc_reset_state")

    def close(self):
        if getattr(self, "_m", None) is not None:
            self._lib.ptc_close(self._m)
            self._m = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        def fmt(i):
            return f"{i.name}: {i.dtype}{i.sizes}"
        return (f"ptc.Model({self.path!r}, inputs=[{', '.join(map(fmt, self.inputs))}], "
                f"outputs=[{', '.join(map(fmt, self.outputs))}], symbols={self.symbols})")



class _CudaArray:
    """A device pointer as torch.as_tensor takes it (__cuda_array_interface__), without a copy."""

    TYPESTR = {torch.float32: "<f4", torch.float64: "<f8", torch.int64: "<i8", torch.int32: "<i4",
               torch.float16: "<f2", torch.uint8: "|u1", torch.int8: "|i1", torch.bool: "|b1"}

    def __init__(self, ptr, shape, dtype):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": self.TYPESTR[dtype], "data": (ptr, False),
                                         "version": 2, "strides": None}


def _library_tensor(ptr, shape, dtype, device):
    """A torch view of library-held memory (host or CUDA device)."""
    n = 1
    for d in shape:
        n *= d
    if device == "cuda":
        return torch.as_tensor(_CudaArray(ptr, shape, dtype), device="cuda")
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    buf = (ctypes.c_char * max(nbytes, 1)).from_address(ptr)
    return torch.frombuffer(buf, dtype=dtype, count=n).view(shape) if n else torch.empty(shape, dtype=dtype)


class Trainer(Model):
    """A training library (`ptc compile --train`): parameters held by the library, a forward
    that keeps what the backward needs, the backward, and fused optimizer steps. For a CUDA
    library (--device cuda) inputs, outputs, params and grads are CUDA tensors.

        t = ptc.load("mlp_train.so")          # a Trainer for a --train library
        t.params["l1.weight"]        # a torch view of the library's parameter (writable)
        t.zero_grad()
        (loss,), saved = t.forward_train(x, target)
        t.backward(saved, [torch.ones(())])   # gradients accumulate into t.grads[...]
        saved.free()
        t.adamw_step(lr=1e-3)
    """

    class Saved:
        def __init__(self, trainer, handle):
            self._t, self.handle = trainer, handle

        def free(self):
            if self.handle is not None:
                self._t._lib.ptc_saved_free(self.handle)
                self.handle = None

        def __del__(self):
            try:
                self.free()
            except Exception:
                pass

    def __init__(self, path, weights_path=None):
        super().__init__(path, weights_path)
        lib = self._lib
        if getattr(lib, "ptc_forward_train", None) is None:
            raise RuntimeError(f"{path} is not a training library (compile with --train)")
        self.params, self.grads, self.param_infos = {}, {}, []
        for i in range(lib.ptc_num_params(self._m)):
            info = self._info(lib.ptc_param_info, i)
            self.param_infos.append(info)
            for table, fn in ((self.params, lib.ptc_param_data), (self.grads, lib.ptc_grad_data)):
                table[info.name] = _library_tensor(fn(self._m, i), info.sizes, torch.float32, self.device)
        self.input_grads = [lib.ptc_input_grad_index(self._m, i) for i in range(lib.ptc_num_input_grads(self._m))]

    def forward_train(self, *tensors, out=None):
        """(outputs, saved): runs the forward and keeps what backward needs. out: tensors of the
        outputs' shapes to write into (a C++ loop's buffers, allocated once) instead of new ones."""
        self._require_open()
        arr, keep = self._prepare_inputs(tensors)
        shapes = self._output_shapes(arr, len(tensors))
        if out is not None:
            outs = list(out)
            if len(outs) != len(shapes) or any(tuple(o.shape) != tuple(s) for o, s in zip(outs, shapes)):
                raise ValueError(f"forward_train: out must be {len(shapes)} tensors of the output shapes {shapes}")
        else:
            outs = [torch.empty(shape, dtype=info.dtype, device=self.device) for info, shape in zip(self.outputs, shapes)]
        out_arr = (_Tensor * max(len(outs), 1))()
        for j, t in enumerate(outs):
            out_arr[j] = self._c_tensor(t, f"output {j}", keep)
        handle = ctypes.c_void_p()
        self._check(self._lib.ptc_forward_train(self._m, len(tensors), arr, len(outs), out_arr, ctypes.byref(handle)),
                    "ptc_forward_train")
        saved = Trainer.Saved(self, handle)
        saved.input_shapes = [tuple(t.shape) for t in tensors]
        return tuple(outs), saved

    def backward(self, saved, grad_outputs):
        """Adds the parameters' gradients to self.grads; returns the gradients of the inputs that
        require grad (in input order). grad_outputs: one tensor (or None: zeros) per output."""
        self._require_open()
        keep = []
        g_arr = (_Tensor * max(len(grad_outputs), 1))()
        for j, g in enumerate(grad_outputs):
            if g is None:
                g_arr[j] = _Tensor(None, 7, len(self.outputs[j].sizes), None)
            else:
                g = g.detach().contiguous()
                keep.append(g)
                g_arr[j] = self._c_tensor(g, f"grad_output {j}", keep)
        ig = [torch.empty(saved.input_shapes[i], dtype=self.inputs[i].dtype, device=self.device) for i in self.input_grads]
        ig_arr = (_Tensor * max(len(ig), 1))()
        for j, t in enumerate(ig):
            ig_arr[j] = self._c_tensor(t, f"input grad {j}", keep)
        self._check(self._lib.ptc_backward(self._m, saved.handle, len(grad_outputs), g_arr, len(ig), ig_arr),
                    "ptc_backward")
        return ig

    def zero_grad(self):
        self._check(self._lib.ptc_zero_grad(self._m), "ptc_zero_grad")

    def sgd_step(self, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        self._check(self._lib.ptc_sgd_step(self._m, lr, momentum, dampening, weight_decay, int(nesterov)), "ptc_sgd_step")

    def adamw_step(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self._check(self._lib.ptc_adamw_step(self._m, lr, betas[0], betas[1], eps, weight_decay), "ptc_adamw_step")

    def unscale_grads(self, inv_scale):
        """Multiplies every gradient by inv_scale; True when any of them is inf or NaN (then skip
        the optimizer step). GradScaler below runs the whole loss-scaling loop."""
        found = ctypes.c_int(0)
        self._check(self._lib.ptc_unscale_grads(self._m, inv_scale, ctypes.byref(found)), "ptc_unscale_grads")
        return bool(found.value)

    def manual_seed(self, seed):
        """Seeds training-mode dropout (the same seed replays the same masks)."""
        self._check(self._lib.ptc_manual_seed(self._m, seed), "ptc_manual_seed")


class GradScaler:
    """Dynamic loss scaling for `--train --precision fp16`, as torch.amp.GradScaler:

        scaler = ptc.GradScaler()
        (loss,), saved = t.forward_train(x, target)
        t.backward(saved, [scaler.loss_grad(device=t.device)])   # d(scale * loss)
        scaler.step(t, lambda: t.sgd_step(lr=0.1))              # unscales; skips on inf / NaN
        scaler.update()

    The step is skipped when a gradient is inf or NaN, and the scale then drops by
    backoff_factor; after growth_interval steps without one it grows by growth_factor.
    """

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        self.scale, self.growth_factor, self.backoff_factor = float(init_scale), growth_factor, backoff_factor
        self.growth_interval, self._good_steps, self.found_inf = growth_interval, 0, False

    def loss_grad(self, device="cpu"):
        """The gradient to seed backward with: the scale, as a 0-d float32 tensor."""
        import torch
        return torch.full((), self.scale, dtype=torch.float32, device=device)

    def step(self, trainer, optimizer_step):
        """Unscales the trainer's gradients and runs optimizer_step() unless one is inf or NaN;
        returns whether it ran."""
        self.found_inf = trainer.unscale_grads(1.0 / self.scale)
        if not self.found_inf:
            optimizer_step()
        return not self.found_inf

    def update(self):
        if self.found_inf:
            self.scale *= self.backoff_factor
            self._good_steps = 0
        else:
            self._good_steps += 1
            if self._good_steps == self.growth_interval:
                self.scale *= self.growth_factor
                self._good_steps = 0


def _np_ndarray():
    """numpy.ndarray, or a type nothing is an instance of when NumPy is not installed."""
    try:
        import numpy
        return numpy.ndarray
    except ImportError:
        return type("NoNumPy", (), {})


def _from_numpy(a):
    # torch.from_numpy shares the array's memory; a non-contiguous or read-only array is copied.
    import numpy
    return torch.from_numpy(numpy.ascontiguousarray(a) if not a.flags.writeable or not a.flags.c_contiguous else a)


def load(path, weights_path=None):
    """Opens a library written by `ptc compile`: a Trainer for a training library (--train), a
    Model otherwise. weights_path: the weights file of a --weights external library (default:
    LIB.weights beside it)."""
    lib = ctypes.CDLL(os.path.abspath(path), mode=getattr(os, "RTLD_LOCAL", 0) | os.RTLD_NOW)
    training = getattr(lib, "ptc_forward_train", None) is not None
    return (Trainer if training else Model)(path, weights_path)
