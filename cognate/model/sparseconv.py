"""2-D sparse convolution over a matrix's nonzero pattern, in two interchangeable backends.

Both backends share one weight layout, MinkowskiEngine's: ``weight[k*k, c_in, c_out]``
with kernel index ``(di + k//2) + k * (dj + k//2)`` for the offset (di, dj) along (row,
col), and the rule ``out[u] = bias + sum_o in[u + o * s] @ weight[o]``, where ``s`` is the
input's tensor stride. A stride-1 layer keeps the input's points; a stride-2 layer's output
points are the distinct ``p // 2`` of its input points (MinkowskiEngine's coordinate map).

Why a hand-written backend: MinkowskiEngine does not install from PyPI and spconv is wrong
on CPU for real matrix sizes (DESIGN section 11); this one is exact, differentiable and
plain PyTorch (sorted int64 keys, ``searchsorted`` per kernel offset, gather, matmul,
``index_add_``). Points are kept in *normalised* grid units (divided by the stride).
"""

from __future__ import annotations

import collections
import collections.abc
import warnings
from dataclasses import dataclass
from functools import cache
from types import ModuleType

import numpy as np
import torch

BACKENDS: tuple[str, ...] = ("torch", "minkowski")


@dataclass(frozen=True)
class PointSet:
    """Sorted, distinct 2-D points on a ``rows x cols`` grid (normalised units)."""

    rows: torch.Tensor  # int64 [n]
    cols: torch.Tensor  # int64 [n]
    grid: tuple[int, int]
    keys: torch.Tensor  # int64 [n], rows * grid[1] + cols, strictly increasing

    @staticmethod
    def from_coords(rows: torch.Tensor, cols: torch.Tensor, grid: tuple[int, int]) -> PointSet:
        """Sort and de-duplicate ``(rows, cols)``."""
        keys = torch.unique(rows.to(torch.int64) * grid[1] + cols.to(torch.int64))
        return PointSet(keys // grid[1], keys % grid[1], grid, keys)

    def __len__(self) -> int:
        return int(self.keys.numel())

    def downsample(self) -> tuple[PointSet, torch.Tensor]:
        """The stride-2 point set and, for each input point, the index of its output point."""
        grid = ((self.grid[0] + 1) // 2, (self.grid[1] + 1) // 2)
        keys, inverse = torch.unique(
            (self.rows // 2) * grid[1] + self.cols // 2, sorted=True, return_inverse=True
        )
        return PointSet(keys // grid[1], keys % grid[1], grid, keys), inverse


def kernel_offsets(k: int) -> list[tuple[int, int]]:
    """Offsets (di, dj) in kernel-index order: index = (di + k//2) + k * (dj + k//2)."""
    if k < 1 or k % 2 == 0:
        raise ValueError(f"kernel size must be odd and positive, got {k}")
    r = k // 2
    return [(di, dj) for dj in range(-r, r + 1) for di in range(-r, r + 1)]


def _neighbours(
    source: PointSet, rows: torch.Tensor, cols: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """For query points (rows, cols): (positions that hit a source point, source indices)."""
    h, w = source.grid
    inside = (rows >= 0) & (rows < h) & (cols >= 0) & (cols < w)
    query = torch.nonzero(inside).squeeze(1)
    keys = rows[query] * w + cols[query]
    pos = torch.searchsorted(source.keys, keys).clamp_(max=max(len(source) - 1, 0))
    hit = source.keys[pos] == keys
    return query[hit], pos[hit]


def _sorted_search(keys: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """``searchsorted(keys, queries)`` for non-decreasing ``queries``."""
    if keys.device.type == "cpu":
        # NumPy narrows each binary search with the previous answer when the queries
        # increase: about 2x faster than torch here for 1M sorted queries.
        return torch.from_numpy(np.searchsorted(keys.numpy(), queries.numpy()))
    return torch.searchsorted(keys, queries)


def _window_pairs(
    source: PointSet, out_points: PointSet, k: int, stride: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dst, src, kernel index) of every pair, with one search per kernel row.

    Why not one ``searchsorted`` per offset: the source points of output u in kernel row
    di are the points of row R = stride*u_r + di with cols in [c - k//2, c + k//2] (c =
    stride*u_c). Keys are sorted and distinct, so those points sit in the k positions
    from the first key >= R*w + max(c - k//2, 0): one search finds all k offsets of the
    row (k searches per layer instead of k*k; the searches were the dominant cost).
    """
    h, w = source.grid
    r, n = k // 2, len(source)
    dst_all, src_all, kidx_all = [], [], []
    centre = out_points.cols * stride
    for di in range(-r, r + 1):
        row = out_points.rows * stride + di
        dst = torch.nonzero((row >= 0) & (row < h)).squeeze(1)
        if not dst.numel() or not n:
            continue
        col = centre[dst]
        base = row[dst] * w + col  # key of offset (di, 0); may lie outside the grid
        # Queries increase with the (sorted) output points, as _sorted_search needs.
        q = _sorted_search(source.keys, base - torch.clamp(col, max=r))
        state = torch.stack([dst, col, base, q])  # compacted together: one gather a step
        for _ in range(k):
            dst, col, base, q = state
            dj = source.keys[q.clamp(max=n - 1)] - base
            inside = (q < n) & (dj <= r)
            # A key within +-r of base but off this row's columns belongs to another row.
            sel = torch.nonzero(inside & (col + dj >= 0) & (col + dj < w)).squeeze(1)
            dst_all.append(dst[sel])
            src_all.append(q[sel])
            kidx_all.append((di + r) + k * (dj[sel] + r))
            # Later keys are larger: a query past its window (dj >= r) is done.
            state = state[:, torch.nonzero(inside & (dj < r)).squeeze(1)]
            if not state.shape[1]:
                break
            state[3] += 1
    if not dst_all:
        empty = source.keys.new_zeros(0)
        return empty, empty, empty
    return torch.cat(dst_all), torch.cat(src_all), torch.cat(kidx_all)


def _group_pairs(
    dst: torch.Tensor, src: torch.Tensor, kidx: torch.Tensor, k: int
) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """Split flat pairs into one (dst, src) per kernel index, each sorted by dst."""
    # Sorting by (kernel index, dst) keeps each offset's scatter in increasing dst order,
    # the same order the per-offset search gave, so index_add_ sums identically.
    order = torch.argsort(kidx * max(int(dst.max()) + 1 if dst.numel() else 1, 1) + dst)
    counts = torch.bincount(kidx, minlength=k * k).tolist()
    dst, src = dst[order], src[order]
    return tuple(zip(dst.split(counts), src.split(counts), strict=True))


@dataclass(frozen=True)
class KernelMap:
    """Which input point feeds which output point through each kernel offset.

    It depends only on the points, so it is computed once per matrix and layer shape and
    reused across training steps (the weights change, the map does not).
    """

    out_points: PointSet
    pairs: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per kernel index: (dst, src)

    @staticmethod
    def build(points: PointSet, k: int, stride: int) -> KernelMap:
        if stride not in (1, 2):
            raise ValueError(f"stride must be 1 or 2, got {stride}")
        out_points = points if stride == 1 else points.downsample()[0]
        kernel_offsets(k)  # validates k
        # Output u (normalised) reads input point stride * u + offset.
        dst, src, kidx = _window_pairs(points, out_points, k, stride)
        return KernelMap(out_points, _group_pairs(dst, src, kidx, k))

    @property
    def size(self) -> int:
        """Number of (dst, src) pairs: what the map costs to keep."""
        return sum(int(d.numel()) for d, _ in self.pairs)


def plan_maps(points: PointSet, layers: list[tuple[int, int]]) -> list[KernelMap]:
    """Kernel maps of a stack of (kernel, stride) layers over ``points``."""
    maps = []
    for k, stride in layers:
        maps.append(KernelMap.build(points, k, stride))
        points = maps[-1].out_points
    return maps


def conv_torch(
    points: PointSet,
    feats: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: int,
    kernel_map: KernelMap | None = None,
) -> tuple[PointSet, torch.Tensor]:
    """Sparse convolution in plain PyTorch; returns the output points and features."""
    k = round(weight.shape[0] ** 0.5)
    kernel_map = kernel_map or KernelMap.build(points, k, stride)
    shape = (len(kernel_map.out_points), weight.shape[2])
    # Starting from the bias saves a zero fill and a full-size add per layer (the sums are
    # the same up to float rounding).
    out = feats.new_zeros(shape) if bias is None else bias.expand(shape).clone()
    if torch.is_grad_enabled():
        for index, (dst, src) in enumerate(kernel_map.pairs):
            if dst.numel():
                out.index_add_(0, dst, feats[src] @ weight[index])
    else:
        _accumulate_inference(out, feats, weight, kernel_map)
    return kernel_map.out_points, out


def _accumulate_inference(
    out: torch.Tensor, feats: torch.Tensor, weight: torch.Tensor, kernel_map: KernelMap
) -> None:
    """``out[dst] += feats[src] @ weight[o]`` per offset, through two reused buffers.

    Why: a fresh 100 MB tensor per gather and per product is paid for in page faults;
    writing into the same buffers (``out=``, not differentiable, so inference only) made
    the loop about 2x faster at 1M nnz.
    """
    most = max((int(dst.numel()) for dst, _ in kernel_map.pairs), default=0)
    gathered = feats.new_empty((most, weight.shape[1]))
    product = feats.new_empty((most, weight.shape[2]))
    for index, (dst, src) in enumerate(kernel_map.pairs):
        m = int(dst.numel())
        if m:
            torch.index_select(feats, 0, src, out=gathered[:m])
            torch.mm(gathered[:m], weight[index], out=product[:m])
            out.index_add_(0, dst, product[:m])


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
