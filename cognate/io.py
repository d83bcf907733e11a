"""Reading and writing matrix files, and the summary statistics ``cognate data info`` shows.

Formats (chosen by suffix): Matrix Market ``.mtx`` / ``.mtx.gz``, the SuiteSparse
``.tar.gz`` / ``.tgz`` as downloaded (the ``<name>/<name>.mtx`` member is read straight
from the archive, never extracted), scipy ``.npz`` (``scipy.sparse.save_npz``) and WACO's
binary ``.csr`` (little-endian int32 nrow, ncol, nnz, rowptr[nrow+1], colidx[nnz]).
A cognate ``.npz`` may also hold a permuted structured matrix's index maps (``row_perm``,
``col_perm``: see ``cognate.matrix``); the other formats have none (writing a permuted
matrix to ``.mtx`` keeps the logical matrix A and drops the maps).

Policies:
- Symmetric, skew-symmetric and hermitian files are expanded to both triangles (the
  mirror of an off-diagonal entry is the same value, its negation, or its conjugate).
- Complex values: cognate keeps the **real part** (after hermitian conjugation, so a
  hermitian matrix becomes a symmetric real one). Every stored entry stays in the pattern,
  even when its real part is 0: the pattern is what the kernels run over, the values only
  have to be reproducible for checking results.
- Pattern files (and WACO ``.csr``) get value 1.0 for every entry, duplicates included.
- Integer values become float32 (exact up to 2**24). Values beyond float32's range are
  clipped to +-3.4e38 and NaN becomes an explicit 0 (temp.mtx stores values up to 4.8e38;
  kernels must be checkable against a reference, which inf and NaN would prevent).
- Explicitly stored zeros are kept; duplicate entries are summed (``canonicalize``).
Every problem with a file becomes ``InputError(path, problem)``: one line, no traceback.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import IO, Any

import fast_matrix_market as fmm
import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError, InputError
from cognate.matrix import Matrix, canonicalize, check_permutation

INT32_MAX = 2**31 - 1
MATRIX_SUFFIXES: tuple[str, ...] = (".mtx.gz", ".tar.gz", ".tgz", ".mtx", ".npz", ".csr")
# Bytes of memory one declared entry may cost while reading, expanding and canonicalizing
# (coordinates, values, mirrored copy, CSR conversion): a generous upper estimate.
_BYTES_PER_ENTRY = 64
_BYTES_PER_DIM = 16  # per declared row / column: int64 index arrays, twice
MEMORY_ENV = "COGNATE_MAX_MEMORY"
_HEAD_BYTES = 1 << 20  # the Matrix Market header (banner, comments, size line) must fit here
# Bytes one entry line may take: two int32 indices and two 17-digit complex parts fit in ~75.
_MAX_LINE_BYTES = 128
_CHUNK_BYTES = 1 << 24
# data info's diagonal concentration: entries within 1% of the shape of the diagonal.
_NEAR_DIAGONAL = 0.01
_FIELDS = ("real", "integer", "complex", "pattern")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")
# Exceptions the parsing libraries (fast_matrix_market, gzip, tarfile, zipfile, numpy,
# scipy) raise for bad input; all of them become one-line InputErrors.
_LIBRARY_ERRORS = (
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


def matrix_name(path: str | Path) -> str:
    """The file name without its matrix suffix (``bcsstk13.mtx.gz`` -> ``bcsstk13``)."""
    name = Path(path).name
    suffix = _matrix_suffix(name)
    return name[: -len(suffix)] if suffix else Path(name).stem


def _matrix_suffix(name: str) -> str | None:
    lower = name.lower()
    return next((s for s in MATRIX_SUFFIXES if lower.endswith(s)), None)


def load_matrix(path: str | Path) -> Matrix:
    """Read a matrix file into canonical form; any problem raises ``InputError``."""
    path = Path(path)
    suffix = _matrix_suffix(path.name)
    if suffix is None:
        raise InputError(
            path, f"unknown matrix format (expected one of {', '.join(MATRIX_SUFFIXES)})"
        )
    if not path.exists():
        raise InputError(path, "no such file")
    if not path.is_file():
        raise InputError(path, "not a regular file")
    if path.stat().st_size == 0:
        raise InputError(path, "empty file")
    reader = {
        ".mtx": _read_mtx_file,
        ".mtx.gz": _read_mtx_gz,
        ".tar.gz": _read_tar,
        ".tgz": _read_tar,
        ".npz": _read_npz,
        ".csr": _read_waco_csr,
    }[suffix]
    try:
        csr, field, symmetry = reader(path)
    except InputError:
        raise
    except _LIBRARY_ERRORS as exc:
        raise InputError(path, _describe(exc)) from exc
    _check_final(path, csr)
    try:
        maps = _read_npz_maps(path, csr.shape) if suffix == ".npz" else {}
    except _LIBRARY_ERRORS as exc:
        raise InputError(path, _describe(exc)) from exc
    return Matrix(matrix_name(path), csr, source=str(path), field=field, symmetry=symmetry, **maps)


def _describe(exc: BaseException) -> str:
    """One readable line for a library exception (its class name when the text is empty)."""
    if isinstance(exc, MemoryError):
        return "too large to load into memory"
    if isinstance(exc, EOFError | zlib.error | gzip.BadGzipFile):
        return f"corrupt or truncated compressed data ({exc or type(exc).__name__})"
    text = str(exc).strip().rstrip(".")
    return text if text else type(exc).__name__


def _check_final(path: Path, csr: sp.csr_matrix) -> None:
    rows, cols = csr.shape
    if rows == 0 or cols == 0:
        raise InputError(path, f"matrix has a zero dimension ({rows} x {cols})")
    if csr.nnz == 0:
        raise InputError(path, "matrix has no entries (nnz = 0)")


def _check_dims(path: Path, rows: int, cols: int, entries: int) -> None:
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
    # Entries cost _BYTES_PER_ENTRY each; each row and column costs index arrays (CSR
    # indptr, CSC/transposes while canonicalising, row-length stats): 2e9 x 2e9 with one
    # entry would otherwise allocate tens of GB before anything else fails.
    needed = entries * _BYTES_PER_ENTRY + (rows + cols + 2) * _BYTES_PER_DIM
    budget = memory_budget()
    if needed > budget:
        raise InputError(
            path,
            f"{rows} x {cols} with {entries} declared entries need about "
            f"{_gib(needed)} GiB, over the memory budget of {_gib(budget)} GiB "
            f"({MEMORY_ENV} to change)",
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g}"


def memory_budget() -> int:
    """Bytes one matrix may take while loading: ``$COGNATE_MAX_MEMORY`` (bytes, or with a
    K/M/G/T suffix), else half of physical RAM (the other half for the work done on it)."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if not raw:
        return physical_memory() // 2
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    scale = units.get(raw[-1].upper(), 1)
    number = raw[:-1] if raw[-1].upper() in units else raw
    try:
        value = int(float(number) * scale)
    except ValueError:
        value = 0
    if value <= 0:
        raise CognateError(f"{MEMORY_ENV}={raw!r}: expected a positive size like 8G")
    return value


