"""2-D sparse convolution over a matrix's nonzero pattern, in two interchangeable backends.

Both backends share one weight layout, MinkowskiEngine's: ``weight[k*k, c_in, c_out]``
with kernel index ``(di + k//2) + k * (dj + k//2)`` for the offset (di, dj) along (row,
col), and the rule ``out[u] = bias + sum_o in[u + o * s] @ weight[o]``, where ``s`` is the
input's tensor stride. A stride-1 layer keeps the input's points; a stride-2 layer's output
points are the distinct ``p // 2`` of its input points (MinkowskiEngine's coordinate map).

Why a hand-written backend: MinkowskiEngine does not install from PyPI and spconv is wrong
on CPU for real matrix sizes (docs/architecture.md, Facts measured here); this one is exact,
differentiable and plain PyTorch/NumPy (sorted int64 keys; kernel maps from a few sorted
searches per layer; gather, matmul, ``index_add_`` per offset when training, and a blocked
gather / matmul / compiled scatter-add for inference). Points are kept in *normalised* grid
units (divided by the stride). ``reference_pairs`` and ``conv_reference`` are the
straightforward versions the fast ones are tested against.
"""

from __future__ import annotations

import collections
import collections.abc
import itertools
import warnings
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import numpy as np
import torch
from scipy.sparse import _sparsetools

from cognate.model.kernel_maps import (  # noqa: F401 - sparseconv's public names
    Blocks,
    KernelMap,
    PointSet,
    kernel_offsets,
    pipelined_maps,
    plan_maps,
    reference_pairs,
)

BACKENDS: tuple[str, ...] = ("torch", "minkowski")


class Workspace:
    """Scratch buffers reused across the layers of one inference pass.

    Why: a fresh large tensor per gather, product and output is paid for in page faults
    (zeroed pages on first touch; docs/benchmarks.md, tune latency). The outputs alternate
    between two buffers, so a layer's output stays valid while the next layer reads it, and
    is overwritten by the layer after that.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._flip = False

    def take(self, name: str, shape: tuple[int, int]) -> torch.Tensor:
        """An uninitialised float32 view of ``shape`` backed by buffer ``name``."""
        numel = shape[0] * shape[1]
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < numel:
            buffer = self._buffers[name] = torch.empty(numel, dtype=torch.float32)
        return buffer[:numel].view(shape)

    def output(self, shape: tuple[int, int]) -> torch.Tensor:
        self._flip = not self._flip
        return self.take("out1" if self._flip else "out0", shape)


def conv_torch(
    points: PointSet,
    feats: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    kernel_map: KernelMap | None = None,
    workspace: Workspace | None = None,
    relu: bool = False,
) -> tuple[PointSet, torch.Tensor]:
    """Sparse convolution in plain PyTorch (then a ReLU when ``relu``); returns the output
    points and features.

    Without autograd (inference) the output may live in ``workspace``: it is valid until
    the second next call with the same workspace.
    """
    k = round(weight.shape[0] ** 0.5)
    kernel_map = kernel_map or KernelMap.build(points, k, stride)
    if not torch.is_grad_enabled() and feats.device.type == "cpu" and feats.dtype == torch.float32:
        out = _conv_inference(feats, weight, bias, kernel_map, workspace or Workspace(), relu)
        return kernel_map.out_points, out
    out = conv_reference(feats, weight, bias, kernel_map)
    return kernel_map.out_points, torch.relu(out) if relu else out


def conv_reference(
    feats: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, kernel_map: KernelMap
) -> torch.Tensor:
    """``out[dst] += feats[src] @ weight[o]`` per offset: differentiable, the reference."""
    shape = (len(kernel_map.out_points), weight.shape[2])
    out = feats.new_zeros(shape) if bias is None else bias.expand(shape).clone()
    for index, (dst, src) in enumerate(kernel_map.pairs):
        if dst.numel():
            out.index_add_(0, dst, feats[src] @ weight[index])
    return out


def _conv_inference(
    feats: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    kernel_map: KernelMap,
    workspace: Workspace,
    relu: bool,
) -> torch.Tensor:
    """The same sums without autograd: products per offset, then one sparse row-sum.

    Why scipy's CSR kernel for the sum: ``index_add_`` adds one row at a time; a CSR
    [outputs x pairs] 0/1 matrix times the products does the same sums in one compiled pass,
    accumulating straight into the bias-filled output. Why blocks of outputs: gathered inputs
    and products of a block stay in cache between the gather, the matmuls and the sum
    (figures: docs/benchmarks.md, tune latency). With one input channel (the first layer)
    the products are rows of the weight, so the sum is a sparse [outputs x k*k] matrix times
    the weight and nothing is gathered.
    """
    n_out, c_out = len(kernel_map.out_points), weight.shape[2]
    w = weight.detach()
    out = workspace.output((n_out, c_out))
    if weight.shape[1] == 1 or kernel_map.size == 0:
        _fill(out, bias)
        if kernel_map.size:
            indptr, order = kernel_map.by_output
            values = feats.detach()[:, 0].numpy()[kernel_map.src.numpy()[order]]
            _csr_matmul_add(
                indptr, kernel_map.kernel_index[order].astype(np.int64), values, w[:, 0, :], out
            )
        return out.relu_() if relu else out
    blocks = kernel_map.blocks
    feats, c_in = feats.detach(), weight.shape[1]
    for block, (a, z) in enumerate(itertools.pairwise(blocks.starts)):
        first = block * blocks.rows
        rows = out[first : min(first + blocks.rows, n_out)]
        _fill(rows, bias)
        if z > a:
            gathered = workspace.take("gathered", (z - a, c_in))
            torch.index_select(feats, 0, blocks.src[a:z], out=gathered)
            product = workspace.take("product", (z - a, c_out))
            lo = 0
            for index, count in enumerate(blocks.counts[block]):
                if count:
                    torch.mm(gathered[lo : lo + count], w[index], out=product[lo : lo + count])
                lo += count
            _scatter_add(blocks.dst[a:z] - first, product, rows)
        if relu:
            rows.relu_()
    return out


def _fill(out: torch.Tensor, bias: torch.Tensor | None) -> None:
    if bias is None:
        out.zero_()
    else:
        out.copy_(bias.detach().expand(out.shape))


@dataclass(frozen=True)
class SharedRows:
    """Features stored once per distinct row: point i's features are ``table[cls[i]]``."""

    cls: np.ndarray  # int64 [points]
    table: torch.Tensor  # float32 [distinct rows, channels]

    def mean(self) -> torch.Tensor:
        """The mean feature over the points (each row weighted by how many points share it)."""
        counts = np.bincount(self.cls, minlength=self.table.shape[0])
        total = torch.from_numpy(counts.astype(np.float64)) @ self.table.double()
        return (total / len(self.cls)).float()

    def expand(self) -> torch.Tensor:
        """One feature row per point."""
        return self.table.index_select(0, torch.from_numpy(self.cls))


