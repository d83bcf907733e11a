"""Matrix files: reading (``read.load_matrix``), writing (``write.save_matrix``), one module
per format.

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
  number on a real line); an .npz's index arrays must hold integers (``EntryChecker``).
- A declared shape is priced before anything is allocated (``check_budget``): reading,
  and again featurizing, tuning and collecting, each at its measured cost per row, column
  and entry, against ``$COGNATE_MAX_MEMORY`` (``memory_budget``).
Every problem with a file becomes ``InputError(path, problem)``: one line, no traceback.
"""
