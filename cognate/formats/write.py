"""Writing a matrix: ``.npz`` (scipy's own, plus index maps when permuted) or
``.mtx`` / ``.mtx.gz`` (general, real), atomically."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import fast_matrix_market as fmm
import numpy as np
import scipy.sparse as sp

from cognate.errors import InputError
from cognate.formats.files import matrix_suffix
from cognate.matrix import Matrix


def check_output_path(path: str | Path) -> Path:
    """The path, if ``save_matrix`` can write it (suffix and folder); else ``InputError``."""
    path = Path(path)
    if matrix_suffix(path.name) not in (".npz", ".mtx", ".mtx.gz"):
        raise InputError(path, "output must end in .npz, .mtx or .mtx.gz")
    if not path.parent.is_dir():
        raise InputError(path, "output folder does not exist")
    return path


def save_matrix(matrix: Matrix, path: str | Path) -> Path:
    """Write ``.npz`` (scipy.sparse.save_npz) or ``.mtx`` / ``.mtx.gz`` (general, real).

    Written to a temporary file and renamed, so a reader never sees half a file.
    """
    path = check_output_path(path)
    suffix = matrix_suffix(path.name)
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
