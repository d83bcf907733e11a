"""The scipy reference every cpu kernel's result is checked against before a timing counts,
and the dense operands measurements use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

# float32 unit roundoff: a sum of n products is exact to about n * u * sum(|terms|).
UNIT_ROUNDOFF = 2.0**-24
OPERAND_SEED = 20230325  # dense inputs are the same for every config of a matrix


def dense_operands(
    op: str, shape: tuple[int, int], width: int, seed: int
) -> tuple[np.ndarray, ...]:
    """Random dense inputs in [-1, 1): SpMM B (K x width); SDDMM X (M x width), Y (N x width)."""
    rng = np.random.default_rng(seed)
    rows, cols = shape
    if op == "spmm":
        return (rng.uniform(-1.0, 1.0, (cols, width)).astype(np.float32),)
    x = rng.uniform(-1.0, 1.0, (rows, width)).astype(np.float32)
    y = rng.uniform(-1.0, 1.0, (cols, width)).astype(np.float32)
    return x, y


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 ``a`` rounded to bfloat16 (to nearest even, as the kernels' bf16 knob and
    torch round), back as float32: what a kernel with B in bf16 multiplies."""
    import ml_dtypes  # here: only bf16 checks need it

    return np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _tolerance(terms: np.ndarray | float, bound: np.ndarray) -> np.ndarray:
    """Error bound of a float32 sum of ``terms`` products whose absolute sum is ``bound``.

    Where ``bound`` exceeds float32's range (e.g. temp.mtx's values near 3.4e38), a float32
    kernel may legitimately overflow to inf or NaN in any summation order: such entries
    cannot be checked in float32 and get an infinite tolerance (``mismatch`` skips them).
    """
    tol = 4.0 * (terms + 1.0) * UNIT_ROUNDOFF * bound
    tol[bound > np.finfo(np.float32).max / 2] = np.inf
    return tol


