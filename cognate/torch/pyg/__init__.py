"""PyTorch Geometric on cognate's tuned kernels: a two-line change to a stock PyG model.

    import cognate.torch.pyg
    edge_index = cognate.torch.pyg.adjacency(edge_index, num_nodes)  # instead of the edge list

(``cognate.pyg`` is the same front end under its earlier name.)

``adjacency`` returns PyG's ``adj_t`` (target x source, flow "source_to_target") as a genuine
torch sparse CSR tensor, registered with cognate: a ``TunedSparse`` of it (tuned per dense
width on first use, A^T cached, one kernel when the pattern is symmetric) does the products.
PyG's layers fuse message passing into ``spmm(adj_t, x, reduce=aggr)`` whenever the adjacency
is a torch sparse tensor (GCNConv, SAGEConv, GINConv, GraphConv, ...). The integration is an
explicit patch (``patch()``, which ``adjacency`` calls once): the name ``spmm`` that each PyG
module imported (``torch_geometric.utils.spmm``, the conv modules' own imports) and
``gcn_norm`` are replaced by dispatchers that send cognate adjacencies to cognate and every
other input, unchanged, to PyG's own function. ``unpatch()`` restores them.

- ``reduce`` "sum" / "add": ``A @ x``; "mean": ``(A @ x) / in-degree`` (edges counted with
  their multiplicity, as PyG's edge-list path does); "max" / "min": a (max, x) / (min, x)
  SpMM keeping the arg for the backward (minmax.py: a kernel of the cpu pipeline, its
  schedule timed on the graph at first use) over the edge list itself (a duplicated edge is
  one more candidate, not a doubled weight).
  An adjacency without edges gives zeros, as PyG does.
- GCN's normalisation: ``gcn_norm`` of a cognate adjacency returns a second cognate adjacency
  with the pattern A + I (remaining self loops, as PyG's edge-list path: a node's self loop
  keeps the weight of its last occurrence in the edge list, the others get 1, or 2 with
  ``improved`` when the edges are weighted; without ``edge_weight`` every loop is 1) and
  values D^-1/2 (A + I) D^-1/2 (NaN where a degree is negative, 0 where it is 0, as PyG),
  built and tuned once per (improved, add_self_loops) and reused on every call, so
  ``cached=False`` costs no renormalisation either. A GCNConv with ``normalize=False`` uses
  the adjacency as given (pass the normalised one yourself).
- Without the patch the tensor is still a correct torch CSR ``adj_t``: PyG runs its own path.
  A scripted module (``torch.jit.script``) runs PyG's own path too: the dispatchers are
  scriptable and send everything to PyG under TorchScript.
- The adjacency is packed once: changing it in place afterwards (``adj.values().mul_(3)``) is
  refused at its next use (make a new one); ``order=`` is refused (PyG keeps x and the output
  in the edge list's numbering: renumber the graph itself, once).

float32 on the cpu only; the adjacency's values do not train (edge weights that require grad
are refused). Imported only when used; needs torch_geometric (``pip install 'cognate[pyg]'``).
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from cognate.budget import Cost, check_budget
from cognate.errors import CognateError
from cognate.matrix import Matrix, canonicalize
from cognate.targets.cpu.operands import check_live_tensor
from cognate.torch.operand import TunedSparse
from cognate.torch.ops import spmm as tuned_spmm

try:  # the dispatchers' annotations, read by TorchScript when it scripts a PyG layer
    from torch_geometric.typing import Adj, OptPairTensor, OptTensor, SparseTensor
except ImportError:  # without PyG nothing here runs (patch() says what to install)
    Adj = OptPairTensor = OptTensor = SparseTensor = Any

__all__ = [
    "adjacency",
    "check_features",
    "gcn_normalized",
    "is_adjacency",
    "patch",
    "patched",
    "tuned",
    "tuning_seconds",
    "undirected_edges",
    "unpatch",
]

NAME = "cognate.torch.pyg"
INT32_MAX = 2**31 - 1  # the kernels' row, column and entry indices are 32-bit
# Peak bytes of adjacency() per node and per edge (numpy's index copies, scipy's CSR build,
# the torch copies, degrees; measured 26 and 45 on 8M nodes / 8M edges, plus a margin),
# priced before anything is allocated.
ADJACENCY_COST = Cost(per_row=32.0, per_entry=64.0)
# (module, attribute, PyG's original) for each name the patch replaced
_PATCHED: list[tuple[Any, str, Any]] = []
_ORIGINAL: dict[str, Callable[..., Any]] = {}
_REGISTRY: dict[int, _Adjacency] = {}


def _torch_geometric() -> Any:
    try:
        import torch_geometric
        import torch_geometric.nn  # noqa: F401  (imports every conv module: all get patched)
    except ImportError as err:
        raise CognateError(
            f"{NAME} needs torch_geometric (pip install 'cognate[pyg]'): {err}"
        ) from None
    return torch_geometric


@dataclass
class _Edges:
    """What the edge list says beyond the summed CSR: PyG's edge-list semantics for max /
    min (duplicates are separate candidates) and for GCN's remaining self loops."""

    multi: sp.csr_matrix | None  # adj_t with duplicated edges kept apart (None: no duplicate)
    loop_nodes: np.ndarray  # nodes with a self loop
    loop_weights: np.ndarray  # the weight of each one's last loop in the edge list
    weighted: bool  # made with edge_weight (PyG fills missing loops with `fill` only then)
    # the caller's edge_index (a reference): what a layer falling back to PyG runs on, in the
    # order of the caller's edge_attr
    edge_index: torch.Tensor | None = None


