#!/usr/bin/env python3
"""Operators against PyTorch eager, end to end: small modules that use them are exported with a
dynamic batch, compiled with ptc (the ptc package, python/ptc), run at several batch sizes and
compared with eager (atol = rtol = 1e-4). Ops with a derivative rule are also compiled with --train
and their gradients compared with torch.autograd. With nvcc installed, one module holding every op
is also compiled for CUDA (no GPU is needed to compile).

    .venv/bin/python test/ops_test.py [--ptc-binary build/ptc] [--keep DIR] [-v]
    python3 test/ops_test.py --device cuda [--jobs 8]    (a GPU machine: the forward checks on CUDA)

Prints one line per check and 'N passed, N failed'; exit code 0 when all passed, 1 otherwise.
"""
import argparse
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "test"))
warnings.filterwarnings("ignore", message=".*non-writable.*")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ptc  # noqa: E402
from python_package_test import Runner, compare  # noqa: E402


class GroupNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.affine, self.plain = torch.nn.GroupNorm(4, 8), torch.nn.GroupNorm(2, 8, affine=False, eps=1e-3)
        with torch.no_grad():  # not the identity affine
            self.affine.weight.uniform_(0.5, 1.5)
            self.affine.bias.uniform_(-0.5, 0.5)

    def forward(self, x):  # [b, 8, 5, 6]
        return self.affine(x), self.plain(x * 3 + 1)


class Upsample(torch.nn.Module):
    def forward(self, x):  # [b, 3, 5, 6]
        return (F.interpolate(x, scale_factor=2, mode="nearest"), F.interpolate(x, size=(7, 13), mode="nearest"),
                F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
                F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=True),
                F.interpolate(x, size=(4, 4), mode="bilinear", align_corners=False))


class Repeat(torch.nn.Module):
    def forward(self, x):  # [b, 3, 4]
        return x.repeat(1, 2, 3), x.repeat(2, 1, 1, 2)


class Var(torch.nn.Module):
    def forward(self, x):  # [b, 6, 5]
        v, m = torch.var_mean(x, dim=-1)
        return (torch.var(x, dim=1), torch.var(x, dim=(1, 2), correction=0, keepdim=True), v, m,
                torch.std(x, dim=1), torch.std(x, dim=(1, 2), correction=0, keepdim=True))


