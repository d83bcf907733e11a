"""The SuiteSparse Matrix Collection: search its index, fetch matrices into the cache.

The index and its search are ssgetpy's (its CSV loader ``csvindex.gen_rows`` and its
SQLite index ``db.MatrixDB``), fed from ``<base>/files/ssstats.csv`` of whichever
collection or mirror is in use. Downloads are cognate's own streaming code (see
``download``). The cached artifact is ``$COGNATE_HOME/suitesparse/<group>/<name>.tar.gz``,
read through ``cognate.formats.read.load_matrix``.
"""

from __future__ import annotations

import fcntl
import fnmatch
import gzip
import hashlib
import os
import re
import sqlite3
import stat
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from cognate import __version__
from cognate.errors import CognateError, InputError
from cognate.homefiles import open_for_write
from cognate.paths import cognate_home
from cognate.util import atomic_path

DEFAULT_URL = "https://sparse.tamu.edu"
URL_ENV = "COGNATE_SUITESPARSE_URL"
INDEX_MAX_AGE_S = 90 * 24 * 3600  # ssgetpy's own refresh policy
INDEX_MAX_BYTES = 64 << 20
CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60.0

# Group and matrix names become URL and cache-path components: letters, digits, _ . + -
# and never a leading dot (no "..", no hidden files, no path separators).
_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
# ssgetpy formats search values into SQL text unescaped: only these characters reach it.
_NAME_PATTERN = re.compile(r"(?:[A-Za-z0-9_.+-]+/)?[A-Za-z0-9_.+*?-]*")
_KIND_PATTERN = re.compile(r"[A-Za-z0-9 ,./()+-]+")

Bounds = tuple[int | None, int | None]


@dataclass(frozen=True)
class IndexEntry:
    """One matrix of the collection's index (ssstats.csv)."""

    id: int
    group: str
    name: str
    rows: int
    cols: int
    nnz: int
    dtype: str  # real | complex | binary
    is2d3d: bool
    isspd: bool
    kind: str

    @property
    def full_name(self) -> str:
        return f"{self.group}/{self.name}"

    def url(self, base: str) -> str:
        return f"{base}/MM/{self.group}/{self.name}.tar.gz"

    def cache_path(self) -> Path:
        return cache_dir() / self.group / f"{self.name}.tar.gz"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Fetched:
    entry: IndexEntry
    path: Path
    status: Literal["cached", "downloaded", "local"]
    size: int


def cache_dir() -> Path:
    return cognate_home() / "suitesparse"


def resolve_base(mirror: str | None = None) -> str:
    """The collection's base URL: ``mirror``, else $COGNATE_SUITESPARSE_URL, else the real one.

    A local directory is accepted too (as a file:// URL).
    """
    base = (mirror or os.environ.get(URL_ENV) or DEFAULT_URL).strip()
    if "://" not in base:
        folder = Path(base).expanduser()
        if not folder.is_dir():
            raise CognateError(f"{base}: mirror is neither an http(s) URL nor a directory")
        return folder.resolve().as_uri()
    if not base.startswith(("http://", "https://", "file://")):
        raise CognateError(f"{base}: mirror URL must be http://, https:// or file://")
    return base.rstrip("/")


# -- ssgetpy ---------------------------------------------------------------------------


def _ssgetpy() -> tuple[Any, Any]:
    """ssgetpy's ``db`` and ``csvindex`` modules, imported without network or $HOME writes.

    ssgetpy 1.0rc2 cannot be pointed at a mirror: its URL is a module constant, and on import
    it creates ~/.ssgetpy/index.db and, when that index is empty or 90 days old, downloads
    ssstats.csv from sparse.tamu.edu (ConnectionError offline). So HOME points at a folder of
    cognate's during the import, holding an index that is seeded as fresh (one placeholder
    row, never searched); cognate then builds one index per mirror with ssgetpy's own
    loader and MatrixDB, which takes the index path as an argument.
    """
    if "ssgetpy.dbinstance" not in sys.modules:
        home = cognate_home() / "ssgetpy-home"
        _seed_ssgetpy_index(home / ".ssgetpy" / "index.db")
        saved = os.environ.get("HOME")
        os.environ["HOME"] = str(home)
        try:
            import ssgetpy  # noqa: F401  (runs ssgetpy.dbinstance against the seeded index)
        finally:
            if saved is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = saved
    from ssgetpy import csvindex, db

    return db, csvindex


