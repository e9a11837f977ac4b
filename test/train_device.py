"""Shared by the training tests: running their checks against a CUDA training library.

The tests compute torch's reference on the CPU; `trainer(lib, device)` opens a library as
ptc.Trainer and, for a CUDA one (--device cuda), wraps it so that the tests keep
passing and reading CPU tensors: inputs and output gradients go to the GPU, outputs, gradients,
parameters and buffers come back.
"""
import ptc


class _CpuCopies:
    """A table of CUDA tensors read as CPU copies, one entry at a time (copying the whole table
    on each access made BERT's per-parameter checks copy every gradient once per parameter)."""

    def __init__(self, table):
        self._table = table

    def __getitem__(self, name):
        return self._table[name].cpu()

    def __contains__(self, name):
        return name in self._table

    def __iter__(self):
        return iter(self._table)

    def __len__(self):
        return len(self._table)

    def keys(self):
        return self._table.keys()

    def items(self):
        return ((k, v.cpu()) for k, v in self._table.items())


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
        return _CpuCopies(self._t.params)

    @property
    def grads(self):
        return _CpuCopies(self._t.grads)

    def buffers(self):
        return {k: v.cpu() for k, v in self._t.buffers().items()}


def trainer(lib, device):
    t = ptc.Trainer(lib)
    return CpuSide(t) if device == "cuda" else t