@dataclass
class _Adjacency:
    """A registered adj_t: its TunedSparse, in-degrees for "mean", and its normalised forms."""

    tuned: TunedSparse
    tensor: weakref.ref
    degree: torch.Tensor  # (n, 1) float32: edges per target (multiplicity), at least 1
    tune: dict[str, Any]
    version: int  # the tensor's _version when packed: a change in place is refused
    edges: _Edges | None = None  # None: the normalised forms (no edge list behind them)
    normalized: dict[tuple[bool, bool], torch.Tensor] = field(default_factory=dict)
    minmax: Any = None  # minmax.MinMaxCSR, built at the first max / min
    attention: dict[str, Any] = field(default_factory=dict)  # attention.Pattern per loops

    def spmm(self, x: torch.Tensor, reduce: str) -> torch.Tensor | None:
        """``reduce`` of the neighbours' rows of x: sum / mean on the tuned kernels, max / min
        on minmax.py's kernel (None: a reduce PyG's own spmm handles)."""
        if reduce not in ("sum", "add", "mean", "max", "min"):
            return None
        x = check_features(x, self.tuned.shape[1])
        if self.tuned.nnz == 0:  # no kernel embeds an empty matrix; PyG gives zeros
            return _NoEdges.apply(x, self.tuned.shape[0])
        if reduce in ("max", "min"):
            from cognate.torch.pyg.minmax import MinMaxCSR, spmm_minmax

            if self.minmax is None:
                multi = self.edges.multi if self.edges is not None else None
                csr = self.tuned.matrix.csr if multi is None else multi
                self.minmax = MinMaxCSR(csr, self.tune.get("schedule") != "baseline")
            return spmm_minmax(self.minmax, x, reduce)
        out = tuned_spmm(self.tuned, x)
        # in place on the kernel's fresh output (its backward saved x, not out): a second
        # n x width tensor costs more than the division on graphs of many nodes
        return out.div_(self.degree) if reduce == "mean" else out

    def gcn_normalized(self, improved: bool, add_self_loops: bool) -> torch.Tensor:
        key = (bool(improved), bool(add_self_loops))
        if key not in self.normalized:
            fill, loops = 2.0 if improved else 1.0, None
            if add_self_loops and self.edges is not None:  # else: A's stored loops, or fill
                fill = fill if self.edges.weighted else 1.0
                loops = _loop_diagonal(self.edges, self.tuned.shape[0], fill)
            csr = gcn_normalized(self.tuned.matrix.csr, fill, add_self_loops, loops)
            self.normalized[key] = _register(csr, self.degree, self.tune, "gcn-normalized")
        return self.normalized[key]

    def tuning_parts(self) -> dict[str, float]:
        """Tuning seconds so far: A's own kernels, the max / min schedules, GCN's forms, the
        attention layers' patterns."""
        return {
            "sum": self.tuned.tuning_s,
            "minmax": self.minmax.tuning_s if self.minmax is not None else 0.0,
            "normalized": sum(_REGISTRY[id(t)].tuning_s() for t in self.normalized.values()),
            "attention": sum(
                tuned.tuning_s
                for p in self.attention.values()
                for tuned in (p.tuned, *(h.tuned for h in p.heads.values()))
            ),
        }

    def tuning_s(self) -> float:
        return sum(self.tuning_parts().values())


