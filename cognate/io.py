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
- Numbers are read strictly: an entry line holds exactly the numbers its field needs, each
  in its decimal form (no ``0x10``, ``5abc``, ``1.5`` in an integer file, nor a fourth
  number on a real line); an .npz's index arrays must hold integers (``_EntryChecker``).
- A declared shape is priced before anything is allocated (``check_budget``): reading,
  and again featurizing, tuning and collecting, each at its measured cost per row, column
  and entry, against ``$COGNATE_MAX_MEMORY`` (``memory_budget``).
Every problem with a file becomes ``InputError(path, problem)``: one line, no traceback.
"""

from __future__ import annotations

import gzip
import io
import itertools
import os
import re
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any, NamedTuple

import fast_matrix_market as fmm
import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError, InputError
from cognate.matrix import Matrix, canonicalize, check_permutation

INT32_MAX = 2**31 - 1
MATRIX_SUFFIXES: tuple[str, ...] = (".mtx.gz", ".tar.gz", ".tgz", ".mtx", ".npz", ".csr")
# What loading a matrix and computing `data info`'s statistics costs (peak RSS over the
# interpreter's start-up, measured with /usr/bin/time -v on files declaring huge shapes,
# docs/reliability.md, matrix inputs): per entry ~48 bytes (parse, mirror, CSR), per row ~31 (CSR indptr,
# row lengths, their float64 statistics), per column ~0; priced with a margin.
_BYTES_PER_ENTRY = 64
_BYTES_PER_ROW = 40
_BYTES_PER_COL = 8
MEMORY_ENV = "COGNATE_MAX_MEMORY"
_HEAD_BYTES = 1 << 20  # the Matrix Market header (banner, comments, size line) must fit here
# Bytes one entry line may take: two int32 indices and two 17-digit complex parts fit in ~75.
_MAX_LINE_BYTES = 128
_CHUNK_BYTES = 1 << 24
_VALUE_CHUNK = 1 << 22  # values converted per step
_STAT_CHUNK = 1 << 22  # entries per step of `matrix_stats`
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
    memory_budget()  # a bad COGNATE_MAX_MEMORY is reported as such, before any file problem
    if path.is_dir():  # before the suffix: "unknown format" would send the user astray
        raise InputError(path, "a directory, not a matrix file (give one matrix file)")
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
    # 2e9 x 2e9 with one entry would otherwise allocate tens of GB before anything fails.
    cost = Cost(per_row=_BYTES_PER_ROW, per_col=_BYTES_PER_COL, per_entry=_BYTES_PER_ENTRY)
    check_budget(path, "reading", rows, cols, entries, cost, counted="declared nnz")


class Cost(NamedTuple):
    """Measured peak bytes (over the interpreter's start-up) a piece of work on a matrix
    costs per row, per column and per stored entry."""

    per_row: float = 0.0
    per_col: float = 0.0
    per_entry: float = 0.0

    def bytes(self, rows: int, cols: int, entries: int) -> int:
        return int(rows * self.per_row + cols * self.per_col + entries * self.per_entry)


def check_work(matrix: Matrix, what: str, cost: Cost) -> None:
    """Refuse ``what`` (a command, e.g. 'collect --target cpu') on ``matrix`` before it
    allocates anything, when its measured ``cost`` is over the memory budget."""
    rows, cols = matrix.shape
    check_budget(matrix.source or matrix.name, f"{what} on", rows, cols, matrix.nnz, cost)


def check_budget(
    where: str | Path,
    what: str,
    rows: int,
    cols: int,
    entries: int,
    cost: Cost,
    counted: str = "nnz",
) -> None:
    """``InputError`` naming ``where`` when ``what`` on a rows x cols matrix with ``entries``
    entries needs more than the memory budget at ``cost``."""
    needed = cost.bytes(rows, cols, entries)
    budget = memory_budget()
    if needed > budget:
        raise InputError(
            where,
            f"{what} a {rows} x {cols} matrix with {counted} {entries} needs about "
            f"{_gib(needed)} GiB, over the memory budget of {_gib(budget)} GiB "
            f"({MEMORY_ENV} to change)",
        )


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g}"


def memory_budget() -> int:
    """Bytes one matrix may take while loading: ``$COGNATE_MAX_MEMORY`` (bytes, or with a
    K/M/G/T suffix), else half of physical RAM (the other half for the work done on it).

    A setting that is not a positive finite size (``inf``, ``nan``, ``lots``) is a
    ``CognateError`` that names the variable, never the matrix."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if not raw:
        return physical_memory() // 2
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    scale = units.get(raw[-1].upper(), 1)
    number = raw[:-1] if raw[-1].upper() in units else raw
    try:
        value = int(float(number) * scale)
    except (ValueError, OverflowError):  # OverflowError: inf
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
    checker = _EntryChecker(head, header.format, header.field)
    body = _BoundedBody(path, head, stream, int(header.nnz), checker)
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

    def __init__(
        self, path: Path, head: bytes, stream: IO[bytes], entries: int, checker: _EntryChecker
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


# Strict forms of the numbers on an entry line (C's strtod/strtol syntax, decimal only).
_INDEX_TOKEN = re.compile(rb"[0-9]+")
_INTEGER_TOKEN = re.compile(rb"[+-]?[0-9]+")
_REAL_TOKEN = re.compile(
    rb"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I
)
_VALUES_PER_ENTRY = {"pattern": 0, "integer": 1, "real": 1, "complex": 2}
_DIGITS = b"0123456789"
_MAX_LINE = 1 << 20  # an entry line longer than this is not Matrix Market
_PIECE_BYTES = 1 << 18  # 256 KiB


class _EntryChecker:
    """Checks that every entry line holds exactly the numbers its field needs, each in its
    strict form: fast_matrix_market reads '0x10' as 0, '5abc' as 5, 1.5 in an integer file
    as 1, and ignores extra numbers on a line.

    Fed the text as the parser reads it (header first), the lines each chunk completes at a
    time. A vectorised test (every byte mapped to its class by one ``bytes.translate``,
    then numpy: allowed characters, numbers per line, where signs, points and exponents
    stand) costs a few passes over the bytes; only a chunk that fails it (or holds letters:
    inf, nan; or blank lines) is read again line by line, in pieces of ~1 MiB, which finds
    the line and says what is wrong with it. The indices' own syntax and range, and a line
    with too few numbers, the parser checks.
    """

    def __init__(self, head: bytes, layout: str, field: str) -> None:
        self.skip, self.line = _header_extent(head)  # bytes and lines before the entries
        self.field = field
        self.indices = 2 if layout == "coordinate" else 0
        self.expected = self.indices + _VALUES_PER_ENTRY[field]
        self.classes = _class_table(field)
        self.carry = b""
        self.done = False

    def feed(self, data: bytes) -> str | None:
        """None, or what is wrong with the first bad line completed by ``data``."""
        if self.skip:
            data, self.skip = data[self.skip :], max(0, self.skip - len(data))
        cut = data.rfind(b"\n") + 1
        if not cut:
            self.carry += data
            if len(self.carry) > _MAX_LINE:
                return f"Matrix Market line {self.line + 1} is longer than {_MAX_LINE} bytes"
            return None
        text = b"".join((self.carry, memoryview(data)[:cut]))  # one copy
        self.carry = data[cut:]
        return self._check(text)

    def finish(self) -> str | None:
        """At the end of the text: the last line, if it has no newline."""
        if self.done:
            return None
        self.done = True
        text, self.carry = self.carry, b""
        return self._check(text)

    def _check(self, text: bytes) -> str | None:
        # In pieces of whole lines that fit the CPU's cache: the dozen passes of the
        # vectorised test then cost little more than one.
        for piece in _pieces(text, _PIECE_BYTES):
            right, newlines = self._looks_right(piece)
            if not right:
                problem = self._find_problem(piece, self.line + 1)
                if problem is not None:
                    return problem
            self.line += newlines
        return None

    def _looks_right(self, text: bytes) -> tuple[bool, int]:
        """The vectorised test, and the number of newlines in ``text``: True means every
        line is right; False, that some line may be wrong (or blank: allowed, but only
        counted slowly)."""
        c = np.empty(len(text) + 2, dtype=np.uint8)  # padded: every byte has two sides
        c[0] = c[-1] = _C_SPACE
        c[1:-1] = np.frombuffer(text.translate(self.classes), dtype=np.uint8)
        newlines = int(np.count_nonzero(c == _C_NEWLINE))
        if np.any(c == _C_OTHER):
            return False, newlines  # other characters: letters of inf / nan, or wrong
        space = c <= _C_SPACE
        lines = newlines + (not text.endswith(b"\n"))
        # A line with fewer numbers than its field needs fails the parser; so as many
        # numbers as lines times the field's count means exactly that many on each line.
        if np.count_nonzero(space[:-1] > space[1:]) != lines * self.expected:
            return False, newlines
        return self.field == "pattern" or _numbers_look_right(c, space), newlines

    def _find_problem(self, text: bytes, first: int) -> str | None:
        """The first bad line of ``text`` (its first line is number ``first``), slowly."""
        strict = _INTEGER_TOKEN if self.field == "integer" else _REAL_TOKEN
        for number, line in enumerate(text.split(b"\n"), first):
            tokens = line.split()
            if not tokens:
                continue  # blank lines may appear anywhere
            if len(tokens) != self.expected:
                return (
                    f"Matrix Market line {number}: {len(tokens)} numbers, an entry of a "
                    f"{self.field} file has {self.expected}"
                )
            for position, token in enumerate(tokens):
                index = position < self.indices
                if not (_INDEX_TOKEN if index else strict).fullmatch(token):
                    kind = "an index" if index else f"{_article(self.field)} {self.field} number"
                    shown = token[:40].decode("ascii", "replace")
                    return f"Matrix Market line {number}: {shown!r} is not {kind}"
        return None


# Byte classes of an entry line (``_class_table``): the spaces first, so that "c <= space"
# finds them all.
_C_NEWLINE, _C_SPACE, _C_DIGIT, _C_POINT, _C_EXP, _C_SIGN, _C_OTHER = range(7)


def _class_table(field: str) -> bytes:
    """A ``bytes.translate`` table from each byte to its class; a character the field
    cannot hold (a point in an integer file, a sign in a pattern file) is 'other'."""
    table = bytearray([_C_OTHER]) * 256
    table[ord("\n")] = _C_NEWLINE
    for byte in b" \t\r":
        table[byte] = _C_SPACE
    for byte in _DIGITS:
        table[byte] = _C_DIGIT
    if field != "pattern":
        table[ord("+")] = table[ord("-")] = _C_SIGN
    if field in ("real", "complex"):
        table[ord(".")] = _C_POINT
        table[ord("e")] = table[ord("E")] = _C_EXP
    return bytes(table)


def _pieces(text: bytes, size: int) -> Iterator[bytes]:
    """``text`` (whole lines) in pieces of whole lines of about ``size`` bytes."""
    start = 0
    while start < len(text):
        cut = text.find(b"\n", start + size) + 1 or len(text)
        yield text[start:cut]
        start = cut


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _mark_table() -> np.ndarray:
    """Whether a sign, point or exponent (the middle class) may stand between the classes
    before and after it, indexed by ``(before * 7 + mark) * 7 + after``: a sign first or
    after an exponent and before a digit (or a point, not after an exponent), a point next
    to a digit, an exponent after a digit or point and before a digit or sign."""
    table = np.zeros(7 * 7 * 7, dtype=bool)
    spaces = (_C_NEWLINE, _C_SPACE)
    for before, mark, after in itertools.product(range(7), repeat=3):
        if mark == _C_SIGN:
            ok = (before in spaces and after in (_C_DIGIT, _C_POINT)) or (
                before == _C_EXP and after == _C_DIGIT
            )
        elif mark == _C_POINT:
            ok = _C_DIGIT in (before, after)
        else:
            ok = before in (_C_DIGIT, _C_POINT) and after in (_C_DIGIT, _C_SIGN)
        table[(before * 7 + mark) * 7 + after] = ok
    return table


def _numbers_look_right(c: np.ndarray, space: np.ndarray) -> bool:
    """Signs, decimal points and exponents in their places (``c``: the padded byte
    classes of a text, ``space``: where it has spaces): each between the right neighbours
    (``_mark_table``), at most one point and one exponent per number, the point first.
    Only the marks and their neighbours are read."""
    at = np.flatnonzero((c - np.uint8(_C_POINT)) <= _C_SIGN - _C_POINT)  # points, exps, signs
    if not at.size:
        return True
    kind = c[at]
    code = (c[at - 1].astype(np.intp) * 7 + kind) * 7 + c[at + 1]
    if not _MARK_OK[code].all():
        return False
    # Two marks in one number: with the digits taken out they stand side by side (or with
    # the exponent's sign between), and only a point then an exponent is allowed.
    if np.count_nonzero(kind != _C_SIGN) < 2:
        return True
    rest = c[c != _C_DIGIT]
    point, exp, sign = rest == _C_POINT, rest == _C_EXP, rest == _C_SIGN
    second = (point | exp)[1:]
    bad = (point[:-1] & point[1:]) | (exp[:-1] & second)
    bad[1:] |= exp[:-2] & sign[1:-1] & second[1:]
    return not bad.any()


_MARK_OK = _mark_table()


def _header_extent(head: bytes) -> tuple[int, int]:
    """Bytes and lines of the banner, comments and size line at the start of ``head``."""
    offset, lines, banner = 0, 0, True
    while offset < len(head):
        end = head.find(b"\n", offset)
        end = len(head) if end < 0 else end + 1
        line = head[offset:end].strip()
        offset, lines = end, lines + 1
        if banner:
            banner = False
        elif line and not line.startswith(b"%"):
            break  # the size line
    return offset, lines


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
    _check_npz_index_types(path)
    matrix = sp.load_npz(path)  # allow_pickle=False inside: no code runs from the file
    rows, cols = (int(n) for n in matrix.shape)
    _check_dims(path, rows, cols, int(matrix.nnz))
    if hasattr(matrix, "check_format"):  # CSR/CSC/BSR: indptr and index ranges
        matrix.check_format(full_check=True)
    if matrix.format == "csr" and matrix.has_canonical_format:
        # Already canonical (what cognate and scipy write): no COO copy, no re-sort; at
        # 10^8 nonzeros that detour cost several GB and most of the load time.
        return _canonical_csr(matrix)
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


def _canonical_csr(matrix: sp.csr_matrix) -> tuple[sp.csr_matrix, str, str]:
    """An already sorted, duplicate-free CSR in cognate's dtypes, converted in place."""
    field = _field_of_dtype(matrix.data.dtype)
    values = _real_values(matrix.data, "real" if field == "pattern" else field)
    if field == "pattern":
        values[:] = 1.0
    indptr = matrix.indptr.astype(np.int32, copy=False)
    indices = matrix.indices.astype(np.int32, copy=False)
    csr = sp.csr_matrix((values, indices, indptr), shape=matrix.shape, copy=False)
    csr.has_canonical_format = True
    return csr, field, "general"


# Arrays of a scipy .npz that hold indices or sizes: load_npz casts floats to integers.
_NPZ_INDEX_ARRAYS = ("shape", "indices", "indptr", "row", "col", "offsets")


def _check_npz_index_types(path: Path) -> None:
    """Refuse index arrays that do not hold integers, reading only the array headers."""
    with zipfile.ZipFile(path) as archive:
        for name in _NPZ_INDEX_ARRAYS:
            if f"{name}.npy" not in archive.namelist():
                continue
            with archive.open(f"{name}.npy") as member:
                dtype = _npy_dtype(member)
            if not np.issubdtype(dtype, np.integer):
                raise InputError(path, f"array {name!r} holds {dtype} values, not integers")


def _npy_dtype(stream: IO[bytes]) -> np.dtype:
    """The dtype in a .npy header (format 1.0 or 2.0; 3.0 is 2.0 with UTF-8 names)."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)[2]
    return np.lib.format.read_array_header_2_0(stream)[2]


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
    bandwidth, near = 0, 0
    # Row blocks of about _STAT_CHUNK entries: per-entry int64 / float64 temporaries of
    # the whole matrix would cost ~40 bytes per nonzero (4 GB at 10^8).
    for lo, hi in row_blocks(csr.indptr, _STAT_CHUNK):
        start, stop = int(csr.indptr[lo]), int(csr.indptr[hi])
        row_of_entry = np.repeat(
            np.arange(lo, hi, dtype=np.int64), np.diff(csr.indptr[lo : hi + 1])
        )
        cols_of_entry = csr.indices[start:stop].astype(np.int64)
        if row_of_entry.size:
            bandwidth = max(bandwidth, int(np.abs(row_of_entry - cols_of_entry).max()))
            # Distance from the diagonal as a fraction of the shape (rectangular: scaled).
            scaled = np.abs(row_of_entry / rows - cols_of_entry / cols)
            near += int(np.count_nonzero(scaled <= _NEAR_DIAGONAL))
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
        "bandwidth": bandwidth,
        "near_diag": near / matrix.nnz if matrix.nnz else 0.0,
    }


def row_blocks(indptr: np.ndarray, entries: int) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges ``[lo, hi)`` covering all rows, each holding about
    ``entries`` nonzeros (a single longer row is a block of its own)."""
    rows = len(indptr) - 1
    lo = 0
    while lo < rows:
        target = int(indptr[lo]) + entries
        hi = int(np.searchsorted(indptr, target, side="right")) - 1
        hi = min(rows, max(hi, lo + 1))
        yield lo, hi
        lo = hi


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
