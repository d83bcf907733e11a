"""PyTorch Geometric on cognate's tuned kernels: a two-line change to a stock PyG model.

    import cognate.pyg
    edge_index = cognate.pyg.adjacency(edge_index, num_nodes)  # instead of the edge list

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
  SpMM keeping the arg for the backward (cognate.pyg_minmax: one fixed schedule, not tuned).
- GCN's normalisation: ``gcn_norm`` of a cognate adjacency returns a second cognate adjacency
  with the pattern A + I (remaining self loops, as PyG's edge-list path: a node's existing
  self loop keeps its weight, the others get 1, or 2 with ``improved``) and values
  D^-1/2 (A + I) D^-1/2, built and tuned once per (improved, add_self_loops) and reused on
  every call, so ``cached=False`` costs no renormalisation either. A GCNConv with
  ``normalize=False`` uses the adjacency as given (pass the normalised one yourself).
- Without the patch the tensor is still a correct torch CSR ``adj_t``: PyG runs its own path.

float32 on the cpu only; the adjacency's values do not train (edge weights that require grad
are refused). Imported only when used; needs torch_geometric (``pip install 'cognate[pyg]'``).
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from cognate.errors import CognateError
from cognate.matrix import Matrix, canonicalize
from cognate.torch.operand import TunedSparse
from cognate.torch.ops import spmm as tuned_spmm

NAME = "cognate.pyg"
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
class _Adjacency:
    """A registered adj_t: its TunedSparse, in-degrees for "mean", and its normalised forms."""

    tuned: TunedSparse
    tensor: weakref.ref
    degree: torch.Tensor  # (n, 1) float32: edges per target (multiplicity), at least 1
    tune: dict[str, Any]
    normalized: dict[tuple[bool, bool], torch.Tensor] = field(default_factory=dict)
    minmax: Any = None  # cognate.pyg_minmax.MinMaxCSR, built at the first max / min

    def spmm(self, x: torch.Tensor, reduce: str) -> torch.Tensor | None:
        """``reduce`` of the neighbours' rows of x: sum / mean on the tuned kernels, max / min
        on cognate.pyg_minmax's kernel (None: a reduce PyG's own spmm handles)."""
        if reduce not in ("sum", "add", "mean", "max", "min"):
            return None
        x = check_features(x, self.tuned.shape[1])
        if reduce in ("max", "min"):
            from cognate.pyg_minmax import MinMaxCSR, spmm_minmax

            if self.minmax is None:
                self.minmax = MinMaxCSR(self.tuned.matrix.csr)
            return spmm_minmax(self.minmax, x.contiguous(), reduce)
        out = tuned_spmm(self.tuned, x)
        # in place on the kernel's fresh output (its backward saved x, not out): a second
        # n x width tensor costs more than the division on graphs of many nodes
        return out.div_(self.degree) if reduce == "mean" else out

    def gcn_normalized(self, improved: bool, add_self_loops: bool) -> torch.Tensor:
        key = (bool(improved), bool(add_self_loops))
        if key not in self.normalized:
            csr = gcn_normalized(self.tuned.matrix.csr, 2.0 if improved else 1.0, add_self_loops)
            self.normalized[key] = _register(csr, self.degree, self.tune, "gcn-normalized")
        return self.normalized[key]

    def tuning_s(self) -> float:
        return self.tuned.tuning_s + sum(
            _REGISTRY[id(t)].tuning_s() for t in self.normalized.values()
        )


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
    return x


def gcn_normalized(csr: sp.csr_matrix, fill: float, add_self_loops: bool) -> sp.csr_matrix:
    """D^-1/2 (A + I) D^-1/2 of adj_t as PyG's ``gcn_norm`` computes it for an edge list:
    remaining self loops (a stored diagonal entry keeps its value, a missing one gets
    ``fill``), D the row sums (in-degrees of the targets), 0 where a degree is 0."""
    a = sp.csr_matrix(csr, dtype=np.float64, copy=True)
    if add_self_loops:
        present = np.zeros(a.shape[0], dtype=bool)
        coo = a.tocoo()
        present[coo.row[coo.row == coo.col]] = True
        # a stored loop gets + 0 (keeps its value; duplicates of it were summed), others fill
        a = (a + sp.diags(np.where(present, 0.0, fill))).tocsr()
    degree = np.asarray(a.sum(axis=1)).ravel()
    with np.errstate(divide="ignore"):
        scale = np.where(degree > 0, 1.0 / np.sqrt(degree), 0.0)
    return canonicalize(sp.diags(scale) @ a @ sp.diags(scale))


def _register(
    csr: sp.csr_matrix, degree: torch.Tensor, tune: dict[str, Any], name: str
) -> torch.Tensor:
    """A torch CSR tensor of ``csr`` that the patched spmm sends to a TunedSparse of it."""
    tuned = TunedSparse(Matrix(name, csr), **tune)
    with warnings.catch_warnings():  # torch's "sparse CSR is beta" notice, once per tensor
        warnings.simplefilter("ignore", UserWarning)
        tensor = tuned.to_torch()
    _REGISTRY[id(tensor)] = _Adjacency(tuned, weakref.ref(tensor), degree, tune)
    weakref.finalize(tensor, _REGISTRY.pop, id(tensor), None)
    return tensor


def _entry(src: Any) -> _Adjacency | None:
    entry = _REGISTRY.get(id(src))
    return entry if entry is not None and entry.tensor() is src else None


def is_adjacency(src: Any) -> bool:
    """Whether ``src`` is an adjacency made by ``adjacency`` (or its GCN-normalised form)."""
    return _entry(src) is not None


def tuned(adj_t: torch.Tensor) -> TunedSparse:
    """The TunedSparse behind a cognate adjacency (its choices, widths, symmetry)."""
    entry = _entry(adj_t)
    if entry is None:
        raise CognateError(f"{NAME}: not an adjacency made by cognate.pyg.adjacency")
    return entry.tuned


def tuning_seconds(adj_t: torch.Tensor) -> float:
    """Seconds spent tuning ``adj_t`` and its GCN-normalised forms so far (widths tune on
    first use: read it after a first epoch)."""
    entry = _entry(adj_t)
    if entry is None:
        raise CognateError(f"{NAME}: not an adjacency made by cognate.pyg.adjacency")
    return entry.tuning_s()


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
    index = edge_index.detach().numpy().astype(np.int64)
    found = int(index.max()) + 1 if index.size else 0
    n = found if num_nodes is None else num_nodes
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"{NAME}: num_nodes must be a non-negative integer, got {num_nodes!r}")
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
        weights = edge_weight.detach().numpy()
    return index[0], index[1], int(n), weights


def adjacency(
    edge_index: torch.Tensor,
    num_nodes: int | None = None,
    edge_weight: torch.Tensor | None = None,
    widths: Iterable[int] = (),
    **tune: Any,
) -> torch.Tensor:
    """PyG's ``adj_t`` of an edge list (``adj_t[target, source]`` = the edge's weight, 1
    without ``edge_weight``; duplicates summed) as a torch sparse CSR tensor whose products
    in PyG's layers run on cognate's tuned kernels. Installs the patch (``patch()``) once.

    ``num_nodes``: default ``edge_index.max() + 1``. ``widths``: dense widths tuned now
    (others on first use). ``tune``: ``TunedSparse`` options (``verify``, ``model``,
    ``store``, ``transpose``, ``threads``...).
    """
    patch()
    sources, targets, n, weights = _check_edges(edge_index, num_nodes, edge_weight)
    csr = canonicalize(sp.coo_matrix((weights, (targets, sources)), shape=(n, n)))
    counts = np.bincount(targets, minlength=n).astype(np.float32)
    degree = torch.from_numpy(np.maximum(counts, 1.0)).view(-1, 1)
    tensor = _register(csr, degree, tune, f"adj_t-{n}-{csr.nnz}")
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


def _spmm(src: Any, other: torch.Tensor, reduce: str = "sum") -> torch.Tensor:
    entry = _entry(src)
    if entry is not None:
        out = entry.spmm(other, reduce)
        if out is not None:
            return out
    return _ORIGINAL["spmm"](src, other, reduce)


def _gcn_norm(
    edge_index: Any,
    edge_weight: Any = None,
    num_nodes: int | None = None,
    improved: bool = False,
    add_self_loops: bool = True,
    flow: str = "source_to_target",
    dtype: torch.dtype | None = None,
) -> Any:
    entry = _entry(edge_index)
    if entry is None:
        return _ORIGINAL["gcn_norm"](
            edge_index, edge_weight, num_nodes, improved, add_self_loops, flow, dtype
        )
    if edge_weight is not None:
        raise ValueError(
            f"{NAME}: GCNConv got an edge_weight with a cognate adjacency; pass the weights to"
            " cognate.pyg.adjacency(edge_index, num_nodes, edge_weight) instead"
        )
    return entry.gcn_normalized(improved, add_self_loops), None


def patch() -> None:
    """Route PyG's ``spmm`` and ``gcn_norm`` (every module's imported name) through cognate
    for cognate adjacencies; idempotent."""
    if _PATCHED:
        return
    _torch_geometric()
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import spmm

    _ORIGINAL.update(spmm=spmm, gcn_norm=gcn_norm)
    replacements = {"spmm": (spmm, _spmm), "gcn_norm": (gcn_norm, _gcn_norm)}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "torch_geometric" or name.startswith("torch_geometric.")):
            continue
        for attr, (original, replacement) in replacements.items():
            if getattr(module, attr, None) is original:
                setattr(module, attr, replacement)
                _PATCHED.append((module, attr, original))


def unpatch() -> None:
    """Give PyG its own ``spmm`` and ``gcn_norm`` back (cognate adjacencies then run on
    PyG's torch path: correct, untuned)."""
    while _PATCHED:
        module, attr, original = _PATCHED.pop()
        setattr(module, attr, original)


def patched() -> bool:
    return bool(_PATCHED)
