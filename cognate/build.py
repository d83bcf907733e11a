"""Compile generated C to a shared library, cached on disk by a hash of source and flags.

Safe under concurrent collectors: each compiler works in a private folder
(``build-<pid>-*``) and atomically renames the library into place, so a reader never sees
a half-written library. The command line is built from constants only; callers pass
source text, never flags.

The cache keeps a manifest: beside each ``k_<hash>.so`` a ``k_<hash>.so.sha256`` holding
the library's own sha256, written after the library. A library is used only when its
manifest entry matches (checked before returning a cached path and again before loading);
one without an entry or with a wrong one (a foreign file, a damaged disk) is rebuilt. Both
are read through ``homefiles.read_home`` (no link followed, no FIFO waited on, size bounded):
a link, FIFO, device or folder there is one warning line and counts as absent.
Build folders of processes that died mid-compile are removed when a process first uses
the cache.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from functools import cache, lru_cache
from pathlib import Path

from cognate.errors import CognateError
from cognate.homefiles import make_room, read_home
from cognate.paths import cognate_home

CC = os.environ.get("CC", "gcc") if os.environ.get("CC", "gcc") in ("gcc", "cc", "clang") else "gcc"
BASE_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fPIC", "-shared", "-std=c11")
OPENMP_FLAGS: tuple[str, ...] = ("-fopenmp",)
_BUILD_PREFIX = "build-"
_LEGACY_MIN_AGE_S = 3600.0  # tmp* folders of older cognate versions carry no pid
MAX_LIBRARY_BYTES = 256 << 20  # a generated kernel library is well under 1 MiB
_MAX_ENTRY_BYTES = 1024  # a manifest entry: one hex sha256 and a newline
_REBUILD = "the kernel is built again"


def kernel_cache_dir() -> Path:
    path = cognate_home() / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    _clean_partial_builds(path)
    return path


@cache
def _clean_partial_builds(folder: Path) -> None:
    """Remove build folders whose process is gone (once per process and folder)."""
    for entry in folder.iterdir():
        if not entry.is_dir():
            continue
        if entry.name.startswith(_BUILD_PREFIX):
            pid = entry.name[len(_BUILD_PREFIX) :].split("-", 1)[0]
            stale = pid.isdigit() and not _alive(int(pid))
        else:  # an old-style tempfile folder: only once nobody can still be compiling there
            stale = entry.name.startswith("tmp") and _age_s(entry) > _LEGACY_MIN_AGE_S
        if stale:
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _sha256(path: Path) -> str:
    """sha256 of a library this process just built (in its private build folder)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(lib: Path) -> Path:
    return lib.with_name(lib.name + ".sha256")


def verified(lib: Path) -> bool:
    """Whether ``lib`` exists, is a regular file and matches its manifest entry."""
    entry = read_home(_manifest(lib), _MAX_ENTRY_BYTES, then=_REBUILD)
    if entry is None:
        return False
    body = read_home(lib, MAX_LIBRARY_BYTES, then=_REBUILD)
    return body is not None and entry.strip() == hashlib.sha256(body).hexdigest().encode()


def _make_room(out: Path) -> None:
    """Clear an empty folder at ``out`` for the built library; a folder with files in it is
    one line for the user to remove."""
    make_room(out)
    if out.is_dir() and not out.is_symlink():
        raise CognateError(f"{out}: is a folder, not a library cognate built; remove it")


def compile_c(source: str, *, openmp: bool = True) -> Path:
    """Return the path of a shared library built from ``source`` (compiled at most once)."""
    flags = BASE_FLAGS + (OPENMP_FLAGS if openmp else ())
    digest = hashlib.sha256((CC + " ".join(flags) + "\n" + source).encode()).hexdigest()[:24]
    out = kernel_cache_dir() / f"k_{digest}.so"
    if verified(out):
        return out
    if shutil.which(CC) is None:
        raise CognateError(f"C compiler {CC!r} not found: install gcc")
    prefix = f"{_BUILD_PREFIX}{os.getpid()}-"
    with tempfile.TemporaryDirectory(prefix=prefix, dir=out.parent) as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        lib = Path(tmp) / "kernel.so"
        # Relative names, run in the build folder: the library embeds the source's name, so
        # every builder of one source writes the same bytes (and the same manifest entry).
        proc = subprocess.run(
            [CC, *flags, "-o", lib.name, src.name, "-lm"],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["no output"])[0]
            raise CognateError(f"kernel compilation failed: {first}")
        entry = Path(tmp) / "kernel.so.sha256"
        entry.write_text(_sha256(lib) + "\n")
        # Library first, then its entry, each renamed atomically: an entry never names a
        # library that is not in place. Concurrent builders of the same source agree.
        for built, place in ((lib, out), (entry, _manifest(out))):
            _make_room(place)
            os.replace(built, place)
    return out


@lru_cache(maxsize=256)
def load_library(path: str) -> ctypes.CDLL:
    """ctypes handle for a compiled library (one per process and path), after checking the
    cache manifest for libraries of the kernel cache."""
    lib = Path(path)
    if lib.parent == kernel_cache_dir() and not verified(lib):
        raise CognateError(f"{lib}: kernel library does not match the cache manifest")
    return ctypes.CDLL(path)
