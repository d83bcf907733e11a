"""What ``cognate.torch`` accepts as the sparse operand A, turned into a cognate Matrix.
Below ``operand`` (TunedSparse) and ``order`` (node orders), which both read it."""

from __future__ import annotations

from typing import Any

import scipy.sparse as sp
import torch

from cognate.errors import CognateError
from cognate.matrix import Matrix


def as_operand_matrix(matrix: Any, name: str = "A") -> Matrix:
    """A cognate Matrix from a scipy sparse matrix, a Matrix, a file path, or a torch sparse
    COO / CSR tensor (2-D, on the cpu)."""
    from cognate.api import as_matrix
    from cognate.matrix import canonicalize

    if isinstance(matrix, torch.Tensor):
        if matrix.dim() != 2 or matrix.layout not in (torch.sparse_coo, torch.sparse_csr):
            raise CognateError(
                f"{name}: a torch tensor must be a 2-D sparse COO or CSR tensor, got"
                f" {matrix.dim()}-D {matrix.layout}"
            )
        if matrix.device.type != "cpu":
            raise CognateError(f"{name}: a torch sparse tensor on {matrix.device}; cpu only")
        if matrix.layout == torch.sparse_coo:
            coo = matrix.detach().coalesce()
            index = coo.indices().numpy()
            csr = sp.coo_matrix((coo.values().numpy(), (index[0], index[1])), shape=coo.shape)
        else:
            t = matrix.detach()
            csr = sp.csr_matrix(
                (t.values().numpy(), t.col_indices().numpy(), t.crow_indices().numpy()),
                shape=t.shape,
            )
        matrix = canonicalize(csr)
    return as_matrix(matrix)
