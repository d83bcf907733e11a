"""A node order for a square sparse matrix: features kept in a locality-friendly numbering.

The plain CSR SpMM reads B's rows at A's column indices; on a graph in an arbitrary node
numbering those reads scatter over all of B. Renumbering the nodes (A replaced by P A P^T,
B and C kept in the new numbering by the caller) puts rows that share neighbours next to each
other. A GNN can keep its node features (and labels) in one numbering for the whole training,
so the permutation is paid once, not per product (permuting on every forward costs more than
the order saves: docs/benchmarks.md, "GNN training"). Which order wins depends on the matrix
(RCM helps scattered graphs and hurts matrices already in a banded order: docs/benchmarks.md,
"Locality schedules"), so ``choose_node_order`` measures.

- ``NodeOrder``: ``perm`` (``perm[new] = old``), ``inverse``, ``to_order(X)`` = X[perm],
  ``from_order(Y)`` = Y[inverse], ``apply(A)`` = P A P^T (``(P A P^T)[i, j] = A[perm[i],
  perm[j]]``, canonical float32 CSR, the same values);
- ``node_order(A, by)``: the order of ``by`` in NODE_ORDERS (``identity`` and the orders of
  cognate.targets.cpu.row_orders, computed on A's own pattern);
- ``choose_node_order(A, width, ...)``: the candidate whose P A P^T runs the baseline cpu SpMM
  fastest with B already in its order, measured in this process (checked against scipy
  first, interleaved rounds under the timing lock).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from cognate.errors import CognateError
from cognate.matrix import canonicalize
from cognate.timing import Load
from cognate.torch.inputs import as_operand_matrix
from cognate.util import positive_int

NODE_ORDERS: tuple[str, ...] = ("identity", "rcm", "degree", "cluster")


def _square_csr(A: Any) -> sp.csr_matrix:
    """A's canonical CSR (anything ``TunedSparse`` takes); a one-line CognateError unless
    A is square."""
    if sp.issparse(A):
        csr = canonicalize(A)
    else:
        csr = as_operand_matrix(A).csr
    rows, cols = csr.shape
    if rows != cols:
        raise CognateError(
            f"node order: A is {rows} x {cols}; a node order needs a square matrix (a graph's"
            " adjacency; cognate.torch.gnn makes a bipartite square graph of a rectangular one)"
        )
    return csr


@dataclass(frozen=True, eq=False)
class NodeOrder:
    """A permutation of a square matrix's n nodes: ``perm[new] = old`` (int64 tensor)."""

    perm: torch.Tensor
    by: str = "custom"
    inverse: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        perm = torch.as_tensor(self.perm).detach().to(device="cpu", dtype=torch.int64)
        perm = perm.contiguous()
        n = perm.numel()
        if perm.dim() != 1:
            raise CognateError(f"node order: perm must be 1-D, got shape {tuple(perm.shape)}")
        inverse = torch.full((n,), -1, dtype=torch.int64)
        if n and (int(perm.min()) < 0 or int(perm.max()) >= n):
            raise CognateError(f"node order: perm has an index outside 0..{n - 1}")
        inverse[perm] = torch.arange(n, dtype=torch.int64)
        if n and bool((inverse < 0).any()):
            raise CognateError(f"node order: perm is not a permutation of {n} nodes")
        object.__setattr__(self, "perm", perm)
        object.__setattr__(self, "inverse", inverse)

    @property
    def n(self) -> int:
        return int(self.perm.numel())

    def __len__(self) -> int:
        return self.n

    def _rows(self, x: Any, index: torch.Tensor, what: str) -> Any:
        if x.shape[0] != self.n:
            raise ValueError(
                f"node order: {what} has {x.shape[0]} rows, the order has {self.n} nodes"
            )
        if isinstance(x, np.ndarray):
            return x[index.numpy()]
        return x.index_select(0, index.to(x.device))

    def to_order(self, x: Any) -> Any:
        """The rows of ``x`` (a tensor or numpy array, one row per node) in the order:
        ``x[perm]`` (index_select: differentiable, a fresh tensor)."""
        return self._rows(x, self.perm, "to_order's input")

    def from_order(self, y: Any) -> Any:
        """Rows in the order back to the original numbering: ``y[inverse]``."""
        return self._rows(y, self.inverse, "from_order's input")

    def apply(self, A: Any) -> sp.csr_matrix:
        """P A P^T: ``(P A P^T)[i, j] = A[perm[i], perm[j]]``, canonical float32 CSR with A's
        values (explicit zeros kept)."""
        from cognate.targets.cpu.structured import structured_view

        csr = _square_csr(A)
        if csr.shape[0] != self.n:
            raise CognateError(f"node order: A has {csr.shape[0]} nodes, the order has {self.n}")
        perm = self.perm.numpy()
        return structured_view(csr, perm, perm).csr

    def __repr__(self) -> str:
        return f"NodeOrder({self.by}, n={self.n})"


