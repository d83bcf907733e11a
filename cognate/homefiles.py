"""Files cognate keeps in its home (``$COGNATE_HOME``): read safely, written atomically.

A home may be shared (a team cache, a CI runner's) or tampered with, and several cognate
processes may use it at once. Every cache file read from it goes through ``read_home``:

- opened without following a symbolic link (``O_NOFOLLOW``) and without blocking
  (``O_NONBLOCK``: a FIFO planted there would otherwise hang the open forever);
- used only when ``fstat`` says it is a regular file, and only up to a size bound checked
  *before* reading (a link to /dev/zero, a 1 GB file);
- a defect (and the caller's own validation failing: ``ignore``) is one warning line naming
  the file, and the caller recomputes what the file held; never an error.

Writers replace a file atomically (``cognate.util.atomic_path``), under ``home_lock`` where
several processes read-modify-write one file, and ``clean_leftovers`` (called holding that
lock) removes the temp files of writers that were killed mid-write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from cognate.errors import CognateError

_WARNED: set[tuple[str, str]] = set()


def ignore(path: str | Path, why: str, then: str = "computed again") -> None:
    """One warning line on stderr: ``path`` is ignored because of ``why`` (once per process
    for each file and reason, so a loop over a bad cache does not repeat it)."""
    key = (str(path), why)
    if key in _WARNED:
        return
    _WARNED.add(key)
    print(f"cognate: warning: {path}: ignored ({why}); {then}", file=sys.stderr, flush=True)


def open_regular(path: str | Path, limit: int | None = None) -> IO[bytes]:
    """``path`` opened for reading if it is a regular file (not a link, FIFO, device or
    folder) of at most ``limit`` bytes; else ``CognateError`` saying which.
    ``FileNotFoundError`` passes through (a missing cache file is no defect)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CognateError("a symbolic link, not a file cognate wrote") from None
        raise CognateError(f"cannot open: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CognateError(f"not a regular file ({_kind(info.st_mode)})")
        if limit is not None and info.st_size > limit:
            raise CognateError(f"{info.st_size} bytes, over the bound of {limit}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_home(path: str | Path, limit: int, then: str = "computed again") -> bytes | None:
    """The bytes of the home file ``path``, or None when it is missing or defective (then
    with one warning line, see ``ignore``). ``limit``: the most bytes a valid file has; a
    file that grows while it is read is cut there and refused."""
    try:
        with open_regular(path, limit) as handle:
            raw = handle.read(limit + 1)
    except FileNotFoundError:
        return None
    except CognateError as err:
        ignore(path, str(err), then)
        return None
    except OSError as err:
        ignore(path, f"cannot read: {err.strerror or err}", then)
        return None
    if len(raw) > limit:
        ignore(path, f"over the bound of {limit} bytes", then)
        return None
    return raw


def open_for_write(path: str | Path, append: bool) -> IO[bytes]:
    """``path`` opened for writing (created 0644, else appended to or truncated) only if it
    is a regular file this process may replace: a symbolic link or anything but a regular
    file is one ``CognateError`` line, its target untouched."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CognateError(
                f"{path}: is a symbolic link, not a file cognate wrote; refusing to write "
                "through it (remove it)"
            ) from None
        raise CognateError(f"{path}: cannot write: {err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CognateError(
                f"{path}: is {_kind(info.st_mode)}, not a file cognate wrote; refusing to "
                "write to it (remove it)"
            )
        os.set_blocking(fd, True)
        if append:
            os.lseek(fd, 0, os.SEEK_END)
        else:
            os.ftruncate(fd, 0)
        return os.fdopen(fd, "ab" if append else "wb")
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def home_lock(path: str | Path) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``<path>.lock`` (one writer of ``path`` at a time,
    across processes); yields False, holding nothing, where no lock file can be made (a
    read-only home: the caller then skips its write)."""
    lock = Path(f"{path}.lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open_for_write(lock, append=True)
    except (OSError, CognateError):
        yield False
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield True


def make_room(path: str | Path) -> None:
    """Remove an empty folder at ``path`` so a file can be renamed there (a rename replaces
    a link, FIFO or file itself, never what a link points at). A folder with files in it is
    left alone: it is the user's to remove, and the caller's rename says so."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        with contextlib.suppress(OSError):
            path.rmdir()


def clean_leftovers(path: str | Path) -> int:
    """Remove the temp files that ``atomic_path`` writers of ``path`` left when they were
    killed (``.<name>.<random>.tmp`` beside it); call it holding ``home_lock(path)``, under
    which no live writer has one. Returns how many were removed."""
    path = Path(path)
    removed = 0
    with contextlib.suppress(OSError):
        for leftover in path.parent.glob(f".{path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                if not leftover.is_symlink() and leftover.is_file():
                    leftover.unlink()
                    removed += 1
    return removed


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"
