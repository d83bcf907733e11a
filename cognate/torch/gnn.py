"""A 2-layer GCN on cognate's tuned kernels or on torch.sparse: what examples/gcn.py trains
and scripts/bench_gnn.py times.

The graph is a sparse matrix (any file cognate reads, a generated graph); GCN propagates
with D^-1/2 (A + I) D^-1/2 of its symmetrised pattern (a rectangular matrix is taken as a
bipartite graph). Features are random; labels follow the graph's structure (each node takes
the class of its nearest of a few random seed nodes), so the model has something to learn
without any download.

With a node order (``propagation(..., order="rcm")``, cognate backend; cognate.torch.order)
the adjacency is tuned as P A P^T and the propagation works in the order; ``GCN.forward``
then moves the (first layer's) features into it once (``to_order``) and the logits back once
(``from_order``), so the model's outputs, loss and gradients are those of the unordered model.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse import csgraph

from cognate.matrix import Matrix, canonicalize
from cognate.torch.operand import TunedSparse
from cognate.torch.ops import spmm

BACKENDS = ("cognate", "torch", "torch-t")


def normalized_adjacency(matrix: Matrix | sp.spmatrix) -> sp.csr_matrix:
    """GCN's D^-1/2 (A + I) D^-1/2 for the symmetrised pattern of ``matrix`` (canonical CSR,
    float32); a rectangular M x N matrix becomes the bipartite graph of M + N nodes."""
    csr = getattr(matrix, "csr", matrix)
    pattern = sp.csr_matrix(csr, dtype=np.float32, copy=True)
    pattern.data[:] = 1.0
    rows, cols = pattern.shape
    if rows != cols:
        pattern = sp.bmat([[None, pattern], [pattern.T, None]], format="csr")
    pattern = (pattern + pattern.T + sp.eye(pattern.shape[0], dtype=np.float32)).tocsr()
    pattern.data[:] = 1.0
    scale = (1.0 / np.sqrt(np.asarray(pattern.sum(axis=1), dtype=np.float64).ravel())).astype(
        np.float32
    )
    return canonicalize(sp.diags(scale) @ pattern @ sp.diags(scale))


def community_labels(adjacency: sp.csr_matrix, classes: int, seed: int = 0) -> np.ndarray:
    """Each node's class: that of its nearest (in hops) of ``4 * classes`` random seed nodes;
    nodes no seed reaches get a random class."""
    rng = np.random.default_rng(seed)
    n = adjacency.shape[0]
    seeds = rng.choice(n, size=min(n, 4 * classes), replace=False)
    hops = adjacency.copy()
    hops.data[:] = 1.0
    _, _, sources = csgraph.dijkstra(
        hops, directed=False, indices=seeds, min_only=True, return_predecessors=True
    )
    label_of_seed = np.zeros(n, dtype=np.int64)
    label_of_seed[seeds] = np.arange(seeds.size) % classes
    labels = rng.integers(0, classes, n)
    reached = sources >= 0
    labels[reached] = label_of_seed[sources[reached]]
    return labels


class _TransposedCSR(torch.autograd.Function):
    """torch.sparse.mm with the transpose given: backward runs A^T @ dY on a CSR built once,
    where plain autograd of torch.sparse.mm transposes A on every backward."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, at: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        ctx.at = at
        return torch.sparse.mm(a, x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return None, None, torch.sparse.mm(ctx.at, grad)


def torch_csr(adjacency: sp.csr_matrix) -> torch.Tensor:
    """``adjacency`` as a torch CSR tensor. Its arrays come from a canonical scipy CSR, so
    the invariants hold and are not re-checked; torch's "CSR is beta" notice is silenced
    here (it says nothing about this use, and a user of the examples read it as a fault)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(
            torch.from_numpy(adjacency.indptr.astype(np.int64)),
            torch.from_numpy(adjacency.indices.astype(np.int64)),
            torch.from_numpy(adjacency.data.astype(np.float32)),
            size=adjacency.shape,
            check_invariants=False,
        )


class OrderedPropagation:
    """``h -> (P A P^T) @ h`` on a TunedSparse with a node order: ``h`` and the result are in
    the order. ``node_order`` tells ``GCN.forward`` to permute the features in and the
    logits out (once per forward)."""

    def __init__(self, ts: TunedSparse) -> None:
        self.ts = ts
        self.node_order = ts.node_order

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return spmm(self.ts, h)


def propagation(
    adjacency: sp.csr_matrix, backend: str, order: str | None = None, **tune: Any
) -> tuple[Callable[[torch.Tensor], torch.Tensor], TunedSparse | None]:
    """``h -> A @ h`` for ``backend``: "cognate" (a TunedSparse, tuned with ``tune``'s
    options), "torch" (torch.sparse.mm on CSR, plain autograd) or "torch-t" (torch.sparse.mm
    with A^T built once for the backward). Returns the function and the TunedSparse.

    ``order`` (cognate only): a node order of TunedSparse ("rcm", "auto" with verify, ...);
    the function is then an ``OrderedPropagation`` working in the order (GCN.forward
    permutes the features in and the logits out)."""
    if order is not None and backend != "cognate":
        raise ValueError(f"order is for the cognate backend, not {backend!r}")
    if backend == "cognate":
        ts = TunedSparse(adjacency, order=order, **tune)
        if ts.node_order is not None:
            return OrderedPropagation(ts), ts
        return (lambda h: spmm(ts, h)), ts
    a = torch_csr(adjacency)
    if backend == "torch":
        return (lambda h: torch.sparse.mm(a, h)), None
    if backend == "torch-t":
        at = torch_csr(adjacency.T.tocsr())
        return (lambda h: _TransposedCSR.apply(a, at, h)), None
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


class GCN(torch.nn.Module):
    """Kipf and Welling's 2-layer GCN: ``A (relu(A (X W1 + b1)) W2 + b2)``; the dense
    products come first, so the SpMMs run at the hidden and the class widths. A
    ``propagate`` with a ``node_order`` (OrderedPropagation) works in that order: the
    features go in with ``to_order`` (after the first linear layer, which acts row by row and
    so commutes with the permutation: the hidden width is moved, not the input width) and the
    logits come out with ``from_order``, once each per forward."""

    def __init__(self, features: int, hidden: int, classes: int, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.layer1 = torch.nn.Linear(features, hidden)
        self.layer2 = torch.nn.Linear(hidden, classes)
        with torch.no_grad():  # seeded, so two backends start from the same weights
            for layer in (self.layer1, self.layer2):
                bound = 1.0 / layer.in_features**0.5
                layer.weight.uniform_(-bound, bound, generator=generator)
                layer.bias.uniform_(-bound, bound, generator=generator)

    def forward(
        self, propagate: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
    ) -> torch.Tensor:
        order = getattr(propagate, "node_order", None)
        h = self.layer1(x)
        if order is not None:  # after layer1: hidden columns to move, not the input features
            h = order.to_order(h)
        hidden = torch.relu(propagate(h))
        logits = propagate(self.layer2(hidden))
        return logits if order is None else order.from_order(logits)
