"""Train a 2-layer GCN on a graph (a matrix file) with cognate's tuned kernels or torch.sparse.mm.

    python examples/gcn.py GRAPH.mtx[.gz] --backend cognate --epochs 100
    python examples/gcn.py GRAPH.mtx --backend torch

Features are random, labels follow the graph's structure (cognate.torch.gnn: each node takes
the class of its nearest random seed node); nothing is downloaded. Half the nodes train,
the other half measure accuracy. With ``--backend cognate`` the adjacency is tuned once
(SpMM at the hidden and class widths, A^T for the backward) before the first epoch; the
tuning time is printed apart from the epochs. ``--order rcm`` (cognate) runs the graph in a
node order: features, labels and the train mask are moved into it once, before training, so
no epoch pays a permutation (permuting per forward costs more than the order saves).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.torch.gnn import BACKENDS, GCN, community_labels, normalized_adjacency, propagation
from cognate.torch.ops import spmm


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("graph", help="a matrix file cognate reads (.mtx, .mtx.gz, .npz, ...)")
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="cognate",
        help="cognate: tuned kernels, A^T tuned for the backward (default); torch: "
        "torch.sparse.mm with plain autograd; torch-t: torch.sparse.mm with A^T built once "
        "for the backward (torch's fastest way)",
    )
    p.add_argument("--epochs", type=int, default=100, help="training epochs (default 100)")
    p.add_argument("--hidden", type=int, default=64, help="hidden width (default 64)")
    p.add_argument("--features", type=int, default=128, help="input features (default 128)")
    p.add_argument("--classes", type=int, default=8, help="label classes (default 8)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default 0.01)")
    p.add_argument("--seed", type=int, default=0, help="features, labels and weights")
    p.add_argument("--verify", action="store_true", help="measure the top schedules (slower)")
    p.add_argument(
        "--order",
        choices=("identity", "rcm", "degree", "cluster", "auto"),
        help="cognate backend: run the graph in this node order (auto: measured; needs --verify)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        matrix = load_matrix(args.graph)
    except CognateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    adjacency = normalized_adjacency(matrix)
    n = adjacency.shape[0]
    print(f"{matrix.name}: {n} nodes, {adjacency.nnz} entries (self loops included)")
    gen = torch.Generator().manual_seed(args.seed)
    features = torch.randn(n, args.features, generator=gen)
    labels = torch.from_numpy(community_labels(adjacency, args.classes, args.seed))
    train = torch.from_numpy(np.random.default_rng(args.seed).random(n) < 0.5)
    start = time.perf_counter()
    tune = {"widths": (args.hidden, args.classes), "verify": args.verify, "order": args.order}
    propagate, tuned = propagation(
        adjacency, args.backend, **(tune if args.backend == "cognate" else {})
    )
    if tuned is not None:
        print(f"tuned in {time.perf_counter() - start:.2f} s: {tuned}")
    if tuned is not None and tuned.node_order is not None:
        # Keep the data in the order for the whole training: moved once here, not per forward.
        features, labels = tuned.to_order(features), tuned.to_order(labels)
        train = tuned.to_order(train)
        propagate = lambda h: spmm(tuned, h)  # noqa: E731 - h and the result stay in the order
    model = GCN(args.features, args.hidden, args.classes, args.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    epoch_s = []
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        optimizer.zero_grad()
        logits = model(propagate, features)
        loss = torch.nn.functional.cross_entropy(logits[train], labels[train])
        loss.backward()
        optimizer.step()
        epoch_s.append(time.perf_counter() - start)
        if epoch == 1 or epoch % 10 == 0 or epoch == args.epochs:
            with torch.no_grad():
                correct = (logits.argmax(1) == labels)[~train].float().mean().item()
            print(f"epoch {epoch:4d}  loss {loss.item():.4f}  test accuracy {correct:.3f}")
    print(
        f"{args.backend}: median epoch {np.median(epoch_s) * 1e3:.2f} ms (forward, backward, step)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
