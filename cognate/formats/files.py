"""Which files are matrix files: the suffixes cognate reads, a matrix's name from its file
name, and folders expanded to the matrix files inside them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cognate.errors import InputError

MATRIX_SUFFIXES: tuple[str, ...] = (".mtx.gz", ".tar.gz", ".tgz", ".mtx", ".npz", ".csr")


def matrix_name(path: str | Path) -> str:
    """The file name without its matrix suffix (``bcsstk13.mtx.gz`` -> ``bcsstk13``)."""
    name = Path(path).name
    suffix = matrix_suffix(name)
    return name[: -len(suffix)] if suffix else Path(name).stem


def matrix_suffix(name: str) -> str | None:
    lower = name.lower()
    return next((s for s in MATRIX_SUFFIXES if lower.endswith(s)), None)


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
                and matrix_suffix(p.name)
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