def reference(
    csr: sp.csr_matrix, op: str, operands: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Exact-ish float64 result and a per-entry float32 error bound (same layout as result())."""
    a64 = csr.astype(np.float64)
    if op == "spmm":
        b64 = operands[0].astype(np.float64)
        terms = np.diff(csr.indptr)[:, None].astype(np.float64)
        return np.asarray(a64 @ b64), _tolerance(terms, np.asarray(abs(a64) @ abs(b64)))
    x, y = (a.astype(np.float64) for a in operands)
    rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
    ref = np.empty(csr.nnz)
    bound = np.empty(csr.nnz)
    step = max(1, 2**22 // max(1, x.shape[1]))  # bounded temporaries for big matrices
    for lo in range(0, csr.nnz, step):
        hi = min(csr.nnz, lo + step)
        prod = x[rows[lo:hi]] * y[csr.indices[lo:hi]]
        ref[lo:hi] = a64.data[lo:hi] * prod.sum(axis=1)
        bound[lo:hi] = np.abs(a64.data[lo:hi]) * np.abs(prod).sum(axis=1)
    return ref, _tolerance(float(x.shape[1]), bound)


def mismatch(result: np.ndarray, ref: np.ndarray, tol: np.ndarray) -> str | None:
    """None when ``result`` is within ``tol`` of ``ref`` everywhere, else a one-line reason."""
    error = np.abs(result.astype(np.float64) - ref)
    # NaN counts as bad, except where float32 cannot represent the sums (infinite tol).
    bad = ~(error <= tol + np.finfo(np.float32).tiny) & np.isfinite(tol)
    if not bad.any():
        return None
    first = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return (
        f"result differs from scipy at {int(bad.sum())} of {bad.size} entries"
        f" (first at {tuple(int(i) for i in first)}: {float(result[first])!r}"
        f" vs {float(ref[first])!r})"
    )


# --- the check on a sample of rows, where the whole-matrix reference is over the budget -------

SAMPLE_SEED = 20240607
HEAVIEST_ROWS = 64  # the longest rows (most terms: where a wrong accumulation shows most)
EDGE_ROWS = 16  # the first and the last rows (off-by-one tiles and tails)
RANDOM_ROWS = 4096
MAX_PARTS = 64  # thread counts whose split rows are sampled: 2 .. MAX_PARTS


def full_reference_bytes(csr: sp.csr_matrix, op: str, width: int) -> int:
    """Peak bytes of ``reference`` on the whole matrix: A and the dense operands in float64,
    the result, its absolute-value bound and the tolerance (SpMM: rows x width each)."""
    rows, cols = csr.shape
    a64 = 2 * 16 * int(csr.nnz)  # A and |A| in float64 with their indices
    if op == "spmm":
        return a64 + 2 * 8 * cols * width + 4 * 8 * rows * width
    return a64 + 8 * (rows + cols) * width + 4 * 8 * int(csr.nnz)


def split_rows(csr: sp.csr_matrix, max_parts: int = MAX_PARTS) -> np.ndarray:
    """The rows where a schedule splits work between threads, for every thread count 2 ..
    ``max_parts``: the merge-path (``nzsplit``) carry rows, where a thread's equal share of
    rows + nonzeros ends inside a row (kernels/cpu/spmm_csr.c, ``run_nzsplit``), and the
    boundaries of equal row blocks; each with its neighbours (an off-by-one shows there)."""
    rows = csr.shape[0]
    if rows == 0:
        return np.zeros(0, dtype=np.int64)
    ends = csr.indptr[1:].astype(np.int64) + np.arange(1, rows + 1)  # diagonal ending row i
    total = rows + int(csr.indptr[-1])
    found = []
    for parts in range(2, max_parts + 1):
        cuts = np.arange(1, parts, dtype=np.int64)
        found.append(np.searchsorted(ends, cuts * total // parts, side="right"))  # carry rows
        found.append(cuts * rows // parts)  # row-block boundaries
    near = np.concatenate(found)[:, None] + np.array([-1, 0, 1])
    return np.unique(np.clip(near, 0, rows - 1))


def sample_rows(csr: sp.csr_matrix, seed: int = SAMPLE_SEED) -> np.ndarray:
    """A fixed sample of rows (sorted, distinct): the heaviest, the first and last, every
    schedule's split rows (``split_rows``) and random ones from a seeded generator."""
    rows = csr.shape[0]
    lengths = np.diff(csr.indptr)
    heavy = min(HEAVIEST_ROWS, rows)
    heaviest = np.argpartition(lengths, rows - heavy)[rows - heavy :] if heavy else []
    edges = np.r_[np.arange(min(EDGE_ROWS, rows)), np.arange(max(0, rows - EDGE_ROWS), rows)]
    drawn = np.random.default_rng(seed).integers(0, rows, size=min(RANDOM_ROWS, rows))
    parts = np.concatenate([heaviest, edges, split_rows(csr), drawn]).astype(np.int64)
    return np.unique(parts)


_CHUNK = 1 << 22  # entries per step of the row sums: bounded temporaries


def _row_sums(csr: sp.csr_matrix, v: np.ndarray, absolute: bool = False) -> np.ndarray:
    """A @ v (or |A| @ v) in float64 (``v`` float64), in bounded steps over the entries."""
    out = np.zeros(csr.shape[0])
    for lo in range(0, csr.nnz, _CHUNK):
        hi = min(csr.nnz, lo + _CHUNK)
        row_of = np.searchsorted(csr.indptr, np.arange(lo, hi), side="right") - 1
        first = int(row_of[0])
        values = csr.data[lo:hi].astype(np.float64)
        prod = (np.abs(values) if absolute else values) * v[csr.indices[lo:hi]]
        out[first : int(row_of[-1]) + 1] += np.bincount(row_of - first, weights=prod)
    return out


def _dense_row_sums(b: np.ndarray, absolute: bool = False) -> np.ndarray:
    """Each row's sum of ``b`` (or of its magnitudes) in float64, in bounded steps."""
    out = np.empty(b.shape[0])
    step = max(1, _CHUNK // max(1, b.shape[1]))
    for lo in range(0, b.shape[0], step):
        part = b[lo : lo + step]
        out[lo : lo + step] = (np.abs(part) if absolute else part).sum(axis=1, dtype=np.float64)
    return out


class Checksum:
    """Every row of an SpMM result checked at once: ``C @ 1`` against ``A @ (B @ 1)`` in
    float64, each row within the sum of its entries' tolerances (the ``reference`` rule), so
    a row outside the sample that is wrong still fails the check."""

    def __init__(self, csr: sp.csr_matrix, b: np.ndarray) -> None:
        terms = np.diff(csr.indptr).astype(np.float64) + 1.0
        self.ref = _row_sums(csr, _dense_row_sums(b))
        bound = _row_sums(csr, _dense_row_sums(b, absolute=True), absolute=True)
        width = b.shape[1]
        # the float32 entries' bounds summed, plus the rounding of the row's float64 sum
        self.tol = 4.0 * (terms + width) * UNIT_ROUNDOFF * bound
        self.tol[bound > np.finfo(np.float32).max / 2] = np.inf

    def check(self, result: np.ndarray, slack: float = 1.0) -> str | None:
        """None when every row sum of ``result`` is within tolerance, else a one-line reason."""
        sums = _dense_row_sums(result)
        error = np.abs(sums - self.ref)
        bad = ~(error <= slack * self.tol + np.finfo(np.float32).tiny) & np.isfinite(self.tol)
        if not bad.any():
            return None
        first = int(np.argmax(bad))
        return (
            f"row sums C @ 1 differ from A @ (B @ 1) at {int(bad.sum())} of {bad.size} rows "
            f"(first bad row {first}: {sums[first]!r} vs {self.ref[first]!r})"
        )


class Reference:
    """The float64 reference a result is checked against: of the whole matrix, or of a fixed
    sample of rows (``sample_rows``) when the whole one is over the memory budget; the same
    per-entry tolerance rule either way."""

    def __init__(
        self,
        csr: sp.csr_matrix,
        op: str,
        operands: tuple[np.ndarray, ...],
        rows: np.ndarray | None = None,
    ) -> None:
        self.op, self.rows, self.total_rows = op, rows, csr.shape[0]
        self._inputs = (csr, operands)  # for ``rounded`` (references, not copies)
        self._rounded: Reference | None = None
        self.entries: np.ndarray | None = None  # SDDMM: A's entries of the sampled rows
        self.checksum: Checksum | None = None  # SpMM, sampled: every row's sum
        self.row_of = rows  # the row of each checked result row (SDDMM: of each entry)
        if rows is None:
            self.ref, self.tol = reference(csr, op, operands)
            return
        # The sampled rows alone, their columns renumbered to the ones they use: the
        # reference then reads (and converts to float64) only those rows of B / Y.
        part = csr[rows]
        used, local = np.unique(part.indices, return_inverse=True)
        part = sp.csr_matrix(
            (part.data, local.astype(np.int32), part.indptr), (rows.size, used.size)
        )
        if op == "sddmm":
            starts, ends = csr.indptr[rows], csr.indptr[rows + 1]
            self.entries = np.concatenate(
                [np.arange(s, e, dtype=np.int64) for s, e in zip(starts, ends, strict=True)]
            )
            self.row_of = np.repeat(rows, ends - starts)
            operands = (operands[0][rows], operands[1][used])
        else:
            self.checksum = Checksum(csr, operands[0])
            operands = (operands[0][used],)
        self.ref, self.tol = reference(part, op, operands)

    @property
    def sampled(self) -> bool:
        return self.rows is not None

    def rounded(self) -> Reference:
        """The reference of the same rows on B rounded to bfloat16: what a ``bf16`` kernel is
        checked against (built once)."""
        if self._rounded is None:
            csr, operands = self._inputs
            self._rounded = Reference(csr, self.op, (round_bf16(operands[0]),), self.rows)
        return self._rounded

    def for_knobs(self, knobs: Mapping[str, Any]) -> Reference:
        """This reference, or ``rounded()`` for a config with B in bf16."""
        return self.rounded() if knobs.get("bf16") else self

    def describe(self) -> str:
        if self.rows is None:
            return "every row"
        what = f"{self.rows.size} of {self.total_rows} rows (heaviest, first/last, split, random)"
        return what + (", every row's sum" if self.checksum is not None else "")

    def check(self, result: np.ndarray, slack: float = 1.0) -> str | None:
        """None when ``result`` (the whole output) is within the tolerance times ``slack`` on
        the checked rows, else a one-line reason naming the first bad row."""
        if self.rows is None:
            return mismatch(result, self.ref, slack * self.tol)
        part = result[self.entries] if self.op == "sddmm" else result[self.rows]
        problem = mismatch(part, self.ref, slack * self.tol)
        if problem is None:
            summed = self.checksum.check(result, slack) if self.checksum else None
            return None if summed is None else f"{summed} (checked {self.describe()})"
        error = np.abs(part.astype(np.float64) - self.ref)
        bad = ~(error <= slack * self.tol + np.finfo(np.float32).tiny) & np.isfinite(self.tol)
        first = int(np.argmax(bad.reshape(bad.shape[0], -1).any(axis=1)))
        return f"{problem} (checked {self.describe()}; first bad row {int(self.row_of[first])})"


def reference_for(
    csr: sp.csr_matrix,
    op: str,
    operands: tuple[np.ndarray, ...],
    held: int = 0,
    budget: int | None = None,
) -> Reference:
    """The whole-matrix reference when it fits the memory budget beside the ``held`` bytes
    of the rest of the measurement, else the reference of a fixed sample of rows."""
    from cognate.budget import memory_budget

    width = operands[0].shape[1]
    allowed = (memory_budget() if budget is None else budget) - held
    if full_reference_bytes(csr, op, width) <= allowed:
        return Reference(csr, op, operands)
    return Reference(csr, op, operands, sample_rows(csr))
