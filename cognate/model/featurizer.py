"""The matrix featurizer: a sparse-convolution embedding of the nonzero pattern.

Layer 0: kernel ``first_kernel``, stride 1; every later layer: kernel ``kernel``, stride 2;
ReLU after each; global average pooling after each, concatenated with log2 (rows, cols,
nnz), then an MLP to ``embedding_dim`` (WACO's design, docs/architecture.md, Cost model). The input
feature of every nonzero is 1: the pattern, not the values, decides a schedule's speed.
Both backends share the same parameters and agree to float rounding.

A matrix whose full featurization would not fit the memory budget is featurized on a
*row-band sketch* instead (``sketch_bands``): at most ``SKETCH_POINTS`` nonzeros taken as
``SKETCH_BANDS`` contiguous bands of whole rows, one centred in each equal stratum of rows,
at their true coordinates; log2 (rows, cols, nnz) stay exact. Global average pooling is a
mean over points, so evenly spread bands of whole rows estimate it while every neighbourhood
inside a band is exact; the cost is bounded by the sketch, not by nnz.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from torch import nn

from cognate.budget import Cost, check_budget, memory_budget
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.matrix_stats import N_STATISTICS, scaled_statistics
from cognate.model import sparseconv
from cognate.model.preset import FeaturizerSpec
from cognate.model.sparseconv import PointSet

# log2 of rows/cols/nnz is divided by this so the scalars are O(1) like the pooled features.
LOG_SCALE = 16.0
# The sketch: at most this many nonzeros (its featurizing cost, ~2 KB each, stays under
# ~3 GiB), in this many row bands whose starts are multiples of SKETCH_ALIGN rows (so the
# stride-2 layers' cells inside a band are whole cells, as in the full matrix).
SKETCH_POINTS = 1_500_000
SKETCH_BANDS = 64
SKETCH_ALIGN = 64
# full: always the whole pattern; sketch: always the row-band sketch; auto: the whole
# pattern when it fits the memory budget, else the sketch.
FEATURIZER_ENV = "COGNATE_FEATURIZER"
MODES = ("auto", "full", "sketch")


def matrix_points(matrix: Matrix) -> PointSet:
    """The nonzero coordinates of ``matrix`` (already sorted and unique in canonical CSR)."""
    csr = matrix.csr
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
    cols = csr.indices.astype(np.int64)
    grid = (int(csr.shape[0]), int(csr.shape[1]))
    rows_t, cols_t = torch.from_numpy(rows), torch.from_numpy(cols)
    return PointSet(rows_t, cols_t, grid, rows_t * grid[1] + cols_t)


def sketch_bands(
    indptr: np.ndarray, max_points: int = SKETCH_POINTS, bands: int = SKETCH_BANDS
) -> list[tuple[int, int]]:
    """Row ranges ``[start, stop)`` of the sketch: one band centred in each of ``bands``
    equal strata of rows, all of the same height, as tall as keeps their nonzeros within
    ``max_points`` (the whole matrix when it has no more). Reads only ``indptr``."""
    rows, nnz = len(indptr) - 1, int(indptr[-1])
    if nnz <= max_points:
        return [(0, rows)]
    bands = max(1, min(bands, rows))
    edges = [rows * i // bands for i in range(bands + 1)]
    height = max(1, rows * max_points // (nnz * bands))
    while True:
        spans = []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            h = min(height, hi - lo)
            start = lo + (hi - lo - h) // 2
            start = max(lo, min(start - start % SKETCH_ALIGN, hi - h))
            spans.append((start, start + h))
        total = sum(int(indptr[b]) - int(indptr[a]) for a, b in spans)
        if total <= max_points or height == 1:
            return spans
        height = max(1, min(height - 1, height * max_points // total))


def sketch_points(
    matrix: Matrix, max_points: int = SKETCH_POINTS, bands: int = SKETCH_BANDS
) -> PointSet:
    """The nonzeros of ``matrix``'s row-band sketch at their true coordinates (a band whose
    single rows still hold too many keeps each band's first ``max_points / bands``)."""
    csr = matrix.csr
    spans = sketch_bands(csr.indptr, max_points, bands)
    share = max(1, max_points // len(spans))
    rows_parts, cols_parts = [], []
    for a, b in spans:
        lo, hi = int(csr.indptr[a]), int(csr.indptr[b])
        lengths = np.diff(csr.indptr[a : b + 1]).astype(np.int64)
        band_rows = np.repeat(np.arange(a, b, dtype=np.int64), lengths)
        band_cols = csr.indices[lo:hi].astype(np.int64)
        if hi - lo > max_points:  # rows longer than the budget: a prefix of the band
            band_rows, band_cols = band_rows[:share], band_cols[:share]
        rows_parts.append(band_rows)
        cols_parts.append(band_cols)
    rows = torch.from_numpy(np.concatenate(rows_parts))
    cols = torch.from_numpy(np.concatenate(cols_parts))
    grid = (int(csr.shape[0]), int(csr.shape[1]))
    return PointSet(rows, cols, grid, rows * grid[1] + cols)


def featurizer_mode() -> str:
    """``$COGNATE_FEATURIZER`` (auto, full or sketch; default auto)."""
    mode = os.environ.get(FEATURIZER_ENV, "auto").strip() or "auto"
    if mode not in MODES:
        raise CognateError(f"{FEATURIZER_ENV}={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def matrix_scalars(shape: tuple[int, int], nnz: int) -> torch.Tensor:
    """log2 (rows, cols, nnz), scaled."""
    values = [math.log2(max(v, 1)) / LOG_SCALE for v in (shape[0], shape[1], nnz)]
    return torch.tensor(values, dtype=torch.float32)


def resolve_backend(backend: str) -> str:
    """``auto`` -> $COGNATE_FEATURIZER_BACKEND, else torch; an unusable request is an error.

    Both backends give the same output. torch is the default because it is deterministic
    and training reuses its cached kernel maps (their speeds: docs/benchmarks.md, tune
    latency).
    """
    if backend == "auto":
        backend = os.environ.get("COGNATE_FEATURIZER_BACKEND", "torch")
    if backend not in sparseconv.BACKENDS:
        raise CognateError(
            f"unknown featurizer backend {backend!r}; expected auto, "
            + ", ".join(sparseconv.BACKENDS)
        )
    if backend == "minkowski" and sparseconv.minkowski() is None:
        raise CognateError(f"MinkowskiEngine is not importable: {sparseconv.minkowski_error()}")
    return backend


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Featurizer(nn.Module):
    """Matrix -> embedding. Weights: ``conv{l}.weight`` [k*k, in, out], ``conv{l}.bias``."""

    def __init__(self, spec: FeaturizerSpec) -> None:
        super().__init__()
        self.spec = spec
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        c_in = 1
        for layer, c_out in enumerate(spec.channels):
            k = spec.first_kernel if layer == 0 else spec.kernel
            # He initialisation over the kernel's fan-in, as for a dense conv + ReLU.
            std = math.sqrt(2.0 / (k * k * c_in))
            self.weights.append(nn.Parameter(torch.randn(k * k, c_in, c_out) * std))
            self.biases.append(nn.Parameter(torch.zeros(c_out)))
            c_in = c_out
        scalars = 3 + (N_STATISTICS if spec.statistics else 0)
        self.mlp = mlp([sum(spec.channels) + scalars, *spec.embed_hidden, spec.embedding_dim])

    @property
    def dim(self) -> int:
        return self.spec.embedding_dim

    def scalars(self, matrix: Matrix) -> torch.Tensor:
        """The non-convolutional inputs: log2 (rows, cols, nnz), and with ``statistics`` the
        scaled structure statistics."""
        base = matrix_scalars(matrix.shape, matrix.nnz)
        if not self.spec.statistics:
            return base
        return torch.cat([base, torch.from_numpy(scaled_statistics(matrix.csr))])

    def layers(self) -> list[tuple[int, int]]:
        """(kernel, stride) of every layer."""
        spec = self.spec
        return [(spec.first_kernel, 1)] + [(spec.kernel, 2)] * (len(spec.channels) - 1)

    def plan(self, points: PointSet) -> list[sparseconv.KernelMap]:
        """The torch backend's kernel maps for ``points`` (reusable while points are fixed)."""
        return sparseconv.plan_maps(points, self.layers())

    def pooled(
        self,
        points: PointSet,
        backend: str = "auto",
        plan: list[sparseconv.KernelMap] | None = None,
    ) -> torch.Tensor:
        """The concatenated global-average-pooled features of every layer.

        ``plan`` (from ``plan(points)``) selects the torch backend and skips the neighbour
        search.
        """
        backend = "torch" if plan is not None else resolve_backend(backend)
        feats = torch.ones((len(points), 1), dtype=torch.float32)
        pools = []
        if backend == "torch":
            if not torch.is_grad_enabled():
                # Inference: rows that repeat are computed once, then blocked convolutions
                # (the same sums as below, tested equal in tests/test_featurizer_fast.py);
                # without a plan, each layer's map is built while the layer before runs.
                weights, biases = list(self.weights), list(self.biases)
                maps = plan or sparseconv.pipelined_maps(points, self.layers())
                return torch.cat(sparseconv.pooled_inference(len(points), maps, weights, biases))
            plan = plan or self.plan(points)
            for (w, b), kmap, (_, stride) in zip(
                zip(self.weights, self.biases, strict=True), plan, self.layers(), strict=True
            ):
                points, feats = sparseconv.conv_torch(points, feats, w, b, stride, kmap, relu=True)
                pools.append(feats.mean(0))
        else:
            tensor = sparseconv.minkowski_input(points, feats)
            for (w, b), (_, stride) in zip(
                zip(self.weights, self.biases, strict=True), self.layers(), strict=True
            ):
                tensor = sparseconv.conv_minkowski(tensor, w, b, stride)
                tensor = sparseconv.minkowski_relu(tensor)
                pools.append(tensor.F.mean(0))
        return torch.cat(pools)

    def forward(
        self,
        points: PointSet,
        scalars: torch.Tensor,
        backend: str = "auto",
        plan: list[sparseconv.KernelMap] | None = None,
    ) -> torch.Tensor:
        return self.mlp(torch.cat([self.pooled(points, backend, plan), scalars]))

    def memory_cost(self) -> Cost:
        """Peak bytes of ``embed`` per row, column and nonzero, measured (peak RSS, torch
        backend; docs/reliability.md, matrix inputs) on dense blocks, where every nonzero
        has all k x k neighbours (~58 x k^2 bytes each for the kernel maps), and on
        scattered nonzeros that never merge (~8.5 bytes per channel of the widest layer);
        priced above both."""
        kernel = max(self.spec.first_kernel, self.spec.kernel)
        per_entry = 68 * kernel**2 + 8 * max(self.spec.channels) + 128
        return Cost(per_row=32, per_col=24, per_entry=per_entry)

    def statistics_cost(self) -> Cost:
        """What ``scalars`` costs on the whole matrix: with ``statistics``, a few int64 /
        float64 arrays per entry (cognate.matrix_stats); else nothing."""
        return Cost(per_row=24, per_col=8, per_entry=48) if self.spec.statistics else Cost()

    def uses_sketch(self, matrix: Matrix) -> bool:
        """Whether ``embed`` featurizes ``matrix``'s sketch (``featurizer_mode``)."""
        mode = featurizer_mode()
        if mode != "auto":
            return mode == "sketch" and matrix.nnz > SKETCH_POINTS
        rows, cols = matrix.shape
        return self.memory_cost().bytes(rows, cols, matrix.nnz) > memory_budget()

    def embed(self, matrix: Matrix, backend: str = "auto") -> torch.Tensor:
        """The embedding of ``matrix`` ([embedding_dim]); deterministic for fixed weights.

        The whole pattern when it fits the memory budget (``COGNATE_MAX_MEMORY``), else its
        row-band sketch (``uses_sketch``); refused (``InputError``) before anything is
        allocated when even that is over the budget."""
        if matrix.nnz == 0:
            raise CognateError(f"{matrix.name}: cannot embed a matrix with no nonzeros")
        rows, cols = matrix.shape
        where = matrix.source or matrix.name
        sketch = self.uses_sketch(matrix)
        if sketch:
            # the sketch's nonzeros at the full path's measured price per nonzero
            entries = min(matrix.nnz, SKETCH_POINTS)
            cost = self.memory_cost()
            check_budget(where, "featurizing", rows, cols, entries, cost, "sketch nnz")
            check_budget(
                where, "structure statistics of", rows, cols, matrix.nnz, self.statistics_cost()
            )
        else:
            check_budget(where, "featurizing", rows, cols, matrix.nnz, self.memory_cost())
        # Inference only (training calls forward with cached plans): recording the autograd
        # graph of a 1M-nnz matrix costs more time than the convolutions themselves.
        with torch.no_grad():
            points = (
                sketch_points(matrix, SKETCH_POINTS, SKETCH_BANDS)
                if sketch
                else matrix_points(matrix)
            )
            return self(points, self.scalars(matrix), backend)
