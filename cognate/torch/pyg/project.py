"""Aggregation after projection: ``W (A x) = A (W x)`` for sum / mean, on a cognate adjacency.

SAGEConv (``lin_l``), GINConv (its ``nn``'s first Linear) and GraphConv (``lin_rel``)
aggregate the input features and project afterwards; GCNConv projects first. For a sum or a
mean aggregation the two orders are equal in real arithmetic (both are linear; the bias is
added after the aggregation, as the layer adds it), so where the projection narrows the
features (out < in) cognate aggregates the projected features: the SpMM runs at the
narrower width, forward and backward. The result equals PyG's own path up to floating-point
rounding (tests/test_pyg_project.py: outputs and gradients within 1e-5 relative).

Installed by the explicit patch (``cognate.torch.pyg.patch``): each layer class's
``forward`` is replaced by one that takes this path when every condition holds (a cognate
adjacency, a sum / mean aggregation given as a string, a plain tensor x, no ``size``, no
propagate hooks, no decomposed layers or explainer, an initialised projection that narrows)
and calls PyG's own ``forward`` otherwise. The replacement is made with PyG's module globals
and wraps PyG's function (``__wrapped__``): TorchScript compiles PyG's own source from it, so
a scripted layer runs PyG's path as before. ``unpatch`` restores each class's forward.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

SUM_MEAN = ("sum", "add", "mean")
_HOOKS = (
    "_propagate_forward_pre_hooks",
    "_propagate_forward_hooks",
    "_message_and_aggregate_forward_pre_hooks",
    "_message_and_aggregate_forward_hooks",
)
EntryOf = Callable[[Any], Any]  # an adjacency -> its registry entry (None: not cognate's)


def _plain(layer: Any, x: Any, size: Any) -> bool:
    """Whether PyG's forward would run the fused ``spmm`` on exactly these inputs and
    nothing else sees the aggregation (hooks, explainers, decomposed layers)."""
    return (
        isinstance(x, torch.Tensor)
        and size is None
        and isinstance(getattr(layer, "aggr", None), str)
        and layer.aggr in SUM_MEAN
        and getattr(layer, "decomposed_layers", 1) == 1
        and not getattr(layer, "explain", None)
        and not any(getattr(layer, hook, None) for hook in _HOOKS)
    )


def _narrowing(weight: Any) -> bool:
    """An initialised (out, in) weight with out < in."""
    return (
        isinstance(weight, torch.Tensor)
        and not isinstance(weight, torch.nn.parameter.UninitializedParameter)
        and weight.dim() == 2
        and weight.shape[0] < weight.shape[1]
    )


def _aggregate_projected(entry: Any, x: torch.Tensor, lin: Any, reduce: str) -> torch.Tensor:
    """``lin(A x)`` computed as ``A (x W^T) + b``."""
    out = entry.spmm(F.linear(x, lin.weight), reduce)
    return out if lin.bias is None else out + lin.bias


def _plain_linear(module: Any) -> bool:
    """A Linear (torch's or PyG's) whose call is exactly ``F.linear(x, weight, bias)``: its
    own forward, an initialised weight, no hooks."""
    from torch_geometric.nn.dense.linear import Linear

    forward = type(module).forward
    return (
        forward in (torch.nn.Linear.forward, Linear.forward)
        and isinstance(module.weight, torch.Tensor)
        and not isinstance(module.weight, torch.nn.parameter.UninitializedParameter)
        and not (module._forward_hooks or module._forward_pre_hooks)
    )


def _sum_bias(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    if a is None or b is None:
        return a if b is None else b
    return a + b


def sage(entry_of: EntryOf) -> Callable[..., torch.Tensor | None]:
    def forward(layer: Any, x: Any, edge_index: Any, size: Any = None) -> torch.Tensor | None:
        entry = entry_of(edge_index)
        if (
            entry is None
            or not _plain(layer, x, size)
            or getattr(layer, "project", False)
            or not _narrowing(layer.lin_l.weight)
        ):
            return None
        if layer.root_weight and _plain_linear(layer.lin_r):
            # lin_l's bias rides in lin_r's addmm, and the aggregation is added in place: one
            # pass over the n x out result instead of three (dense work bounds these epochs)
            root = F.linear(x, layer.lin_r.weight, _sum_bias(layer.lin_l.bias, layer.lin_r.bias))
            out = root.add_(entry.spmm(F.linear(x, layer.lin_l.weight), layer.aggr))
        else:
            out = _aggregate_projected(entry, x, layer.lin_l, layer.aggr)
            if layer.root_weight:
                out = out + layer.lin_r(x)
        if layer.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return out

    return forward


def gin(entry_of: EntryOf) -> Callable[..., torch.Tensor | None]:
    def forward(layer: Any, x: Any, edge_index: Any, size: Any = None) -> torch.Tensor | None:
        entry = entry_of(edge_index)
        nn = layer.nn
        if entry is None or not _plain(layer, x, size) or not isinstance(nn, torch.nn.Sequential):
            return None
        modules = list(nn)
        first = modules[0] if modules else None
        if not isinstance(first, torch.nn.Linear) or type(first).forward is not (
            torch.nn.Linear.forward
        ):
            return None
        if not _narrowing(first.weight):
            return None
        # nn(A x + (1 + eps) x) with nn = rest . Linear: the Linear's projection first
        h = F.linear(x, first.weight)
        # one pass for the root term and one for the bias, in place (no temporaries)
        out = torch.addcmul(entry.spmm(h, layer.aggr), h, 1 + layer.eps)
        if first.bias is not None:
            out = out.add_(first.bias)
        for module in modules[1:]:
            out = module(out)
        return out

    return forward


def graph_conv(entry_of: EntryOf) -> Callable[..., torch.Tensor | None]:
    def forward(
        layer: Any, x: Any, edge_index: Any, edge_weight: Any = None, size: Any = None
    ) -> torch.Tensor | None:
        entry = entry_of(edge_index)
        if (
            entry is None
            or edge_weight is not None
            or not _plain(layer, x, size)
            or not _narrowing(layer.lin_rel.weight)
        ):
            return None
        return _aggregate_projected(entry, x, layer.lin_rel, layer.aggr) + layer.lin_root(x)

    return forward


def _wrapped(original: Callable[..., Any], fast: Callable[..., Any]) -> Callable[..., Any]:
    """``fast`` where it answers, else PyG's ``original``; a function of PyG's module globals
    wrapping ``original``, so TorchScript compiles ``original``'s source."""

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = fast(self, *args, **kwargs)
        return original(self, *args, **kwargs) if out is None else out

    made = types.FunctionType(
        forward.__code__, original.__globals__, "forward", None, forward.__closure__
    )
    functools.update_wrapper(made, original)
    made.__cognate_projection__ = True  # type: ignore[attr-defined]
    return made


def install(entry_of: EntryOf) -> list[tuple[Any, str, Any]]:
    """Replace the forwards of SAGEConv, GINConv and GraphConv; returns (class, "forward",
    PyG's original) for each, for ``unpatch``."""
    from torch_geometric.nn import GINConv, GraphConv, SAGEConv

    done = []
    for cls, make in ((SAGEConv, sage), (GINConv, gin), (GraphConv, graph_conv)):
        original = cls.__dict__["forward"]
        if getattr(original, "__cognate_projection__", False):
            continue
        cls.forward = _wrapped(original, make(entry_of))
        done.append((cls, "forward", original))
    return done
