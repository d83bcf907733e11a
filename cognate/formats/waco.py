"""WACO's binary ``.csr``: little-endian int32 nrow, ncol, nnz, rowptr[nrow+1], colidx[nnz]
(a pattern: every value 1.0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from cognate.errors import InputError
from cognate.formats.checks import check_dims
from cognate.matrix import canonicalize


def read_waco_csr(path: Path) -> tuple[sp.csr_matrix, str, str]:
    raw = np.fromfile(path, dtype="<i4")
    size = path.stat().st_size
    if size % 4 or raw.size < 3:
        raise InputError(path, f"WACO .csr file of {size} bytes is too short or not int32 data")
    rows, cols, nnz = (int(n) for n in raw[:3])
    check_dims(path, rows, cols, nnz)
    expected = 3 + rows + 1 + nnz
    if raw.size != expected:
        raise InputError(
            path,
            f"WACO .csr header {rows} x {cols} with {nnz} entries needs {4 * expected} bytes, file has {size}",
        )
    rowptr = raw[3 : 4 + rows].astype(np.int64)
    colidx = raw[4 + rows :].astype(np.int64)
    if rowptr[0] != 0 or np.any(np.diff(rowptr) < 0):
        raise InputError(path, "WACO .csr rowptr does not start at 0 and increase monotonically")
    if rowptr[-1] != nnz:
        raise InputError(path, f"WACO .csr rowptr ends at {rowptr[-1]}, header says nnz = {nnz}")
    if colidx.min() < 0 or colidx.max() >= cols:
        raise InputError(path, f"WACO .csr column index out of range [0, {cols})")
    values = np.ones(nnz, dtype=np.float32)
    csr = canonicalize(sp.csr_matrix((values, colidx, rowptr), shape=(rows, cols)))
    csr.data[:] = 1.0  # pattern: a duplicated index stays 1.0
    return csr, "pattern", "general"
