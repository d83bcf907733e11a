"""cognate.torch.order: node orders (P A P^T with the dense operands kept in the order), in
TunedSparse (order=...) and in the GCN (loss and gradients equal the unordered model's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

import cognate.torch as ct  # noqa: E402
from cognate import synth, timing  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402
from cognate.torch import gnn  # noqa: E402
from cognate.torch.order import (  # noqa: E402
    NODE_ORDERS,
    NodeOrder,
    choose_node_order,
    node_order,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOL = 1e-4  # relative error (Frobenius) against float64, float32 kernels


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def graph() -> sp.csr_matrix:
    """GCN's normalised adjacency of a generated power-law graph (1250 nodes, 21k entries)."""
    return gnn.normalized_adjacency(synth.generate("powerlaw", nnz=20000, seed=0))


@pytest.fixture(scope="module")
def west(shared: Path):
    """A real non-symmetric square matrix (A^T is a kernel of its own)."""
    return load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert text and "\n" not in text
    return text


@pytest.mark.parametrize("by", NODE_ORDERS)
def test_each_order_is_a_permutation_and_round_trips(graph, by) -> None:
    order = node_order(graph, by)
    n = graph.shape[0]
    assert isinstance(order, NodeOrder) and order.by == by and len(order) == n
    assert order.perm.dtype == torch.int64 and order.inverse.dtype == torch.int64
    assert torch.equal(torch.sort(order.perm).values, torch.arange(n))
    assert torch.equal(order.perm[order.inverse], torch.arange(n))
    if by == "identity":
        assert torch.equal(order.perm, torch.arange(n))
    x = torch.randn(n, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(order.to_order(x), x[order.perm])
    assert torch.equal(order.from_order(order.to_order(x)), x)
    assert torch.equal(order.to_order(order.from_order(x)), x)
    arr = x.numpy()
    assert np.array_equal(order.from_order(order.to_order(arr)), arr)


def test_apply_is_p_a_pt_computed_with_scipy_indexing() -> None:
    """On a non-symmetric matrix with explicit zeros: apply(A) equals A[perm][:, perm]
    (canonical float32 CSR, same values), and (P A P^T) @ X[perm] = (A @ X)[perm]."""
    rng = np.random.default_rng(2)
    a = sp.random(60, 60, density=0.08, format="csr", random_state=3, dtype=np.float32)
    a.data[:5] = 0.0  # explicit zeros stay stored entries
    perm = rng.permutation(60)
    order = NodeOrder(torch.from_numpy(perm))
    got = order.apply(a)
    want = a[perm][:, perm].tocsr()
    want.sort_indices()
    assert got.dtype == np.float32 and got.has_sorted_indices and got.nnz == a.nnz
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)
    x = rng.standard_normal((60, 4)).astype(np.float32)
    assert np.allclose(got @ order.to_order(x), (a @ x)[perm], rtol=1e-5, atol=1e-6)
    with pytest.raises(CognateError):
        NodeOrder(torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError):
        order.to_order(torch.zeros(59, 2))


def test_rectangular_matrices_are_refused_in_one_line() -> None:
    rect = sp.random(5, 7, density=0.5, format="csr", random_state=0)
    with pytest.raises(CognateError) as exc:
        node_order(rect, "rcm")
    assert "square" in _one_line(exc)
    with pytest.raises(CognateError) as exc:
        ct.TunedSparse(rect, order="rcm")
    _one_line(exc)


def test_bad_order_arguments_are_refused_in_one_line(graph) -> None:
    with pytest.raises(CognateError) as exc:
        ct.TunedSparse(graph, widths=(8,), order="auto")
    assert "verify=True" in _one_line(exc)
    with pytest.raises(CognateError) as exc:
        ct.TunedSparse(graph, order="auto", verify=True)  # no widths to pick at
    _one_line(exc)
    with pytest.raises(CognateError) as exc:
        ct.TunedSparse(graph, order="random")
    _one_line(exc)
    with pytest.raises(CognateError) as exc:
        node_order(graph, "bfs")
    _one_line(exc)


