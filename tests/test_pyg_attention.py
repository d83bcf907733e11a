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


def run_both(make, graph: dict) -> tuple[dict, dict]:
    torch.manual_seed(0)
    reference = make()
    ours = copy.deepcopy(reference)
    results = []
    for layer, adj in ((reference, graph["edge_index"]), (ours, graph["adj_t"])):
        x = graph["x"].clone().requires_grad_()
        out = layer(x, adj)
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1)))
        grads = {name: p.grad for name, p in layer.named_parameters() if p.grad is not None}
        results.append({"out": out.detach(), "x": x.grad, **grads})
    return results[0], results[1]


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_attention_equals_pyg(graph: dict, layer: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no fallback warning: on cognate
        warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
        want, got = run_both(LAYERS[layer], graph)
    assert want.keys() == got.keys()
    floor = max(float(want[k].norm()) for k in want)  # the gradients' scale
    for key in want:
        assert close(got[key], want[key], floor * 0.1), key  # abs: 1e-6 of the largest


def test_attention_runs_tuned_spmm_and_sddmm(graph: dict) -> None:
    """The aggregation is the tuned SpMM at the head width (its values' gradient the tuned
    SDDMM); TransformerConv's scores the tuned SDDMM; the patterns are built once."""
    x = graph["x"].clone().requires_grad_()
    GATConv(WIDTH, 8, heads=2)(x, graph["adj_t"]).sum().backward()
    TransformerConv(WIDTH, 4, heads=2)(x, graph["adj_t"]).sum().backward()
    entry = cp._entry(graph["adj_t"])
    loops, plain = entry.attention["loops"].tuned, entry.attention["plain"].tuned
    assert ("spmm", "A", 8) in loops.choices and ("sddmm", "A", 8) in loops.choices
    assert ("sddmm", "A", 4) in plain.choices and ("spmm", "A", 4) in plain.choices
    GATConv(WIDTH, 8, heads=2)(x, graph["adj_t"])
    assert entry.attention["loops"].tuned is loops
    assert int(torch.diff(torch.from_numpy(loops.matrix.csr.indptr)).min()) >= 1  # a loop each


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