class _NoEdges(torch.autograd.Function):
    """Zeros for an adjacency without edges, differentiable (to any order) like PyG's
    scatter over no edges: every gradient is zero, none is None."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, rows: int) -> torch.Tensor:
        ctx.cols = x.shape[0]
        return x.new_zeros((rows, x.shape[1]))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return _NoEdges.apply(grad, ctx.cols), None


def check_features(x: Any, rows: int) -> torch.Tensor:
    """Node features as the kernels take them, else one clear error naming what is wrong."""
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided:
        raise TypeError(f"{NAME}: node features must be a dense torch.Tensor, got {type(x)}")
    if x.device.type != "cpu":
        raise ValueError(
            f"{NAME}: node features are on {x.device}; cognate's kernels run on the cpu"
            " (use .cpu(), or PyG's own path for another device)"
        )
    if x.dtype != torch.float32:
        raise TypeError(
            f"{NAME}: node features have dtype {x.dtype}; cognate's cpu kernels are float32"
            " only (model.float(), x.float())"
        )
    if x.dim() != 2 or x.shape[0] != rows:
        raise ValueError(
            f"{NAME}: node features have shape {tuple(x.shape)}; the adjacency has {rows}"
            f" source nodes: expected ({rows}, channels)"
        )
    try:  # before any copy: torch's own .contiguous() of a freed tensor crashes
        check_live_tensor(x, f"{NAME}: node features")
    except CognateError as exc:
        raise ValueError(str(exc)) from None
    return x


def _loop_diagonal(edges: _Edges, n: int, fill: float) -> np.ndarray:
    """GCN's remaining self loops as PyG's ``add_remaining_self_loops`` makes them: the last
    loop's weight where a node has one (weighted edges only; 1 otherwise), ``fill`` else."""
    diagonal = np.full(n, fill, dtype=np.float64)
    diagonal[edges.loop_nodes] = edges.loop_weights if edges.weighted else 1.0
    return diagonal


def gcn_normalized(
    csr: sp.csr_matrix,
    fill: float = 1.0,
    add_self_loops: bool = True,
    loops: np.ndarray | None = None,
) -> sp.csr_matrix:
    """D^-1/2 (A + I) D^-1/2 of adj_t as PyG's ``gcn_norm`` computes it for an edge list.
    With ``add_self_loops`` A's diagonal is replaced by ``loops`` (one weight per node; PyG
    removes the stored loops and adds one per node), by default A's stored loop where it has
    one and ``fill`` elsewhere. D: the row sums (in-degrees of the targets), its inverse
    square root 0 where a degree is 0 and NaN where it is negative, as PyG's."""
    a = sp.csr_matrix(csr, dtype=np.float64, copy=True)
    if add_self_loops:
        if loops is None:
            coo = a.tocoo()
            stored = coo.row[coo.row == coo.col]
            loops = np.full(a.shape[0], fill)
            loops[stored] = a.diagonal()[stored]
        a = _add_loops(a, loops)
    degree = np.asarray(a.sum(axis=1)).ravel()
    with np.errstate(divide="ignore", invalid="ignore"):  # PyG: pow(-0.5), inf -> 0
        scale = np.power(degree, -0.5)
    scale[np.isinf(scale)] = 0.0
    # entry by entry, as PyG's scale[source] * w * scale[target]: a product with scipy's
    # diagonal matrices would drop 0 * NaN (zeros are not stored) where PyG gets NaN
    targets = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    a.data = scale[a.indices] * a.data * scale[targets]
    return canonicalize(a)


