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
        pairs = tuple(
            # Output u (normalised) reads input point stride * u + offset.
            _neighbours(points, out_points.rows * stride + di, out_points.cols * stride + dj)
            for di, dj in kernel_offsets(k)
        )
        return KernelMap(out_points, pairs)

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
    out = feats.new_zeros((len(kernel_map.out_points), weight.shape[2]))
    for index, (dst, src) in enumerate(kernel_map.pairs):
        if dst.numel():
            out.index_add_(0, dst, feats[src] @ weight[index])
    if bias is not None:
        out = out + bias
    return kernel_map.out_points, out


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
