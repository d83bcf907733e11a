"""GATConv, GATv2Conv and TransformerConv on cognate's kernels (cognate.torch.pyg.attention):
outputs, the input's and every parameter's gradient equal PyG's edge-list path within 1e-5
relative on real graphs (dropout 0), a 2-layer GAT trains to PyG's losses, the products run
on the tuned SpMM / SDDMM, and what is not supported falls back to PyG with one warning."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric", reason="torch_geometric not installed (cognate[pyg])")

from pyg_cases import assert_trains_alike  # noqa: E402
from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv  # noqa: E402

import cognate.torch.pyg as cp  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402
from cognate.torch.pyg import attention  # noqa: E402

TOL = 1e-5
WIDTH = 16


def close(got: torch.Tensor, want: torch.Tensor, floor: float = 0.0) -> bool:
    """Within TOL relative; ``floor``: the norm below which a gradient is rounding noise
    (one that is zero in real arithmetic, e.g. a key bias under a softmax)."""
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm()) <= TOL * max(float(want.norm()), floor)


def edges_of(shared: Path, name: str) -> tuple[torch.Tensor, int]:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
    coo = matrix.csr.tocoo()
    return torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64)), matrix.shape[0]


@pytest.fixture(scope="module", params=["west0479", "dwt_878"])
def graph(request, shared: Path) -> dict:
    edge_index, n = edges_of(shared, request.param)
    gen = torch.Generator().manual_seed(0)
    return {
        "edge_index": edge_index,
        "adj_t": cp.adjacency(edge_index, n),
        # a mini-batch's adjacency: the heads run one product each, not one kron(A, I)
        "baseline": cp.adjacency(edge_index, n, schedule="baseline"),
        "x": torch.randn(n, WIDTH, generator=gen),
        "y": torch.randint(0, 4, (n,), generator=gen),
    }


LAYERS = {
    "gat-4-heads": lambda: GATConv(WIDTH, 8, heads=4),
    "gat-mean-heads-no-loops": lambda: GATConv(
        WIDTH, 8, heads=3, concat=False, add_self_loops=False
    ),
    "gat-residual": lambda: GATConv(WIDTH, 8, heads=2, residual=True),
    "gatv2": lambda: GATv2Conv(WIDTH, 8, heads=2),
    "gatv2-shared": lambda: GATv2Conv(WIDTH, 8, heads=2, share_weights=True, concat=False),
    "transformer": lambda: TransformerConv(WIDTH, 8, heads=2),
    "transformer-beta": lambda: TransformerConv(WIDTH, 8, heads=3, beta=True, concat=False),
    "transformer-no-root": lambda: TransformerConv(WIDTH, 8, root_weight=False),
}


def run_both(make, graph: dict, adj_key: str = "adj_t") -> tuple[dict, dict]:
    torch.manual_seed(0)
    reference = make()
    ours = copy.deepcopy(reference)
    results = []
    for layer, adj in ((reference, graph["edge_index"]), (ours, graph[adj_key])):
        x = graph["x"].clone().requires_grad_()
        out = layer(x, adj)
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1)))
        grads = {name: p.grad for name, p in layer.named_parameters() if p.grad is not None}
        results.append({"out": out.detach(), "x": x.grad, **grads})
    return results[0], results[1]


@pytest.mark.parametrize("adj_key", ["adj_t", "baseline"])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_attention_equals_pyg(graph: dict, layer: str, adj_key: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no fallback warning: on cognate
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        want, got = run_both(LAYERS[layer], graph, adj_key)
    assert want.keys() == got.keys()
    floor = max(float(want[k].norm()) for k in want)  # the gradients' scale
    for key in want:
        assert close(got[key], want[key], floor * 0.1), key  # abs: 1e-6 of the largest


def test_attention_runs_tuned_spmm_and_sddmm(graph: dict) -> None:
    """GATv2's aggregation, and TransformerConv's with attention dropout in training, is the
    tuned SpMM at the head width (its values' gradient the tuned SDDMM); TransformerConv's
    scores the tuned SDDMM; the patterns are built once. (Without dropout GATConv's and
    TransformerConv's are fused: test_pyg_attention_fused.py.)"""
    x = graph["x"].clone().requires_grad_()
    GATv2Conv(WIDTH, 8, heads=2)(x, graph["adj_t"]).sum().backward()
    TransformerConv(WIDTH, 4, heads=2, dropout=0.1)(x, graph["adj_t"]).sum().backward()
    entry = cp._entry(graph["adj_t"])
    # both heads in one kernel: kron(A, I_2)
    loops, plain = entry.attention["loops"].heads[2].tuned, entry.attention["plain"].heads[2].tuned
    assert ("spmm", "A", 8) in loops.choices and ("sddmm", "A", 8) in loops.choices
    assert ("sddmm", "A", 4) in plain.choices and ("spmm", "A", 4) in plain.choices
    GATv2Conv(WIDTH, 8, heads=2)(x, graph["adj_t"])
    assert entry.attention["loops"].heads[2].tuned is loops
    indptr = torch.from_numpy(entry.attention["loops"].tuned.matrix.csr.indptr)
    assert int(torch.diff(indptr).min()) >= 1  # a loop each
    GATv2Conv(WIDTH, 8, heads=2)(x, graph["baseline"])  # per head: no kron(A, I) built
    assert not cp._entry(graph["baseline"]).attention["loops"].heads


@pytest.mark.parametrize("heads", [2, 3])
def test_multi_head_matrix_is_kron_with_its_entry_map(graph: dict, heads: int) -> None:
    """kron(A, I_heads): head h of A's entry k (row i, column j) is the entry at (i * heads
    + h, j * heads + h), and ``flat`` names it k * heads + h (``order`` inverts it)."""
    entry = cp._entry(graph["adj_t"])
    p = attention.pattern(entry, loops=True)
    mh = attention.multi_head(p, heads)
    a = p.tuned.matrix.csr
    kron = mh.tuned.matrix.csr
    assert (kron != sp.kron(a, sp.identity(heads), format="csr")).nnz == 0
    rows = np.repeat(np.arange(kron.shape[0]), np.diff(kron.indptr))
    k, h = np.divmod(mh.flat.numpy(), heads)
    a_rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    np.testing.assert_array_equal(rows, a_rows[k] * heads + h)
    np.testing.assert_array_equal(kron.indices, a.indices[k] * heads + h)
    np.testing.assert_array_equal(mh.flat[mh.order].numpy(), np.arange(kron.nnz))


class GAT(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = GATConv(WIDTH, 8, heads=4)
        self.conv2 = GATConv(32, 4, heads=1)

    def forward(self, x, edge_index):
        return self.conv2(torch.nn.functional.elu(self.conv1(x, edge_index)), edge_index)


def test_gat_trains_like_pyg(graph: dict) -> None:
    reference = GAT()
    ours = copy.deepcopy(reference)
    assert_trains_alike(reference, ours, graph, TOL)


def test_dropout_trains(graph: dict) -> None:
    """Attention dropout in training mode: a different mask than PyG's (CSR order), the
    same expectation; eval mode is deterministic and equals PyG."""
    torch.manual_seed(0)
    layer = GATConv(WIDTH, 8, heads=2, dropout=0.5)
    out = layer(graph["x"], graph["adj_t"])
    assert out.isfinite().all()
    layer.eval()
    assert close(layer(graph["x"], graph["adj_t"]), layer(graph["x"], graph["edge_index"]))


def test_fallbacks_warn_once_and_equal_pyg(shared: Path) -> None:
    edge_index, n = edges_of(shared, "west0479")
    edge_index = torch.cat([edge_index, edge_index[:, ::9]], 1)  # duplicated edges
    adj = cp.adjacency(edge_index, n)
    x = torch.randn(n, WIDTH, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    layer = GATConv(WIDTH, 8, heads=2)
    attention._WARNED.clear()
    with pytest.warns(UserWarning, match="GATConv with duplicated edges"):
        got = layer(x, adj)
    assert close(got, layer(x, edge_index))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        layer(x, adj)  # once per layer type and reason
    # edge features: PyG's own path on the caller's edge list, edge_attr in its order
    edge_attr = torch.randn(edge_index.shape[1], 3, generator=torch.Generator().manual_seed(4))
    torch.manual_seed(0)
    with_edges = TransformerConv(WIDTH, 8, heads=2, edge_dim=3)
    with pytest.warns(UserWarning, match="TransformerConv with edge_attr"):
        got = with_edges(x, adj, edge_attr)
    assert close(got, with_edges(x, edge_index, edge_attr))
    # attention weights asked for
    plain, m = edges_of(shared, "dwt_878")
    adj = cp.adjacency(plain, m)
    xs = torch.randn(m, WIDTH, generator=torch.Generator().manual_seed(5))
    with pytest.warns(UserWarning, match="return_attention_weights"):
        out, (index, alpha) = GATv2Conv(WIDTH, 4)(xs, adj, return_attention_weights=True)
    assert alpha.shape[0] == index.shape[1]


def test_patch_wraps_pyg_forwards() -> None:
    """The patched forwards wrap PyG's (what TorchScript reads; PyG 2.8.1's attention layers
    do not script either way: their return_attention_weights overloads) and unpatch
    restores them."""
    cp.patch()
    patched = {cls: cls.forward for cls in (GATConv, GATv2Conv, TransformerConv)}
    cp.unpatch()
    try:
        for cls, forward in patched.items():
            assert cls.forward is forward.__wrapped__
            assert forward.__globals__ is cls.forward.__globals__  # PyG's module globals
    finally:
        cp.patch()


def test_edge_softmax_is_pygs_and_twice_differentiable() -> None:
    """The segment-reduction softmax equals PyG's ``softmax`` (an empty row included), and
    its written-out backward passes gradcheck to second order."""
    from torch_geometric.utils import softmax

    rows = torch.tensor([0, 0, 0, 2, 2, 3, 3, 3, 3, 5])  # rows 1 and 4 empty
    scores = torch.randn(rows.numel(), 2, dtype=torch.float64, requires_grad=True)
    got = attention.edge_softmax(scores, rows, 6)
    assert close(got, softmax(scores, rows, num_nodes=6))
    assert torch.autograd.gradcheck(lambda s: attention.edge_softmax(s, rows, 6), (scores,))
    assert torch.autograd.gradgradcheck(lambda s: attention.edge_softmax(s, rows, 6), (scores,))
