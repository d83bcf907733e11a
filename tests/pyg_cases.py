"""What the PyG front end's tests share (imported by name: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import numpy as np
import torch


def assert_trains_alike(reference: torch.nn.Module, ours: torch.nn.Module, graph: dict,
                        rtol: float, steps: int = 4) -> None:  # fmt: skip
    """``reference`` on the edge list and ``ours`` (a copy) on cognate's adjacency: the losses
    of ``steps`` Adam steps agree within ``rtol``."""
    losses = {}
    for net, adj in ((reference, graph["edge_index"]), (ours, graph["adj_t"])):
        opt = torch.optim.Adam(net.parameters(), lr=0.01)
        losses[id(net)] = []
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(graph["x"], adj), graph["y"])
            loss.backward()
            opt.step()
            losses[id(net)].append(loss.item())
    np.testing.assert_allclose(losses[id(ours)], losses[id(reference)], rtol=rtol)
