"""Mini-batches (NeighborLoader-style sampled subgraphs) on cognate without per-batch tuning:
``adjacency(..., schedule="baseline")`` ranks nothing, compiles each width's kernel once for
every batch, builds A^T only when a backward needs it, and gives PyG's results per batch."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric", reason="torch_geometric not installed (cognate[pyg])")

from torch_geometric.nn import GATConv, SAGEConv  # noqa: E402

import cognate.torch.pyg as cp  # noqa: E402
from cognate.targets.cpu import families  # noqa: E402

TOL = 1e-5


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def sampled_batches(n: int, edges: int, batch: int, fanout: int, count: int, seed: int = 0):
    """What NeighborLoader yields (2 hops of ``fanout`` in-neighbours per node, the seeds
    first, edges renumbered locally), from a random power-law-ish graph, in numpy."""
    rng = np.random.default_rng(seed)
    src = (rng.pareto(1.5, edges) * 10).astype(np.int64) % n
    dst = rng.integers(0, n, edges)
    incoming = sp.csr_matrix((np.arange(edges), (dst, src)), shape=(n, n))
    for _ in range(count):
        seeds = rng.choice(n, batch, replace=False)
        nodes, frontier, kept = list(seeds), seeds, []
        index = {int(v): i for i, v in enumerate(seeds)}
        for _ in range(2):
            following = []
            for v in frontier:
                lo, hi = incoming.indptr[v], incoming.indptr[v + 1]
                picks = incoming.indices[lo:hi]
                picks = rng.choice(picks, min(fanout, picks.size), replace=False)
                for u in picks:
                    if int(u) not in index:
                        index[int(u)] = len(nodes)
                        nodes.append(int(u))
                        following.append(int(u))
                    kept.append((index[int(u)], index[int(v)]))
            frontier = following
        edge_index = torch.tensor(kept, dtype=torch.int64).t().contiguous()
        yield edge_index, len(nodes), batch


def test_batches_run_without_tuning_and_reuse_kernels(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a mini-batch adjacency was ranked")

    monkeypatch.setattr("cognate.torch.choices._tune", refuse)
    torch.manual_seed(0)
    reference = torch.nn.ModuleList([SAGEConv(12, 8), SAGEConv(8, 3)])
    ours = copy.deepcopy(reference)
    gen = torch.Generator().manual_seed(1)
    compiled = []
    for edge_index, n, batch in sampled_batches(3000, 30000, 64, 6, 4):
        x = torch.randn(n, 12, generator=gen)
        y = torch.randint(0, 3, (batch,), generator=gen)
        adj = cp.adjacency(edge_index, n, schedule="baseline")
        results = []
        for net, graph in ((reference, edge_index), (ours, adj)):
            net.zero_grad()
            out = net[1](torch.relu(net[0](x, graph)), graph)[:batch]
            torch.nn.functional.cross_entropy(out, y).backward()
            results.append((out, [p.grad.clone() for p in net.parameters()]))
        assert rel(results[1][0], results[0][0]) < TOL
        for got, want in zip(results[1][1], results[0][1], strict=True):
            assert rel(got, want) < TOL
        ts = cp.tuned(adj)
        assert {c.source for c in ts.choices.values()} <= {"baseline", "reused from A"}
        compiled.append(families._compile.cache_info().misses)
    assert compiled[-1] == compiled[0]  # batches 2..4 compiled nothing new


def test_no_transpose_without_backward() -> None:
    edge_index, n, _ = next(sampled_batches(2000, 20000, 32, 5, 1, seed=3))
    adj = cp.adjacency(edge_index, n, schedule="baseline")
    with torch.no_grad():
        GATConv(8, 4, heads=2)(torch.randn(n, 8), adj)
        SAGEConv(8, 4)(torch.randn(n, 8), adj)
    entry = cp._entry(adj)
    assert cp.tuned(adj)._transposed is None
    assert entry.attention["loops"].tuned._transposed is None
    x = torch.randn(n, 8, requires_grad=True)
    SAGEConv(8, 4)(x, adj).sum().backward()
    assert cp.tuned(adj)._transposed is not None  # the backward needed A^T


def test_unknown_schedule_refused() -> None:
    from cognate.errors import CognateError

    with pytest.raises(CognateError, match="schedule must be one of"):
        cp.adjacency(torch.tensor([[0, 1], [1, 0]]), 2, schedule="fast")


def test_temporary_adjacency_backward() -> None:
    """``model(x, adjacency(...))``: the adjacency is gone after the forward; the backward
    still has its kernels (autograd keeps the operand alive)."""
    import gc

    edge_index, n, _ = next(sampled_batches(2000, 20000, 32, 5, 1, seed=4))
    x = torch.randn(n, 8, requires_grad=True)
    torch.manual_seed(0)
    layer = SAGEConv(8, 4)
    out = layer(x, cp.adjacency(edge_index, n, schedule="baseline"))
    gc.collect()
    out.sum().backward()
    x2 = x.detach().clone().requires_grad_()
    layer.zero_grad()
    layer(x2, edge_index).sum().backward()
    assert rel(x.grad, x2.grad) < TOL


def test_attention_batches_leave_nothing_alive() -> None:
    """GAT on temporary adjacencies: the attention weights train, so their autograd graph
    (whose nodes hold the operand for the backward) must not be held by the operand in turn;
    a strong reference made a cycle through C++ and kept every batch's kernels (GBs/epoch)."""
    import gc

    from cognate.torch.operand import TunedSparse

    def alive() -> set[int]:
        gc.collect()
        return {id(o) for o in gc.get_objects() if isinstance(o, TunedSparse)}

    before = alive()
    torch.manual_seed(0)
    # Two layers on one adjacency: the second's weights depend on the first's SpMM.
    first, second = GATConv(8, 4, heads=2), GATConv(8, 3, heads=1)
    opt = torch.optim.Adam([*first.parameters(), *second.parameters()], lr=0.01)
    for edge_index, n, size in sampled_batches(2000, 20000, 32, 5, 3, seed=6):
        x = torch.randn(n, 8)
        adj = cp.adjacency(edge_index, n, schedule="baseline")
        opt.zero_grad()
        second(first(x, adj).relu(), adj)[:size].sum().backward()
        opt.step()
        del adj
    assert alive() <= before, "a batch's TunedSparse outlived its step"
