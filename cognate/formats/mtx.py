"""Matrix Market ``.mtx`` / ``.mtx.gz`` (and the text inside SuiteSparse archives):
header checked before the body, the body streamed under a bound, entries checked strictly."""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import fast_matrix_market as fmm
import numpy as np
import scipy.sparse as sp

from cognate.budget import memory_budget
from cognate.errors import InputError
from cognate.formats.checks import LIBRARY_ERRORS, check_dims, real_values
from cognate.formats.mtx_entries import EntryChecker
from cognate.matrix import canonicalize

_HEAD_BYTES = 1 << 20  # the Matrix Market header (banner, comments, size line) must fit here
# Bytes one entry line may take: two int32 indices and two 17-digit complex parts fit in ~75.
_MAX_LINE_BYTES = 128
_CHUNK_BYTES = 1 << 24


_FIELDS = ("real", "integer", "complex", "pattern")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")


def read_mtx_file(path: Path) -> tuple[sp.csr_matrix, str, str]:
    with open(path, "rb") as stream:
        return read_mtx_stream(path, stream, plain_size=path.stat().st_size)


def read_mtx_gz(path: Path) -> tuple[sp.csr_matrix, str, str]:
    with gzip.open(path, "rb") as stream:
        return read_mtx_stream(path, stream)


def read_mtx_stream(
    path: Path, stream: IO[bytes], plain_size: int | None = None
) -> tuple[sp.csr_matrix, str, str]:
    """Parse Matrix Market with fast_matrix_market, checking the header before the body.

    The header is read from the first MiB, so an absurd size is refused before a large
    (or compressed) body is read into memory.
    """
    head = stream.read(_HEAD_BYTES)
    header = _mm_header(path, head, plain_size)
    checker = EntryChecker(head, header.format, header.field)
    body = _BoundedBody(path, head, stream, int(header.nnz), checker)
    try:
        (values, (row_idx, col_idx)), _ = _mm_call(
            fmm.read_coo, io.BufferedReader(body, _CHUNK_BYTES), generalize_symmetry=False
        )
    except LIBRARY_ERRORS:
        body.raise_refusal()  # the real reason the parser met an early end
        raise
    body.raise_refusal()
    row_idx = np.asarray(row_idx, dtype=np.int64)
    col_idx = np.asarray(col_idx, dtype=np.int64)
    values = np.asarray(values)
    if header.format == "array":  # dense file: its zeros are not stored sparse entries
        keep = values != 0
        values, row_idx, col_idx = values[keep], row_idx[keep], col_idx[keep]
    if header.symmetry == "skew-symmetric" and np.any(values[row_idx == col_idx] != 0):
        raise InputError(path, "skew-symmetric file stores a non-zero diagonal entry")
    values, row_idx, col_idx = _expand_symmetry(values, row_idx, col_idx, header.symmetry)
    values = real_values(values, header.field)
    shape = (int(header.shape[0]), int(header.shape[1]))
    csr = canonicalize(sp.coo_matrix((values, (row_idx, col_idx)), shape=shape))
    if header.field == "pattern":
        csr.data[:] = 1.0
    return csr, header.field, header.symmetry


class _BoundedBody(io.RawIOBase):
    """The header bytes, then the rest of the stream, streamed to the parser (never held
    whole) and refused once longer than ``entries`` lines can be or than the memory budget.

    A compressed file can expand without limit (a gzip bomb): the header's entry count
    bounds what a valid body needs. Matrix Market is text, so NUL bytes (the cheapest
    padding of a bomb) are refused at once. The parser sees a refusal as an end of file;
    ``raise_refusal`` then names it (before any other complaint about the short body).
    """

    def __init__(
        self, path: Path, head: bytes, stream: IO[bytes], entries: int, checker: EntryChecker
    ) -> None:
        super().__init__()
        self.path, self.stream, self.pending, self.checker = path, stream, head, checker
        self.limit = min(entries * _MAX_LINE_BYTES + _HEAD_BYTES, memory_budget() // 2)
        self.entries, self.size = entries, 0
        self.refusal: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.refusal is not None:
            return 0
        data = self.pending or self.stream.read(min(len(buffer), _CHUNK_BYTES))
        self.pending = b""
        if b"\0" in data:
            self.refusal = f"binary data (NUL bytes) after byte {self.size} of the text"
            return 0
        self.size += len(data)
        if self.size > self.limit:
            self.refusal = (
                f"data go on past {self.limit} bytes, more than {self.entries} declared "
                "entries need or over the memory budget"
            )
            return 0
        view = memoryview(buffer).cast("B")
        if len(data) > len(view):  # the head may be longer than the parser's buffer
            data, self.pending = data[: len(view)], data[len(view) :]
            self.size -= len(self.pending)
        # The parser reads numbers leniently ('5abc' as 5): every entry line is checked too.
        self.refusal = self.checker.feed(data) if data else self.checker.finish()
        if self.refusal is not None:
            return 0
        view[: len(data)] = data
        return len(data)

    def raise_refusal(self) -> None:
        if self.refusal is not None:
            raise InputError(self.path, self.refusal)


def _mm_header(path: Path, head: bytes, plain_size: int | None) -> Any:
    """The parsed header of a Matrix Market text starting with ``head``, after sanity checks."""
    if not head.strip():
        raise InputError(path, "empty file")
    if not head.split(b"\n", 1)[0].strip().lower().startswith(b"%%matrixmarket"):
        raise InputError(
            path, "not a Matrix Market file (first line is not a %%MatrixMarket banner)"
        )
    header = _mm_call(fmm.read_header, io.BytesIO(head))
    rows, cols = (int(n) for n in header.shape)
    if header.field not in _FIELDS:
        raise InputError(path, f"unsupported Matrix Market field {header.field!r}")
    if header.symmetry not in _SYMMETRIES:
        raise InputError(path, f"unsupported Matrix Market symmetry {header.symmetry!r}")
    stored = int(header.nnz)
    check_dims(path, rows, cols, stored if header.symmetry == "general" else 2 * stored)
    if header.symmetry != "general" and rows != cols:
        raise InputError(
            path, f"{header.symmetry} matrix must be square, header says {rows} x {cols}"
        )
    # Every coordinate entry line needs at least 4 bytes ("1 1\n"): catches absurd counts early.
    if plain_size is not None and header.format == "coordinate" and stored > plain_size // 4:
        raise InputError(
            path, f"header declares {stored} entries but the file is only {plain_size} bytes"
        )
    return header


def _mm_call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call fast_matrix_market; its ValueErrors ("Line 3: ...") get a Matrix Market prefix."""
    try:
        return function(*args, **kwargs)
    except ValueError as exc:
        raise ValueError(f"Matrix Market {str(exc)[:1].lower()}{str(exc)[1:]}") from exc


def _expand_symmetry(
    values: np.ndarray, rows: np.ndarray, cols: np.ndarray, symmetry: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Add the mirror of each off-diagonal entry (same / negated / conjugated value)."""
    if symmetry == "general":
        return values, rows, cols
    off = rows != cols
    mirrored = values[off]
    if symmetry == "skew-symmetric":
        mirrored = -mirrored
    elif symmetry == "hermitian":
        mirrored = np.conj(mirrored)
    return (
        np.concatenate([values, mirrored]),
        np.concatenate([rows, cols[off]]),
        np.concatenate([cols, rows[off]]),
    )
