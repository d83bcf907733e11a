"""Stock PyTorch Geometric models trained on cognate's kernels against PyG's own cpu paths.

Per graph and model (2 layers, hidden 64 by default, 128 random input features, 16 classes;
GCN: GCNConv with ``cached=True``; SAGE: SAGEConv mean; GIN: GINConv sum with a 2-layer MLP;
``--models sage-max`` adds SAGEConv max, cognate's untuned (max, x) kernel),
one training epoch (zero grads, forward, cross-entropy, backward, Adam step) is timed with
the adjacency as PyG users pass it:

- ``cognate``: ``cognate.torch.pyg.adjacency(edge_index, n)`` (the two-line change; schedules
  ranked by the shipped cost model, choices remembered from an earlier run forgotten first
  unless ``--reuse-choices``); its tuning seconds (the first epoch's choosing, packing,
  compiling) are reported apart with the break-even epoch count against PyG's fastest path
  (GCN tunes its normalised adjacency; SAGE and GIN share A's tuning, counted for each);
- ``edge_index``: the plain edge list (PyG gathers and scatters per edge);
- ``csr``: ``T.ToSparseTensor(layout=torch.sparse_csr)``'s ``adj_t`` (PyG fuses into
  ``torch.sparse.mm`` / ``spmm_reduce``);
- ``EdgeIndex``: ``EdgeIndex(edge_index, sparse_size=(n, n))`` sorted by column.

Before any timing, every backend's first loss and parameter gradients must equal the
``edge_index`` path's (relative error <= 1e-4); a mismatch is reported and not timed. Each
backend then runs in its own block of epochs after a pause (``--pause``, 0.3 s: Intel OpenMP
spins 200 ms after a call), warm-up epochs first, the blocks rotating over ``--rounds``
rounds; the median epoch and its spread (min-max) per backend. OpenMP and torch threads keep
their defaults (``--threads N`` sets OMP_NUM_THREADS / MKL_NUM_THREADS before anything loads).

Graphs (``--graphs``): the shared real matrices over 100k stored entries (suitesparse, waco)
and generated power-law and road graphs (``cognate.synth``, ``--synth-edges``), each as an
undirected graph: the symmetrised pattern without self loops (a rectangular matrix as its
bipartite graph). The output says which graphs' matrices the shipped cpu SpMM model saw in
training or validation (in-sample).

Models (``--models``): gcn, sage (mean), gin (sum), sage-max, gat (GATConv, 4 heads of
hidden / 4 channels concatenated, then 1 head), transformer (TransformerConv, the same
heads). Beside each epoch: the aggregation's own time, forward + backward. For GCN, SAGE,
GIN and SAGE-max it is timed alone: the sparse aggregations one epoch makes are recorded
(cognate's, the projection first included, and PyG's fused ``spmm`` on the CSR ``adj_t``),
then replayed on fixed inputs of the same shapes, each backend in its own blocks after a
pause (``alone``, PyG CSR / cognate). For the attention layers, whose aggregation is not one
call: the epoch minus the "dense" epoch (the same model on a graph without edges: its linear
layers, loss, backward and Adam step, common to every backend), where that exceeds the
epoch's spread.

``--loader``: mini-batch training as NeighborLoader runs it (``--batch-size`` seeds,
``--fanout`` in-neighbours per hop; PyG's NeighborLoader, with its own sampler where pyg-lib
is not installed) on generated power-law graphs of ``--synth-edges`` entries: one epoch =
every batch, each backend building each batch's adjacency as its users do (cognate:
``adjacency(..., schedule="baseline")``, no tuning; csr: ``ToSparseTensor``; edge_index as
sampled); the batches are sampled once, before timing. Beside them, "dense": the same
batches without edges, and the ceiling fastest PyG / dense that no aggregation can pass.

    python scripts/bench_pyg.py --quick                  # one small generated graph
    python scripts/bench_pyg.py --graphs real --json real.json
    python scripts/bench_pyg.py --graphs synth --json synth.json

The quiet run for issue 59 (figures go to docs/torch.md; nothing else may run on the host):

    python scripts/bench_pyg.py --graphs real --only Groebner arrow pushpull bcsstk38 nemspmm1 \
        --models gcn sage gin sage-max gat transformer --json A.json
    python scripts/bench_pyg.py --only Trec6 c-46 cavity24 stokes64s powerlaw road \
        --models gcn sage gin sage-max gat transformer --json B.json
    python scripts/bench_pyg.py --report A.json B.json
    python scripts/bench_pyg.py --loader --synth-edges 1000000 5000000 \
        --models gcn sage gin gat --rounds 2 --json loader.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable

from cognate.timing import early_threads

early_threads(sys.argv)  # before numpy / torch load their OpenMP runtimes

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

from cognate.bench.corpus import generated_graphs, shared_matrices  # noqa: E402
from cognate.bench.loop import run_rows  # noqa: E402
from cognate.bench.provenance import model_data  # noqa: E402
from cognate.matrix import Matrix, canonicalize  # noqa: E402
from cognate.stats import geomean  # noqa: E402

MODELS = ("gcn", "sage", "gin", "sage-max", "gat", "transformer")
DEFAULT_MODELS = ("gcn", "sage", "gin", "gat", "transformer")
HEADS = 4  # GAT / TransformerConv: 4 heads of hidden / 4 channels, concatenated
PYG_BACKENDS = ("edge_index", "csr", "EdgeIndex")
BACKENDS = ("cognate", *PYG_BACKENDS)
REAL_MIN_NNZ = 100_000
SYNTH = ("powerlaw", "road")
TOL = 1e-4


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one 20k-edge power-law graph, 1 round")
    p.add_argument("--graphs", choices=("all", "real", "synth"), default="all",
                   help="shared real matrices over 100k entries, generated graphs, or both")  # fmt: skip
    p.add_argument("--only", nargs="*", help="only the graphs whose names start with these")
    p.add_argument("--synth-edges", type=int, nargs="*", default=[1_000_000],
                   help="entries of each generated graph (default 1M)")  # fmt: skip
    p.add_argument("--models", nargs="+", choices=MODELS, default=list(DEFAULT_MODELS),
                   help="models to time (default gcn sage gin)")  # fmt: skip
    p.add_argument("--hidden", type=int, default=64, help="hidden channels (64)")
    p.add_argument("--features", type=int, default=128, help="random input features (128)")
    p.add_argument("--classes", type=int, default=16, help="label classes (16)")
    p.add_argument("--epochs", type=int, default=4, help="timed epochs per block")
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs per block")
    p.add_argument("--rounds", type=int, default=2, help="blocks per backend (rotating)")
    p.add_argument("--pause", type=float, default=0.3, help="seconds before each block")
    p.add_argument("--reuse-choices", action="store_true", help="keep remembered choices")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS / MKL_NUM_THREADS")
    p.add_argument("--seed", type=int, default=0, help="graphs, weights, features (0)")
    p.add_argument("--loader", action="store_true",
                   help="mini-batch training (NeighborLoader's batches) on generated power-law"
                   " graphs of --synth-edges entries instead of full-batch epochs")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=1024, help="--loader: seed nodes (1024)")
    p.add_argument("--fanout", type=int, nargs="+", default=[10, 10],
                   help="--loader: sampled in-neighbours per hop (10 10)")  # fmt: skip
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--report", nargs="+", metavar="JSON",
                   help="print the report of earlier runs' --json files together; run nothing")  # fmt: skip
    args = p.parse_args(argv)
    if args.quick:
        args.graphs, args.synth_edges, args.rounds, args.epochs = "synth", [20_000], 1, 2
        args.only = ["powerlaw"]
    for name in ("hidden", "features", "classes", "epochs", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def graphs(args: argparse.Namespace) -> list[Matrix]:
    found: list[Matrix] = []
    if args.graphs in ("all", "real"):
        found += shared_matrices(min_nnz=REAL_MIN_NNZ + 1)
    if args.graphs in ("all", "synth"):
        found += generated_graphs(args.synth_edges, SYNTH, seed=args.seed)
    if args.only:
        found = [m for m in found if any(m.name.startswith(o) for o in args.only)]
    return found


def make_model(kind: str, args: argparse.Namespace) -> torch.nn.Module:
    from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv, TransformerConv

    def gin(i: int, o: int) -> GINConv:
        mlp = torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(), torch.nn.Linear(o, o))
        return GINConv(mlp)

    make = {
        # PyG's recommended caching, full-batch only: a cached layer keeps the first graph
        "gcn": lambda i, o: GCNConv(i, o, cached=not args.loader),
        "sage": lambda i, o: SAGEConv(i, o, aggr="mean"),
        "sage-max": lambda i, o: SAGEConv(i, o, aggr="max"),
        "gin": gin,
    }.get(kind)
    torch.manual_seed(args.seed)
    if make is not None:
        return _Net(make(args.features, args.hidden), make(args.hidden, args.classes))
    layer = GATConv if kind == "gat" else TransformerConv
    heads = HEADS if args.hidden % HEADS == 0 else 1
    first = layer(args.features, args.hidden // heads, heads=heads)  # concatenated heads
    return _Net(first, layer(args.hidden, args.classes, heads=1))


class _Net(torch.nn.Module):
    def __init__(self, conv1: torch.nn.Module, conv2: torch.nn.Module) -> None:
        super().__init__()
        self.conv1, self.conv2 = conv1, conv2

    def forward(self, x: torch.Tensor, adj) -> torch.Tensor:
        return self.conv2(torch.relu(self.conv1(x, adj)), adj)


def adjacencies(edge_index: torch.Tensor, n: int, args: argparse.Namespace) -> dict:
    """The adjacency each backend passes, built as its users build it."""
    import torch_geometric.transforms as T
    from torch_geometric import EdgeIndex
    from torch_geometric.data import Data

    import cognate.torch.pyg

    if not args.reuse_choices:
        _forget(edge_index, n)
    csr = T.ToSparseTensor(layout=torch.sparse_csr)(Data(edge_index=edge_index, num_nodes=n))
    return {
        "cognate": cognate.torch.pyg.adjacency(edge_index, n),
        "edge_index": edge_index,
        "csr": csr.adj_t,
        "EdgeIndex": EdgeIndex(edge_index, sparse_size=(n, n)).sort_by("col").values,
    }


def _forget(edge_index: torch.Tensor, n: int) -> None:
    """Forget remembered choices of the adjacency and its GCN-normalised form."""
    from cognate.torch import choices
    from cognate.torch.pyg import gcn_normalized

    index = edge_index.numpy()
    ones = np.ones(index.shape[1], dtype=np.float32)
    adj = canonicalize(sp.coo_matrix((ones, (index[1], index[0])), shape=(n, n)))
    choices.forget(Matrix("adj_t", adj))
    choices.forget(Matrix("gcn", gcn_normalized(adj, 1.0, True)))


def trainer(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, adj) -> Callable:
    """One epoch: zero grads, forward, loss, backward, Adam step; returns the loss and
    gradients of the epoch (before the step)."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def epoch() -> tuple[torch.Tensor, list[torch.Tensor]]:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x, adj), y)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        opt.step()
        return loss.detach(), grads

    return epoch


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


