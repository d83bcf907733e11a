"""scipy ``.npz`` (``scipy.sparse.save_npz``), with a cognate file's optional index maps
(``row_perm``, ``col_perm``)."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO

import numpy as np
import scipy.sparse as sp

from cognate.budget import MEMORY_ENV, gib, memory_budget
from cognate.errors import CognateError, InputError
from cognate.formats.checks import check_dims, real_values
from cognate.matrix import canonicalize, check_permutation


def read_npz(path: Path) -> tuple[sp.csr_matrix, str, str]:
    if not zipfile.is_zipfile(path):  # np.load would otherwise talk about pickles
        raise InputError(path, "not a scipy .npz file (not a zip archive)")
    with zipfile.ZipFile(path) as archive:  # a compressed .npz can expand without limit
        unpacked = sum(info.file_size for info in archive.infolist())
    if unpacked > memory_budget():
        raise InputError(
            path,
            f"arrays unpack to {gib(unpacked)} GiB, over the memory budget of "
            f"{gib(memory_budget())} GiB ({MEMORY_ENV} to change)",
        )
    _check_npz_index_types(path)
    matrix = sp.load_npz(path)  # allow_pickle=False inside: no code runs from the file
    rows, cols = (int(n) for n in matrix.shape)
    check_dims(path, rows, cols, int(matrix.nnz))
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
    values = real_values(coo.data, "real" if field == "pattern" else field)
    csr = canonicalize(sp.coo_matrix((values, (coo.row, coo.col)), shape=(rows, cols)))
    if field == "pattern":
        csr.data[:] = 1.0
    return csr, field, "general"


def _canonical_csr(matrix: sp.csr_matrix) -> tuple[sp.csr_matrix, str, str]:
    """An already sorted, duplicate-free CSR in cognate's dtypes, converted in place."""
    field = _field_of_dtype(matrix.data.dtype)
    values = real_values(matrix.data, "real" if field == "pattern" else field)
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


def read_npz_maps(path: Path, shape: tuple[int, int]) -> dict[str, np.ndarray]:
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
