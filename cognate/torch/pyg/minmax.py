"""(max, x) / (min, x) SpMM with the arg kept for the backward: SAGEConv(aggr="max") and
other max / min aggregations of a cognate adjacency (cognate.torch.pyg).

``out[i, j] = max_k A[i, k] * x[k, j]`` over row i's stored entries (0 for an empty row, as
torch's ``spmm_reduce`` and PyG's scatter give; NaN when any product is NaN, as PyG's scatter
max / min give); the backward routes ``dy[i, j]`` to ``dx[k*, j]`` times ``A[i, k*]`` for the
entry k* that won (ties: the first in CSR order; a NaN output sends NaN to each entry of its
row, as scatter's backward does). The backward is itself differentiable (its adjoint is a
gather through the same args), so gradient penalties (``create_graph=True``) get exact
second-order gradients. A may repeat a column in a row (a duplicated edge): it then counts
as one more candidate, as in PyG's edge list.

Both directions are kernels of the cpu kernel pipeline (cognate.targets.cpu.pipeline: the
minmax family, kernels/pyg/spmm_minmax.c specialised to the dense width): packed once per
width (A's own int32 / float32 arrays, no copy), built once per width and reduce (the kernel
cache is per source), bound once, then called through the pipeline's argument vector with
each call's tensors pointed at. Every tensor handed to C is checked first
(``check_live_tensor``: a freed or shrunk storage is a one-line ValueError, never a read of
freed memory).

The forward's schedule (its register tile and task size: configs/cpu-minmax.yaml) is chosen
per graph, width and reduce by timing every config of that small space on the graph at its
first call (a few runs each, on filled features: zero pages would all read one cached page),
unless the adjacency runs the baseline schedule (``schedule="baseline"``: mini-batches).
"""

from __future__ import annotations

import itertools
import time
from functools import cache
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import yaml

from cognate.errors import CognateError
from cognate.paths import configs_dir
from cognate.targets.cpu import pipeline
from cognate.targets.cpu.families.minmax import ARG_EMPTY, ARG_NAN
from cognate.targets.cpu.operands import check_live_tensor, zero_pages

REDUCES = ("max", "min")
TIMED_RUNS = 3  # per candidate schedule, after one warm-up run


@cache
def space() -> tuple[list[dict[str, int]], dict[str, int]]:
    """(every schedule, the baseline) of configs/cpu-minmax.yaml: tile x chunk knobs."""
    spec = yaml.safe_load((configs_dir() / "cpu-minmax.yaml").read_text())
    names = ("tile", "chunk")
    configs = [dict(zip(names, v, strict=True)) for v in itertools.product(*map(spec.get, names))]
    return configs, {name: spec["baseline"][name] for name in names}


def _live(tensor: torch.Tensor, what: str) -> None:
    """One-line ValueError (like cognate.torch's other argument checks) when ``tensor`` has
    no memory for its elements: C must never read a freed or shrunk storage."""
    try:
        check_live_tensor(tensor, f"min/max aggregation: {what}")
    except CognateError as exc:
        raise ValueError(str(exc)) from None