def physical_memory() -> int:
    """Bytes of RAM in this machine (a large guess where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume a large machine
        return 2**40


# --- Matrix Market -------------------------------------------------------------------


def _read_mtx_file(path: Path) -> tuple[sp.csr_matrix, str, str]:
    with open(path, "rb") as stream:
        return _read_mtx_stream(path, stream, plain_size=path.stat().st_size)


def _read_mtx_gz(path: Path) -> tuple[sp.csr_matrix, str, str]:
    with gzip.open(path, "rb") as stream:
        return _read_mtx_stream(path, stream)


def _read_mtx_stream(
    path: Path, stream: IO[bytes], plain_size: int | None = None
) -> tuple[sp.csr_matrix, str, str]:
    """Parse Matrix Market with fast_matrix_market, checking the header before the body.

    The header is read from the first MiB, so an absurd size is refused before a large
    (or compressed) body is read into memory.
    """
    head = stream.read(_HEAD_BYTES)
    header = _mm_header(path, head, plain_size)
    body = _BoundedBody(path, head, stream, int(header.nnz))
    try:
        (values, (row_idx, col_idx)), _ = _mm_call(
            fmm.read_coo, io.BufferedReader(body, _CHUNK_BYTES), generalize_symmetry=False
        )
    except _LIBRARY_ERRORS:
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
    values = _real_values(values, header.field)
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

    def __init__(self, path: Path, head: bytes, stream: IO[bytes], entries: int) -> None:
        super().__init__()
        self.path, self.stream, self.pending = path, stream, head
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
    _check_dims(path, rows, cols, stored if header.symmetry == "general" else 2 * stored)
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


def _real_values(values: np.ndarray, field: str) -> np.ndarray:
    """float32 values; complex keeps the real part (module docstring: the complex policy)."""
    if field == "pattern":
        return np.ones(values.shape, dtype=np.float32)
    if np.iscomplexobj(values):
        values = values.real
    finite = np.finfo(np.float32).max
    values = np.nan_to_num(values.astype(np.float64), nan=0.0, posinf=finite, neginf=-finite)
    return np.clip(values, -finite, finite).astype(np.float32)


# --- SuiteSparse tar archives --------------------------------------------------------


def _read_tar(path: Path) -> tuple[sp.csr_matrix, str, str]:
    """Read ``<name>/<name>.mtx`` from the archive without extracting anything to disk."""
    with tarfile.open(path, "r:*") as archive:
        members = archive.getmembers()
        for member in members:
            _check_tar_member(path, member)
        member = _pick_matrix_member(path, members)
        stream = archive.extractfile(member)
        if stream is None:
            raise InputError(path, f"archive member {member.name!r} cannot be read")
        with stream:
            return _read_mtx_stream(path, stream)


def _check_tar_member(path: Path, member: tarfile.TarInfo) -> None:
    """Refuse unsafe members outright (stricter than tarfile's data_filter: no links at all)."""
    parts = PurePosixPath(member.name).parts
    if member.name.startswith(("/", "\\")) or (parts and ":" in parts[0]):
        raise InputError(path, f"archive member {member.name!r} has an absolute path")
    if ".." in parts or ".." in member.name.split("\\"):
        raise InputError(path, f"archive member {member.name!r} escapes the archive (..)")
    if member.issym() or member.islnk():
        raise InputError(path, f"archive member {member.name!r} is a link")
    if not (member.isfile() or member.isdir()):
        raise InputError(path, f"archive member {member.name!r} is a device or special file")


def _pick_matrix_member(path: Path, members: list[tarfile.TarInfo]) -> tarfile.TarInfo:
    name = matrix_name(path)
    files = [m for m in members if m.isfile()]
    wanted = [m for m in files if PurePosixPath(m.name).parts == (name, f"{name}.mtx")]
    if wanted:
        return wanted[0]
    mtx = [m for m in files if m.name.lower().endswith(".mtx")]
    if len(mtx) == 1:
        return mtx[0]
    if not mtx:
        raise InputError(path, "archive holds no .mtx file")
    raise InputError(path, f"archive has no {name}/{name}.mtx and several other .mtx files")


# --- scipy .npz ------------------------------------------------------------------------


def _read_npz(path: Path) -> tuple[sp.csr_matrix, str, str]:
    if not zipfile.is_zipfile(path):  # np.load would otherwise talk about pickles
        raise InputError(path, "not a scipy .npz file (not a zip archive)")
    with zipfile.ZipFile(path) as archive:  # a compressed .npz can expand without limit
        unpacked = sum(info.file_size for info in archive.infolist())
    if unpacked > memory_budget():
        raise InputError(
            path,
            f"arrays unpack to {_gib(unpacked)} GiB, over the memory budget of "
            f"{_gib(memory_budget())} GiB ({MEMORY_ENV} to change)",
        )
    matrix = sp.load_npz(path)  # allow_pickle=False inside: no code runs from the file
    rows, cols = (int(n) for n in matrix.shape)
    _check_dims(path, rows, cols, int(matrix.nnz))
    if hasattr(matrix, "check_format"):  # CSR/CSC/BSR: indptr and index ranges
        matrix.check_format(full_check=True)
    coo = matrix.tocoo()
    if coo.nnz and (
        coo.row.min() < 0 or coo.col.min() < 0 or coo.row.max() >= rows or coo.col.max() >= cols
    ):
        raise InputError(path, f"index out of range for shape {rows} x {cols}")
    field = _field_of_dtype(coo.data.dtype)
    values = _real_values(coo.data, "real" if field == "pattern" else field)
    csr = canonicalize(sp.coo_matrix((values, (coo.row, coo.col)), shape=(rows, cols)))
    if field == "pattern":
        csr.data[:] = 1.0
    return csr, field, "general"


def _read_npz_maps(path: Path, shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """The optional ``row_perm`` / ``col_perm`` index maps of a cognate .npz, validated."""
    maps = {}
    with np.load(path, allow_pickle=False) as loaded:
        for key, length in (("row_perm", shape[0]), ("col_perm", shape[1])):
            if key in loaded.files:
                try:
                    maps[key] = check_permutation(loaded[key], length, key)
                except CognateError as exc:
                    raise InputError(path, str(exc)) from exc
    return maps


def _field_of_dtype(dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return "pattern"
    if np.issubdtype(dtype, np.integer):
        return "integer"
    if np.issubdtype(dtype, np.complexfloating):
        return "complex"
    if np.issubdtype(dtype, np.floating):
        return "real"
    raise ValueError(f"unsupported value type {dtype}")


# --- WACO binary .csr --------------------------------------------------------------------


def _read_waco_csr(path: Path) -> tuple[sp.csr_matrix, str, str]:
    raw = np.fromfile(path, dtype="<i4")
    size = path.stat().st_size
    if size % 4 or raw.size < 3:
        raise InputError(path, f"WACO .csr file of {size} bytes is too short or not int32 data")
    rows, cols, nnz = (int(n) for n in raw[:3])
    _check_dims(path, rows, cols, nnz)
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


# --- writing -----------------------------------------------------------------------------


def check_output_path(path: str | Path) -> Path:
    """The path, if ``save_matrix`` can write it (suffix and folder); else ``InputError``."""
    path = Path(path)
    if _matrix_suffix(path.name) not in (".npz", ".mtx", ".mtx.gz"):
        raise InputError(path, "output must end in .npz, .mtx or .mtx.gz")
    if not path.parent.is_dir():
        raise InputError(path, "output folder does not exist")
    return path


def save_matrix(matrix: Matrix, path: str | Path) -> Path:
    """Write ``.npz`` (scipy.sparse.save_npz) or ``.mtx`` / ``.mtx.gz`` (general, real).

    Written to a temporary file and renamed, so a reader never sees half a file.
    """
    path = check_output_path(path)
    suffix = _matrix_suffix(path.name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp{suffix}")
    try:
        if suffix == ".npz":
            _write_npz(tmp, matrix)
        else:
            opener = gzip.open if suffix == ".mtx.gz" else open
            with opener(tmp, "wb") as stream:
                fmm.mmwrite(
                    stream, matrix.csr, comment=_comment(matrix), field=_write_field(matrix)
                )
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(path, f"cannot write: {exc.strerror or exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _write_npz(path: Path, matrix: Matrix) -> None:
    """scipy's own .npz; with index maps, the same arrays plus ``row_perm`` / ``col_perm``.

    Without maps the file is exactly what ``scipy.sparse.save_npz`` writes (stored corpora
    stay byte-identical); ``load_npz`` ignores the extra keys, so scipy still reads it.
    """
    if not matrix.permuted:
        sp.save_npz(path, matrix.csr, compressed=True)
        return
    csr = matrix.csr
    arrays = {"indices": csr.indices, "indptr": csr.indptr, "format": b"csr"}
    arrays.update(shape=csr.shape, data=csr.data)
    arrays.update({k: v for k, v in _maps(matrix).items() if v is not None})
    with open(path, "wb") as stream:  # a file object: numpy would append .npz to a name
        np.savez_compressed(stream, **arrays)


def _maps(matrix: Matrix) -> dict[str, np.ndarray | None]:
    return {"row_perm": matrix.row_perm, "col_perm": matrix.col_perm}


def _write_field(matrix: Matrix) -> str:
    return matrix.field if matrix.field in ("pattern", "integer") else "real"


def _comment(matrix: Matrix) -> str:
    return " ".join(f" written by cognate: {matrix.name} ({matrix.source})".split("\n"))


# --- statistics and path expansion ---------------------------------------------------------


def matrix_stats(matrix: Matrix) -> dict[str, Any]:
    """The numbers ``cognate data info`` reports (row lengths over all rows, empty ones too).

    ``near_diag`` is the fraction of entries (i, j) with |i / rows - j / cols| <= 1%: about
    0.02 for a uniform matrix, near 1 for a banded or bandwidth-reduced one.
    """
    csr = matrix.csr
    rows, cols = matrix.shape
    lengths = np.diff(csr.indptr).astype(np.float64)
    mean = float(lengths.mean())
    row_of_entry = np.repeat(np.arange(rows, dtype=np.int64), np.diff(csr.indptr))
    distance = np.abs(row_of_entry - csr.indices.astype(np.int64))
    # Distance from the diagonal as a fraction of the shape (rectangular: the scaled one).
    scaled = np.abs(row_of_entry / rows - csr.indices / cols)
    return {
        "name": matrix.name,
        "rows": rows,
        "cols": cols,
        "nnz": matrix.nnz,
        "field": matrix.field,
        "symmetry": matrix.symmetry,
        "density": matrix.nnz / (rows * cols),
        "row_mean": mean,
        "row_max": int(lengths.max()),
        "row_cv": float(lengths.std() / mean) if mean > 0 else 0.0,
        "bandwidth": int(distance.max()) if distance.size else 0,
        "near_diag": float(np.mean(scaled <= _NEAR_DIAGONAL)) if scaled.size else 0.0,
    }


def expand_matrix_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; folders become the matrix files inside them (recursively, sorted).

    A missing path or a folder without matrix files raises ``InputError``. Hidden files and
    folders (names starting with '.') are skipped.
    """
    result: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and _matrix_suffix(p.name)
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                raise InputError(path, "folder holds no matrix files")
            result.extend(found)
        elif path.exists():
            result.append(path)
        else:
            raise InputError(path, "no such file or folder")
    return result
