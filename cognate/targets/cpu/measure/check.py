"""The scipy reference every cpu kernel's result is checked against before a timing counts,
and the dense operands measurements use."""

from __future__ import annotations

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
