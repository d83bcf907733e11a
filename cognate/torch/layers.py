"""``SparseLinear``: a linear layer whose weight has a fixed sparsity mask, on tuned kernels.

The weight W (out x in) keeps only the mask's entries (a DynaDiag k-diagonal, block or N:M
mask from ``cognate.synth``, or any sparse pattern); its values on the mask are the layer's
parameter. ``y = x @ W^T + b`` runs as the SpMM ``W @ x^T`` (width = the batch size, tuned on
first use per batch size), so the backward's ``W^T @ dY^T`` and the weight gradient (an SDDMM
at the mask) are cognate kernels too.

Permutations (the permutation-augmented structured layers, y = S(P x)): with ``row_perm``
/ ``col_perm`` the weight is ``W[row_perm[i], col_perm[j]] = S[i, j]`` for the mask S, the
convention of a cognate ``Matrix`` that carries index maps. The maps are part of W's sparse
operand, not a pass over the features: a CSR schedule reads the permuted column indices
directly (a gather of input features inside the kernel), and DIA / reordered-BCSR schedules
run over S and read B / write C through the maps. No shuffle of x or y happens.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from cognate.errors import CognateError
from cognate.matrix import Matrix, canonicalize, check_permutation
from cognate.torch.operand import TunedSparse
from cognate.torch.ops import spmm


def mask_matrix(mask: Any, row_perm: Any = None, col_perm: Any = None) -> Matrix:
    """The weight's sparse pattern as a Matrix carrying the permutations as index maps.

    ``mask``: a cognate Matrix (its own index maps kept; then no ``row_perm``/``col_perm``),
    a scipy sparse matrix, or a dense boolean / 0-1 numpy array or torch tensor."""
    if isinstance(mask, Matrix):
        if mask.permuted and (row_perm is not None or col_perm is not None):
            raise CognateError(
                "SparseLinear: the mask already carries index maps; pass row_perm/col_perm"
                " only with an unpermuted mask"
            )
        if row_perm is None and col_perm is None:
            return mask
        mask = mask.csr
    if isinstance(mask, torch.Tensor):
        mask = mask.to_dense() if mask.layout != torch.strided else mask
        mask = mask.detach().cpu().numpy()
    if isinstance(mask, np.ndarray):
        if mask.ndim != 2:
            raise CognateError(f"SparseLinear: a dense mask must be 2-D, got shape {mask.shape}")
        mask = sp.csr_matrix(mask != 0)
    if not sp.issparse(mask):
        raise CognateError(
            f"SparseLinear: mask must be a Matrix, scipy sparse matrix or 2-D array, got"
            f" {type(mask).__name__}"
        )
    s = sp.coo_matrix(mask)
    rows, cols = s.shape
    if s.nnz == 0:
        raise CognateError(f"SparseLinear: the mask of shape {s.shape} keeps no entry")
    rp = check_permutation(row_perm, rows, "SparseLinear: row_perm")
    cp = check_permutation(col_perm, cols, "SparseLinear: col_perm")
    row = s.row if rp is None else rp[s.row]
    col = s.col if cp is None else cp[s.col]
    pattern = sp.coo_matrix((np.ones(s.nnz, np.float32), (row, col)), shape=s.shape)
    source = f"mask {rows}x{cols} nnz={s.nnz}"
    return Matrix("sparse-linear", canonicalize(pattern), source, "pattern", "general", rp, cp)


class SparseLinear(torch.nn.Module):
    """``y = x @ W^T + b`` with W fixed to a sparse mask (out_features x in_features).

    ``weight``: the values on the mask (W.nnz, W's canonical CSR order), initialised like
    ``nn.Linear`` (uniform in +-1/sqrt(mean entries per row)). ``bias``: out_features or
    None. ``row_perm`` / ``col_perm``: index maps (module docstring). ``tune``: options for
    ``TunedSparse`` (``verify``, ``model``, ``widths`` = batch sizes to tune now, ...).
    Input: (..., in_features) float32 on the cpu.
    """

    def __init__(
        self,
        mask: Any,
        bias: bool = True,
        row_perm: Any = None,
        col_perm: Any = None,
        **tune: Any,
    ) -> None:
        super().__init__()
        matrix = mask_matrix(mask, row_perm, col_perm)
        self.operand = TunedSparse(matrix, **tune)
        self.out_features, self.in_features = matrix.shape
        bound = 1.0 / math.sqrt(max(1.0, matrix.nnz / self.out_features))
        self.weight = torch.nn.Parameter(torch.empty(matrix.nnz).uniform_(-bound, bound))
        self.bias = (
            torch.nn.Parameter(torch.empty(self.out_features).uniform_(-bound, bound))
            if bias
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != self.in_features:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(
                f"SparseLinear: input of shape {shape}, expected (..., {self.in_features})"
            )
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        y = spmm(self.operand, flat.t().contiguous(), self.weight).t()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def dense_weight(self) -> torch.Tensor:
        """W as a dense (out_features x in_features) tensor (for checks and export)."""
        return self.operand.to_torch(self.weight.detach()).to_dense()

    def extra_repr(self) -> str:
        m = self.operand.matrix
        return (
            f"in_features={self.in_features}, out_features={self.out_features},"
            f" nnz={m.nnz}, bias={self.bias is not None}, permuted={m.permuted}"
        )
