"""cognate's tuned SpMM / SDDMM kernels as differentiable PyTorch operators.

    import cognate.torch as ct
    ts = ct.TunedSparse(A, widths=(64,))   # tune A (and A^T) once per dense width
    Y = ts @ X                             # or ct.spmm(ts, X): autograd through tuned kernels
    v = ct.sddmm(ts, X, Y)                 # A * (X @ Y^T) at A's pattern, differentiable
    layer = ct.SparseLinear(mask)          # a linear layer with a fixed sparsity mask

float32 on the cpu only. Imported only when used: ``import cognate`` and the CLI do not load
torch because of it. Inside this package ``import torch`` is PyTorch (absolute imports).
"""

from __future__ import annotations

from cognate.torch.layers import SparseLinear, mask_matrix
from cognate.torch.operand import TunedSparse
from cognate.torch.ops import sddmm, spmm, spmm_t
from cognate.torch.order import NodeOrder, choose_node_order, node_order

__all__ = [
    "NodeOrder",
    "SparseLinear",
    "TunedSparse",
    "choose_node_order",
    "mask_matrix",
    "node_order",
    "sddmm",
    "spmm",
    "spmm_t",
]
