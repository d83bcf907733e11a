"""cognate.torch.pyg under hostile input (issue 61): freed or shrunk features and saved tensors,
second-order gradients, NaN, duplicated edges and self loops, ``order=``, in-place changes,
no edges, TorchScript, non-positive GCN degrees, 2^31 nodes. Each case is PyG's own
edge-list result (outputs and gradients within 1e-5) or a one-line refusal."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric", reason="torch_geometric not installed (cognate[pyg])")

from torch_geometric.nn import GCNConv, GINConv, SAGEConv  # noqa: E402

import cognate.torch.pyg as cp  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402

TOL = 1e-5
WIDTH = 8
ROOT = Path(__file__).resolve().parents[1]


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def edges_of(shared: Path, name: str) -> tuple[torch.Tensor, int]:
    """A real matrix's pattern as a directed edge list (source = row, target = column)."""
    matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
    coo = matrix.csr.tocoo()
    return torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64)), matrix.shape[0]


def features(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, WIDTH, generator=torch.Generator().manual_seed(seed))


def run_both(make, x: torch.Tensor, edge_index, adj, *extra, **kw) -> tuple[dict, dict]:
    """(PyG's, cognate's) output, x's gradient and every parameter gradient of one layer."""
    torch.manual_seed(0)
    reference = make()
    ours = copy.deepcopy(reference)
    results = []
    for layer, graph in ((reference, edge_index), (ours, adj)):
        xi = x.clone().requires_grad_()
        args = (xi, graph, *extra) if graph is edge_index else (xi, graph)
        out = layer(*args, **kw)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
        out.backward(grad)
        grads = {name: p.grad for name, p in layer.named_parameters()}
        results.append({"out": out.detach(), "x": xi.grad, **grads})
    return results[0], results[1]


def assert_same(want: dict, got: dict, nan: bool = False) -> None:
    assert want.keys() == got.keys()
    for key in want:
        if nan:
            torch.testing.assert_close(got[key], want[key], rtol=TOL, atol=1e-6, equal_nan=True)
        else:
            assert rel(got[key], want[key]) < TOL, key


def one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert message and "\n" not in message
    return message


# --- 1. freed or shrunk storage under max / min: a one-line error, never a read of it ----

CRASHES = {
    "freed x": "x.untyped_storage().resize_(0); conv(x, adj)",
    "shrunk x": "x.untyped_storage().resize_(x.untyped_storage().nbytes() // 2); conv(x, adj)",
    "freed non-contiguous x": "y = x.t().contiguous().t(); y.untyped_storage().resize_(0);"
    " conv(y, adj)",
    "freed saved args": "out = cognate.torch.pyg._spmm(adj, x.requires_grad_(), REDUCE);"
    " out.grad_fn.saved_tensors[0].untyped_storage().resize_(0); out.sum().backward()",
    "freed saved args, second order": "out = cognate.torch.pyg._spmm(adj, x.requires_grad_(), REDUCE);"
    " w = torch.ones_like(out, requires_grad=True);"
    " (g,) = torch.autograd.grad((out * w).sum(), x, create_graph=True);"
    " g.grad_fn.saved_tensors[0].untyped_storage().resize_(0); g.sum().backward()",
}


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("case", sorted(CRASHES))
def test_minmax_refuses_freed_storage(case: str, reduce: str) -> None:
    """In a subprocess (the unchecked kernel read freed memory: SIGSEGV)."""
    script = textwrap.dedent(
        f"""
        import torch, cognate.torch.pyg
        from torch_geometric.nn import SAGEConv
        REDUCE = {reduce!r}
        edge_index = torch.tensor([[0, 1, 2, 3, 3, 0], [1, 2, 3, 0, 1, 2]])
        adj = cognate.torch.pyg.adjacency(edge_index, 4)
        conv = SAGEConv(64, 4, aggr=REDUCE)
        x = torch.randn(4, 64)
        try:
            {CRASHES[case]}
        except ValueError as exc:
            print("REFUSED", exc)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("REFUSED"), run.stdout
    assert "storage holds" in lines[0]


# --- 2. second-order gradients through max / min --------------------------------------


@pytest.mark.parametrize("name", ["west0479", "dwt_878"])
@pytest.mark.parametrize("aggr", ["max", "min"])
def test_minmax_second_order_equals_pyg(shared: Path, name: str, aggr: str) -> None:
    """A gradient penalty (create_graph=True) through SAGEConv max / min: every parameter's
    gradient equals PyG's (today's backward was a ctypes call: None or wrong, silently)."""
    edge_index, n = edges_of(shared, name)
    adj = cp.adjacency(edge_index, n)
    x = features(n, 1)
    grads = []
    torch.manual_seed(0)
    reference = SAGEConv(WIDTH, 4, aggr=aggr)
    ours = copy.deepcopy(reference)
    for layer, graph in ((reference, edge_index), (ours, adj)):
        xi = x.clone().requires_grad_()
        out = layer(xi, graph)
        (g,) = torch.autograd.grad((out**2).sum(), xi, create_graph=True)
        loss = out.sum() + (g**2).sum()
        grads.append(torch.autograd.grad(loss, [xi, *layer.parameters()]))
    for want, got in zip(*grads, strict=True):
        assert rel(got, want) < TOL


# --- 3. NaN propagates as PyG's scatter max / min propagates it --------------------------


@pytest.mark.parametrize("aggr", ["max", "min"])
def test_minmax_nan_like_pyg(shared: Path, aggr: str) -> None:
    """NaN in a neighbour's feature, wherever it sits in the row: output and gradients are
    PyG's (NaN where PyG has NaN, its values elsewhere)."""
    edge_index, n = edges_of(shared, "west0479")
    adj = cp.adjacency(edge_index, n)
    x = features(n, 2)
    # sources that are not the first (lowest) of some target's row: the old kernel missed them
    sources, targets = edge_index.numpy()
    first = np.full(n, n)
    np.minimum.at(first, targets, sources)
    later = torch.from_numpy(np.unique(sources[sources > first[targets]]))
    x[later[:3], 2] = float("nan")
    x[later[3], :] = float("nan")
    want, got = run_both(lambda: SAGEConv(WIDTH, 4, aggr=aggr), x, edge_index, adj)
    assert want["out"].isnan().any()
    assert_same(want, got, nan=True)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_minmax_kernel_nan_against_reference(reduce: str) -> None:
    import scipy.sparse as sp

    from cognate.torch.pyg.minmax import MinMaxCSR, reference, spmm_minmax

    csr = sp.random(60, 50, density=0.2, format="csr", random_state=3, dtype=np.float32)
    x = torch.randn(50, 17, generator=torch.Generator().manual_seed(4))
    x[7, 3] = x[11, :5] = float("nan")
    out = spmm_minmax(MinMaxCSR(csr), x, reduce)
    np.testing.assert_allclose(out.numpy(), reference(csr, x.numpy(), reduce), rtol=1e-6)