def _add_loops(csr: sp.csr_matrix, loops: np.ndarray) -> sp.csr_matrix:
    """A without its stored loops, plus ``loops`` on the diagonal (A's explicit zeros kept,
    as PyG keeps edges of weight 0)."""
    coo = csr.tocoo()
    keep = coo.row != coo.col
    n = csr.shape[0]
    rows = np.concatenate([coo.row[keep], np.arange(n)])
    cols = np.concatenate([coo.col[keep], np.arange(n)])
    data = np.concatenate([coo.data[keep], loops])
    return sp.csr_matrix((data, (rows, cols)), shape=csr.shape)


def _register(
    csr: sp.csr_matrix,
    degree: torch.Tensor,
    tune: dict[str, Any],
    name: str,
    edges: _Edges | None = None,
) -> torch.Tensor:
    """A torch CSR tensor of ``csr`` that the patched spmm sends to a TunedSparse of it."""
    tuned = TunedSparse(Matrix(name, csr), **tune)
    with warnings.catch_warnings():  # torch's "sparse CSR is beta" notice, once per tensor
        warnings.simplefilter("ignore", UserWarning)
        tensor = tuned.to_torch()
    entry = _Adjacency(tuned, weakref.ref(tensor), degree, tune, tensor._version, edges)
    _REGISTRY[id(tensor)] = entry
    weakref.finalize(tensor, _REGISTRY.pop, id(tensor), None)
    return tensor


def _entry(src: Any) -> _Adjacency | None:
    entry = _REGISTRY.get(id(src))
    return entry if entry is not None and entry.tensor() is src else None


def _current(src: Any) -> _Adjacency | None:
    """``src``'s entry for a product, None when it is not a cognate adjacency; a one-line
    refusal when it changed in place since it was packed (the kernels hold a packed copy:
    running them would give the old values silently)."""
    entry = _entry(src)
    if entry is not None and src._version != entry.version:
        raise ValueError(
            f"{NAME}: the adjacency was changed in place (its values or indices) after"
            " cognate packed it; cognate's kernels would use the old ones: make a new one"
            " with cognate.torch.pyg.adjacency(edge_index, num_nodes, edge_weight)"
        )
    return entry


def is_adjacency(src: Any) -> bool:
    """Whether ``src`` is an adjacency made by ``adjacency`` (or its GCN-normalised form)."""
    return _entry(src) is not None


def tuned(adj_t: torch.Tensor) -> TunedSparse:
    """The TunedSparse behind a cognate adjacency (its choices, widths, symmetry)."""
    entry = _entry(adj_t)
    if entry is None:
        raise CognateError(f"{NAME}: not an adjacency made by cognate.torch.pyg.adjacency")
    return entry.tuned


def tuning_seconds(adj_t: torch.Tensor, part: str = "all") -> float:
    """Seconds spent tuning ``adj_t`` so far (widths tune on first use: read it after a first
    epoch). ``part``: "all"; "sum" (A's own kernels: sum / mean); "minmax" (the max / min
    schedules timed); "normalized" (GCN's normalised forms); "attention" (the attention
    layers' patterns, each head count's)."""
    entry = _entry(adj_t)
    if entry is None:
        raise CognateError(f"{NAME}: not an adjacency made by cognate.torch.pyg.adjacency")
    parts = entry.tuning_parts()
    if part != "all" and part not in parts:
        raise ValueError(f"part must be all, {', '.join(parts)}; got {part!r}")
    return sum(parts.values()) if part == "all" else parts[part]