class ConvTranspose(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.grouped = torch.nn.ConvTranspose2d(4, 4, 4, stride=2, padding=1, groups=2, bias=False)
        self.dilated = torch.nn.ConvTranspose2d(4, 3, 3, dilation=2)

    def forward(self, x):  # [b, 4, 5, 6]
        return self.up(x), self.grouped(x), self.dilated(x)


class IndexUpdates(torch.nn.Module):  # index_copy, index_put (one index tensor, = and +=), scatter, argmin
    def __init__(self):
        super().__init__()
        self.register_buffer("idx", torch.tensor([4, 0, 2]))
        self.register_buffer("dup", torch.tensor([1, 3, 1]))
        self.register_buffer("cols", torch.tensor([[3, 0], [1, 4], [2, 4], [0, 1], [4, 3], [1, 0]]))
        # a repeated column: scatter of values (one value: any order agrees; of a source, the order
        # of duplicate writes is unspecified, and torch's CUDA kernel differs from its CPU one)
        self.register_buffer("cols_dup", torch.tensor([[3, 0], [1, 4], [2, 2], [0, 1], [4, 3], [1, 1]]))

    def forward(self, x):  # [b, 6, 5]
        v = x[:, :3] * 2
        put = x.clone()
        put[:, self.idx] = v
        acc = torch.ops.aten.index_put(x, [None, self.dup], v, True)
        ix = self.cols.expand(x.shape[0], 6, 2)
        return (x.index_copy(1, self.idx, v), put, acc, x.scatter(2, ix, x * 3), x.scatter(2, self.cols_dup.expand(x.shape[0], 6, 2), 1.5),
                x.argmin(dim=2), x.argmax(dim=1))


class PadFmod(torch.nn.Module):  # F.pad in its four modes (aten::pad), fmod (C's sign rule) on floats and integers
    def forward(self, x):  # [b, 3, 5, 6]
        return (F.pad(x, (2, 1, 1, 2), value=1.5), F.pad(x, (2, 3, 1, 4), mode="reflect"),
                F.pad(x, (3, 0, 2, 1), mode="replicate"), F.pad(x, (2, 4, 0, 3), mode="circular"),
                F.pad(x[:, 0], (1, 2), mode="reflect"), torch.fmod(x * 5, 1.7), torch.fmod(x * -3, -0.9),
                torch.fmod((x * 9).floor().long(), 4), torch.fmod((x * 9).floor().long(), -3))


class SliceAssign(torch.nn.Module):  # in-place updates through slice / select views of a tensor the module made
    def forward(self, x):  # [b, 6, 5]
        m = x.new_zeros(x.shape)
        m[:, 1:3] = x[:, :2] * 2         # slice, copy_
        m[:, :, 0] = 7.0                 # select, fill_
        m[:, 4:, ::2] = 0.5              # slice with a step under a slice
        m[:, 5, 1:3] += x[:, 0, :2]      # add_ on a view of a select
        c = torch.zeros(x.shape[0], 3, 2)
        c[:, 1] = x[:, 2, :2]
        return (m + x, c, torch.select_scatter(x, x[:, 0] * 3, 1, 2), torch.select_scatter(x, x[:, :, 1], 2, -1),
                torch.slice_scatter(x, x[:, :2] + 1, 1, 3, 5), torch.slice_scatter(x, x[:, :, :2] * 4, 2, 1, None, 3))


class TopK(torch.nn.Module):  # topk: largest and smallest, along the last and a middle dim; k > 64 and ints by a sort
    def forward(self, x):  # [b, 6, 9]
        v1, i1 = torch.topk(x, 3)
        v2, i2 = torch.topk(x * 2 + 1, 2, dim=1, largest=False)
        v3, i3 = torch.topk(x, 1, dim=-1, sorted=False)
        wide = x.reshape(x.shape[0], 54).repeat(1, 2) * torch.arange(1, 109)  # distinct values
        v4, i4 = torch.topk(wide, 70)
        v5, i5 = torch.topk((x * 100).to(torch.int32), 4, largest=False)
        return v1, i1, v2, i2, v3 + 1, i3, v4, i4, v5


class Counter(torch.nn.Module):  # buffers updated in place: the library holds them between runs
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(5))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
        self.register_buffer("last", torch.zeros(3, 5))

    def forward(self, x):  # [3, 5]
        self.total.add_(x.sum(0))
        self.calls.add_(1)
        prev = self.last.clone()
        self.last.copy_(x)
        return x * self.total + prev, self.calls * 2


class RaggedRows(torch.nn.Module):  # CUDA's 4-wide pointwise kernels: rows not a multiple of 4 wide (ragged chunks), reads under
    def forward(self, x):  # [b, 3, 72]       # padding tests that do not depend on the last dimension (4 at a time where they hold)
        return x[..., :67] * 2 + 1, x[..., 3:70].sin(), x[:, 1:, :65].exp(), F.pad(x, (0, 0, 1, 2)) * 3


class Everything(torch.nn.Module):  # one module with every op above, for the CUDA build
    def __init__(self):
        super().__init__()
        self.gn, self.ct = torch.nn.GroupNorm(2, 4), torch.nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)
        self.register_buffer("idx", torch.tensor([1, 3]))

    def forward(self, x):  # [b, 4, 5, 6]
        y = self.ct(self.gn(x))
        y = F.interpolate(y, scale_factor=2, mode="nearest") + F.interpolate(y, scale_factor=2, mode="bilinear")
        z = y[:, :, 0].index_copy(2, self.idx, y[:, :, 1, :2])
        p = F.pad(x, (2, 1, 1, 2), mode="reflect") + F.pad(x, (2, 1, 1, 2), mode="circular") + F.pad(x, (2, 1, 1, 2), mode="replicate")
        m = x.new_zeros(x.shape)
        m[:, 1:3, 0] = x[:, :2, 1]
        return (y.repeat(1, 2, 1, 1), torch.var(y, dim=1), torch.std(y, dim=(2, 3)), z, z.scatter(2, self.idx.expand(z.shape[0], 4, 2), 0.5),
                p, torch.fmod(x, 0.3), m, torch.topk(x, 2)[0], torch.topk(x, 3, dim=1, largest=False)[1],
                x.argmax(dim=1), x.argmin(dim=-1), torch.max(x, dim=2)[1], x.argmax(), torch.sort(x, dim=1)[0], torch.argsort(x, dim=-1),
                y.reshape(y.shape[0], 4, 480)[..., :67] * 2, F.pad(y, (0, 0, 2, 1)) + 1)


