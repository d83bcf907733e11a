"""Kernel maps of the 2-D sparse convolution (sparseconv.py): for each kernel offset, which
input point feeds which output point, for stride-1 and stride-2 layers; ``reference_pairs``
is the straightforward version the fast one is tested against. Built from sorted int64 keys
and a few searches per layer, the next layer's maps in a background thread while the
current one convolves (``pipelined_maps``)."""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch


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
        rows, cols = self.rows.numpy(), self.cols.numpy()
        halves = (rows >> 1) * grid[1] + (cols >> 1)
        # Why not a sort: the halves of the even input rows are already in order, and so are
        # the odd rows'; a stable argsort of the two runs back to back is one linear merge
        # (about 2x faster than torch.unique here).
        odd = (rows & 1).astype(bool)
        runs = np.concatenate([np.flatnonzero(~odd), np.flatnonzero(odd)])
        merged = runs[np.argsort(halves[runs], kind="stable")]
        ordered = halves[merged]
        first = np.ones(len(ordered), dtype=bool)
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        inverse = np.empty(len(ordered), dtype=np.int64)
        inverse[merged] = np.cumsum(first) - 1
        keys = torch.from_numpy(ordered[first])
        return PointSet(keys // grid[1], keys % grid[1], grid, keys), torch.from_numpy(inverse)


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


def reference_pairs(
    points: PointSet, k: int, stride: int
) -> tuple[PointSet, tuple[tuple[torch.Tensor, torch.Tensor], ...]]:
    """The straightforward kernel map: one binary search per kernel offset.

    Slow (k*k searches per layer) but obviously right; the fast builders are tested
    equal to it.
    """
    out_points = points if stride == 1 else points.downsample()[0]
    pairs = tuple(
        _neighbours(points, out_points.rows * stride + di, out_points.cols * stride + dj)
        for di, dj in kernel_offsets(k)
    )
    return out_points, pairs


def _stride1_pairs(points: PointSet, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dst, src, kernel index) of every pair of a stride-1 layer, in no particular order.

    Why not one search per offset: the relation is symmetric (v = u + o iff u = v - o), so
    only the rows below a point are searched (k//2 searches, each finding a whole kernel
    row), the same-row neighbours come from comparing sorted keys a few places apart (no
    search), and every pair found is also emitted mirrored.
    """
    keys, rows, cols = points.keys.numpy(), points.rows.numpy(), points.cols.numpy()
    (h, w), n, r = points.grid, len(keys), k // 2
    everyone = np.arange(n, dtype=np.int64)
    dst, src, kidx = [everyone], [everyone], [np.full(n, r + k * r, dtype=np.int64)]

    def emit(u: np.ndarray, v: np.ndarray, di: int, dj: np.ndarray) -> None:
        dst.extend((u, v))
        src.extend((v, u))
        kidx.extend(((di + r) + k * (dj + r), (r - di) + k * (r - dj)))

    # Same row: a neighbour within r columns is at most r places further in key order.
    for t in range(1, min(r, n - 1) + 1):
        gap = keys[t:] - keys[:-t]
        u = np.flatnonzero((gap <= r) & (rows[t:] == rows[:-t]))
        emit(u, u + t, 0, gap[u])
    for di in range(1, r + 1):
        u = np.flatnonzero(rows + di < h)
        if not u.size:
            continue
        col, base = cols[u], keys[u] + di * w  # base: the key of (row + di, col)
        # The first point at or after column max(col - r, 0) of row + di; queries increase.
        q = np.searchsorted(keys, base - np.minimum(col, r))
        for _ in range(k):
            live = q < n
            u, col, base, q = u[live], col[live], base[live], q[live]
            dj = keys[q] - base
            # A key within +-r of base but off this row's columns belongs to another row.
            hit = (dj <= r) & (col + dj < w)
            emit(u[hit], q[hit], di, dj[hit])
            more = dj < r  # later keys are larger: a query past its window is done
            u, col, base, q = u[more], col[more], base[more], q[more] + 1
            if not u.size:
                break
    return np.concatenate(dst), np.concatenate(src), np.concatenate(kidx)


def _group(
    dst: np.ndarray, src: np.ndarray, kidx: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Pairs ordered by (kernel index, dst), and the count of each kernel index."""
    # Two stable sorts: by dst (a merge of a few sorted runs), then a radix sort by the
    # small kernel index; cheaper than one sort of a combined 64-bit key.
    by_dst = np.argsort(dst, kind="stable")
    order = by_dst[np.argsort(kidx[by_dst].astype(np.int16), kind="stable")]
    counts = np.bincount(kidx, minlength=k * k).tolist()
    return dst[order], src[order], counts


def _stride2_pairs(
    points: PointSet, out_points: PointSet, home: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Pairs of a stride-2 layer grouped by kernel index, dst increasing in each group.

    Why no general search: input p feeds output u through offset o iff p = 2u + o, so
    offset o only takes inputs whose (row, col) parities equal o's, and their outputs
    (p - o) / 2 increase with p. Offsets in {0, 1}^2 give each input its own output
    p // 2 (``home``, the downsampling's inverse); only the other offsets need a search,
    of sorted queries over a quarter of the points each.
    """
    rows, cols = points.rows.numpy(), points.cols.numpy()
    out_keys = out_points.keys.numpy()
    h2, w2 = out_points.grid
    parity = ((rows & 1) * 2 + (cols & 1)).astype(np.int8)
    by_parity = np.argsort(parity, kind="stable")  # each class stays in key order
    classes = np.split(by_parity, np.cumsum(np.bincount(parity, minlength=4))[:3])
    homes = [home[members] for members in classes]
    home_keys = [out_keys[h] for h in homes]
    dst, src = [], []
    row_starts: dict[tuple[int, int], np.ndarray] = {}
    for di, dj in kernel_offsets(k):
        parity_class = (di & 1) * 2 + (dj & 1)
        members = classes[parity_class]
        # (p - o) / 2 = p // 2 - o // 2 for p = o (mod 2): a shift of the home output.
        shift_r, shift_c = di >> 1, dj >> 1
        if shift_r == shift_c == 0:
            dst.append(homes[parity_class])
            src.append(members)
            continue
        query = home_keys[parity_class] - (shift_r * w2 + shift_c)
        # A shifted point off the grid would alias another row's key: drop it first.
        inside = np.ones(len(members), dtype=bool)
        if shift_r:
            half = rows[members] >> 1
            inside &= (half >= shift_r) & (half < h2 + shift_r)
        if shift_c:
            half = cols[members] >> 1
            inside &= (half >= shift_c) & (half < w2 + shift_c)
        kept = np.flatnonzero(inside)
        if shift_r == 0:  # same output row: the target lies a few keys from the home
            start = homes[parity_class][kept]
        else:  # one search per shifted row, shared by that row's column shifts
            if (parity_class, shift_r) not in row_starts:
                row_keys = home_keys[parity_class] - shift_r * w2
                row_starts[parity_class, shift_r] = np.searchsorted(out_keys, row_keys)
            start = row_starts[parity_class, shift_r][kept]
        hit, pos = _find_near(out_keys, start, query[kept], -shift_c)
        dst.append(pos)
        src.append(members[kept[hit]])
    counts = [int(d.size) for d in dst]
    return np.concatenate(dst), np.concatenate(src), counts


def _find_near(
    keys: np.ndarray, start: np.ndarray, query: np.ndarray, ahead: int
) -> tuple[np.ndarray, np.ndarray]:
    """(which queries are keys, their positions), for queries known to sit between
    ``start`` and ``start + ahead`` (either sign) in the sorted, distinct ``keys``.

    Why: the column-shifted neighbours of a point are within a few keys of a position
    already known, so a couple of compares replace a binary search.
    """
    found = np.full(len(query), -1, dtype=np.int64)
    for step in range(min(0, ahead), max(0, ahead) + 1):
        if len(keys):
            near = np.clip(start + step, 0, len(keys) - 1)
            match = keys[near] == query
            found[match] = near[match]
    hit = np.flatnonzero(found >= 0)
    return hit, found[hit]


@dataclass(frozen=True)
class KernelMap:
    """Which input point feeds which output point through each kernel offset.

    It depends only on the points, so it is computed once per matrix and layer shape and
    reused across training steps (the weights change, the map does not). The pairs are
    stored flat, grouped by kernel index with dst increasing inside each group.
    """

    out_points: PointSet
    dst: torch.Tensor  # int64 [m]
    src: torch.Tensor  # int64 [m]
    counts: tuple[int, ...]  # pairs per kernel index (k*k of them)

    @staticmethod
    def build(points: PointSet, k: int, stride: int) -> KernelMap:
        if stride not in (1, 2):
            raise ValueError(f"stride must be 1 or 2, got {stride}")
        kernel_offsets(k)  # validates k
        if stride == 1:
            out_points = points
            dst, src, counts = _group(*_stride1_pairs(points, k), k)
        else:
            out_points, home = points.downsample()
            dst, src, counts = _stride2_pairs(points, out_points, home.numpy(), k)
        return KernelMap(out_points, torch.from_numpy(dst), torch.from_numpy(src), tuple(counts))

    @property
    def k(self) -> int:
        return round(len(self.counts) ** 0.5)

    @property
    def size(self) -> int:
        """Number of (dst, src) pairs: what the map costs to keep."""
        return int(self.dst.numel())

    @cached_property
    def pairs(self) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        """Per kernel index: (dst, src), dst increasing."""
        return tuple(zip(self.dst.split(self.counts), self.src.split(self.counts), strict=True))

    @cached_property
    def by_output(self) -> tuple[np.ndarray, np.ndarray]:
        """(indptr over the outputs, pair positions in output order): the CSR of dst."""
        dst = self.dst.numpy()
        indptr = np.zeros(len(self.out_points) + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=len(self.out_points)), out=indptr[1:])
        # Stable, so each output's pairs stay in kernel-index order.
        return indptr, np.argsort(dst, kind="stable")

    @cached_property
    def blocks(self) -> Blocks:
        """The pairs cut into blocks of consecutive outputs (for inference)."""
        return Blocks.build(self)

    @cached_property
    def kernel_index(self) -> np.ndarray:
        """The kernel index of every pair (flat order; int16: k*k <= 81 keeps cached plans small)."""
        return np.repeat(np.arange(len(self.counts), dtype=np.int16), self.counts)


# Pairs per inference block: small enough that a block's gathered rows and products stay in
# cache, large enough that per-op overheads (and thread wake-ups) stay small at 1M nnz.
PAIRS_PER_BLOCK = 65536


@dataclass(frozen=True)
class Blocks:
    """A kernel map's pairs ordered by (block of ``rows`` outputs, kernel index, dst).

    Block b holds pairs ``starts[b]:starts[b+1]``, all with outputs in
    ``[b*rows, (b+1)*rows)``.
    """

    rows: int
    src: torch.Tensor
    dst: np.ndarray
    counts: list[list[int]]  # per block, pairs per kernel index
    starts: list[int]

    @staticmethod
    def build(kernel_map: KernelMap) -> Blocks:
        n_out, k2 = len(kernel_map.out_points), len(kernel_map.counts)
        rows = max(256, PAIRS_PER_BLOCK * n_out // max(kernel_map.size, 1))
        n_blocks = -(-n_out // rows)
        dst = kernel_map.dst.numpy()
        # No sort: each kernel index's pairs have increasing dst, so a block's share of them
        # is a slice found by bisection; the order is those slices, block-major.
        firsts = np.arange(n_blocks + 1, dtype=np.int64) * rows
        group_starts = np.concatenate([[0], np.cumsum(kernel_map.counts)])
        cuts = np.stack(
            [
                lo + np.searchsorted(dst[lo:hi], firsts)
                for lo, hi in itertools.pairwise(group_starts.tolist())
            ],
            axis=1,
        )  # [n_blocks + 1, k2]: where each block starts inside each kernel index's pairs
        begin, size = cuts[:-1].ravel(), (cuts[1:] - cuts[:-1]).ravel()
        ends = np.cumsum(size)
        order = _concat_ranges(begin, size, ends)
        starts = np.concatenate([[0], ends[k2 - 1 :: k2]]) if n_blocks else np.zeros(1)
        src = kernel_map.src[torch.from_numpy(order)]
        counts = size.reshape(n_blocks, k2).tolist()
        return Blocks(rows, src, dst[order], counts, [int(v) for v in starts])


def _concat_ranges(begin: np.ndarray, size: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``concatenate([arange(b, b + n) for b, n in zip(begin, size)])`` without a loop."""
    # Why a cumulative sum of steps: ones inside a range, a jump at each range's start;
    # cheaper than np.repeat over a million entries.
    keep = size > 0
    begin, size, first = begin[keep], size[keep], (ends - size)[keep]
    if not begin.size:
        return np.zeros(0, dtype=np.int64)
    steps = np.ones(int(ends[-1]), dtype=np.int64)
    steps[first] = begin - np.concatenate([[-1], (begin + size - 1)[:-1]])
    return np.cumsum(steps) - 1


def plan_maps(points: PointSet, layers: list[tuple[int, int]]) -> list[KernelMap]:
    """Kernel maps of a stack of (kernel, stride) layers over ``points``."""
    maps = []
    for k, stride in layers:
        maps.append(KernelMap.build(points, k, stride))
        points = maps[-1].out_points
    return maps


def pipelined_maps(points: PointSet, layers: list[tuple[int, int]]) -> Iterator[KernelMap]:
    """``plan_maps``'s maps, in order, each built in a thread while the caller runs the layers
    before it.

    Why: at inference the neighbour searches (numpy) and the convolutions (torch, scipy) each
    take about half of a 1M-nnz embedding, and both release the GIL for their array work,
    so on 2 cores the map of layer i+1 is built while layer i is convolved.
    """
    ready: queue.Queue[KernelMap | BaseException] = queue.Queue()
    stop = threading.Event()

    def build() -> None:
        current = points
        try:
            for k, stride in layers:
                if stop.is_set():
                    return
                kmap = KernelMap.build(current, k, stride)
                ready.put(kmap)
                current = kmap.out_points
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            ready.put(exc)

    worker = threading.Thread(target=build, name="cognate-kernel-maps", daemon=True)
    worker.start()
    try:
        for _ in layers:
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()
