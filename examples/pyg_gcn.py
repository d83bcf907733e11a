"""Train a stock PyTorch Geometric GCN on a matrix file's graph, on cognate or on PyG's cpu path.

Two GCNConv layers on cognate's tuned kernels (``--backend cognate``) or on PyG's own cpu
path (``--backend pyg``):

    python examples/pyg_gcn.py GRAPH.mtx[.gz] --epochs 100
    python examples/pyg_gcn.py GRAPH.mtx --backend pyg     # the same model, PyG's edge list

The model is plain PyG; the change that moves it onto cognate is two lines (marked below):

    import cognate.pyg
    edge_index = cognate.pyg.adjacency(edge_index, num_nodes)

The graph is the matrix's symmetrised pattern without self loops (a rectangular matrix as its
bipartite graph), as an edge list in both directions. Features are random, labels follow the
graph's structure (each node takes the class of its nearest random seed node); nothing is
downloaded. Half the nodes train, the other half measure accuracy. With cognate the kernels
are tuned at the first epoch (ranked by the shipped cost model); that first epoch is printed
apart from the median of the others. Both backends print the same losses (float32 rounding).
Needs torch_geometric (``pip install 'cognate[pyg]'``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import scipy.sparse as sp
import torch

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.torch.gnn import community_labels


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("graph", help="a matrix file cognate reads (.mtx, .mtx.gz, .npz, ...)")
    p.add_argument(
        "--backend",
        choices=("cognate", "pyg"),
        default="cognate",
        help="cognate: the two-line change; pyg: PyG's own edge-list path (default cognate)",
    )
    p.add_argument("--epochs", type=int, default=100, help="training epochs (default 100)")
    p.add_argument("--hidden", type=int, default=64, help="hidden channels (default 64)")
    p.add_argument("--features", type=int, default=128, help="random input features (128)")
    p.add_argument("--classes", type=int, default=8, help="label classes (default 8)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (0.01)")
    p.add_argument("--seed", type=int, default=0, help="weights, features, labels (0)")
    args = p.parse_args(argv)
    for name in ("epochs", "hidden", "features", "classes"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


class GCN(torch.nn.Module):
    """A stock PyG 2-layer GCN."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        from torch_geometric.nn import GCNConv

        super().__init__()
        self.conv1 = GCNConv(features, hidden, cached=True)
        self.conv2 = GCNConv(hidden, classes, cached=True)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x, edge_index))
        return self.conv2(x, edge_index)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        print("error: torch_geometric is not installed (pip install 'cognate[pyg]')")
        return 1
    from cognate.pyg import undirected_edges

    try:
        edge_index, n = undirected_edges(load_matrix(args.graph))
    except CognateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.graph}: {n} nodes, {edge_index.shape[1]} directed edges")
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(n, args.features, generator=gen)
    ones = np.ones(edge_index.shape[1], dtype=np.float32)
    graph = sp.csr_matrix((ones, (edge_index[0].numpy(), edge_index[1].numpy())), shape=(n, n))
    y = torch.from_numpy(community_labels(graph, args.classes, args.seed))
    train = torch.from_numpy(np.random.default_rng(args.seed).random(n) < 0.5)

    if args.backend == "cognate":
        import cognate.pyg  # change 1 of 2

        edge_index = cognate.pyg.adjacency(edge_index, n)  # change 2 of 2

    torch.manual_seed(args.seed)
    model = GCN(args.features, args.hidden, args.classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    epoch_s = []
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        optimizer.zero_grad()
        out = model(x, edge_index)
        loss = torch.nn.functional.cross_entropy(out[train], y[train])
        loss.backward()
        optimizer.step()
        epoch_s.append(time.perf_counter() - start)
        if epoch == 1 or epoch % 10 == 0 or epoch == args.epochs:
            with torch.no_grad():
                accuracy = (out.argmax(1) == y)[~train].float().mean().item()
            print(f"epoch {epoch:4d}  loss {loss.item():.4f}  test accuracy {accuracy:.3f}")
    rest = epoch_s[1:] or epoch_s
    print(
        f"{args.backend}: first epoch {epoch_s[0] * 1e3:.1f} ms (cognate: includes tuning),"
        f" median of the others {np.median(rest) * 1e3:.2f} ms (forward, backward, step)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
