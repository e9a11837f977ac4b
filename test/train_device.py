"""Shared by the training tests: running their checks against a CUDA training library.

The tests compute torch's reference on the CPU; `trainer(lib, device)` opens a library as
ptc_ctypes.PtcTrainer and, for a CUDA one (--device cuda), wraps it so that the tests keep
passing and reading CPU tensors: inputs and output gradients go to the GPU, outputs, gradients,
parameters and buffers come back.
"""
import ptc_ctypes


class CpuSide:
    def __init__(self, t):
        self._t = t

    def __getattr__(self, name):
        return getattr(self._t, name)

    def forward_train(self, *xs):
        outs, saved = self._t.forward_train(*[x.cuda() for x in xs])
        return tuple(o.cpu() for o in outs), saved

    def backward(self, saved, gouts):
        return [g.cpu() for g in self._t.backward(saved, [None if g is None else g.cuda() for g in gouts])]

    @property
    def params(self):
        return {k: v.cpu() for k, v in self._t.params.items()}

    @property
    def grads(self):
        return {k: v.cpu() for k, v in self._t.grads.items()}

    def buffers(self):
        return {k: v.cpu() for k, v in self._t.buffers().items()}


def trainer(lib, device):
    t = ptc_ctypes.PtcTrainer(lib)
    return CpuSide(t) if device == "cuda" else t