def check_order_name(by: object) -> str:
    """``by`` if it names a node order, else a one-line CognateError."""
    if not isinstance(by, str) or by not in NODE_ORDERS:
        names = ", ".join(NODE_ORDERS)
        raise CognateError(f"node order: by={repr(by)[:40]} is not one of {names}")
    return by


def node_order(A: Any, by: str) -> NodeOrder:
    """The node order ``by`` of A's pattern: "identity", "rcm" (reverse Cuthill-McKee of
    A + A^T), "degree" (most entries first) or "cluster" (Jaccard row clusters); see
    cognate.targets.cpu.row_orders. A must be square."""
    by = check_order_name(by)
    csr = _square_csr(A)
    if by == "identity":
        return NodeOrder(torch.arange(csr.shape[0], dtype=torch.int64), by)
    from cognate.targets.cpu.families import view_of
    from cognate.targets.cpu.row_orders import row_order

    order = np.asarray(row_order(view_of(csr), by), dtype=np.int64)
    return NodeOrder(torch.from_numpy(order), by)


def choose_node_order(
    A: Any,
    width: int,
    candidates: Iterable[str] = NODE_ORDERS,
    rounds: int = 7,
    threads: int | None = None,
) -> tuple[NodeOrder, dict[str, float], Load]:
    """Measure the baseline cpu SpMM (WACO's FixedCSR) on each candidate's P A P^T, with a
    random float32 B of ``width`` columns already in that order, in interleaved rounds under
    the timing lock (cognate.timing.time_interleaved); each result is checked against scipy
    first. Returns (the fastest order, {by: median seconds}, the load read before timing).
    A measured choice, never a model's guess: run it on a quiet machine."""
    from cognate.matrix import Matrix
    from cognate.targets.cpu.measure.check import mismatch, reference
    from cognate.targets.cpu.space import make_space
    from cognate.targets.cpu.tuned import ScheduleKernel
    from cognate.timing import time_interleaved

    names = list(dict.fromkeys(check_order_name(by) for by in candidates))
    if not names:
        raise CognateError("choose_node_order: no candidate orders")
    positive_int(width, "choose_node_order: width")
    csr = _square_csr(A)
    b = np.random.default_rng(0).standard_normal((csr.shape[0], width)).astype(np.float32)
    config = make_space("spmm").baseline(csr.shape)
    orders: dict[str, NodeOrder] = {}
    calls = {}
    for by in names:
        order = orders[by] = node_order(csr, by)
        permuted = order.apply(csr)
        kernel = ScheduleKernel(Matrix(f"node-order-{by}", permuted), "spmm", config)
        b_in = np.ascontiguousarray(order.to_order(b))
        out = np.empty((csr.shape[0], width), dtype=np.float32)
        kernel(b_in, out=out)
        problem = mismatch(out, *reference(permuted, "spmm", (b_in,)))
        if problem is not None:
            raise CognateError(f"choose_node_order: the {by} order's kernel is wrong: {problem}")
        calls[by] = _call(kernel, b_in, out)
    timed = time_interleaved(calls, rounds, threads=threads)
    best = min(names, key=lambda by: timed.seconds[by])  # ties: the earlier candidate
    return orders[best], dict(timed.seconds), timed.load


def _call(kernel: Any, b: np.ndarray, out: np.ndarray) -> Any:
    def call() -> None:
        kernel(b, out=out)

    return call