def _check_edges(
    edge_index: Any, num_nodes: int | None, edge_weight: Any
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """(sources, targets, num_nodes, weights) of a valid edge list, else one clear error."""
    if not isinstance(edge_index, torch.Tensor):
        raise TypeError(f"{NAME}: edge_index must be a torch.Tensor, got {type(edge_index)}")
    if edge_index.device.type != "cpu":
        raise ValueError(
            f"{NAME}: edge_index is on {edge_index.device}; cognate's kernels run on the cpu"
        )
    if edge_index.dtype not in (torch.int32, torch.int64) or edge_index.layout != torch.strided:
        raise TypeError(f"{NAME}: edge_index must be a dense int64 tensor, got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(
            f"{NAME}: edge_index has shape {tuple(edge_index.shape)}, expected (2, num_edges)"
        )
    _live(edge_index, "edge_index")
    index = edge_index.detach().numpy().astype(np.int64)
    found = int(index.max()) + 1 if index.size else 0
    n = found if num_nodes is None else num_nodes
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"{NAME}: num_nodes must be a non-negative integer, got {num_nodes!r}")
    _check_size(int(n), index.shape[1])
    if index.size and (index.min() < 0 or found > n):
        outside = (index < 0) | (index >= n)
        edge = int(np.flatnonzero(outside.any(axis=0))[0])
        node = int(index[:, edge][outside[:, edge]][0])
        raise ValueError(
            f"{NAME}: edge_index holds node {node} (edge {edge}) outside [0, {n}) for num_nodes={n}"
        )
    weights = np.ones(index.shape[1], dtype=np.float32)
    if edge_weight is not None:
        if not isinstance(edge_weight, torch.Tensor) or edge_weight.device.type != "cpu":
            raise ValueError(f"{NAME}: edge_weight must be a cpu torch.Tensor")
        if edge_weight.dtype != torch.float32:
            raise TypeError(
                f"{NAME}: edge_weight has dtype {edge_weight.dtype}; cognate's cpu kernels are"
                " float32 only"
            )
        if tuple(edge_weight.shape) != (index.shape[1],):
            raise ValueError(
                f"{NAME}: edge_weight has shape {tuple(edge_weight.shape)}, expected"
                f" ({index.shape[1]},): one per edge"
            )
        if edge_weight.requires_grad:
            raise ValueError(
                f"{NAME}: edge_weight requires grad; the adjacency's values do not train here"
                " (use PyG's own path for learned edge weights)"
            )
        _live(edge_weight, "edge_weight")
        weights = edge_weight.detach().numpy()
    return index[0], index[1], int(n), weights


def _live(tensor: torch.Tensor, what: str) -> None:
    try:
        check_live_tensor(tensor, f"{NAME}: {what}")
    except CognateError as exc:
        raise ValueError(str(exc)) from None


def _check_size(n: int, edges: int) -> None:
    """One line, before anything is allocated, when the nodes or edges pass the kernels'
    32-bit indices or building the adjacency would pass the memory budget."""
    for count, what in ((n, "num_nodes"), (edges, "the edge count")):
        if count > INT32_MAX:
            raise ValueError(
                f"{NAME}: {what} is {count}, over the {INT32_MAX} that cognate's 32-bit"
                " indices hold"
            )
    check_budget(NAME, "building adj_t as", n, n, edges, ADJACENCY_COST, "edges")


def _check_tune(tune: dict[str, Any]) -> None:
    """The TunedSparse options an adjacency cannot honour, refused in one line."""
    if tune.get("order") is not None:
        raise ValueError(
            f"{NAME}: order={tune['order']!r} is not supported: PyG keeps x and the output in"
            " the edge list's numbering; renumber the graph once instead (relabel edge_index"
            " and permute x with cognate.torch.node_order(A, by).perm)"
        )
    if tune.get("requires_grad"):
        raise ValueError(
            f"{NAME}: requires_grad=True is not supported: the adjacency's values do not"
            " train here (use PyG's own path for learned edge weights)"
        )