def conv_shared(
    rows: SharedRows, weight: torch.Tensor, bias: torch.Tensor | None, kernel_map: KernelMap
) -> SharedRows | None:
    """Inference conv + ReLU computing each distinct output row once; None when most
    outputs would be distinct (the plain path is then cheaper).

    Why: an output fed by a single pair (offset o, input row class c) is ``relu(bias +
    table[c] @ W[o])``, the same for every output with that (o, c). In a sparse matrix most
    points are isolated at the first layers (the receptive field grows 2x per layer), so
    a 1M-point layer has a few thousand distinct rows instead of a million. Outputs fed by
    several pairs get a row of their own, summed like the plain path.
    """
    n_out, k2, n_cls = len(kernel_map.out_points), len(kernel_map.counts), rows.table.shape[0]
    dst, src, kidx = kernel_map.dst.numpy(), kernel_map.src.numpy(), kernel_map.kernel_index
    per_out = np.bincount(dst, minlength=n_out)
    single = per_out[dst] == 1
    key = kidx[single].astype(np.int64) * n_cls + rows.cls[src[single]]
    if k2 * n_cls <= 8 * len(key) + 1024:  # a counting unique: no sort
        seen = np.bincount(key, minlength=k2 * n_cls) > 0
        distinct, single_cls = np.flatnonzero(seen), (np.cumsum(seen) - 1)[key]
    else:
        distinct, single_cls = np.unique(key, return_inverse=True)
    several, alone = np.flatnonzero(per_out > 1), np.flatnonzero(per_out == 0)
    n_rows = len(distinct) + len(several) + (1 if alone.size else 0)
    if n_rows > n_out // 2:
        return None
    w = weight.detach()
    table = torch.empty((n_rows, w.shape[2]), dtype=torch.float32)
    _fill(table, bias)
    # Single-pair rows: the distinct keys are sorted, so grouped by kernel index.
    bounds = np.searchsorted(distinct // n_cls, np.arange(k2 + 1)).tolist()
    inputs = torch.from_numpy(distinct % n_cls)
    for index, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        if hi > lo:
            table[lo:hi] += rows.table.index_select(0, inputs[lo:hi]) @ w[index]
    # Rows of outputs fed by several pairs (the pairs keep their kernel-index grouping).
    first = len(distinct)
    if several.size:
        rank = np.zeros(n_out, dtype=np.int64)
        rank[several] = np.arange(len(several))
        mixed = np.flatnonzero(~single)
        gathered = rows.table.index_select(0, torch.from_numpy(rows.cls[src[mixed]]))
        product = torch.empty((len(mixed), w.shape[2]), dtype=torch.float32)
        lo = 0
        for index, count in enumerate(np.bincount(kidx[mixed], minlength=k2).tolist()):
            if count:
                torch.mm(gathered[lo : lo + count], w[index], out=product[lo : lo + count])
            lo += count
        block = table[first : first + len(several)]
        _scatter_add(rank[dst[mixed]], product, block)
    table.relu_()
    cls = np.empty(n_out, dtype=np.int64)
    cls[dst[single]] = single_cls
    cls[several] = first + np.arange(len(several))
    cls[alone] = n_rows - 1
    return SharedRows(cls, table)


def pooled_inference(
    n_points: int,
    plan: collections.abc.Iterable[KernelMap],
    weights: list[torch.Tensor],
    biases: list[torch.Tensor],
) -> list[torch.Tensor]:
    """Mean-pooled ReLU features of each layer of a stack whose input feature is 1 at every
    point: shared rows while most rows repeat, then the plain blocked path."""
    shared: SharedRows | None = SharedRows(np.zeros(n_points, np.int64), torch.ones((1, 1)))
    feats, workspace, pools = torch.empty(0), Workspace(), []
    for kmap, weight, bias in zip(plan, weights, biases, strict=True):
        if shared is not None:
            after = conv_shared(shared, weight, bias, kmap)
            if after is not None:
                shared = after
                pools.append(after.mean())
                continue
            feats, shared = shared.expand(), None
        feats = _conv_inference(feats, weight, bias, kmap, workspace, relu=True)
        pools.append(feats.mean(0))
    return pools


def _scatter_add(dst: np.ndarray, rows: torch.Tensor, out: torch.Tensor) -> None:
    """``out[dst[j]] += rows[j]`` for every j, in order (float32, in place)."""
    rows = rows.contiguous()
    # The [out x j] 0/1 matrix with one entry per column, in CSC form: scipy's compiled CSC
    # x dense kernel is exactly this scatter-add (``index_add_`` is ~3x slower here).
    columns = np.arange(len(dst) + 1, dtype=dst.dtype)
    _sparsetools.csc_matvecs(
        out.shape[0],
        rows.shape[0],
        out.shape[1],
        columns,
        dst,
        _ones(len(dst)),
        rows.numpy().ravel(),
        out.numpy().ravel(),
    )


_ONES = np.ones(0, dtype=np.float32)


def _ones(n: int) -> np.ndarray:
    """n float32 ones from one shared, growing array (never written to)."""
    global _ONES  # noqa: PLW0603 - a cache
    if len(_ONES) < n:
        _ONES = np.ones(max(n, 2 * len(_ONES)), dtype=np.float32)
        _ONES.flags.writeable = False
    return _ONES[:n]


def _csr_matmul_add(
    indptr: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray,
    dense: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """``out += csr(values, indices, indptr) @ dense`` in place (float32, contiguous)."""
    dense = dense.contiguous()
    # scipy's own CSR x dense kernel, called directly because the public ``@`` allocates
    # a zeroed result (page faults again) that would then be added to the bias.
    _sparsetools.csr_matvecs(
        out.shape[0],
        dense.shape[0],
        out.shape[1],
        indptr,
        indices,
        values,
        dense.numpy().ravel(),
        out.numpy().ravel(),
    )


@cache
def _import_minkowski() -> tuple[ModuleType | None, str]:
    # The 0.5.4 release does `from collections import Sequence`, removed in Python 3.10.
    if not hasattr(collections, "Sequence"):
        collections.Sequence = collections.abc.Sequence  # type: ignore[attr-defined]
    try:
        with warnings.catch_warnings():  # "compiled with CPU_ONLY": expected, not news
            warnings.simplefilter("ignore", UserWarning)
            import MinkowskiEngine as ME  # noqa: N817
    except Exception as err:  # noqa: BLE001 - any import failure means "not available"
        return None, f"{type(err).__name__}: {err}"
    return ME, ""


def minkowski() -> ModuleType | None:
    """MinkowskiEngine when importable (after the Python 3.11 ``collections`` fix), else None."""
    return _import_minkowski()[0]


def minkowski_error() -> str:
    """Why MinkowskiEngine cannot be used here ("" when it can)."""
    return _import_minkowski()[1]


def conv_minkowski(
    tensor: object, weight: torch.Tensor, bias: torch.Tensor | None, stride: int
) -> object:
    """One MinkowskiEngine convolution sharing ``weight`` (so gradients reach it)."""
    ME = minkowski()  # noqa: N806
    if ME is None:
        raise RuntimeError("MinkowskiEngine is not importable")
    k = round(weight.shape[0] ** 0.5)
    with warnings.catch_warnings():  # 0.5.4 instantiates an autograd Function (deprecated)
        warnings.simplefilter("ignore", DeprecationWarning)
        conv = ME.MinkowskiConvolution(
            weight.shape[1], weight.shape[2], kernel_size=k, stride=stride, bias=False, dimension=2
        )
    # Share the caller's parameter instead of the module's own random kernel.
    del conv.kernel
    conv.kernel = weight
    out = conv(tensor)
    if bias is not None:
        out = ME.SparseTensor(
            out.F + bias,
            coordinate_map_key=out.coordinate_map_key,
            coordinate_manager=out.coordinate_manager,
        )
    return out


def minkowski_input(points: PointSet, feats: torch.Tensor) -> object:
    """A single-batch MinkowskiEngine SparseTensor over ``points``."""
    ME = minkowski()  # noqa: N806
    coords = torch.stack([torch.zeros_like(points.rows), points.rows, points.cols], dim=1).to(
        torch.int32
    )
    return ME.SparseTensor(feats, coordinates=coords)


def minkowski_relu(tensor: object) -> object:
    ME = minkowski()  # noqa: N806
    return ME.MinkowskiReLU()(tensor)