# --- 4. duplicated edges and self loops, as PyG's edge list -------------------------------


def duplicated(shared: Path, weighted: bool) -> tuple[torch.Tensor, int, torch.Tensor | None]:
    """west0479's edges with every 5th edge repeated, and self loops repeated on a few
    nodes (with different weights when ``weighted``)."""
    edge_index, n = edges_of(shared, "west0479")
    loops = torch.tensor([3, 3, 10, 10, 10, 40])
    edge_index = torch.cat(
        [edge_index, edge_index[:, ::5], torch.stack([loops, loops]), edge_index[:, 1::7]], 1
    )
    weight = None
    if weighted:
        weight = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(6))
        weight = weight + 0.5
    return edge_index, n, weight


LAYERS = {
    "sage-max": lambda: SAGEConv(WIDTH, 4, aggr="max"),
    "sage-min": lambda: SAGEConv(WIDTH, 4, aggr="min"),
    "sage-mean": lambda: SAGEConv(WIDTH, 4, aggr="mean"),
    "gin-sum": lambda: GINConv(torch.nn.Linear(WIDTH, 4), train_eps=True),
    "gcn": lambda: GCNConv(WIDTH, 4),
    "gcn-improved": lambda: GCNConv(WIDTH, 4, improved=True),
    "gcn-no-loops": lambda: GCNConv(WIDTH, 4, add_self_loops=False),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_duplicate_edges_like_pyg(shared: Path, layer: str) -> None:
    edge_index, n, _ = duplicated(shared, weighted=False)
    adj = cp.adjacency(edge_index, n)
    assert_same(*run_both(LAYERS[layer], features(n, 3), edge_index, adj))


@pytest.mark.parametrize("improved", [False, True])
def test_weighted_gcn_duplicate_loops_like_pyg(shared: Path, improved: bool) -> None:
    """A node's repeated self loop keeps one weight (its last), as PyG's
    add_remaining_self_loops; other duplicates are summed."""
    edge_index, n, weight = duplicated(shared, weighted=True)
    adj = cp.adjacency(edge_index, n, weight)
    make = lambda: GCNConv(WIDTH, 4, improved=improved)  # noqa: E731
    assert_same(*run_both(make, features(n, 4), edge_index, adj, weight))


# --- 5. order= -------------------------------------------------------------------------


@pytest.mark.parametrize("tune", [{"order": "rcm"}, {"order": "degree"}, {"order": "cluster"},
                                  {"order": "auto"}, {"requires_grad": True}])  # fmt: skip
def test_unsupported_tune_options_refused(tune: dict) -> None:
    with pytest.raises(ValueError) as err:
        cp.adjacency(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3, **tune)
    assert "not supported" in one_line(err)


# --- 6. in-place changes -----------------------------------------------------------------


@pytest.mark.parametrize("layer", ["sage-mean", "sage-max", "gcn", "gin-sum"])
def test_inplace_value_change_refused(layer: str) -> None:
    """``adj.values().mul_(3)``: torch sees the new values; cognate refuses, never stale."""
    edge_index = torch.tensor([[0, 1, 2, 3, 1], [1, 2, 3, 0, 3]])
    adj = cp.adjacency(edge_index, 4)
    conv, x = LAYERS[layer](), features(4)
    conv(x, adj)
    adj.values().mul_(3)
    with pytest.raises(ValueError) as err:
        conv(x, adj)
    assert "changed in place" in one_line(err)


# --- 7. no edges -------------------------------------------------------------------------


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_no_edges_like_pyg(layer: str) -> None:
    edge_index = torch.zeros((2, 0), dtype=torch.int64)
    adj = cp.adjacency(edge_index, 5)
    assert_same(*run_both(LAYERS[layer], features(5), edge_index, adj))


def test_no_edges_second_order() -> None:
    adj = cp.adjacency(torch.zeros((2, 0), dtype=torch.int64), 5)
    x = features(5).requires_grad_()
    out = cp._spmm(adj, x, "mean")
    w = torch.ones_like(out, requires_grad=True)
    (g,) = torch.autograd.grad((out * w).sum(), x, create_graph=True)
    assert not g.any() and g.requires_grad
    (gw,) = torch.autograd.grad(g.sum(), w)
    assert gw is not None and not gw.any()


# --- 8. TorchScript after the patch --------------------------------------------------------


def test_jit_script_after_patch() -> None:
    """In a fresh process (TorchScript caches a class's compiled type): after the patch,
    scripting GCNConv / SAGEConv / GINConv works and a scripted layer runs PyG's own path
    (on a cognate adjacency too: the dispatchers send TorchScript to PyG)."""
    script = textwrap.dedent(
        """
        import torch, cognate.torch.pyg
        from torch_geometric.nn import GCNConv, GINConv, SAGEConv
        edge_index = torch.tensor([[0, 1, 2, 3, 3, 0], [1, 2, 3, 0, 1, 2]])
        adj = cognate.torch.pyg.adjacency(edge_index, 4)
        x = torch.randn(4, 8)
        for conv in (GCNConv(8, 4), SAGEConv(8, 4), SAGEConv(8, 4, aggr="max"),
                     GINConv(torch.nn.Linear(8, 4))):
            scripted = torch.jit.script(conv)
            assert torch.allclose(scripted(x, edge_index), conv(x, edge_index), atol=1e-6)
            if not isinstance(conv, GCNConv):  # PyG's scripted GCNConv takes no torch CSR
                assert torch.allclose(scripted(x, adj), conv(x, edge_index), atol=1e-6)
        print("SCRIPTED")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert run.returncode == 0 and run.stdout.strip() == "SCRIPTED", run.stderr[-3000:]


# --- 9. GCN with non-positive degrees --------------------------------------------------------


@pytest.mark.parametrize("add_self_loops", [True, False])
def test_gcn_nonpositive_degree_like_pyg(add_self_loops: bool) -> None:
    """Negative in-degrees give NaN and a zero in-degree 0, as PyG's gcn_norm; no warning."""
    edge_index = torch.tensor([[1, 2, 0, 3, 0, 2, 4], [0, 0, 1, 1, 2, 3, 3]])
    weight = torch.tensor([-3.0, 1.0, 1.0, -1.0, 2.0, 0.5, -2.0])
    adj = cp.adjacency(edge_index, 5, weight)
    make = lambda: GCNConv(WIDTH, 4, add_self_loops=add_self_loops)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want, got = run_both(make, features(5), edge_index, adj, weight)
    assert want["out"].isnan().any()
    assert_same(want, got, nan=True)


# --- 10. 2^31 nodes -------------------------------------------------------------------------


def test_huge_num_nodes_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    edge_index = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError) as err:
        cp.adjacency(edge_index, 2**31)
    assert "32-bit" in one_line(err)
    monkeypatch.setenv("COGNATE_MAX_MEMORY", "1G")
    with pytest.raises(CognateError) as err:
        cp.adjacency(edge_index, 2**31 - 1)
    assert "memory budget" in one_line(err)
