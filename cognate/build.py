"""Compile generated C to a shared library, cached on disk by a hash of source and flags.

Safe under concurrent collectors: each compiler writes a private temporary file and
atomically renames it into place, so a reader never sees a half-written library. The
command line is built from constants only; callers pass source text, never flags.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from cognate.errors import CognateError
from cognate.paths import cognate_home

CC = os.environ.get("CC", "gcc") if os.environ.get("CC", "gcc") in ("gcc", "cc", "clang") else "gcc"
BASE_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fPIC", "-shared", "-std=c11")
OPENMP_FLAGS: tuple[str, ...] = ("-fopenmp",)


def kernel_cache_dir() -> Path:
    path = cognate_home() / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_c(source: str, *, openmp: bool = True) -> Path:
    """Return the path of a shared library built from ``source`` (compiled at most once)."""
    flags = BASE_FLAGS + (OPENMP_FLAGS if openmp else ())
    digest = hashlib.sha256((CC + " ".join(flags) + "\n" + source).encode()).hexdigest()[:24]
    out = kernel_cache_dir() / f"k_{digest}.so"
    if out.exists():
        return out
    if shutil.which(CC) is None:
        raise CognateError(f"C compiler {CC!r} not found: install gcc")
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        lib = Path(tmp) / "kernel.so"
        proc = subprocess.run(
            [CC, *flags, "-o", str(lib), str(src), "-lm"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["no output"])[0]
            raise CognateError(f"kernel compilation failed: {first}")
        os.replace(lib, out)  # atomic: concurrent builders of the same source agree
    return out


@lru_cache(maxsize=256)
def load_library(path: str) -> ctypes.CDLL:
    """ctypes handle for a compiled library (one per process and path)."""
    return ctypes.CDLL(path)
