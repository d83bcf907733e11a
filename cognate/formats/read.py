"""``load_matrix``: any matrix file cognate reads (``cognate.formats``), in canonical form."""

from __future__ import annotations

from pathlib import Path

from cognate.budget import memory_budget
from cognate.errors import InputError
from cognate.formats.checks import LIBRARY_ERRORS, check_final, describe
from cognate.formats.files import MATRIX_SUFFIXES, matrix_name, matrix_suffix
from cognate.formats.mtx import read_mtx_file, read_mtx_gz
from cognate.formats.npz import read_npz, read_npz_maps
from cognate.formats.tar import read_tar
from cognate.formats.waco import read_waco_csr
from cognate.matrix import Matrix


def load_matrix(path: str | Path) -> Matrix:
    """Read a matrix file into canonical form; any problem raises ``InputError``."""
    path = Path(path)
    memory_budget()  # a bad COGNATE_MAX_MEMORY is reported as such, before any file problem
    if path.is_dir():  # before the suffix: "unknown format" would send the user astray
        raise InputError(path, "a directory, not a matrix file (give one matrix file)")
    suffix = matrix_suffix(path.name)
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
        ".mtx": read_mtx_file,
        ".mtx.gz": read_mtx_gz,
        ".tar.gz": read_tar,
        ".tgz": read_tar,
        ".npz": read_npz,
        ".csr": read_waco_csr,
    }[suffix]
    try:
        csr, field, symmetry = reader(path)
    except InputError:
        raise
    except LIBRARY_ERRORS as exc:
        raise InputError(path, describe(exc)) from exc
    check_final(path, csr)
    try:
        maps = read_npz_maps(path, csr.shape) if suffix == ".npz" else {}
    except LIBRARY_ERRORS as exc:
        raise InputError(path, describe(exc)) from exc
    return Matrix(matrix_name(path), csr, source=str(path), field=field, symmetry=symmetry, **maps)
