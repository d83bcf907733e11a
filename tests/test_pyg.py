"""cognate.torch.pyg: stock PyG layers (GCNConv, SAGEConv, GINConv) on a cognate adjacency give
PyG's own cpu results (outputs, every parameter gradient, losses over optimizer steps), on
real graphs from ../shared; bad input gets one clear error."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric", reason="torch_geometric not installed (cognate[pyg])")

from torch_geometric.nn import GCNConv, GINConv, SAGEConv  # noqa: E402

import cognate.torch.pyg as cp  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402

TOL = 1e-5
FEATURES, HIDDEN, CLASSES = 16, 16, 8  # two dense widths: few tunings per graph
GRAPHS = ("dwt_878", "west0479")  # symmetric pattern with loops; directed, no symmetry


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(
        (got.detach().double() - want.detach().double()).norm()
        / want.detach().double().norm().clamp_min(1e-30)
    )


@pytest.fixture(scope="module", params=GRAPHS)
def graph(request, shared: Path) -> dict:
    """A real matrix's pattern as a directed edge list (source = row, target = column),
    random features and labels, and its cognate adjacency."""
    matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{request.param}.mtx.gz")
    coo = matrix.csr.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    n = matrix.shape[0]
    gen = torch.Generator().manual_seed(0)
    return {
        "name": request.param,
        "edge_index": edge_index,
        "adj_t": cp.adjacency(edge_index, n),
        "x": torch.randn(n, FEATURES, generator=gen),
        "y": torch.randint(0, CLASSES, (n,), generator=gen),
    }


class Net(torch.nn.Module):
    """A stock 2-layer PyG model: ``conv2(relu(conv1(x, edge_index)), edge_index)``."""

    def __init__(self, make) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.conv2 = make(FEATURES, HIDDEN), make(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor, edge_index) -> torch.Tensor:
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def gin(i: int, o: int) -> GINConv:
    mlp = torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o))
    return GINConv(mlp, train_eps=True)


MODELS = {
    "gcn": lambda i, o: GCNConv(i, o),
    "gcn-cached": lambda i, o: GCNConv(i, o, cached=True),
    "sage-mean": lambda i, o: SAGEConv(i, o, aggr="mean"),
    "sage-max": lambda i, o: SAGEConv(i, o, aggr="max"),  # the pipeline's minmax family
    "gin-sum": gin,
}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_stock_model_equals_pyg(graph: dict, model: str) -> None:
    reference = Net(MODELS[model])
    ours = copy.deepcopy(reference)
    losses = {"pyg": [], "cognate": []}
    for net, adj, key in (
        (reference, graph["edge_index"], "pyg"),
        (ours, graph["adj_t"], "cognate"),
    ):
        out = net(graph["x"], adj)
        loss = torch.nn.functional.cross_entropy(out, graph["y"])
        loss.backward()
        losses[key].append(out.detach())
    assert rel(losses["cognate"][0], losses["pyg"][0]) < TOL
    for (name, p), q in zip(reference.named_parameters(), ours.parameters(), strict=True):
        assert rel(q.grad, p.grad) < TOL, name
    # several optimizer steps: the same losses
    for net, adj, key in (
        (reference, graph["edge_index"], "pyg"),
        (ours, graph["adj_t"], "cognate"),
    ):
        opt = torch.optim.Adam(net.parameters(), lr=0.01)
        losses[key] = []
        for _ in range(4):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(graph["x"], adj), graph["y"])
            loss.backward()
            opt.step()
            losses[key].append(loss.item())
    np.testing.assert_allclose(losses["cognate"], losses["pyg"], rtol=TOL)


def test_products_run_on_cognate(graph: dict) -> None:
    """The sum/mean products reach the TunedSparse (its widths get tuned), and GCN's
    normalised adjacency is built once and reused by every layer and call."""
    adj = graph["adj_t"]
    conv = GCNConv(FEATURES, HIDDEN)
    conv(graph["x"], adj)
    conv(graph["x"], adj)
    entry = cp._entry(adj)
    assert list(entry.normalized) == [(False, True)]
    assert HIDDEN in cp.tuned(entry.normalized[(False, True)]).widths
    SAGEConv(FEATURES, HIDDEN)(graph["x"], adj)
    assert FEATURES in cp.tuned(adj).widths
    assert cp.tuning_seconds(adj) > 0
    fresh = cp.adjacency(graph["edge_index"], graph["x"].shape[0])
    assert cp.tuning_seconds(fresh, "minmax") == 0
    SAGEConv(FEATURES, HIDDEN, aggr="max")(graph["x"], fresh)  # times the max schedules
    assert cp.tuning_seconds(fresh, "minmax") > 0
    parts = {
        part: cp.tuning_seconds(adj, part) for part in ("sum", "minmax", "normalized", "attention")
    }
    assert parts["sum"] > 0 and parts["normalized"] > 0
    assert cp.tuning_seconds(adj) == pytest.approx(sum(parts.values()))
    with pytest.raises(ValueError, match="part must be all, sum, minmax, normalized, attention"):
        cp.tuning_seconds(adj, "max")
    if graph["name"] == "dwt_878":
        assert cp.tuned(adj).symmetric  # one kernel for A and A^T


def test_unpatched_adjacency_runs_pyg_path(graph: dict) -> None:
    """Without the patch the adjacency is still a correct torch CSR adj_t."""
    conv = SAGEConv(FEATURES, HIDDEN)
    want = conv(graph["x"], graph["edge_index"])
    cp.unpatch()
    try:
        assert not cp.patched()
        got = conv(graph["x"], graph["adj_t"])
    finally:
        cp.patch()
    assert rel(got, want) < TOL


@pytest.fixture(scope="module")
def small() -> dict:
    edge_index = torch.tensor([[0, 1, 1, 2, 3], [1, 0, 2, 1, 2]])
    return {"edge_index": edge_index, "adj_t": cp.adjacency(edge_index, 4)}


@pytest.mark.parametrize(
    "args, error, words",
    [
        ((torch.tensor([[0, 1], [1, 5]]), 4), ValueError, "node 5 (edge 1) outside [0, 4)"),
        ((torch.tensor([[0, -1], [1, 2]]), 4), ValueError, "node -1 (edge 1)"),
        ((torch.tensor([[0.0, 1.0], [1.0, 2.0]]), 4), TypeError, "int64"),
        ((torch.tensor([[0, 1, 2]]), 4), ValueError, "expected (2, num_edges)"),
        ((torch.zeros(2, 3, dtype=torch.int64, device="meta"), 4), ValueError, "on meta"),
        ((torch.tensor([[0], [1]]), -1), ValueError, "num_nodes"),
    ],
)
def test_bad_edge_index(args, error, words: str) -> None:
    with pytest.raises(error) as err:
        cp.adjacency(*args)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_bad_edge_weight() -> None:
    edge_index = torch.tensor([[0, 1], [1, 0]])
    for weight, error, words in (
        (torch.ones(2, dtype=torch.float64), TypeError, "float32"),
        (torch.ones(3), ValueError, "expected (2,)"),
        (torch.ones(2, requires_grad=True), ValueError, "requires grad"),
    ):
        with pytest.raises(error, match=None) as err:
            cp.adjacency(edge_index, 2, weight)
        assert words in str(err.value)


def test_bad_features(small: dict) -> None:
    conv = GINConv(torch.nn.Identity())
    for x, error, words in (
        (torch.ones(4, 3, dtype=torch.float64), TypeError, "float32 only"),
        (torch.ones(4, 3, device="meta"), ValueError, "run on the cpu"),
    ):
        with pytest.raises(error) as err:
            conv(x, small["adj_t"])
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"has 4 source nodes: expected \(4, channels\)"):
        conv(torch.ones(5, 3), small["adj_t"])


def test_cuda_features_get_a_clear_message(small: dict) -> None:
    if torch.cuda.is_available():
        x = torch.ones(4, 3, device="cuda")
        with pytest.raises(ValueError, match="run on the cpu"):
            cp._spmm(small["adj_t"], x)
    else:  # no CUDA here: torch's own one-line refusal, before cognate sees anything
        with pytest.raises((AssertionError, RuntimeError), match="(?i)cuda"):
            torch.ones(4, 3, device="cuda")


def test_gcn_edge_weight_with_adjacency_is_refused(small: dict) -> None:
    with pytest.raises(ValueError, match="pass the weights to"):
        GCNConv(3, 2)(torch.ones(4, 3), small["adj_t"], torch.ones(5))


def test_weighted_gcn_equals_pyg(shared: Path) -> None:
    """Edge weights given to adjacency() are GCN's edge_weight."""
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")
    coo = matrix.csr.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    weight = torch.from_numpy(np.abs(coo.data).astype(np.float32)) + 0.5
    x = torch.randn(matrix.shape[0], FEATURES, generator=torch.Generator().manual_seed(1))
    conv = GCNConv(FEATURES, HIDDEN)
    want = conv(x, edge_index, weight)
    got = conv(x, cp.adjacency(edge_index, matrix.shape[0], weight))
    assert rel(got, want) < TOL