def _edge_semantics(
    sources: np.ndarray,
    targets: np.ndarray,
    n: int,
    weights: np.ndarray,
    csr: sp.csr_matrix,
    weighted: bool,
) -> _Edges:
    """The edge list's duplicates (for max / min) and self loops (for GCN), see ``_Edges``."""
    multi = None
    if csr.nnz < sources.size:  # duplicated edges: keep them apart, sorted by (target, source)
        order = np.lexsort((sources, targets))  # stable: duplicates in edge-list order
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(targets, minlength=n), out=indptr[1:])
        multi = sp.csr_matrix(
            (weights[order], sources[order].astype(np.int32), indptr.astype(np.int32)),
            shape=(n, n),
        )
    loop = sources == targets
    nodes, last = np.unique(targets[loop][::-1], return_index=True)  # the last of each
    return _Edges(multi, nodes, weights[loop][::-1][last].astype(np.float64), weighted)


def adjacency(
    edge_index: torch.Tensor,
    num_nodes: int | None = None,
    edge_weight: torch.Tensor | None = None,
    widths: Iterable[int] = (),
    **tune: Any,
) -> torch.Tensor:
    """PyG's ``adj_t`` of an edge list (``adj_t[target, source]`` = the edge's weight, 1
    without ``edge_weight``; duplicates summed) as a torch sparse CSR tensor whose products
    in PyG's layers run on cognate's tuned kernels, with PyG's edge-list results (max / min
    and GCN's self loops see the edge list itself: module docstring). Installs the patch
    (``patch()``) once. Over 2^31 - 1 nodes or edges, or over the memory budget: one line.

    ``num_nodes``: default ``edge_index.max() + 1``. ``widths``: dense widths tuned now
    (others on first use). ``tune``: ``TunedSparse`` options (``verify``, ``model``,
    ``store``, ``transpose``, ``threads``...; not ``order`` nor ``requires_grad``).
    """
    patch()
    _check_tune(tune)
    sources, targets, n, weights = _check_edges(edge_index, num_nodes, edge_weight)
    csr = canonicalize(sp.coo_matrix((weights, (targets, sources)), shape=(n, n)))
    counts = np.bincount(targets, minlength=n).astype(np.float32)
    degree = torch.from_numpy(np.maximum(counts, 1.0)).view(-1, 1)
    edges = _edge_semantics(sources, targets, n, weights, csr, edge_weight is not None)
    edges.edge_index = edge_index
    tensor = _register(csr, degree, tune, f"adj_t-{n}-{csr.nnz}", edges)
    for width in widths:
        tuned(tensor).prepare(width)
    return tensor


def undirected_edges(matrix: Any) -> tuple[torch.Tensor, int]:
    """A matrix (a cognate Matrix, scipy sparse matrix or file) as an undirected PyG graph:
    its symmetrised pattern without self loops as ``edge_index`` (both directions, int64)
    and the node count; a rectangular M x N matrix becomes the bipartite graph of M + N
    nodes. What examples/pyg_gcn.py and scripts/bench_pyg.py train on."""
    from cognate.api import as_matrix

    a = sp.csr_matrix(as_matrix(matrix).csr, dtype=np.float32, copy=True)
    a.data[:] = 1.0
    if a.shape[0] != a.shape[1]:
        a = sp.bmat([[None, a], [a.T, None]], format="csr")
    a = canonicalize(a + a.T).tocoo()
    keep = a.row != a.col
    index = np.vstack([a.row[keep], a.col[keep]]).astype(np.int64)
    return torch.from_numpy(index), a.shape[0]


# --- the patch ---------------------------------------------------------------------------
#
# The dispatchers are what PyG's modules call once patched. Each is scriptable: under
# TorchScript ``torch.jit.is_scripting()`` is a static condition, so the cognate branch is
# not compiled and a scripted layer runs PyG's own function (correct, untuned); in eager mode
# a cognate adjacency goes to cognate, anything else to PyG unchanged.


def _cognate_spmm(src: Any, other: Any, reduce: str) -> Tensor | None:
    entry = _current(src)
    return None if entry is None else entry.spmm(other, reduce)


