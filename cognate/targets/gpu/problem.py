"""One (matrix, op, width) problem: seeded dense inputs, the scipy reference, the check.

Shared by the runner (which must never time a kernel whose result is wrong) and the tests.
The reference is computed in float64; a float32 result is accepted when every entry is
within ``max(RTOL, 2 n u)`` times the sum of magnitudes of its n terms (|A| @ |B| for
SpMM; u = 2^-24), which bounds the rounding error of a float32 sum in any order (Higham's
gamma_n), so the nonzero split's reassociation always passes and a wrong or missing term
does not (unless it is tiny against the row's magnitude).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.matrix import Matrix

RTOL = 1e-4
UNIT_ROUNDOFF = 2.0**-24
SEED = 20240531


@dataclass
class Problem:
    """Host-side inputs and reference of one op on one matrix at one dense width."""

    op: str
    csr: sp.csr_matrix
    width: int
    inputs: dict[str, np.ndarray]  # spmm: b; sddmm: x, y (float32, row-major)
    reference: np.ndarray  # spmm: M x width; sddmm: nnz values in CSR order (float64)
    bound: np.ndarray  # per-entry tolerance

    def check(self, result: np.ndarray) -> str | None:
        """None if ``result`` matches the reference, else a one-line description."""
        if result.shape != self.reference.shape:
            return f"wrong result shape {result.shape}, expected {self.reference.shape}"
        error = np.abs(result.astype(np.float64) - self.reference)
        bad = ~(error <= self.bound)  # NaN counts as bad
        if not bad.any():
            return None
        worst = np.where(bad, np.nan_to_num(error, nan=np.inf), -1.0)
        at = np.unravel_index(int(np.argmax(worst)), bad.shape)
        return (
            f"wrong result: {int(bad.sum())} of {bad.size} entries off the scipy reference, "
            f"worst at {tuple(int(i) for i in at)}: got {result[at]!r}, "
            f"expected {self.reference[at]:.6g}"
        )


def make_problem(matrix: Matrix, op: str, width: int) -> Problem:
    """Seeded inputs (uniform in [-1, 1)) and the float64 scipy reference."""
    if width < 1:
        raise CognateError(f"dense width must be positive, got {width}")
    csr = matrix.csr
    m, k = matrix.shape
    rng = np.random.default_rng(SEED)
    a64 = csr.astype(np.float64)
    abs_a = abs(a64)
    if op == "spmm":
        b = rng.uniform(-1.0, 1.0, (k, width)).astype(np.float32)
        b64 = b.astype(np.float64)
        ref = np.asarray(a64 @ b64)
        terms = np.diff(csr.indptr)[:, None]
        bound = _relative_bound(terms) * np.asarray(abs_a @ np.abs(b64))
        return Problem(op, csr, width, {"b": b}, ref, bound)
    if op == "sddmm":
        x = rng.uniform(-1.0, 1.0, (m, width)).astype(np.float32)
        y = rng.uniform(-1.0, 1.0, (k, width)).astype(np.float32)
        rows = np.repeat(np.arange(m), np.diff(csr.indptr))
        x64, y64 = x.astype(np.float64)[rows], y.astype(np.float64)[csr.indices]
        ref = a64.data * np.einsum("ij,ij->i", x64, y64)
        magnitude = np.abs(a64.data) * np.einsum("ij,ij->i", np.abs(x64), np.abs(y64))
        bound = _relative_bound(width + 1) * magnitude
        return Problem(op, csr, width, {"x": x, "y": y}, ref, bound)
    raise CognateError(f"unknown op {op!r}; expected spmm or sddmm")


def _relative_bound(terms: np.ndarray | int) -> np.ndarray:
    return np.maximum(RTOL, 2.0 * UNIT_ROUNDOFF * np.asarray(terms, dtype=np.float64))