class Elu(torch.nn.Module):  # aten::elu, which selu and celu become
    def forward(self, x):  # [b, 6, 5]
        return F.elu(x * 3), F.elu(x, alpha=0.5), F.selu(x * 3), F.celu(x * 3, alpha=2.0)


class Sort(torch.nn.Module):  # sort, argsort: ties (rounded values) in stable order
    def forward(self, x):  # [b, 6, 9]
        r = (x * 2).round()
        return (*torch.sort(x), *torch.sort(x, dim=1, descending=True), torch.argsort(x, dim=0),
                *torch.sort(r, stable=True), *torch.sort(r, dim=1, descending=True, stable=True), torch.argsort(r, dim=-1, stable=True))


class GradRegions(torch.nn.Module):  # no_grad / autocast(enabled=False) blocks: torch.export's higher-order wrappers
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 5)

    def forward(self, x):  # [b, 6, 5]
        h = self.lin(x)
        with torch.no_grad():
            s = h.sin() * 2
            with torch.enable_grad():
                e = s + 1
        with torch.autocast("cpu", enabled=False):
            c = (h.float() * 3).cos()
        return h + s, c * e


def pools(x):  # average pooling: padding counted or not, ceil_mode's partial windows, a divisor override, adaptive
    return (F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), F.avg_pool2d(x, 2, ceil_mode=True),
            F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), F.avg_pool2d(x, (2, 3), (2, 1), divisor_override=3),
            F.adaptive_avg_pool2d(x, (3, 5)), F.adaptive_avg_pool2d(x, (4, 3)))  # adaptive: windows of one size, and of several


class AvgPool(torch.nn.Module):
    def forward(self, x):  # [b, 3, 9, 10]
        return pools(x)


MODULES = {  # name: (module, one input of batch size b)
    "group_norm": (GroupNorm, lambda b: torch.randn(b, 8, 5, 6)),
    "upsample": (Upsample, lambda b: torch.randn(b, 3, 5, 6)),
    "avg_pool": (AvgPool, lambda b: torch.randn(b, 3, 9, 10)),
    "repeat": (Repeat, lambda b: torch.randn(b, 3, 4)),
    "var_std": (Var, lambda b: torch.randn(b, 6, 5)),
    "conv_transpose2d": (ConvTranspose, lambda b: torch.randn(b, 4, 5, 6)),
    "index_updates": (IndexUpdates, lambda b: torch.randn(b, 6, 5)),
    "pad_fmod": (PadFmod, lambda b: torch.randn(b, 3, 5, 6)),
    "slice_assign": (SliceAssign, lambda b: torch.randn(b, 6, 5)),
    "topk": (TopK, lambda b: torch.randn(b, 6, 9)),
    "elu": (Elu, lambda b: torch.randn(b, 6, 5)),
    "sort": (Sort, lambda b: torch.randn(b, 6, 9)),
    "grad_regions": (GradRegions, lambda b: torch.randn(b, 6, 5)),
    "ragged_rows": (RaggedRows, lambda b: torch.randn(b, 3, 72)),
}


class TrainSliceAssign(torch.nn.Module):  # derivatives through in-place slice / select updates (slice_scatter, select_scatter), strided slices
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 5)

    def forward(self, x):  # [4, 6, 5]
        h = self.lin(x)
        m = torch.zeros_like(h)
        m[:, 1:4] = h[:, :3] * 2
        m[:, 0] = h[:, 5]
        y = h.clone()
        y[:, 2:4] += m[:, 1:3]
        y[:, :, 1] = 0.5
        strided = (h[:, ::2] * h[:, 1::3].sum(1, keepdim=True)).sum() + (h[:, -5::2, 1:] ** 2).sum()  # slices with a step
        return ((m * y).sum() + (y * y).sum() + strided).reshape(1)