def _spmm(src: Adj, other: Tensor, reduce: str = "sum") -> Tensor:
    if not torch.jit.is_scripting():
        out = _cognate_spmm(src, other, reduce)
        if out is not None:
            return out
    return _pyg_spmm(src, other, reduce)


def _cognate_gcn_norm(edge_index: Any, edge_weight: Any, improved: bool, loops: bool) -> Any:
    entry = _current(edge_index)
    if entry is None:
        return None
    if edge_weight is not None:
        raise ValueError(
            f"{NAME}: GCNConv got an edge_weight with a cognate adjacency; pass the weights to"
            " cognate.torch.pyg.adjacency(edge_index, num_nodes, edge_weight) instead"
        )
    return entry.gcn_normalized(improved, loops), None


@torch.jit._overload
def _gcn_norm(  # noqa: F811
    edge_index, edge_weight, num_nodes, improved, add_self_loops, flow, dtype
):  # pragma: no cover  (TorchScript's overloads: PyG's own gcn_norm declares the same two)
    # type: (Tensor, OptTensor, Optional[int], bool, bool, str, Optional[int]) -> OptPairTensor
    pass


@torch.jit._overload
def _gcn_norm(  # noqa: F811
    edge_index, edge_weight, num_nodes, improved, add_self_loops, flow, dtype
):  # pragma: no cover
    # type: (SparseTensor, OptTensor, Optional[int], bool, bool, str, Optional[int]) -> SparseTensor
    pass


def _gcn_norm(  # noqa: F811
    edge_index: Adj,
    edge_weight: OptTensor = None,
    num_nodes: Optional[int] = None,  # noqa: UP045  (TorchScript reads this annotation)
    improved: bool = False,
    add_self_loops: bool = True,
    flow: str = "source_to_target",
    dtype: Optional[torch.dtype] = None,  # noqa: UP045
):  # no return annotation: each overload above declares its own
    if not torch.jit.is_scripting():
        out = _cognate_gcn_norm(edge_index, edge_weight, improved, add_self_loops)
        if out is not None:
            return out
    return _pyg_gcn_norm(edge_index, edge_weight, num_nodes, improved, add_self_loops, flow, dtype)


def _pyg_spmm(src: Adj, other: Tensor, reduce: str = "sum") -> Tensor:  # pragma: no cover
    raise CognateError(f"{NAME}: PyG's spmm is not loaded yet (patch() loads it)")


_pyg_gcn_norm: Any = None  # PyG's gcn_norm, set by patch()


def patch() -> None:
    """Route PyG's ``spmm`` and ``gcn_norm`` (every module's imported name) through cognate
    for cognate adjacencies, let SAGEConv, GINConv and GraphConv aggregate after their
    projection on them (project.py) and run GATConv, GATv2Conv and TransformerConv on
    cognate's kernels (attention.py); idempotent."""
    global _pyg_spmm, _pyg_gcn_norm
    if _PATCHED:
        return
    _torch_geometric()
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import spmm

    _ORIGINAL.update(spmm=spmm, gcn_norm=gcn_norm)
    _pyg_spmm, _pyg_gcn_norm = spmm, gcn_norm  # what the dispatchers (and TorchScript) call
    replacements = {"spmm": (spmm, _spmm), "gcn_norm": (gcn_norm, _gcn_norm)}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "torch_geometric" or name.startswith("torch_geometric.")):
            continue
        for attr, (original, replacement) in replacements.items():
            if getattr(module, attr, None) is original:
                setattr(module, attr, replacement)
                _PATCHED.append((module, attr, original))
    from cognate.torch.pyg import attention, project

    _PATCHED.extend(project.install(_current))  # aggregation after projection
    _PATCHED.extend(attention.install(_current))  # GAT, GATv2, TransformerConv


def unpatch() -> None:
    """Give PyG its own ``spmm``, ``gcn_norm`` and layer forwards back (cognate adjacencies then run on
    PyG's torch path: correct, untuned)."""
    while _PATCHED:
        module, attr, original = _PATCHED.pop()
        setattr(module, attr, original)


def patched() -> bool:
    return bool(_PATCHED)