def grad_error(grads: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """The largest relative gradient error, a gradient's norm floored at 1e-3 of the largest
    one's (a gradient that is zero in real arithmetic, TransformerConv's key bias under the
    softmax, is rounding noise on every backend)."""
    floor = 1e-3 * max(float(w.double().norm()) for w in want)
    return max(
        float((g.double() - w.double()).norm()) / max(float(w.double().norm()), floor, 1e-30)
        for g, w in zip(grads, want, strict=True)
    )


def rotating_blocks(calls: dict[str, Callable], args) -> dict[str, list[float]]:
    """Each call in its own block (``--warmup`` untimed, ``--epochs`` timed) after a pause,
    the blocks' order rotating over ``--rounds`` rounds; the seconds of each timed call."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(args.rounds):
        names = list(calls)[r % len(calls) :] + list(calls)[: r % len(calls)]
        for name in names:
            time.sleep(args.pause)
            for _ in range(args.warmup):
                calls[name]()
            for _ in range(args.epochs):
                start = time.perf_counter()
                calls[name]()
                samples[name].append(time.perf_counter() - start)
    return samples


def one_model(kind: str, adjs: dict, x: torch.Tensor, y: torch.Tensor, args) -> dict:

    base = make_model(kind, args)
    epochs = {name: trainer(copy.deepcopy(base), x, y, adj) for name, adj in adjs.items()}
    first = {}
    for name, epoch in epochs.items():  # the check epoch; cognate's tunes its widths here
        start = time.perf_counter()
        first[name] = (*epoch(), time.perf_counter() - start)
    row: dict = {"tune_s": _tuning_s(kind, adjs["cognate"])}
    want_loss, want_grads, _ = first["edge_index"]
    for name, (loss, grads, _) in first.items():
        error = max([rel(loss, want_loss), grad_error(grads, want_grads)])
        if error > TOL:
            row["check"] = f"mismatch: {name} differs from edge_index by {error:.1e}"
            return row
    row["check"] = "ok"
    samples = rotating_blocks(epochs, args)
    row["epoch_ms"] = {n: float(np.median(s)) * 1e3 for n, s in samples.items()}
    row["dense_ms"] = _dense_ms(base, x, y, args)
    row["aggregation_ms"] = {n: ms - row["dense_ms"] for n, ms in row["epoch_ms"].items()}
    direct = _direct_aggregation_ms(kind, base, adjs, x, y, args)
    if direct is not None:
        row["aggregation_direct_ms"] = direct
    row["spread_ms"] = {n: [min(s) * 1e3, max(s) * 1e3] for n, s in samples.items()}
    fastest = min(PYG_BACKENDS, key=lambda n: row["epoch_ms"][n])
    cog = row["epoch_ms"]["cognate"]
    row["fastest_pyg"] = fastest
    row["speedup"] = row["epoch_ms"][fastest] / cog
    saved = (row["epoch_ms"][fastest] - cog) / 1e3
    row["break_even_epochs"] = int(np.ceil(row["tune_s"] / saved)) if saved > 0 else None
    return row


class _Recorder:
    """The sparse aggregations one epoch makes (sum / mean / max / min models): cognate's
    (``_Adjacency.spmm``, the patched path, the projection first included) and PyG's fused
    ``spmm`` on a torch CSR ``adj_t`` (what the dispatcher hands to PyG), each as (call, [(input
    shape, whether it needs a gradient)]), to replay alone."""

    def __init__(self) -> None:
        import cognate.torch.pyg as front

        self.front, self.calls = front, []
        self.own, self.pyg = front._Adjacency.spmm, front._pyg_spmm

    def __enter__(self) -> _Recorder:
        own, pyg, calls = self.own, self.pyg, self.calls

        def own_spmm(entry, x, reduce):
            calls.append((lambda h: own(entry, h, reduce), [(tuple(x.shape), x.requires_grad)]))
            return own(entry, x, reduce)

        def pyg_spmm(src, x, reduce="sum"):
            calls.append((lambda h: pyg(src, h, reduce), [(tuple(x.shape), x.requires_grad)]))
            return pyg(src, x, reduce)

        self.front._Adjacency.spmm, self.front._pyg_spmm = own_spmm, pyg_spmm
        return self

    def __exit__(self, *exc: object) -> None:
        self.front._Adjacency.spmm, self.front._pyg_spmm = self.own, self.pyg


class _AttentionRecorder:
    """The attention aggregations one epoch makes (GAT, TransformerConv), after the
    projections: cognate's (``gat_attention`` / ``dot_attention``: the edges' scores, their
    softmax per target and the weighted SpMM) and PyG's (GATConv's ``edge_updater`` then
    ``propagate``, TransformerConv's ``propagate``, on the edge list PyG built, its self
    loops added), each as (call, [(input shape, whether it needs a gradient)]), to replay
    alone."""

    def __init__(self, model: torch.nn.Module) -> None:
        from cognate.torch.pyg import attention

        self.attention, self.model, self.calls = attention, model, []
        self.own = {name: getattr(attention, name) for name in ("gat_attention", "dot_attention")}

    def __enter__(self) -> _AttentionRecorder:
        from torch_geometric.nn import GATConv, TransformerConv

        for name, own in self.own.items():
            setattr(self.attention, name, self._own(own))
        for layer in self.model.modules():
            if isinstance(layer, GATConv):
                self._pyg_gat(layer)
            elif isinstance(layer, TransformerConv):
                self._pyg_transformer(layer)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, own in self.own.items():
            setattr(self.attention, name, own)

    @staticmethod
    def _shapes(*tensors: torch.Tensor) -> list[tuple[tuple[int, ...], bool]]:
        return [(tuple(t.shape), t.requires_grad) for t in tensors]

    def _own(self, own: Callable) -> Callable:
        def run(p, layer, *tensors):
            self.calls.append((lambda *t: own(p, layer, *t), self._shapes(*tensors)))
            return own(p, layer, *tensors)

        return run

    def _pyg_gat(self, layer) -> None:
        update, propagate, scores = layer.edge_updater, layer.propagate, {}

        def edge_updater(edge_index, alpha, edge_attr=None, size=None):
            scores["shapes"] = self._shapes(*alpha)
            return update(edge_index, alpha=alpha, edge_attr=edge_attr, size=size)

        def recorded(edge_index, x, alpha, size=None):
            def replay(a_src, a_dst, x_src, edge_index=edge_index):
                att = update(edge_index, alpha=(a_src, a_dst), edge_attr=None, size=None)
                return propagate(edge_index, x=(x_src, x_src), alpha=att, size=None)

            self.calls.append((replay, [*scores["shapes"], *self._shapes(x[0])]))
            return propagate(edge_index, x=x, alpha=alpha, size=size)

        layer.edge_updater, layer.propagate = edge_updater, recorded

    def _pyg_transformer(self, layer) -> None:
        propagate = layer.propagate

        def recorded(edge_index, query, key, value, edge_attr=None, size=None):
            def replay(q, k, v, edge_index=edge_index):
                return propagate(edge_index, query=q, key=k, value=v, edge_attr=None, size=None)

            self.calls.append((replay, self._shapes(query, key, value)))
            return propagate(
                edge_index, query=query, key=key, value=value, edge_attr=edge_attr, size=size
            )

        layer.propagate = recorded


def _direct_aggregation_ms(
    kind: str, base: torch.nn.Module, adjs: dict, x, y, args
) -> dict[str, float] | None:
    """cognate's and PyG's aggregations of one epoch timed alone, forward and backward (the
    gradient only where the epoch needs it), each backend in its own blocks after a pause:
    the calls one epoch makes, recorded, then replayed on fixed inputs of the same shapes.
    Sum / mean / max / min: PyG's CSR path (its fastest here); attention: the scores,
    softmax and weighted SpMM after the projections, PyG on its edge list and on the CSR
    ``adj_t`` (attention runs PyG's gather / scatter on both)."""
    attention = kind in ("gat", "transformer")
    replays = {}
    for name in ("cognate", "edge_index", "csr") if attention else ("cognate", "csr"):
        model = copy.deepcopy(base)
        recorder = _AttentionRecorder(model) if attention else _Recorder()
        with recorder as rec:
            trainer(model, x, y, adjs[name])()
        if not rec.calls:
            return None
        gen = torch.Generator().manual_seed(args.seed)
        inputs = [
            (call, [torch.randn(shape, generator=gen).requires_grad_(grad) for shape, grad in ins])
            for call, ins in rec.calls
        ]

        def replay(inputs=inputs) -> None:
            for call, tensors in inputs:
                out = call(*tensors)
                if out.requires_grad:
                    out.backward(torch.ones_like(out))

        replays[name] = replay
    samples = rotating_blocks(replays, args)
    return {name: float(np.median(t)) * 1e3 for name, t in samples.items()}


def _fastest_pyg_alone(direct: dict[str, float]) -> str:
    """The PyG backend whose replayed aggregation ran fastest."""
    return min((name for name in direct if name != "cognate"), key=direct.get)


def _dense_ms(base: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, args) -> float:
    """The epoch without the graph: the same model on an edge list without edges (its dense
    layers, loss, backward and Adam step, which every backend runs alike). A backend's
    epoch minus this is its aggregation's own time, forward and backward (attention: the
    scores, the softmax and the weighted SpMM)."""
    empty = torch.zeros((2, 0), dtype=torch.int64)
    epoch = trainer(copy.deepcopy(base), x, y, empty)
    samples = []
    for _ in range(args.rounds):
        time.sleep(args.pause)
        for _ in range(args.warmup):
            epoch()
        for _ in range(args.epochs):
            start = time.perf_counter()
            epoch()
            samples.append(time.perf_counter() - start)
    return float(np.median(samples)) * 1e3


def _tuning_s(kind: str, adj_t) -> float:
    """The tuning of the kernels ``kind`` runs on: GCN's normalised form, the max / min
    schedules timed, the attention patterns (GAT and TransformerConv: every pattern tuned so
    far, shared where both run), or A itself (SAGE and GIN share it: same widths, so the
    second model finds it tuned)."""
    import cognate.torch.pyg

    parts = {"gcn": "normalized", "sage-max": "minmax", "gat": "attention"}
    part = parts.get(kind, "attention" if kind == "transformer" else "sum")
    return cognate.torch.pyg.tuning_seconds(adj_t, part)


def one_graph(matrix: Matrix, args: argparse.Namespace) -> dict:
    from cognate.torch.pyg import undirected_edges

    edge_index, n = undirected_edges(matrix)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(n, args.features, generator=gen)
    y = torch.randint(0, args.classes, (n,), generator=gen)
    adjs = adjacencies(edge_index, n, args)
    import cognate.torch.pyg

    row = {
        "graph": matrix.name,
        "nodes": n,
        "edges": int(edge_index.shape[1]),
        "model_data": model_data(matrix.name),
        "symmetric_kernel": cognate.torch.pyg.tuned(adjs["cognate"]).symmetric,
        "models": {},
    }
    for kind in args.models:
        row["models"][kind] = one_model(kind, adjs, x, y, args)
    return row


def report(rows: list[dict], args: argparse.Namespace) -> None:
    print(
        f"{'graph':22s} {'model':8s} {'edges':>8s} {'data':>10s} {'tune s':>7s}"
        + "".join(f" {b + ' ms':>14s}" for b in BACKENDS)
        + f" {'vs fastest':>10s} {'break-even':>10s}"
    )
    for r in rows:
        for kind, m in r["models"].items():
            head = f"{r['graph'][:22]:22s} {kind:8s} {r['edges']:8d} {r['model_data']:>10s}"
            if m["check"] != "ok":
                print(f"{head} {m['check']}")
                continue
            cells = "".join(
                f" {m['epoch_ms'][b]:7.1f} ({m['spread_ms'][b][1] - m['spread_ms'][b][0]:4.1f})"
                for b in BACKENDS
            )
            if "aggregation_ms" in m and "aggregation_direct_ms" not in m:  # older files
                agg = m["aggregation_ms"]
                fastest = agg[m["fastest_pyg"]]
                spread = m["spread_ms"]["cognate"][1] - m["spread_ms"]["cognate"][0]
                ratio = (  # epoch - dense: no ratio where cognate's part is inside its spread
                    f"{fastest / agg['cognate']:.2f}x"
                    if agg["cognate"] > spread
                    else "cognate's part inside its epoch's spread"
                )
                cells += (
                    f"  [epoch - dense: cognate {agg['cognate']:.1f} ms, {m['fastest_pyg']}"
                    f" {fastest:.1f} ms, {ratio}; dense {m['dense_ms']:.1f} ms]"
                )
            if "aggregation_direct_ms" in m:
                d = m["aggregation_direct_ms"]
                pyg = _fastest_pyg_alone(d)
                cells += (
                    f"  [alone: cognate {d['cognate']:.2f} ms, {pyg} {d[pyg]:.2f} ms,"
                    f" {d[pyg] / max(d['cognate'], 1e-9):.2f}x]"
                )
            be = m["break_even_epochs"]
            print(
                f"{head} {m['tune_s']:7.2f}{cells} {m['speedup']:9.2f}x"
                f" {'never' if be is None else be:>10}  ({m['fastest_pyg']} fastest PyG)"
            )
    print(
        "(per backend: median epoch ms and, in brackets, the max-min spread; alone = the"
        " epoch's aggregations replayed alone, forward + backward, cognate's against PyG's"
        " fastest (attention: the scores, softmax and weighted SpMM after the projections);"
        " dense = the same epoch on a graph without edges)"
    )
    for kind in args.models:
        good = [r for r in rows if r["models"].get(kind, {}).get("check") == "ok"]
        ratios = [r["models"][kind]["speedup"] for r in good]
        if not ratios:
            continue
        out = [
            r["models"][kind]["speedup"] for r in good if r["model_data"] in ("unseen", "held-out")
        ]
        # the most any aggregation could give: the fastest PyG epoch over the dense epoch
        ceilings = [
            r["models"][kind]["epoch_ms"][r["models"][kind]["fastest_pyg"]]
            / r["models"][kind]["dense_ms"]
            for r in good
            if r["models"][kind].get("dense_ms")
        ]
        alone = [
            r["models"][kind]["aggregation_direct_ms"]
            for r in good
            if "aggregation_direct_ms" in r["models"][kind]
        ]
        if alone:
            ratios_alone = [a[_fastest_pyg_alone(a)] / a["cognate"] for a in alone]
            print(
                f"{kind}: aggregation alone (forward + backward, replayed), fastest PyG / cognate:"
                f" geomean {geomean(ratios_alone):.2f}x over {len(alone)} graphs"
                f" (min {min(ratios_alone):.2f}x)"
            )
        print(
            f"{kind}: cognate vs the fastest PyG cpu path per graph: geomean"
            f" {geomean(ratios):.2f}x over {len(ratios)} graphs (min {min(ratios):.2f}x, max"
            f" {max(ratios):.2f}x)"
            + (f"; out-of-sample graphs only: {geomean(out):.2f}x over {len(out)}" if out else "")
            + (
                f"; ceiling (fastest PyG / dense) geomean {geomean(ceilings):.2f}x"
                if len(ceilings) == len(good)
                else ""
            )
        )
    seen = sorted({r["graph"] for r in rows if r["model_data"] in ("train", "validation")})
    print(
        f"in-sample for the shipped cpu SpMM model (its matrix trained/validated it): {seen or 'none'}"
    )


def report_files(args: argparse.Namespace) -> int:
    """The report of saved runs (``--json`` files) as one table and one summary."""
    rows = []
    for name in args.report:
        try:
            rows += json.loads(open(name).read())
        except (OSError, ValueError) as err:
            print(f"bench_pyg: cannot read {name}: {err}")
            return 1
    args.models = [m for m in MODELS if any(m in r["models"] for r in rows)]
    report(rows, args)
    return 0


# --- mini-batches (--loader) ----------------------------------------------------------------


def sampled_batches(edge_index: torch.Tensor, n: int, args: argparse.Namespace) -> list:
    """One epoch of NeighborLoader's batches (seed nodes shuffled, ``--fanout`` in-neighbours
    per hop, seeds first, edges renumbered locally): PyG's NeighborLoader (its own sampler
    without pyg-lib), else (no torch_geometric.loader) the same sampling in numpy (per node, ``fanout`` draws
    among its in-neighbours, duplicates dropped). Sampled once, before any timing: every
    backend trains on the same batches. Each batch: (edge_index, nodes, batch size, ids)."""
    try:
        from torch_geometric.data import Data
        from torch_geometric.loader import NeighborLoader

        data = Data(edge_index=edge_index, num_nodes=n, n_id=torch.arange(n))
        torch.manual_seed(args.seed)  # the same batches in every run
        loader = NeighborLoader(
            data, num_neighbors=args.fanout, batch_size=args.batch_size, shuffle=True
        )
        return [(b.edge_index, b.num_nodes, b.batch_size, b.n_id) for b in loader]
    except ImportError:
        pass
    rng = np.random.default_rng(args.seed)
    src, dst = edge_index.numpy()
    order = np.argsort(dst, kind="stable")
    sources = src[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    local = np.full(n, -1, dtype=np.int64)
    batches = []
    for seeds in np.array_split(rng.permutation(n), max(1, -(-n // args.batch_size))):
        nodes = [seeds]
        local[seeds] = np.arange(seeds.size)
        count, frontier, kept = seeds.size, seeds, []
        for fanout in args.fanout:
            targets = np.repeat(frontier, fanout)
            degree = indptr[targets + 1] - indptr[targets]
            targets, degree = targets[degree > 0], degree[degree > 0]
            picked = sources[indptr[targets] + (rng.random(targets.size) * degree).astype(np.int64)]
            pairs = np.unique(np.stack([picked, targets]), axis=1)
            fresh = np.unique(pairs[0][local[pairs[0]] < 0])
            local[fresh] = count + np.arange(fresh.size)
            count += fresh.size
            nodes.append(fresh)
            kept.append(local[pairs])
            frontier = fresh
        ids = np.concatenate(nodes)
        batches.append((torch.from_numpy(np.concatenate(kept, 1)), count, seeds.size,
                        torch.from_numpy(ids)))  # fmt: skip
        local[ids] = -1
    return batches


def loader_epoch(model: torch.nn.Module, batches: list, x, y, backend: str) -> Callable:
    """One epoch over every batch for ``backend``: the batch's adjacency built as its users
    build it (cognate: ``adjacency(..., schedule="baseline")``, no tuning; csr: PyG's
    ``ToSparseTensor``; edge_index: as sampled), then forward, loss on the seeds, backward,
    Adam step. Returns the first batch's loss and gradients."""
    import torch_geometric.transforms as T
    from torch_geometric.data import Data

    import cognate.torch.pyg

    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def adjacency(edge_index: torch.Tensor, nodes: int) -> object:
        if backend == "cognate":
            return cognate.torch.pyg.adjacency(edge_index, nodes, schedule="baseline")
        if backend == "csr":
            data = Data(edge_index=edge_index, num_nodes=nodes)
            return T.ToSparseTensor(layout=torch.sparse_csr)(data).adj_t
        return edge_index

    def epoch() -> tuple[torch.Tensor, list[torch.Tensor]]:
        first = None
        for edge_index, nodes, size, ids in batches:
            opt.zero_grad(set_to_none=True)
            out = model(x[ids], adjacency(edge_index, nodes))[:size]
            loss = torch.nn.functional.cross_entropy(out, y[ids[:size]])
            loss.backward()
            if first is None:
                first = (loss.detach(), [p.grad.clone() for p in model.parameters()])
            opt.step()
        return first

    return epoch


def loader_main(args: argparse.Namespace) -> int:
    from cognate.torch.pyg import undirected_edges

    backends = ("cognate", "edge_index", "csr")
    timed = (*backends, "dense")
    ok = True
    rows = []
    for matrix in generated_graphs(args.synth_edges, ("powerlaw",), seed=args.seed):
        edge_index, n = undirected_edges(matrix)
        gen = torch.Generator().manual_seed(args.seed)
        x = torch.randn(n, args.features, generator=gen)
        y = torch.randint(0, args.classes, (n,), generator=gen)
        start = time.perf_counter()
        batches = sampled_batches(edge_index, n, args)
        sample_s = time.perf_counter() - start
        # The floor: the same batches without edges (linear layers, loss, backward, Adam),
        # common to every backend; fastest PyG / dense bounds any aggregation's speed-up.
        bare = [(e[:, :0], nodes, size, ids) for e, nodes, size, ids in batches]
        for kind in args.models:
            base = make_model(kind, args)
            epochs = {b: loader_epoch(copy.deepcopy(base), batches, x, y, b) for b in backends}
            epochs["dense"] = loader_epoch(copy.deepcopy(base), bare, x, y, "edge_index")
            first = {b: epochs[b]() for b in backends}  # the check epoch (compiles, warms)
            epochs["dense"]()
            want_loss, want_grads = first["edge_index"]
            error = max(
                max(rel(first[b][0], want_loss), grad_error(first[b][1], want_grads))
                for b in backends
            )
            row = {"graph": matrix.name, "nodes": n, "edges": int(edge_index.shape[1]),
                   "model": kind, "batches": len(batches), "sample_s": sample_s}  # fmt: skip
            if error > TOL:
                row["check"] = f"mismatch {error:.1e}"
                ok = False
            else:
                row["check"] = "ok"
                samples: dict[str, list[float]] = {b: [] for b in timed}
                for r in range(args.rounds):
                    for b in timed[r % len(timed) :] + timed[: r % len(timed)]:
                        time.sleep(args.pause)
                        begin = time.perf_counter()
                        epochs[b]()
                        samples[b].append(time.perf_counter() - begin)
                row["epoch_s"] = {b: float(np.median(v)) for b, v in samples.items()}
                fastest = min(("edge_index", "csr"), key=lambda b: row["epoch_s"][b])
                row["fastest_pyg"] = fastest
                row["speedup"] = row["epoch_s"][fastest] / row["epoch_s"]["cognate"]
                row["ceiling"] = row["epoch_s"][fastest] / row["epoch_s"]["dense"]
            rows.append(row)
            cells = (
                "  ".join(f"{b} {row['epoch_s'][b]:.2f} s" for b in timed)
                if row["check"] == "ok"
                else row["check"]
            )
            speed = (
                f"  {row['speedup']:.2f}x vs {row['fastest_pyg']} (ceiling {row['ceiling']:.2f}x)"
                if "speedup" in row
                else ""
            )
            print(
                f"{matrix.name:18s} {kind:12s} {n:9d} nodes {row['edges']:10d} edges"
                f" {len(batches):5d} batches  epoch: {cells}{speed}",
                flush=True,
            )
            if args.json:  # after every row: a run stopped later keeps what it measured
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.report:
        return report_files(args)
    try:
        import torch_geometric
    except ImportError:
        print("bench_pyg: torch_geometric is not installed (pip install 'cognate[pyg]')")
        return 1
    from cognate.hostid import cpu_model
    from cognate.targets.cpu.isa import host_isa

    print(f"host: {cpu_model()}, {host_isa().line()}, {torch.get_num_threads()} torch threads")
    print(
        f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__},"
        f" {torch.get_num_threads()} torch threads; hidden {args.hidden}, features"
        f" {args.features}, classes {args.classes}; {args.rounds} rounds x {args.epochs}"
        f" epochs per backend",
        flush=True,
    )
    if args.loader:
        return loader_main(args)
    rows = run_rows(graphs(args), lambda matrix: one_graph(matrix, args), args.json)
    report(rows, args)
    ok = all(m["check"] == "ok" for r in rows for m in r["models"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
