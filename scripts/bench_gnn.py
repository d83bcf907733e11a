"""GCN training epochs on cognate's tuned kernels against the same model on torch.sparse.

For each graph, a 2-layer GCN (cognate.torch.gnn: hidden 64, 128 random features, 16
community classes, GCN's normalised adjacency of the symmetrised pattern, a rectangular
matrix taken as a bipartite graph) is built once per backend from the same seeded weights:

- cognate: ``cognate.torch.spmm`` on a ``TunedSparse`` of the adjacency (tuned at widths 64
  and 16, ranked by the shipped model; ``--verify`` measures the top schedules). Its
  tuning cost (choosing the schedules, packing, compiling; choices remembered from an earlier
  run are forgotten first unless ``--reuse-choices``) is timed once and reported apart;
- torch: ``torch.sparse.mm`` on a CSR tensor with plain autograd (the model a PyTorch user
  writes; its backward transposes A on every call);
- torch-t: ``torch.sparse.mm`` with A^T built once for the backward (a stronger reference);
- cognate-ordered: cognate on the graph in a node order (cognate.torch.order: P A P^T tuned
  as above, the features kept in the order through both layers): with ``--verify`` the order
  ``choose_node_order`` measures fastest at the hidden width (64 by default) among identity /
  rcm / degree / cluster, else reverse Cuthill-McKee; the output says which. The features
  and labels are moved into the order once, before the epochs, and stay there (as a training
  loop keeps its data in the order; permuting on every forward costs more than the order
  saves): its epochs pay no permutation, its tuning seconds include computing (with
  ``--verify``, measuring) the order and that one move.

Before any timing, one forward and backward of each backend must give the same loss and
parameter gradients (relative error <= 1e-4 against the torch backend); a graph that does
not is reported as a mismatch and not timed. Then the epochs (zero grads, forward, loss,
backward; no optimizer step, identical in all backends) are timed in ONE process in
interleaved rounds under cognate's timing lock (cognate.timing.time_interleaved: warm-up,
rotating order), medians per backend. Reported: median epoch per backend, torch / cognate
(> 1: cognate faster), the tuning seconds and the break-even epoch count (tuning seconds /
seconds saved per epoch against torch); for cognate-ordered, its order, median epoch and
speedups over torch and over cognate. OpenMP and torch threads keep their defaults
(``--threads N`` sets OMP_NUM_THREADS / MKL_NUM_THREADS before anything loads).

Graphs: generated power-law community graphs (``cognate data synth powerlaw``) of 0.1, 0.5,
1, 2 and 5M entries, and the shared real matrices over 100k entries.

    python scripts/bench_gnn.py --quick           # one small generated graph, 2 rounds
    python scripts/bench_gnn.py --json gnn.json   # the full set (see docs for the duration)
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial

from cognate.timing import early_threads

early_threads(sys.argv)  # before numpy / torch load their OpenMP runtimes

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cognate.bench.corpus import generated_graphs, shared_matrices  # noqa: E402
from cognate.bench.loop import run_rows  # noqa: E402
from cognate.matrix import Matrix  # noqa: E402
from cognate.stats import geomean  # noqa: E402
from cognate.timing import time_interleaved  # noqa: E402
from cognate.torch import choices  # noqa: E402
from cognate.torch.gnn import (  # noqa: E402
    BACKENDS,
    GCN,
    community_labels,
    normalized_adjacency,
    propagation,
)
from cognate.torch.inputs import as_operand_matrix  # noqa: E402
from cognate.torch.ops import spmm  # noqa: E402
from cognate.torch.order import NODE_ORDERS, node_order  # noqa: E402

ORDERED = "cognate-ordered"  # cognate on P A P^T, features kept in the node order
BENCH_BACKENDS = (*BACKENDS, ORDERED)
GENERATED = (100_000, 500_000, 1_000_000, 2_000_000, 5_000_000)
QUICK = (20_000,)
REAL_MIN_NNZ = 100_000
TOL = 1e-4


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one 20k-entry graph, 2 rounds")
    p.add_argument("--sizes", type=int, nargs="*", help="generated graph sizes (entries)")
    p.add_argument("--no-real", action="store_true", help="skip the shared real matrices")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--budget", type=float, default=60.0, help="seconds of rounds per graph")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--backends", nargs="+", choices=BENCH_BACKENDS, default=list(BENCH_BACKENDS))
    p.add_argument("--verify", action="store_true", help="tune with verify (measured top-5)")
    p.add_argument("--reuse-choices", action="store_true", help="keep remembered choices")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS / MKL_NUM_THREADS")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.no_real, args.budget = 2, True, 10.0
        args.sizes = list(QUICK) if args.sizes is None else args.sizes
    if "cognate" not in args.backends or "torch" not in args.backends:
        p.error("--backends must include cognate and torch")
    return args


def graphs(args: argparse.Namespace) -> list[Matrix]:
    """Generated power-law community graphs, then the shared real matrices over 100k nnz."""
    sizes = GENERATED if args.sizes is None else args.sizes
    found = generated_graphs(sizes, ("powerlaw",), seed=args.seed)
    if not args.no_real:
        found += shared_matrices(min_nnz=REAL_MIN_NNZ + 1)
    return found


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30))


def one_graph(matrix: Matrix, args: argparse.Namespace) -> dict:
    adjacency = as_operand_matrix(normalized_adjacency(matrix), f"{matrix.name} (GCN)")
    n = adjacency.shape[0]
    gen = torch.Generator().manual_seed(args.seed)
    features = torch.randn(n, args.features, generator=gen)
    labels = torch.from_numpy(community_labels(adjacency.csr, args.classes, args.seed))
    row = {"graph": matrix.name, "nodes": n, "nnz": adjacency.nnz, "source": matrix.source}
    if not args.reuse_choices:
        choices.forget(adjacency)
    steps = {}
    for backend in args.backends:
        if backend == ORDERED:
            row[ORDERED], tuned = _ordered(adjacency, args)
            start = time.perf_counter()
            in_order = tuned.to_order(features).contiguous(), tuned.to_order(labels)
            row[ORDERED]["tune_s"] += time.perf_counter() - start
            model = GCN(args.features, args.hidden, args.classes, args.seed)
            steps[backend] = _epoch(model, partial(spmm, tuned), *in_order)
            continue
        start = time.perf_counter()
        options = {"widths": (args.hidden, args.classes), "verify": args.verify}
        propagate, tuned = propagation(
            adjacency.csr if backend != "cognate" else adjacency,
            backend,
            **(options if backend == "cognate" else {}),
        )
        if tuned is not None:
            row["tune_s"] = time.perf_counter() - start
            row["choices"] = sorted({c.source for c in tuned.choices.values()})
            row["symmetric"] = tuned.symmetric
        model = GCN(args.features, args.hidden, args.classes, args.seed)
        steps[backend] = _epoch(model, propagate, features, labels)
    row["check"] = _check(steps)
    if row["check"] != "ok":
        return row
    timings = time_interleaved(
        {name: step for name, step in steps.items()}, args.rounds, budget_s=args.budget
    )
    row["rounds"] = timings.rounds
    row["load"] = timings.load.as_dict()
    row["epoch_ms"] = {name: s * 1e3 for name, s in timings.seconds.items()}
    cog, ref = timings.seconds["cognate"], timings.seconds["torch"]
    row["speedup_vs_torch"] = ref / cog
    row["break_even_epochs"] = _break_even(row["tune_s"], ref - cog)
    if "torch-t" in timings.seconds:
        ref_t = timings.seconds["torch-t"]
        row["speedup_vs_torch_t"] = ref_t / cog
        row["break_even_epochs_vs_torch_t"] = _break_even(row["tune_s"], ref_t - cog)
    if ORDERED in timings.seconds:
        ordered = timings.seconds[ORDERED]
        row[ORDERED]["speedup_vs_torch"] = ref / ordered
        row[ORDERED]["speedup_vs_cognate"] = cog / ordered
        row[ORDERED]["break_even_epochs"] = _break_even(row[ORDERED]["tune_s"], ref - ordered)
    return row


def _ordered(adjacency: Matrix, args: argparse.Namespace) -> tuple[dict, object]:
    """The cognate-ordered backend: TunedSparse(order="auto") with --verify (measured at the
    hidden width), else order="rcm"; its facts and the TunedSparse."""
    order = "auto" if args.verify else "rcm"
    if not args.reuse_choices:  # the schedules of every P A P^T it may tune, forgotten
        for by in NODE_ORDERS if args.verify else ("rcm",):
            permuted = node_order(adjacency, by).apply(adjacency)
            choices.forget(Matrix(f"{adjacency.name}@{by}", permuted))
    start = time.perf_counter()
    options = {"widths": (args.hidden, args.classes), "verify": args.verify}
    _, tuned = propagation(adjacency, "cognate", order=order, **options)
    facts = {
        "order": tuned.node_order.by,
        "how": (
            f"measured fastest of {'/'.join(NODE_ORDERS)} at width {args.hidden}"
            if args.verify
            else "not measured: no --verify"
        ),
        "order_s": tuned.order_seconds,
        "tune_s": time.perf_counter() - start,
        "choices": sorted({c.source for c in tuned.choices.values()}),
    }
    return facts, tuned


def _break_even(tune_s: float, saved_s: float) -> int | None:
    """Epochs after which the one-off tuning has paid for itself (None: never)."""
    return int(np.ceil(tune_s / saved_s)) if saved_s > 0 else None


def _epoch(model: GCN, propagate, features: torch.Tensor, labels: torch.Tensor):
    """One epoch's forward and backward; returns the loss and the parameters' gradients."""

    def step() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(propagate, features), labels)
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()]

    return step


def _check(steps: dict) -> str:
    """ "ok" when every backend's loss and gradients match the torch backend's."""
    want_loss, want_grads = steps["torch"]()
    for name, step in steps.items():
        if name == "torch":
            continue
        loss, grads = step()
        errors = [rel(loss, want_loss)] + [
            rel(g, w) for g, w in zip(grads, want_grads, strict=True)
        ]
        if max(errors) > TOL:
            return f"mismatch: {name} differs from torch by {max(errors):.2e} (relative)"
    return "ok"


def report(rows: list[dict]) -> None:
    print(
        f"{'graph':28s} {'nodes':>8s} {'nnz':>9s} {'tune s':>7s} {'cognate ms':>10s}"
        f" {'torch ms':>9s} {'torch-t ms':>10s} {'vs torch':>8s} {'vs t-t':>7s} {'break-even':>10s}"
        f" {'b-e t-t':>8s}"
    )
    for r in rows:
        if r["check"] != "ok":
            print(f"{r['graph']:28s} {r['nodes']:8d} {r['nnz']:9d} {r['check']}")
            continue
        ms = r["epoch_ms"]
        tt = f"{ms['torch-t']:10.2f}" if "torch-t" in ms else f"{'-':>10s}"
        vt = f"{r['speedup_vs_torch_t']:6.2f}x" if "speedup_vs_torch_t" in r else f"{'-':>7s}"
        be, be_t = r["break_even_epochs"], r.get("break_even_epochs_vs_torch_t", "-")
        print(
            f"{r['graph'][:28]:28s} {r['nodes']:8d} {r['nnz']:9d} {r['tune_s']:7.2f}"
            f" {ms['cognate']:10.2f} {ms['torch']:9.2f} {tt} {r['speedup_vs_torch']:7.2f}x {vt}"
            f" {'never' if be is None else be:>10} {'never' if be_t is None else be_t:>8}"
        )
    good = [r for r in rows if r["check"] == "ok"]
    for key, peer in (
        ("speedup_vs_torch", "torch.sparse.mm (plain autograd)"),
        ("speedup_vs_torch_t", "torch.sparse.mm with A^T built once"),
    ):
        ratios = [r[key] for r in good if key in r]
        if ratios:
            print(
                f"geomean speedup vs {peer}: {geomean(ratios):.2f}x over {len(ratios)} graphs"
                f" (min {min(ratios):.2f}x, max {max(ratios):.2f}x)"
            )
    ordered = [r for r in good if "speedup_vs_torch" in r.get(ORDERED, {})]
    for r in ordered:
        o, be = r[ORDERED], r[ORDERED]["break_even_epochs"]
        print(
            f"{ORDERED} {r['graph'][:28]}: order {o['order']} ({o['how']}), epoch"
            f" {r['epoch_ms'][ORDERED]:.2f} ms (data kept in the order), tune {o['tune_s']:.2f} s,"
            f" {o['speedup_vs_torch']:.2f}x vs torch, {o['speedup_vs_cognate']:.2f}x vs cognate,"
            f" break-even {'never' if be is None else be}"
        )
    for key, peer in (("speedup_vs_torch", "torch"), ("speedup_vs_cognate", "cognate")):
        ratios = [r[ORDERED][key] for r in ordered]
        if ratios:
            print(
                f"geomean speedup of {ORDERED} vs {peer}: {geomean(ratios):.2f}x over"
                f" {len(ratios)} graphs (min {min(ratios):.2f}x, max {max(ratios):.2f}x)"
            )
    never = [r["graph"] for r in good if r.get("break_even_epochs_vs_torch_t", 0) is None]
    if never:
        print(f"tuning never pays back against torch-t on: {', '.join(never)}")
    busy = [r["graph"] for r in good if r["load"]["unreliable"]]
    if busy:
        print(f"timings unreliable (machine busy) for: {', '.join(busy)}")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} torch threads; hidden"
        f" {args.hidden}, features {args.features}, classes {args.classes}, rounds {args.rounds}",
        flush=True,
    )
    rows = run_rows(graphs(args), lambda matrix: one_graph(matrix, args), args.json)
    report(rows)
    return 0 if all(r["check"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