def test_tuned_sparse_in_rcm_order_matches_the_unordered_product(west) -> None:
    """TunedSparse(order="rcm"): from_order(A' @ to_order(X)) = A @ X, and X's gradient
    through autograd = A^T @ G (dense float64 torch reference); values= is in P A P^T's
    canonical CSR order."""
    ts = ct.TunedSparse(west, widths=(16,), order="rcm")
    order = ts.node_order
    assert order is not None and order.by == "rcm"
    permuted = order.apply(west)
    assert np.array_equal(ts.matrix.csr.indices, permuted.indices)
    assert np.array_equal(ts.values.numpy(), permuted.data)
    dense = torch.from_numpy(west.csr.toarray().astype(np.float64))
    gen = torch.Generator().manual_seed(0)
    n = west.shape[0]
    x = torch.randn(n, 16, generator=gen, requires_grad=True)
    grad = torch.randn(n, 16, generator=gen)
    y = ts.from_order(ct.spmm(ts, ts.to_order(x)))
    y.backward(grad)
    assert rel(y, dense @ x.detach().double()) <= TOL
    assert rel(y, torch.from_numpy(west.csr @ x.detach().numpy())) <= TOL
    assert rel(x.grad, dense.T @ grad.double()) <= TOL
    twice = ts.from_order(ct.spmm(ts, ts.to_order(x.detach()), ts.values * 2))
    assert rel(twice, 2 * (dense @ x.detach().double())) <= TOL
    plain = ct.TunedSparse(west)
    assert plain.node_order is None and plain.to_order(x) is x and plain.from_order(x) is x


def test_auto_takes_the_measured_order_at_the_first_width(graph, tmp_path, monkeypatch) -> None:
    """order="auto" with verify: the order whose median was smallest at widths[0], and
    products in that order equal scipy's (the timings themselves are not asserted)."""
    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    ts = ct.TunedSparse(graph, widths=(8,), verify=True, order="auto")
    assert set(ts.order_seconds) == set(NODE_ORDERS)
    assert ts.node_order.by == min(ts.order_seconds, key=ts.order_seconds.get)
    want = node_order(graph, ts.node_order.by).apply(graph)
    assert np.array_equal(ts.matrix.csr.indices, want.indices)
    x = torch.randn(graph.shape[0], 8, generator=torch.Generator().manual_seed(5))
    y = ts.from_order(ts @ ts.to_order(x))
    assert rel(y, torch.from_numpy(graph.astype(np.float64) @ x.double().numpy())) <= TOL


def test_choose_node_order_measures_every_candidate(graph, tmp_path, monkeypatch) -> None:
    """One of the candidates, a median per candidate (the timings are not asserted)."""
    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    best, seconds, load = choose_node_order(graph, 8, rounds=3)
    assert best.by in NODE_ORDERS and set(seconds) == set(NODE_ORDERS)
    assert all(s > 0 for s in seconds.values())
    assert isinstance(load, timing.Load)
    best, seconds, _ = choose_node_order(graph, 8, candidates=("rcm", "degree"), rounds=3)
    assert best.by in ("rcm", "degree") and set(seconds) == {"rcm", "degree"}
    with pytest.raises(CognateError):
        choose_node_order(graph, 8, candidates=("rcm", "bfs"))


def test_gcn_with_a_node_order_equals_the_torch_model(graph) -> None:
    """The GCN on cognate with order="rcm": the same loss and parameter gradients as on
    torch.sparse.mm (features permuted in once, logits out once)."""
    n = graph.shape[0]
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(n, 24, generator=gen)
    labels = torch.from_numpy(gnn.community_labels(graph, 4, seed=0))
    results = {}
    for backend, order in (("torch", None), ("cognate", "rcm")):
        tune = {"widths": (16, 4)} if backend == "cognate" else {}
        propagate, ts = gnn.propagation(graph, backend, order=order, **tune)
        if ts is not None:
            assert isinstance(propagate, gnn.OrderedPropagation)
            assert ts.node_order.by == "rcm"
        model = gnn.GCN(24, 16, 4, seed=0)
        loss = torch.nn.functional.cross_entropy(model(propagate, features), labels)
        loss.backward()
        results[backend] = (loss.detach(), [p.grad for p in model.parameters()])
    (loss, grads), (want_loss, want_grads) = results["cognate"], results["torch"]
    assert rel(loss, want_loss) <= TOL
    for got, want in zip(grads, want_grads, strict=True):
        assert rel(got, want) <= TOL
    with pytest.raises(ValueError):
        gnn.propagation(graph, "torch", order="rcm")


def test_gcn_example_in_a_node_order_trains_as_without(shared, capsys) -> None:
    """examples/gcn.py --order rcm (data moved into the order once) prints the losses of the
    unordered cognate run and of the torch.sparse backend."""
    import runpy
    from pathlib import Path

    example = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "gcn.py"))
    graph = str(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")
    losses = {}
    for name, extra in (("torch", ["--backend", "torch"]), ("rcm", ["--order", "rcm"])):
        argv = [graph, "--epochs", "10", "--hidden", "16", "--features", "8", *extra]
        assert example["main"](argv) == 0
        lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("epoch")]
        losses[name] = [float(ln.split()[3]) for ln in lines]
    assert losses["rcm"] == pytest.approx(losses["torch"], rel=1e-3)
    assert losses["rcm"][-1] < losses["rcm"][0]
