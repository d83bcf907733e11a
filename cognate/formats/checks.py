"""Checks every matrix reader shares: sizes cognate can represent and afford, one-line
descriptions of library errors, and the float32 values cognate keeps."""

from __future__ import annotations

import gzip
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from cognate.budget import Cost, check_budget
from cognate.errors import InputError

INT32_MAX = 2**31 - 1


# What loading a matrix and computing `data info`'s statistics costs (peak RSS over the
# interpreter's start-up, measured with /usr/bin/time -v on files declaring huge shapes,
# docs/reliability.md, matrix inputs): per entry ~48 bytes (parse, mirror, CSR), per row
# ~31 (CSR indptr, row lengths, their float64 statistics), per column ~0; priced with a margin.
_BYTES_PER_ENTRY = 64
_BYTES_PER_ROW = 40
_BYTES_PER_COL = 8


_VALUE_CHUNK = 1 << 22  # values converted per step


# Exceptions the parsing libraries (fast_matrix_market, gzip, tarfile, zipfile, numpy,
# scipy) raise for bad input; all of them become one-line InputErrors.
LIBRARY_ERRORS = (
    ValueError,
    OSError,
    EOFError,
    zlib.error,
    tarfile.TarError,
    zipfile.BadZipFile,
    KeyError,
    IndexError,
    TypeError,
    OverflowError,
    MemoryError,
    RuntimeError,
)


def describe(exc: BaseException) -> str:
    """One readable line for a library exception (its class name when the text is empty)."""
    if isinstance(exc, MemoryError):
        return "too large to load into memory"
    if isinstance(exc, EOFError | zlib.error | gzip.BadGzipFile):
        return f"corrupt or truncated compressed data ({exc or type(exc).__name__})"
    text = str(exc).strip().rstrip(".")
    return text if text else type(exc).__name__


def check_final(path: Path, csr: sp.csr_matrix) -> None:
    rows, cols = csr.shape
    if rows == 0 or cols == 0:
        raise InputError(path, f"matrix has a zero dimension ({rows} x {cols})")
    if csr.nnz == 0:
        raise InputError(path, "matrix has no entries (nnz = 0)")


def check_dims(path: Path, rows: int, cols: int, entries: int) -> None:
    """Refuse sizes cognate cannot represent (int32 CSR) or hold in this machine's memory."""
    if rows < 0 or cols < 0 or entries < 0:
        raise InputError(path, f"negative size in header ({rows} x {cols}, {entries} entries)")
    if rows == 0 or cols == 0:
        raise InputError(path, f"matrix has a zero dimension ({rows} x {cols})")
    if entries == 0:
        raise InputError(path, "matrix has no entries (nnz = 0)")
    if rows > INT32_MAX or cols > INT32_MAX:
        raise InputError(path, f"dimensions {rows} x {cols} exceed the int32 limit {INT32_MAX}")
    if entries > INT32_MAX:
        raise InputError(path, f"{entries} entries exceed the int32 limit {INT32_MAX}")
    # 2e9 x 2e9 with one entry would otherwise allocate tens of GB before anything fails.
    cost = Cost(per_row=_BYTES_PER_ROW, per_col=_BYTES_PER_COL, per_entry=_BYTES_PER_ENTRY)
    check_budget(path, "reading", rows, cols, entries, cost, counted="declared nnz")


def real_values(values: np.ndarray, field: str) -> np.ndarray:
    """float32 values; complex keeps the real part (cognate.formats: the complex policy)."""
    if field == "pattern":
        return np.ones(values.shape, dtype=np.float32)
    if np.iscomplexobj(values):
        values = values.real
    if values.dtype == np.float32 and _all_finite(values):
        return values  # already what cognate keeps: no copy (0.4 GB at 10^8)
    finite = np.finfo(np.float32).max
    out = np.empty(values.shape, dtype=np.float32)
    # In chunks: float64 copies of 10^8 values would cost 0.8 GB each.
    for lo in range(0, values.size, _VALUE_CHUNK):
        chunk = values[lo : lo + _VALUE_CHUNK].astype(np.float64)
        chunk = np.nan_to_num(chunk, nan=0.0, posinf=finite, neginf=-finite)
        out[lo : lo + _VALUE_CHUNK] = np.clip(chunk, -finite, finite)
    return out


def _all_finite(values: np.ndarray) -> bool:
    """No NaN or infinity in ``values`` (checked in chunks: no full-size mask)."""
    return all(
        np.isfinite(values[lo : lo + _VALUE_CHUNK]).all()
        for lo in range(0, values.size, _VALUE_CHUNK)
    )