def test_example_prints_the_same_losses_on_both_backends(shared: Path) -> None:
    """examples/pyg_gcn.py: the two-line change gives PyG's own losses."""
    import subprocess
    import sys

    graph = shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz"
    script = Path(__file__).resolve().parents[1] / "examples" / "pyg_gcn.py"
    losses = {}
    for backend in ("pyg", "cognate"):
        run = subprocess.run(
            [sys.executable, str(script), str(graph), "--backend", backend, "--epochs", "10"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        losses[backend] = [
            float(w.split()[3]) for w in run.stdout.splitlines() if w.startswith("epoch")
        ]
    assert len(losses["pyg"]) == 2
    np.testing.assert_allclose(losses["cognate"], losses["pyg"], rtol=1e-4)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_minmax_kernel_against_references(shared: Path, reduce: str) -> None:
    """The (max, x) / (min, x) kernel on a real matrix with signed values and an empty row:
    forward equals numpy's reference, the gradient equals torch's spmm_reduce's."""
    from cognate.torch.gnn import torch_csr
    from cognate.torch.pyg.minmax import MinMaxCSR, reference, spmm_minmax

    csr = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz").csr.tolil()
    csr[3, :] = 0  # an empty row: 0 out, no gradient
    csr = csr.tocsr()
    csr.eliminate_zeros()
    x = torch.randn(csr.shape[1], 24, generator=torch.Generator().manual_seed(2))
    out = spmm_minmax(MinMaxCSR(csr), x.requires_grad_(), reduce)
    np.testing.assert_allclose(
        out.detach().numpy(), reference(csr, x.detach().numpy(), reduce), rtol=1e-6, atol=1e-6
    )
    assert not out[3].any()
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    (dx,) = torch.autograd.grad(out, x, grad)
    xt = x.detach().clone().requires_grad_()
    want = torch.sparse.mm(torch_csr(csr), xt, "amax" if reduce == "max" else "amin")
    (dxt,) = torch.autograd.grad(want, xt, grad)
    assert rel(out, want) < TOL and rel(dx, dxt) < TOL


def test_sage_max_runs_on_cognate(graph: dict) -> None:
    SAGEConv(FEATURES, HIDDEN, aggr="max")(graph["x"], graph["adj_t"])
    assert cp._entry(graph["adj_t"]).minmax is not None