class MinMaxCSR:
    """A's CSR arrays held as the kernel takes them (int32 indices, float32 values); a
    column may repeat within a row (duplicated edges)."""

    def __init__(self, csr: sp.csr_matrix, measure: bool = True) -> None:
        if csr.nnz >= 2**31:  # the kernel's offsets and argmin/argmax entries are int32
            raise CognateError(f"min/max aggregation: {csr.nnz} entries, over 2^31 - 1")
        self.shape = csr.shape
        self.nnz = int(csr.nnz)
        self.csr = sp.csr_matrix(
            (
                np.ascontiguousarray(csr.data, dtype=np.float32),
                np.ascontiguousarray(csr.indices, dtype=np.int32),
                np.ascontiguousarray(csr.indptr, dtype=np.int32),
            ),
            shape=csr.shape,
        )
        self.indices, self.values = self.csr.indices, self.csr.data
        self._kernels: dict[tuple[str, str, int], pipeline.PreparedKernel] = {}
        self.measure = measure  # time the space at a width's first call, else the baseline
        # (reduce, width, args) -> the forward's schedule knobs
        self.choices: dict[tuple[str, int, int], dict[str, int]] = {}
        self.tuning_s = 0.0  # seconds spent timing schedules

    def _kernel(self, op: str, reduce: str, width: int, args: int) -> pipeline.PreparedKernel:
        """The pipeline's kernel of ``op`` ("spmm" or "route") at ``width``: packed, built
        and bound once (to untouched zero pages: every call points it at its tensors)."""
        key = (op, reduce, width, args) if op == "spmm" else (op, "", width, 1)
        found = self._kernels.get(key)
        if found is None:
            rows, cols = self.shape
            # the backward ("route") is one kernel for both reduces: any legal one names it
            knobs = {"family": "minmax", "reduce": reduce or "max", **space()[1]}
            if op == "spmm":
                knobs.update(self._schedule(reduce, width, args), args=args)
                dense: tuple[np.ndarray, ...] = (zero_pages((cols, width), np.float32),)
            else:
                dense = (zero_pages((rows, width), np.float32), zero_pages((rows, width), np.int32))
            found = pipeline.bind(pipeline.pack(self.csr, op, knobs, width), knobs, dense)
            self._kernels[key] = found
        return found

    def _schedule(self, reduce: str, width: int, args: int) -> dict[str, int]:
        """The forward's fastest schedule at ``width`` on this graph (timed once), or the
        baseline when not measuring."""
        key = (reduce, width, args)
        if key not in self.choices:
            fastest = self._fastest(reduce, width, args) if self.measure else space()[1]
            self.choices[key] = fastest
        return self.choices[key]

    def _fastest(self, reduce: str, width: int, args: int) -> dict[str, int]:
        start = time.perf_counter()
        x = np.random.default_rng(0).standard_normal((self.shape[1], width), dtype=np.float32)
        times: list[tuple[float, int, dict[str, int]]] = []
        for rank, schedule in enumerate(space()[0]):
            knobs = {"family": "minmax", "reduce": reduce, "args": args, **schedule}
            # packing views A's own arrays (no copy): once per candidate costs nothing
            kernel = pipeline.bind(pipeline.pack(self.csr, "spmm", knobs, width), knobs, (x,))
            kernel.run()  # the warm-up faults the output's pages in
            runs = []
            for _ in range(TIMED_RUNS):
                tic = time.perf_counter()
                kernel.run()
                runs.append(time.perf_counter() - tic)
            times.append((float(np.median(runs)), rank, schedule))
        self.tuning_s += time.perf_counter() - start
        return min(times)[2]

    def _run(self, op: str, reduce: str, tensors: tuple[torch.Tensor, ...], args: int = 1) -> None:
        kernel = self._kernel(op, reduce, tensors[0].shape[1], args)
        with kernel.lock:  # the argument vector is shared by every call of this kernel
            kernel.point_at([t.data_ptr() for t in tensors])
            kernel.run()

    def _check(self, x: torch.Tensor, rows: int, what: str) -> torch.Tensor:
        """``x`` as C reads it: float32 cpu, ``rows`` x width, live, contiguous."""
        if x.dtype != torch.float32 or x.device.type != "cpu" or x.layout != torch.strided:
            raise TypeError(
                f"min/max aggregation: {what} must be a dense float32 cpu tensor, got"
                f" {x.dtype} {x.layout} on {x.device}"
            )
        if x.dim() != 2 or x.shape[0] != rows:
            raise ValueError(
                f"min/max aggregation: {what} has shape {tuple(x.shape)}, expected ({rows}, width)"
            )
        _live(x, what)  # before .contiguous(): torch's copy of a freed tensor crashes too
        return x.detach().contiguous()

    def _check_arg(self, arg: torch.Tensor, width: int) -> torch.Tensor:
        if arg.dtype != torch.int32 or tuple(arg.shape) != (self.shape[0], width):
            raise ValueError(
                f"min/max aggregation: the saved args have {arg.dtype} {tuple(arg.shape)},"
                f" expected int32 ({self.shape[0]}, {width})"
            )
        _live(arg, "the args saved for the backward")
        return arg.contiguous()

    def forward(
        self, x: torch.Tensor, reduce: str, args: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(out, arg) for x of A.cols rows; arg None without ``args`` (no gradient to x:
        the kernel then keeps no args, which saves a third of its work)."""
        x = self._check(x, self.shape[1], "x")
        rows, width = self.shape[0], x.shape[1]
        out = torch.empty((rows, width), dtype=torch.float32)
        arg = torch.empty((rows, width), dtype=torch.int32) if args else None
        if rows and width:
            # without args the kernel never touches its arg pointer: out stands in
            self._run("spmm", reduce, (x, out, out if arg is None else arg), int(args))
        return out, arg

    def backward(self, grad: torch.Tensor, arg: torch.Tensor) -> torch.Tensor:
        """dx: ``grad`` (A.rows x width) routed to the entries that won."""
        grad = self._check(grad, self.shape[0], "the output's gradient")
        arg = self._check_arg(arg, grad.shape[1])
        if not (self.shape[0] and self.shape[1] and grad.shape[1]):
            return torch.zeros((self.shape[1], grad.shape[1]), dtype=torch.float32)
        dx = torch.empty((self.shape[1], grad.shape[1]), dtype=torch.float32)
        self._run("route", "", (grad, arg, dx))  # the kernel zeroes dx first
        return dx

    def gather(self, dx: torch.Tensor, arg: torch.Tensor) -> torch.Tensor:
        """The adjoint of ``backward`` (what differentiating it gives): ``out[i, j] =
        A.val[k] * dx[A.col[k], j]`` for k = arg[i, j] (0 for an empty row, NaN for a NaN
        output). In torch: it runs only for second-order gradients."""
        dx = self._check(dx, self.shape[1], "the input's gradient")
        arg = self._check_arg(arg, dx.shape[1])
        if self.nnz == 0:
            return dx.new_zeros(arg.shape)
        k = arg.long().clamp_min(0)
        source = torch.from_numpy(self.indices).long()[k]
        out = torch.gather(dx, 0, source) * torch.from_numpy(self.values)[k]
        out = out.masked_fill(arg == ARG_EMPTY, 0.0)
        return out.masked_fill(arg == ARG_NAN, float("nan"))


class _MinMaxSpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, operand: MinMaxCSR, reduce: str) -> torch.Tensor:
        out, arg = operand.forward(x, reduce, args=ctx.needs_input_grad[0])
        ctx.operand = operand
        if arg is not None:
            ctx.save_for_backward(arg)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (arg,) = ctx.saved_tensors
        return _Route.apply(grad, arg, ctx.operand), None, None


class _Route(torch.autograd.Function):
    """dx = the gradient routed through the args: linear in the gradient, its derivative
    is ``_Gather`` (the args are piecewise constant in x: no second-order term in x)."""

    @staticmethod
    def forward(ctx: Any, grad: torch.Tensor, arg: torch.Tensor, operand: MinMaxCSR) -> Any:
        ctx.operand = operand
        ctx.save_for_backward(arg)
        return operand.backward(grad, arg)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (arg,) = ctx.saved_tensors
        return _Gather.apply(grad, arg, ctx.operand), None, None


class _Gather(torch.autograd.Function):
    """``_Route``'s adjoint; its own derivative is ``_Route`` again (any order)."""

    @staticmethod
    def forward(ctx: Any, dx: torch.Tensor, arg: torch.Tensor, operand: MinMaxCSR) -> Any:
        ctx.operand = operand
        ctx.save_for_backward(arg)
        return operand.gather(dx, arg)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (arg,) = ctx.saved_tensors
        return _Route.apply(grad, arg, ctx.operand), None, None


def spmm_minmax(operand: MinMaxCSR, x: torch.Tensor, reduce: str) -> torch.Tensor:
    """``reduce`` ("max" / "min") over each row's entries of A * x, differentiable in x to
    any order (x: float32 cpu, A.cols x width)."""
    if reduce not in REDUCES:
        raise ValueError(f"reduce must be one of {', '.join(REDUCES)}, got {reduce!r}")
    return _MinMaxSpMM.apply(x, operand, reduce)


def reference(csr: sp.csr_matrix, x: np.ndarray, reduce: str) -> np.ndarray:
    """numpy reference of the forward (float64; NaN wherever a product is NaN), for the
    tests."""
    out = np.zeros((csr.shape[0], x.shape[1]))
    pick = np.max if reduce == "max" else np.min  # both propagate NaN
    for i in range(csr.shape[0]):
        lo, hi = csr.indptr[i], csr.indptr[i + 1]
        if hi > lo:
            out[i] = pick(csr.data[lo:hi, None].astype(np.float64) * x[csr.indices[lo:hi]], 0)
    return out
