"""Aggregation after projection (cognate.torch.pyg.project): SAGEConv (sum / mean), GINConv
and GraphConv whose projection narrows the features aggregate the projected features on a
cognate adjacency, with PyG's own results: outputs and every gradient within 1e-5 relative,
the same losses over Adam steps; anything else runs PyG's forward unchanged."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric", reason="torch_geometric not installed (cognate[pyg])")

from pyg_cases import assert_trains_alike  # noqa: E402
from torch_geometric.nn import GINConv, GraphConv, SAGEConv  # noqa: E402

import cognate.torch.pyg as cp  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402

TOL = 1e-5
WIDE, NARROW, CLASSES = 24, 8, 4


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.fixture(scope="module", params=["dwt_878", "west0479"])
def graph(request, shared: Path) -> dict:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{request.param}.mtx.gz")
    coo = matrix.csr.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    n = matrix.shape[0]
    gen = torch.Generator().manual_seed(0)
    return {
        "edge_index": edge_index,
        "adj_t": cp.adjacency(edge_index, n),
        "x": torch.randn(n, WIDE, generator=gen),
        "y": torch.randint(0, CLASSES, (n,), generator=gen),
    }


def gin(i: int, o: int) -> GINConv:
    mlp = torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o))
    return GINConv(mlp, train_eps=True)


LAYERS = {
    "sage-mean": lambda i, o: SAGEConv(i, o, aggr="mean"),
    "sage-sum": lambda i, o: SAGEConv(i, o, aggr="sum"),
    "sage-normalize-no-root": lambda i, o: SAGEConv(i, o, normalize=True, root_weight=False),
    "gin": gin,
    "graph-conv": lambda i, o: GraphConv(i, o),
    "graph-conv-mean": lambda i, o: GraphConv(i, o, aggr="mean"),
}


class Net(torch.nn.Module):
    def __init__(self, make) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.conv2 = make(WIDE, NARROW), make(NARROW, CLASSES)

    def forward(self, x: torch.Tensor, edge_index) -> torch.Tensor:
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_projection_first_equals_pyg(graph: dict, layer: str, monkeypatch) -> None:
    reference = Net(LAYERS[layer])
    ours = copy.deepcopy(reference)
    widths: list[int] = []
    entry = cp._entry(graph["adj_t"])
    spmm = entry.spmm

    def recording(x, reduce):
        widths.append(x.shape[1])
        return spmm(x, reduce)

    monkeypatch.setattr(entry, "spmm", recording)
    results = []
    for net, adj in ((reference, graph["edge_index"]), (ours, graph["adj_t"])):
        x = graph["x"].clone().requires_grad_()
        out = net(x, adj)
        torch.nn.functional.cross_entropy(out, graph["y"]).backward()
        results.append((out, x.grad, {n: p.grad for n, p in net.named_parameters()}))
    # both layers narrow: their SpMMs ran at the output widths, never at the input's
    assert widths == [NARROW, CLASSES]
    (want, want_x, want_p), (got, got_x, got_p) = results
    assert rel(got, want) < TOL and rel(got_x, want_x) < TOL
    for name in want_p:
        assert rel(got_p[name], want_p[name]) < TOL, name
    assert_trains_alike(reference, ours, graph, TOL)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SAGEConv(NARROW, WIDE),  # widening: aggregate first, as PyG
        lambda: SAGEConv(WIDE, NARROW, aggr="max"),  # max is not linear
        lambda: SAGEConv(WIDE, NARROW, project=True),
        lambda: GINConv(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(WIDE, NARROW))),
    ],
)
def test_other_layers_run_pyg_forward(graph: dict, make) -> None:
    """Widening or non-linear cases aggregate the input as PyG does (and equal it)."""
    torch.manual_seed(0)
    layer = make()
    width = layer.lin_l.in_channels if isinstance(layer, SAGEConv) else WIDE
    x = graph["x"][:, :width].contiguous()
    want = layer(x, graph["edge_index"])
    got = layer(x, graph["adj_t"])
    assert rel(got, want) < TOL


def test_unpatch_restores_the_forwards() -> None:
    patched = SAGEConv.forward
    assert getattr(patched, "__cognate_projection__", False)
    cp.unpatch()
    try:
        assert not getattr(SAGEConv.forward, "__cognate_projection__", False)
        assert SAGEConv.forward is patched.__wrapped__
    finally:
        cp.patch()
    assert getattr(SAGEConv.forward, "__cognate_projection__", False)