def _seed_ssgetpy_index(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        # ssgetpy's schema (db.MatrixDB._create_table), so its import-time checks pass.
        conn.execute(
            "CREATE TABLE IF NOT EXISTS MATRICES (id INTEGER PRIMARY KEY, matrixgroup TEXT,"
            " name TEXT, rows INTEGER, cols INTEGER, nnz INTEGER, dtype TEXT, is2d3d INTEGER,"
            " isspd INTEGER, psym REAL, nsym REAL, kind TEXT)"
        )
        conn.execute("CREATE TABLE IF NOT EXISTS update_table (update_date TIMESTAMP)")
        conn.execute(
            "INSERT OR IGNORE INTO MATRICES VALUES (0, '', '', 0, 0, 0, 'real', 0, 0, 0, 0, '')"
        )
        conn.execute("INSERT INTO update_table VALUES (datetime('now'))")
    conn.close()


# -- the index -------------------------------------------------------------------------


def index_path(base: str, refresh: bool = False) -> Path:
    """The ssgetpy index (SQLite) built from ``<base>/files/ssstats.csv``, cached per base;
    for a local folder without that file, built from its Matrix Market files' headers."""
    path = cache_dir() / "index" / f"{hashlib.sha256(base.encode()).hexdigest()[:16]}.db"
    folder = local_folder(base)
    if folder is not None:  # rebuilt once per process: headers only, and the folder may change
        if path not in _FOLDER_INDEXES:
            _build_folder_index(folder, path)
            _FOLDER_INDEXES.add(path)
        return path
    if not refresh and path.is_file() and time.time() - path.stat().st_mtime < INDEX_MAX_AGE_S:
        return path
    url = f"{base}/files/ssstats.csv"
    csv_path = path.with_suffix(".csv")
    csv_path.unlink(missing_ok=True)
    csv_path.with_name(csv_path.name + ".part").unlink(missing_ok=True)
    try:
        download(url, csv_path, max_bytes=INDEX_MAX_BYTES, progress=False, sized=False)
    except CognateError as exc:
        if base.startswith("file:"):
            raise
        raise CognateError(
            f"{exc}; offline? --mirror DIR searches a local folder of Matrix Market files "
            f"(.mtx, .mtx.gz; indexed from their headers) or a copy of the collection "
            f"(${URL_ENV} sets it for every command)"
        ) from None
    try:
        _build_index(url, csv_path, path)
    finally:
        csv_path.unlink(missing_ok=True)
    return path


def _build_index(url: str, csv_path: Path, path: Path) -> None:
    db, csvindex = _ssgetpy()
    lines = csv_path.read_text(encoding="utf-8", errors="replace").splitlines()
    # ssstats.csv: line 1 the number of matrices, line 2 the revision date, then one row each.
    if len(lines) < 2 or not lines[0].strip().isdigit():
        raise CognateError(f"{url}: not a SuiteSparse index (first line is not a matrix count)")
    declared = int(lines[0])
    rows = [line for line in lines[2:] if line.strip()]
    if len(rows) != declared:
        raise CognateError(f"{url}: index declares {declared} matrices but lists {len(rows)}")
    with atomic_path(path) as tmp:
        index = db.MatrixDB(db=str(tmp))
        try:
            index.refresh(_checked_rows(url, csvindex.gen_rows(rows)))
        finally:
            index.conn.close()


# -- a local folder of Matrix Market files as the collection -----------------------------

MM_SUFFIXES = (".mtx", ".mtx.gz")
LOCAL_GROUP = "local"  # the group of files at the folder's top level
_HEADER_LINES = 100_000  # comment lines read before the size line; a longer header is refused
_FOLDER_INDEXES: set[Path] = set()  # the folder indexes this process built


def local_folder(base: str) -> Path | None:
    """The folder a ``file://`` base names when it is not a copy of the collection (no
    ``files/ssstats.csv``): a folder of Matrix Market files, indexed from their headers."""
    if not base.startswith("file:"):
        return None
    folder = Path(urllib.request.url2pathname(urllib.parse.urlparse(base).path))
    return None if (folder / "files" / "ssstats.csv").is_file() else folder


def folder_matrices(folder: Path) -> dict[str, Path]:
    """``GROUP/NAME`` -> file for the Matrix Market files under ``folder``: the group is the
    file's own folder below ``folder`` (``local`` at the top), the name its stem. Names
    unsafe as path components are left out, as in the collection's index."""
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*")):
        suffix = next((s for s in MM_SUFFIXES if path.name.endswith(s)), None)
        if suffix is None or not path.is_file():
            continue
        parent = path.parent.relative_to(folder)
        group = parent.as_posix().replace("/", "_") if parent.parts else LOCAL_GROUP
        name = path.name[: -len(suffix)]
        if _COMPONENT.fullmatch(group) and _COMPONENT.fullmatch(name):
            found.setdefault(f"{group}/{name}", path)  # x.mtx before x.mtx.gz
    return found


def mm_header(path: Path) -> tuple[int, int, int, str, str]:
    """(rows, cols, stored entries, field, symmetry) from a Matrix Market file's header
    alone (the banner and the size line; the entries are never read)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as stream:
            banner = stream.readline(1024).decode("ascii", "replace").split()
            if len(banner) != 5 or [w.lower() for w in banner[:2]] != ["%%matrixmarket", "matrix"]:
                raise CognateError(f"{path}: not a Matrix Market file (no %%MatrixMarket banner)")
            for _ in range(_HEADER_LINES):
                raw = stream.readline(1024)
                line = raw.strip()
                if not raw or (line and not line.startswith(b"%")):
                    break
            if not line or line.startswith(b"%"):
                raise CognateError(f"{path}: no size line after the banner and comments")
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CognateError(f"{path}: cannot read its header ({exc})") from None
    layout, field, symmetry = (word.lower() for word in banner[2:])
    sizes = line.split()
    want = 3 if layout == "coordinate" else 2
    if len(sizes) != want or not all(n.isdigit() for n in sizes):
        shown = line[:60].decode("ascii", "replace")
        raise CognateError(f"{path}: size line {shown!r} is not {want} whole numbers")
    rows, cols = int(sizes[0]), int(sizes[1])
    nnz = int(sizes[2]) if layout == "coordinate" else rows * cols
    return rows, cols, nnz, field, symmetry


def _build_folder_index(folder: Path, path: Path) -> None:
    """An ssgetpy index of ``folder``'s Matrix Market files; a file whose header cannot be
    read is left out with a warning (one bad file does not hide the others)."""
    files = folder_matrices(folder)
    if not files:
        raise CognateError(
            f"{folder}: no Matrix Market files (.mtx, .mtx.gz) and no files/ssstats.csv "
            "(a copy of the collection): nothing to search"
        )
    rows = []
    for number, (full, file) in enumerate(files.items(), 1):
        try:
            n_rows, n_cols, nnz, field, symmetry = mm_header(file)
        except CognateError as exc:
            print(f"warning: left out of the index: {exc}", file=sys.stderr, flush=True)
            continue
        group, name = full.split("/")
        dtype = {"pattern": "binary", "complex": "complex"}.get(field, "real")
        sym = 0.0 if symmetry == "general" else 1.0
        rows.append(
            (number, group, name, n_rows, n_cols, nnz, dtype, False, False, sym, sym, "local file")
        )
    db, _ = _ssgetpy()
    with atomic_path(path) as tmp:
        index = db.MatrixDB(db=str(tmp))
        try:
            index.refresh(rows)
        finally:
            index.conn.close()


def _checked_rows(url: str, rows: Iterator[tuple]) -> Iterator[tuple]:
    """Rows as parsed by ssgetpy; a malformed line is an error naming it, while a row whose
    group or name is unsafe as a path component is left out (it could not be fetched)."""
    line = 3  # the line being parsed (after the count and the date)
    try:
        for row in rows:
            if _COMPONENT.fullmatch(row[1]) and _COMPONENT.fullmatch(row[2]):
                yield row
            line += 1
    except (ValueError, IndexError) as exc:
        raise CognateError(f"{url}: line {line} is not a SuiteSparse index row ({exc})") from None


def _entry(m: Any) -> IndexEntry:
    return IndexEntry(
        int(m.id),
        m.group,
        m.name,
        int(m.rows),
        int(m.cols),
        int(m.nnz),
        m.dtype,
        bool(m.is2d3d),
        bool(m.isspd),
        m.kind,
    )


def _query(base: str, refresh: bool, **constraints: Any) -> list[IndexEntry]:
    db, _ = _ssgetpy()
    index = db.MatrixDB(db=str(index_path(base, refresh)))
    try:
        return [_entry(m) for m in index.search(limit=-1, **constraints)]  # LIMIT -1: all
    finally:
        index.conn.close()


def search(
    base: str,
    *,
    name: str | None = None,
    kind: str | None = None,
    dtype: str | None = None,
    rows: Bounds = (None, None),
    cols: Bounds = (None, None),
    nnz: Bounds = (None, None),
    square: bool = False,
    limit: int | None = None,
    refresh: bool = False,
) -> list[IndexEntry]:
    """Matrices of the index matching every filter, in collection (id) order.

    ``name``: ``[GROUP/]PATTERN``, a case-insensitive substring of the name, or a glob
    when it contains ``*`` or ``?``. ``kind``: a substring of the problem kind.
    """
    group, pattern = _split_name(name)
    if kind is not None and not _KIND_PATTERN.fullmatch(kind):
        raise CognateError(f"--kind {kind!r}: use letters, digits, spaces and , . / ( ) + -")
    like = pattern.replace("*", "%").replace("?", "_") if pattern else None
    found = _query(
        base,
        refresh,
        group=group,
        name=like,
        kind=kind,
        dtype=dtype,
        rowbounds=rows,
        colbounds=cols,
        nzbounds=nnz,
    )
    if pattern and any(c in pattern for c in "*?"):
        found = [e for e in found if fnmatch.fnmatchcase(e.name.lower(), pattern.lower())]
    if square:
        found = [e for e in found if e.rows == e.cols]
    return found if limit is None else found[:limit]


def _split_name(name: str | None) -> tuple[str | None, str | None]:
    if not name:
        return None, None
    if not _NAME_PATTERN.fullmatch(name):
        raise CognateError(f"--name {name!r}: use [GROUP/]NAME with letters, digits, _ . + - * ?")
    group, _, pattern = name.rpartition("/")
    return group or None, pattern or None


def lookup(base: str, names: Iterable[str], refresh: bool = False) -> list[IndexEntry]:
    """Index entries for exact names (``NAME`` or ``GROUP/NAME``), in the order given."""
    entries = []
    for full in names:
        group, _, name = full.rpartition("/")
        if not _COMPONENT.fullmatch(name) or (group and not _COMPONENT.fullmatch(group)):
            raise CognateError(f"{full!r}: not a SuiteSparse matrix name ([GROUP/]NAME)")
        found = _query(base, refresh, group=group or None, name=name)
        exact = [e for e in found if e.name.lower() == name.lower()]
        if not exact:
            raise CognateError(f"{full}: no such matrix in the index at {base}")
        if len(exact) > 1:
            choices = ", ".join(e.full_name for e in exact)
            raise CognateError(f"{full}: ambiguous, give the group: {choices}")
        entries.append(exact[0])
    return entries


# -- downloads -------------------------------------------------------------------------
# Written here rather than ssgetpy's Matrix.download, which sleeps 0.1 s per 4 KiB chunk
# (~40 KB/s), cannot resume, checks nothing and extracts with tarfile.extractall.


def download(
    url: str,
    dest: Path,
    *,
    max_bytes: int | None = None,
    progress: bool = True,
    sized: bool = True,
) -> int:
    """Stream ``url`` to ``dest`` via ``dest.part``; returns the size in bytes.

    A ``.part`` left by an interrupted run is resumed with an HTTP Range request. The size
    must equal the server's Content-Length; only then is the file renamed into place.
    ``sized=False`` accepts a server that sends no length (then ``max_bytes`` still caps it).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    for _attempt in range(2):  # the second attempt starts over after an unusable .part
        offset = _part_size(part)
        response, total = _open(url, offset)
        if response is None:  # 416: nothing left to send
            if total == offset:
                break
            part.unlink()
            continue
        with response:
            if response.status == 206:
                start = _content_range(response.headers.get("Content-Range"))[0]
                if start != offset:
                    part.unlink()
                    continue
            else:  # a full body (the server ignored Range, or there was no .part)
                offset = 0
            total = _total_size(url, response, sized)
            if max_bytes is not None and total is not None and total > max_bytes:
                raise CognateError(
                    f"{url}: {total / 1e6:.1f} MB exceeds the limit of {max_bytes / 1e6:.1f} MB"
                )
            _stream(url, response, part, offset, total or max_bytes, progress)
        break
    else:
        raise CognateError(f"{url}: the server does not honour resume requests")
    size = part.stat().st_size
    if total is not None and size != total:
        raise CognateError(
            f"{url}: incomplete download ({size} of {total} bytes); run again to resume"
        )
    os.replace(part, dest)
    return size


def _part_size(part: Path) -> int:
    """The bytes of an interrupted download's ``part`` (0 when there is none). Anything but
    a regular file there (a planted symbolic link, a FIFO) is refused: it is not ours, and
    writing through it would truncate a file outside the cache."""
    try:
        info = os.lstat(part)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise CognateError(
            f"{part}: is {kind}, not a partial download cognate wrote; refusing to write "
            "through it (remove it)"
        )
    return info.st_size


def _open(url: str, offset: int) -> tuple[Any, int | None]:
    headers = {"User-Agent": f"cognate/{__version__}"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        return urllib.request.urlopen(request, timeout=TIMEOUT_S), None
    except urllib.error.HTTPError as exc:
        with exc:
            if exc.code == 416 and offset:
                return None, _content_range(exc.headers.get("Content-Range"))[2]
            raise CognateError(f"{url}: HTTP error {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        verb = "cannot read" if url.startswith("file:") else "cannot connect"
        raise CognateError(f"{url}: {verb} ({getattr(exc, 'reason', exc)})") from None


def _content_range(value: str | None) -> tuple[int | None, int | None, int | None]:
    """(first, last, total) of ``bytes first-last/total`` or ``bytes */total``."""
    match = re.fullmatch(r"bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)", (value or "").strip())
    if not match:
        return None, None, None
    first, last, total = (int(g) if g and g != "*" else None for g in match.groups())
    return first, last, total


def _total_size(url: str, response: Any, sized: bool) -> int | None:
    if response.status == 206:
        total = _content_range(response.headers.get("Content-Range"))[2]
    else:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
    if total is None and sized:
        raise CognateError(f"{url}: the server sent no file size; cannot verify the download")
    return total


def _stream(
    url: str, response: Any, part: Path, offset: int, total: int | None, show: bool
) -> None:
    """Append the body to ``part``; ``total`` (expected size, or a cap) is never exceeded."""
    received = offset
    console = Console(stderr=True)
    show = show and console.is_terminal  # no bar (nor its stray newline) in logs and pipes
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with (
        open_for_write(part, append=bool(offset)) as out,  # never through a planted link
        Progress(*columns, console=console, disable=not show) as bar,
    ):
        task = bar.add_task(url.rsplit("/", 1)[-1], total=total, completed=offset)
        while True:
            try:
                chunk = response.read(CHUNK_BYTES)
            except OSError as exc:
                raise CognateError(
                    f"{url}: download interrupted at {received} of {total} bytes ({exc}); "
                    "run again to resume"
                ) from None
            if not chunk:
                return
            received += len(chunk)
            if total is not None and received > total:
                out.close()
                part.unlink()
                raise CognateError(f"{url}: the server sent more than {total} bytes")
            out.write(chunk)
            bar.update(task, completed=received)


def fetch(
    entries: Iterable[IndexEntry],
    base: str,
    *,
    max_bytes: int | None = None,
    progress: bool = True,
) -> list[Fetched]:
    """Download each matrix unless cached, and verify a new download by loading it. From a
    local folder of Matrix Market files nothing is copied: its file is the one to use."""
    results = []
    folder = local_folder(base)
    files = folder_matrices(folder) if folder is not None else {}
    for entry in entries:
        if folder is not None:
            file = files[entry.full_name]
            results.append(Fetched(entry, file, "local", file.stat().st_size))
            continue
        path = entry.cache_path()
        lock_path = cache_dir() / ".locks" / f"{entry.group}.{entry.name}.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        # One downloader per file: a second process waits, then finds the file cached.
        with open_for_write(lock_path, append=True) as lock:  # never through a planted link
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.is_file():
                results.append(Fetched(entry, path, "cached", path.stat().st_size))
                continue
            url = entry.url(base)
            size = download(url, path, max_bytes=max_bytes, progress=progress)
            _verify(entry, url, path)
            results.append(Fetched(entry, path, "downloaded", size))
    return results


def _verify(entry: IndexEntry, url: str, path: Path) -> None:
    """The collection publishes no checksums: loading the file and matching the index's shape
    is the content check (on top of the size check against Content-Length)."""
    from cognate.formats.read import load_matrix  # io imports scipy and friends: only when needed

    try:
        shape = load_matrix(path).shape
    except InputError as exc:
        path.unlink(missing_ok=True)
        raise CognateError(
            f"{url}: downloaded file is unreadable ({exc.problem}); removed"
        ) from None
    if shape != (entry.rows, entry.cols):
        path.unlink(missing_ok=True)
        raise CognateError(
            f"{url}: downloaded matrix is {shape[0]} x {shape[1]}, the index says "
            f"{entry.rows} x {entry.cols}; removed"
        )