class TrainElu(torch.nn.Module):  # derivatives: elu (with selu's and celu's constants)
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(5, 5))

    def forward(self, x):  # [4, 5]
        z = x @ self.w
        return (F.elu(z).sum() + F.selu(z * 0.5).sum() + F.celu(z, alpha=2.0).pow(2).sum()).reshape(1)


class TrainSortTopk(torch.nn.Module):  # derivatives: sort (values), topk (k <= 64 and k > 64), argsort (none)
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(5, 80))

    def forward(self, x):  # [4, 5]
        z = x @ self.w
        s = torch.sort(z, dim=-1, descending=True).values
        ranks = torch.arange(80.0) + 1
        order = torch.argsort(z[:, :3], dim=-1).to(torch.float32)
        return ((s * ranks).sum() + torch.topk(z, 3).values.pow(2).sum() + (torch.topk(z, 70, largest=False).values * ranks[:70]).sum()
                + order.sum()).reshape(1)


class TrainGradRegions(torch.nn.Module):  # no gradient through a torch.no_grad() block
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(5, 5))

    def forward(self, x):  # [4, 5]
        z = x @ self.w
        with torch.no_grad():
            s = (z * 2).sin()
        return ((z * s).sum() + z.pow(2).sum()).reshape(1)


class TrainVarRepeat(torch.nn.Module):  # derivatives: var (and var_mean's mean), std, repeat
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))

    def forward(self, x):  # [4, 3, 8]
        z = x * self.w.repeat(1, 2)
        v, m = torch.var_mean(z, dim=-1)
        return (torch.var(z, dim=1).sum() + (v * m).sum() + torch.std(z, dim=(0, 2)).sum()).reshape(1)


class TrainUpBlock(torch.nn.Module):  # derivatives: conv_transpose2d, group_norm, nearest upsampling by 2
    def __init__(self):
        super().__init__()
        self.ct = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.gn = torch.nn.GroupNorm(3, 6)
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):  # [2, 4, 3, 4]
        y = self.gn(self.ct(x))
        return (F.interpolate(y, scale_factor=2, mode="nearest") * y.repeat(1, 1, 2, 2)).sum().reshape(1)


class WeightedAfterConv(torch.nn.Module):
    """A convolution (the parameters whose gradients are compared), ops on its result (outputs()),
    and a loss weighting each output by a fixed random tensor, so that every output element's
    gradient differs."""

    def __init__(self, shapes, seed):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        g = torch.Generator().manual_seed(seed)
        for k, shape in enumerate(shapes):
            self.register_buffer(f"r{k}", torch.randn(2, 4, *shape, generator=g))

    def forward(self, x):
        return sum((o * getattr(self, f"r{k}")).sum() for k, o in enumerate(self.outputs(self.conv(x)))).reshape(1)


class TrainUpsample(WeightedAfterConv):  # derivatives: nearest and bilinear upsampling, by sizes and scale factors
    def __init__(self):
        super().__init__([(10, 12), (9, 11), (4, 4), (7, 13), (15, 18), (7, 9), (5, 6)], 3)

    def outputs(self, y):  # x: [2, 3, 5, 6]
        return [F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False),
                F.interpolate(y, size=(9, 11), mode="bilinear", align_corners=True),
                F.interpolate(y, size=(4, 4), mode="bilinear", align_corners=False),  # downsampling
                F.interpolate(y, size=(7, 13), mode="nearest"),
                F.interpolate(y, scale_factor=3, mode="nearest"),
                F.interpolate(y, scale_factor=1.5, mode="bilinear", align_corners=False),  # a scale the taps use
                F.interpolate(y, scale_factor=1, mode="bilinear", align_corners=True)]


class TrainPool(WeightedAfterConv):  # derivatives: average pooling (pools() above), adaptive to sizes other than 1x1
    def __init__(self):
        super().__init__([(5, 5), (5, 5), (5, 5), (5, 6), (4, 8), (3, 5), (4, 3)], 4)

    def outputs(self, y):  # x: [2, 3, 9, 10]
        return pools(y)


def export(module, make, batch=True):
    x = make(2)
    shapes = ({0: torch.export.Dim("batch", min=1, max=16)},) if batch else None
    return torch.export.export(module, (x,), dynamic_shapes=shapes)


def run_on_gpu(exe, work, t, jobs):
    """--device cuda (a machine with a GPU): every module above, and the one holding every op,
    exported here (torch.export is not thread-safe), compiled for CUDA (jobs compiles at a time)
    and run on CUDA inputs at batch 1, 3 and 8 against CPU eager, with the same tolerance."""
    from concurrent.futures import ThreadPoolExecutor
    cases = dict(MODULES, everything=(Everything, lambda b: torch.randn(b, 4, 5, 6)))
    modules, archives = {}, {}
    for name, (cls, make) in cases.items():
        torch.manual_seed(1)
        modules[name] = cls().eval()
        archives[name] = work / f"{name}_cuda.pt2"
        torch.export.save(export(modules[name], make), str(archives[name]))

    with ThreadPoolExecutor(jobs) as pool:
        futures = {name: pool.submit(ptc.compile, archives[name], work / f"{name}_cuda.so", device="cuda", ptc=exe) for name in cases}
    for name, future in futures.items():
        def run(name=name, future=future):
            lib, (_, make), module = future.result(), cases[name], modules[name]
            msgs = []
            with ptc.load(lib) as m, torch.inference_mode():
                for b in (1, 3, 8):
                    x = make(b)
                    got, ref = m(x.cuda()), module(x)
                    ref = ref if isinstance(ref, tuple) else (ref,)
                    assert len(got) == len(ref), (len(got), len(ref))
                    msgs += [compare(g.cpu(), r) for g, r in zip(got, ref)]
            worst = max(float(s.split()[-1]) for s in msgs)
            return f"{len(msgs)} outputs at batch 1, 3, 8; worst abs err {worst:.1e}"
        t.check(f"{name} on CUDA matches eager", run)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ptc-binary", default=os.environ.get("PTC_BINARY", str(ROOT / "build" / "ptc")))
    ap.add_argument("--keep", help="compile into this folder and keep it")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: run the forward checks on a GPU instead (compiled for CUDA, against CPU eager)")
    ap.add_argument("--jobs", type=int, default=8, help="with --device cuda: compiles at a time")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    exe = Path(args.ptc_binary).resolve()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ptc_ops_test_"))
    work.mkdir(parents=True, exist_ok=True)
    t = Runner(args.verbose)
    try:
        if args.device == "cuda":
            run_on_gpu(exe, work, t, args.jobs)
            print(f"{t.passed} passed, {t.failed} failed")
            return 0 if t.failed == 0 and t.passed > 0 else 1
        for name, (cls, make) in MODULES.items():
            def run(name=name, cls=cls, make=make):
                torch.manual_seed(1)
                module = cls().eval()
                lib = ptc.compile(export(module, make), work / f"{name}.so", ptc=exe)
                msgs = []
                with ptc.load(lib) as m, torch.inference_mode():
                    for b in (1, 3, 8):
                        x = make(b)
                        got, ref = m(x), module(x)
                        ref = ref if isinstance(ref, tuple) else (ref,)
                        assert len(got) == len(ref), (len(got), len(ref))
                        msgs += [compare(g, r) for g, r in zip(got, ref)]
                worst = max(float(s.split()[-1]) for s in msgs)
                return f"{len(msgs)} outputs at batch 1, 3, 8; worst abs err {worst:.1e}"
            t.check(f"{name} matches eager", run)

        def slice_assign_core():
            """The Core ATen form of SliceAssign: torch's own functionalization wrote slice_scatter / select_scatter."""
            torch.manual_seed(1)
            module = SliceAssign().eval()
            ep = export(module, lambda b: torch.randn(b, 6, 5)).run_decompositions()
            kinds = {str(n.target) for n in ep.graph.nodes}
            assert "aten.slice_scatter.default" in kinds, kinds
            lib = ptc.compile(ep, work / "slice_assign_core.so", ptc=exe)
            with ptc.load(lib) as m, torch.inference_mode():
                for b in (1, 4):
                    x = torch.randn(b, 6, 5)
                    for g, r in zip(m(x), module(x)):
                        compare(g, r)
            return "batch 1, 4"
        t.check("SliceAssign in Core ATen (torch's own slice_scatter nodes) matches eager", slice_assign_core)

        class TopKTies(torch.nn.Module):
            def forward(self, x):  # [r, 8]
                return torch.topk(x, 5) + torch.topk(x, 5, largest=False)

        def topk_ties():
            """Ties, infinities and NaN: the values as torch's, at distinct positions holding them."""
            inf, nan = float("inf"), float("nan")
            x = torch.tensor([[1, 3, 3, 0, 3, 1, 2, 2], [inf, -inf, 0, inf, nan, -inf, 1, nan],
                              [nan, nan, nan, nan, nan, 2, nan, nan], [-inf] * 8, [inf, 2, nan, inf, inf, -1, 0, inf]])
            lib = ptc.compile(torch.export.export(TopKTies(), (x,)), work / "topk_ties.so", ptc=exe)
            with ptc.load(lib) as m:
                got, ref = m(x), TopKTies()(x)
            for j in (0, 2):
                v, i, rv = got[j], got[j + 1], ref[j]
                assert torch.equal(v.nan_to_num(7.5), rv.nan_to_num(7.5)), (j, v, rv)
                assert torch.equal(x.gather(1, i).nan_to_num(7.5), rv.nan_to_num(7.5)), (j, i)
                assert all(len(set(r.tolist())) == 5 for r in i), i
            return "largest and smallest: torch's values, distinct positions"
        t.check("topk with ties, infinities and NaN", topk_ties)

        class SortSpecial(torch.nn.Module):
            def forward(self, x):  # [r, 8]
                return (*torch.sort(x, stable=True), *torch.sort(x, descending=True, stable=True))

        def sort_special():
            """Infinities, NaN (after everything ascending, first descending) and -0.0 == 0.0 in stable order."""
            inf, nan = float("inf"), float("nan")
            x = torch.tensor([[1, 3, 3, 0, 3, 1, 2, 2], [inf, -inf, 0, inf, nan, -inf, 1, nan],
                              [nan, nan, nan, nan, nan, 2, nan, nan], [-inf] * 8, [0.0, -0.0, 0.0, -0.0, nan, -1, 0, inf]])
            lib = ptc.compile(torch.export.export(SortSpecial(), (x,)), work / "sort_special.so", ptc=exe)
            with ptc.load(lib) as m:
                got, ref = m(x), SortSpecial()(x)
            for g, r in zip(got, ref):
                assert torch.equal(g.nan_to_num(7.5), r.nan_to_num(7.5)), (g, r)
                assert g.dtype != torch.float32 or torch.equal(torch.signbit(g), torch.signbit(r)), (g, r)
            return "ascending and descending: torch's values and indices"
        t.check("sort with ties, infinities, NaN and signed zeros (stable)", sort_special)

        def check_training(make_module, x, lib_name, seed):
            """A --train library of the module against torch.autograd: the loss and every parameter's gradient."""
            torch.manual_seed(seed)
            module = make_module()
            lib = ptc.compile(torch.export.export(module, (x,)), work / lib_name, train=True, ptc=exe)
            with ptc.load(lib) as tr:
                with torch.no_grad():
                    for k, v in module.named_parameters():
                        tr.params[k].copy_(v)
                tr.zero_grad()
                (loss,), saved = tr.forward_train(x)
                tr.backward(saved, [torch.ones(1)])
                saved.free()
                ref = module(x)
                ref.sum().backward()
                msg = compare(loss, ref.detach())
                worst = 0.0
                for k, v in module.named_parameters():
                    g = tr.grads[k]
                    err = (g - v.grad).abs().max().item()
                    if not torch.allclose(g, v.grad, atol=1e-4, rtol=1e-4):
                        raise AssertionError(f"grad {k}: max abs error {err:.3g}")
                    worst = max(worst, err)
                return f"loss {msg}; {len(tr.grads)} parameter gradients, worst abs err {worst:.2e}"

        t.check("var, var_mean, std and repeat gradients match torch.autograd (--train)",
                lambda: check_training(TrainVarRepeat, torch.randn(4, 3, 8), "train_var_repeat.so", 2))
        t.check("sort and topk gradients match torch.autograd (--train)",
                lambda: check_training(TrainSortTopk, torch.randn(4, 5), "train_sort_topk.so", 8))
        t.check("elu, selu and celu gradients match torch.autograd (--train)",
                lambda: check_training(TrainElu, torch.randn(4, 5) * 2, "train_elu.so", 7))
        t.check("gradients through in-place slice and select updates match torch.autograd (--train)",
                lambda: check_training(TrainSliceAssign, torch.randn(4, 6, 5), "train_slice_assign.so", 6))
        t.check("conv_transpose2d, group_norm and nearest upsampling gradients match torch.autograd (--train)",
                lambda: check_training(TrainUpBlock, torch.randn(2, 4, 3, 4), "train_up_block.so", 4))
        t.check("nearest and bilinear upsampling gradients match torch.autograd (--train)",
                lambda: check_training(TrainUpsample, torch.randn(2, 3, 5, 6), "train_upsample.so", 10))
        t.check("average pooling gradients match torch.autograd (--train)",
                lambda: check_training(TrainPool, torch.randn(2, 3, 9, 10), "train_pool.so", 11))
        t.check("no gradient flows through a torch.no_grad() block (--train)",
                lambda: check_training(TrainGradRegions, torch.randn(4, 5), "train_grad_regions.so", 9))

        class AutocastRegion(torch.nn.Module):
            def forward(self, x):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    y = x @ x.t()
                return y.float()

        def autocast_region_refused():
            ep = torch.export.export(AutocastRegion(), (torch.randn(4, 4),))
            assert any("wrap_with_autocast" in str(n.target) for n in ep.graph.nodes), ep.graph
            try:
                ptc.compile(ep, work / "autocast_region.so", ptc=exe)
            except ptc.CompileError as e:
                assert "torch.autocast region" in str(e), str(e)
                return str(e).splitlines()[-1][-80:]
            raise AssertionError("compile did not refuse an enabled torch.autocast region")
        t.check("an enabled torch.autocast region inside forward() is refused with one sentence", autocast_region_refused)

        def state():
            """A library with state: 4 runs against 4 calls of the module, the buffers, a reset."""
            torch.manual_seed(5)
            module = Counter().eval()
            ep = torch.export.export(Counter(), (torch.randn(3, 5),))
            lib = ptc.compile(ep, work / "counter.so", ptc=exe)
            with ptc.load(lib) as m:
                for step in range(4):
                    x = torch.randn(3, 5)
                    got, ref = m(x), module(x)
                    for g, r in zip(got, ref):
                        compare(g, r)
                bufs = m.buffers()
                assert sorted(bufs) == ["calls", "last", "total"], sorted(bufs)
                for k, v in module.named_buffers():
                    compare(bufs[k], v)
                m.reset_state()
                assert all(float(v.abs().max()) == 0 for v in m.buffers().values()), m.buffers()
                x = torch.randn(3, 5)
                got, ref = m(x), Counter()(x)
                for g, r in zip(got, ref):
                    compare(g, r)
            return "4 runs, the buffers and a reset as the module"
        t.check("a module that updates its buffers in place: the library holds them (state)", state)

        class ViewUpdate(torch.nn.Module):  # a cache written a row at a time through slices: state
            def __init__(self):
                super().__init__()
                self.register_buffer("cache", torch.zeros(4, 5))
                self.register_buffer("pos", torch.zeros((), dtype=torch.int64))

            def forward(self, x):  # [2, 5]
                self.cache[1:3].copy_(x)
                self.cache[0] += x[0]
                self.pos.add_(1)
                return self.cache * 2, self.pos

        def view_update_state():
            module = ViewUpdate()
            lib = ptc.compile(torch.export.export(ViewUpdate(), (torch.randn(2, 5),)), work / "view_update.so", ptc=exe)
            with ptc.load(lib) as m:
                for _ in range(3):
                    x = torch.randn(2, 5)
                    for g, r in zip(m(x), module(x)):
                        compare(g, r)
                for k, v in module.named_buffers():
                    compare(m.buffers()[k], v)
            return "3 runs and the buffers as the module"
        t.check("a buffer updated through slice and select views holds the module's state", view_update_state)

        class ViewUpdateReshaped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("cache", torch.zeros(4, 5))

            def forward(self, x):  # [10]
                self.cache.view(20)[:10].copy_(x)
                return self.cache * 2

        def view_update_refused():
            try:
                ptc.compile(torch.export.export(ViewUpdateReshaped(), (torch.randn(10),)), work / "view_update_r.so", ptc=exe)
            except ptc.CompileError as e:
                assert "slice and select views only" in str(e) and "buffer 'cache'" in str(e), str(e)
                return str(e)[-60:]
            raise AssertionError("compile did not refuse an update through a reshaped view")
        t.check("an update through a view other than slice / select is refused with one sentence", view_update_refused)

        class UnknownInplace(torch.nn.Module):  # zero_ on a fresh tensor: unused output, an update all the same
            def forward(self, x):
                m = x.clone()
                m[:, :2].zero_()
                return m + 1

        def unknown_inplace_refused():
            try:
                ptc.compile(torch.export.export(UnknownInplace(), (torch.randn(3, 4),)), work / "unknown_inplace.so", ptc=exe)
            except ptc.CompileError as e:
                assert "in-place operator" in str(e) and "zero_" in str(e), str(e)
                return str(e)[-60:]
            raise AssertionError("compile dropped an unknown in-place op instead of refusing it")
        t.check("an unknown in-place operator is refused, not dropped as unused", unknown_inplace_refused)

        class BigTopk(torch.nn.Module):  # topk with k > 64 sorts, which lowers for dims up to 4096
            def forward(self, x):
                return torch.topk(x, 100).values * 2, x.repeat(1, 2)

        def inspect_lists_refused():
            import json
            import subprocess
            path = work / "big_topk.pt2"
            torch.export.save(torch.export.export(BigTopk(), (torch.randn(2, 5000),)), str(path))
            r = subprocess.run([str(exe), "inspect", "--json", str(path)], capture_output=True, text=True, check=True)
            refused = json.loads(r.stdout)["refused_ops"]
            for device in ("cpu", "cuda"):
                ops = [u["op"] for u in refused[device]]
                assert ops == ["aten::topk"], (device, ops)  # and not repeat, which lowers
            try:
                ptc.compile(path, work / "big_topk.so", ptc=exe)
            except ptc.CompileError as e:
                assert refused["cpu"][0]["reason"] in str(e), (refused["cpu"][0]["reason"], str(e))
                return refused["cpu"][0]["reason"][-50:]
            raise AssertionError("compile did not refuse topk with k = 100 over 5000 elements")
        t.check("ptc inspect lists the ops compile would refuse, with compile's sentence", inspect_lists_refused)

        nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
        if nvcc:
            def cuda():
                torch.manual_seed(3)
                loops = work / "everything_cuda.loops"
                lib = ptc.compile(export(Everything().eval(), lambda b: torch.randn(b, 4, 5, 6)), work / "everything_cuda.so",
                                  device="cuda", ptc=exe, cache=False,
                                  extra_args=("--emit-dir", str(work / "everything_cuda"), "--dump-loops", str(loops)))
                src = (work / "everything_cuda" / "model.cu").read_text()
                # the [b, 4, 67] slice of [b, 4, 480] rows: 4-wide loads in chunks of rows not a multiple of 4
                assert "const int64_t chunks = (" in src, "no ragged vector kernel"
                # the padded rows of y [b, 4, 20, 24]: 4 at a time under the row's padding test
                assert ") ? ptc_cuda::load4(" in src, "no guarded vector load"
                # loads under a where's branches (index_copy, the in-place slice update) through ptc_cuda::ldg
                assert "ptc_cuda::ldg(" in src, "no where-branch load through ptc_cuda::ldg"
                # cuDNN's transposed convolution reads the group norm's output with the batch outermost
                import re
                convs = re.findall(r"conv_input_grad\([^{]+\{[^}]*\}, \w+\[([^\]]*)\]\{\[([^\]]*)\]", loops.read_text())
                assert convs, "no cuDNN transposed convolution"
                for sizes, strides in convs:
                    ev = [[eval(re.sub(r"s\d+", "3", t)) for t in part.split(", ")] for part in (sizes, strides)]
                    n, st = ev
                    assert all(st[2] >= st[d] * n[d] for d in range(5) if d != 2 and n[d] > 1), ("batch not outermost", sizes, strides)
                return f"{os.path.getsize(lib) >> 10} KiB"
            t.check("every op above compiles for CUDA (nvcc)", cuda)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{t.passed} passed, {t.failed} failed")
    return 0 if t.failed == 0 and t.passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
