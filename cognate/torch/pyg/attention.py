"""Attention layers on cognate's kernels: GATConv, GATv2Conv and TransformerConv.

Each layer is three steps over the edges of A (``adj_t``: row = target i, column = source j):

1. per-edge scores per head: GAT's additive attention ``a_src[j] + a_dst[i]`` and GATv2's
   ``att . leaky_relu(x_r[i] + x_l[j])`` are gathers (as PyG computes them);
   TransformerConv's dot product ``q_i . k_j / sqrt(C)`` is an SDDMM at A's pattern
   (``cognate.torch.sddmm``, the tuned kernel; its backward two tuned SpMMs);
2. a softmax per target node over its edges (PyG's: the row maximum subtracted, 1e-16 added
   to the sum; segment reductions over A's CSR rows, its backward written out), then
   dropout on it when training;
3. the SpMM of A's pattern with those values and the source features (``cognate.torch.spmm``
   with ``values=``), every head in one product of ``kron(A, I_heads)`` (one per head on a
   mini-batch's adjacency): differentiable in the features (A^T's tuned SpMM) and in the
   values, whose gradient is the tuned SDDMM ``dY . X^T`` at A's pattern.

GATConv and TransformerConv without attention dropout (PyG's default, or eval mode) run the
three steps fused, one kernel each way (``FusedAttention``: the cpu pipeline's attention
family, kernels/pyg/edge_attention.c) instead of about ten passes of torch ops over the
edges' arrays.

Self loops as PyG adds them (GAT / GATv2 ``add_self_loops=True``: A's own loops removed, one
per node added), heads, ``concat``, ``bias``, ``residual``, TransformerConv's ``beta`` and
``root_weight`` as PyG. The pattern (with loops or not) is packed and tuned once per
adjacency and reused by every layer and call. Dropout draws its mask in A's CSR order, not
the edge list's: the same distribution as PyG's, another sample.

Anything else falls back to PyG's own forward, on the edge list behind the adjacency (its
duplicates kept: never a wrong answer), with one warning per layer type and reason:
``edge_dim`` / ``edge_attr``, ``return_attention_weights``, bipartite inputs (a pair of
feature tensors), ``size``, propagate hooks or an explainer, a graph with duplicated edges
(PyG's softmax counts each copy). Installed by ``cognate.torch.pyg.patch`` like project.py.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from cognate.matrix import Matrix, canonicalize
from cognate.targets.cpu import pipeline
from cognate.targets.cpu.families import attention as attention_family
from cognate.targets.cpu.operands import check_live_tensor, zero_pages
from cognate.torch.operand import TunedSparse
from cognate.torch.ops import sddmm, spmm
from cognate.torch.pyg.project import _wrapped

EntryOf = Callable[[Any], Any]
_HOOKS = (
    "_propagate_forward_pre_hooks",
    "_propagate_forward_hooks",
    "_message_forward_pre_hooks",
    "_message_forward_hooks",
    "_aggregate_forward_pre_hooks",
    "_aggregate_forward_hooks",
    "_edge_update_forward_pre_hooks",
    "_edge_update_forward_hooks",
)
_WARNED: set[tuple[str, str]] = set()


@dataclass
class Heads:
    """Every head's copy of A in one matrix, ``kron(A, I_heads)``: entry (i, j) of head h sits
    at (i * heads + h, j * heads + h), so features laid out (nodes, heads, C), as PyG's
    layers make them, are this matrix's dense operand (nodes * heads, C) as they are: one
    SpMM (and one SDDMM) for all heads, no per-head copies of the features, values or
    outputs."""

    tuned: TunedSparse
    flat: torch.Tensor  # int64: each entry's index in alpha.reshape(-1) (edges x heads)
    order: torch.Tensor  # int64: the inverse, alpha.reshape(-1)'s index -> entry
    ones: torch.Tensor  # float32 ones, one per entry (the SDDMM's values)


@dataclass
class Pattern:
    """A's pattern (unit values) for attention: its TunedSparse and each entry's row and
    column as torch indices (CSR order); per head count, its multi-head matrix."""

    tuned: TunedSparse
    rows: torch.Tensor  # int64, the target of each entry
    cols: torch.Tensor  # int64, the source of each entry
    ones: torch.Tensor  # float32 ones, one per entry
    lengths: torch.Tensor  # int64, entries per row: the edge softmax's segments
    tune: dict[str, Any] = field(default_factory=dict)  # the adjacency's TunedSparse options
    heads: dict[int, Heads] = field(default_factory=dict)
    fused: FusedAttention | None = None  # the fused kernels, built at the first call

    @property
    def n(self) -> int:
        return self.tuned.shape[0]


def multi_head(p: Pattern, heads: int) -> Heads:
    """``kron(A, I_heads)`` of the pattern, built and tuned once per head count."""
    found = p.heads.get(heads)
    if found is None:
        csr = p.tuned.matrix.csr
        n, nnz = csr.shape[0], csr.nnz
        lengths = np.repeat(p.lengths.numpy(), heads)  # per (row, head)
        indptr = np.zeros(n * heads + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        within = np.arange(nnz * heads, dtype=np.int64) - np.repeat(indptr[:-1], lengths)
        entry = np.repeat(np.repeat(csr.indptr[:-1].astype(np.int64), heads), lengths) + within
        head = np.repeat(np.tile(np.arange(heads, dtype=np.int64), n), lengths)
        offsets = np.int32 if nnz * heads < 2**31 else np.int64
        kron = sp.csr_matrix(
            (
                np.ones(nnz * heads, dtype=np.float32),
                (csr.indices[entry] * heads + head).astype(np.int32),
                indptr.astype(offsets),
            ),
            shape=(n * heads, csr.shape[1] * heads),
        )
        # each row's columns ascend with A's: canonical already, so the entry order holds
        kron.has_sorted_indices = True
        flat = entry * heads + head
        # the inverse without a sort: A's entry k of row i, head h, sits at kron row
        # i * heads + h, k - indptr[i] entries in
        rows = p.rows.numpy()
        within_row = np.arange(nnz, dtype=np.int64) - csr.indptr[rows]
        order = indptr[rows[:, None] * heads + np.arange(heads)] + within_row[:, None]
        found = Heads(
            TunedSparse(Matrix(f"{p.tuned.matrix.name}-x{heads}", kron), **p.tune),
            torch.from_numpy(flat),
            torch.from_numpy(order.reshape(-1)),
            torch.ones(nnz * heads, dtype=torch.float32),
        )
        p.heads[heads] = found
    return found


def pattern(entry: Any, loops: bool) -> Pattern:
    """The adjacency's pattern (``loops``: A's own loops removed and one per node added, as
    GAT's ``add_self_loops``), built and tuned once per adjacency."""
    key = "loops" if loops else "plain"
    found = entry.attention.get(key)
    if found is None:
        csr = sp.csr_matrix(entry.tuned.matrix.csr, dtype=np.float32, copy=True)
        csr.data[:] = 1.0
        if loops:
            csr.setdiag(0.0)
            csr.eliminate_zeros()
            csr = csr + sp.identity(csr.shape[0], dtype=np.float32, format="csr")
        csr = canonicalize(csr)
        tuned = TunedSparse(Matrix(f"{entry.tuned.matrix.name}-{key}", csr), **entry.tune)
        rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
        found = Pattern(
            tuned,
            torch.from_numpy(rows),
            torch.from_numpy(csr.indices.astype(np.int64)),
            torch.ones(csr.nnz, dtype=torch.float32),
            torch.from_numpy(np.diff(csr.indptr).astype(np.int64)),
            dict(entry.tune),
        )
        entry.attention[key] = found
    return found


def edge_softmax(
    scores: torch.Tensor, rows: torch.Tensor, n: int, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax of ``scores`` (edges x heads) over each target's edges, as PyG's ``softmax``:
    ``exp(s - max) / (sum exp(s - max) + 1e-16)``, the maximum not differentiated. ``rows``
    ascend (A's CSR order): the per-target reductions are segment reductions, and the
    backward is written out (``_EdgeSoftmax``): torch's scatter-based amax and the autograd
    of the gathers took most of a GAT epoch's aggregation. ``lengths``: entries per row
    (the pattern's, kept once), else counted from ``rows``."""
    if lengths is None:
        lengths = torch.bincount(rows, minlength=n)
    return _EdgeSoftmax.apply(scores, rows, lengths)


def _segment_sum(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return torch.segment_reduce(values, "sum", lengths=lengths, axis=0, unsafe=True)


class _EdgeSoftmax(torch.autograd.Function):
    """out = e / (row sum of e + 1e-16), e = exp(s - row max); ds = out * (g - row sum of
    g * out) (the max held constant, as PyG detaches it). The backward is made of
    differentiable torch ops on the saved output: higher-order gradients flow."""

    @staticmethod
    def forward(ctx: Any, scores: torch.Tensor, rows: torch.Tensor, lengths: torch.Tensor) -> Any:
        top = torch.segment_reduce(scores, "max", lengths=lengths, axis=0, unsafe=True)
        e = (scores - top.index_select(0, rows)).exp_()
        total = _segment_sum(e, lengths).add_(1e-16)
        out = e.div_(total.index_select(0, rows))
        ctx.save_for_backward(out, rows, lengths)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        out, rows, lengths = ctx.saved_tensors
        weighted = grad * out
        return weighted - out * _segment_sum(weighted, lengths).index_select(0, rows), None, None


class FusedAttention:
    """An attention layer's aggregation on the attention family's kernels
    (kernels/pyg/edge_attention.c, through the cpu kernel pipeline) for one pattern: per
    (op, score kind, heads, channels) packed, built and bound once to zero pages, then
    pointed at each call's tensors."""

    CHUNK = 32  # rows per OpenMP dynamic task (a row's entries are few: small tasks balance)

    def __init__(self, csr: sp.csr_matrix) -> None:
        self.csr = csr
        self._kernels: dict[tuple[str, str, int, int], pipeline.PreparedKernel] = {}

    def run(self, op: str, score: str, shape: tuple[int, int], tensors: tuple[Any, ...]) -> None:
        """``op`` on ``tensors`` (its operands then its outputs, families/attention.py) for
        ``shape`` = (heads, channels): the caller's as ``_flat`` made them, the rest fresh."""
        kernel = self._kernel(op, score, *shape)
        with kernel.lock:  # the argument vector is shared by every call of this kernel
            kernel.point_at([t.data_ptr() for t in tensors])
            kernel.run()

    def _kernel(self, op: str, score: str, heads: int, channels: int) -> pipeline.PreparedKernel:
        key = (op, score, heads, channels)
        found = self._kernels.get(key)
        if found is None:
            knobs = {"family": "attention", "score": score, "heads": heads, "chunk": self.CHUNK}
            shape, nnz = (int(self.csr.shape[0]), int(self.csr.shape[1])), int(self.csr.nnz)
            operands, _ = attention_family.shapes(op, score, shape, nnz, heads, channels)
            dense = tuple(zero_pages(s, np.float32) for _, s in operands)
            found = pipeline.bind(pipeline.pack(self.csr, op, knobs, channels), knobs, dense)
            self._kernels[key] = found
        return found


class _FusedAggregate(torch.autograd.Function):
    """An attention aggregation without dropout on the fused kernels: forward (scores,
    softmax and SpMM in one pass over each target row), backward (the scores' gradients and
    dst's per target row, then x's and src's per source row). ``src`` / ``dst``: GAT's
    a_src / a_dst (nodes x heads), TransformerConv's key / query (nodes x heads x C); x:
    nodes x heads x C. A second-order gradient (``create_graph``) recomputes the aggregation
    with torch ops and differentiates that."""

    @staticmethod
    def forward(
        ctx: Any, src: Any, dst: Any, x: Any, p: Pattern, score: str, param: float
    ) -> torch.Tensor:
        heads, c = x.shape[1], x.shape[2]
        _check_shapes(p.n, score, heads, c, src, dst, x)
        # the inputs themselves are saved: a second-order backward differentiates through them
        saved = (src, dst, x)
        src, dst, x = (_flat(t) for t in saved)
        fused = _fused(p)
        out = torch.empty((p.n, heads, c), dtype=torch.float32)
        alpha = torch.empty((fused.csr.nnz, heads), dtype=torch.float32)
        params = torch.tensor([[param]], dtype=torch.float32)
        fused.run("forward", score, (heads, c), (src, dst, x, params, out, alpha))
        ctx.save_for_backward(*saved, alpha)
        ctx.p, ctx.score, ctx.param, ctx.params = p, score, param, params
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:
        *inputs, alpha = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: differentiate the torch ops' version
            return (*_second_order(ctx, inputs, dout), None, None, None)
        src, dst, x = (_flat(t) for t in inputs)
        shape = tuple(inputs[2].shape[1:])
        fused = _fused(ctx.p)
        dout = _flat(dout)
        dpre = torch.empty_like(alpha)
        ddst, dx, dsrc = torch.empty_like(dst), torch.empty_like(x), torch.empty_like(src)
        fused.run("backward", ctx.score, shape, (src, dst, x, alpha, dout, ctx.params, dpre, ddst))
        fused.run("transpose", ctx.score, shape, (alpha, dpre, dout, dst, dx, dsrc))
        grads = (t.view_as(like) for t, like in zip((dsrc, ddst, dx), inputs, strict=True))
        return (*grads, None, None, None)


def _flat(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the kernels read it: detached, contiguous, nodes x everything else; a freed
    or shrunk storage is one line first (torch's own copy of one crashes too)."""
    check_live_tensor(t, "attention: an input")
    t = t.detach().contiguous()
    return t.view(t.shape[0], -1)


def _second_order(ctx: Any, inputs: list[torch.Tensor], dout: torch.Tensor) -> tuple[Any, ...]:
    """The three inputs' gradients as differentiable torch ops (the unfused aggregation) of
    the inputs themselves, so that the graph reaches what made them: for gradient penalties
    and other higher-order uses. Taken at aliases of the inputs: at the inputs themselves,
    x's would also count a path through src or dst made from it (GAT's a_src is x_src . att),
    which the outer graph counts again."""
    needed = ctx.needs_input_grad[:3]
    with torch.enable_grad():
        aliases = [t.view_as(t) for t in inputs]
        out = _unfused(ctx.p, ctx.score, ctx.param, *aliases)
        wanted = [t for t, need in zip(aliases, needed, strict=True) if need]
        grads = iter(torch.autograd.grad(out, wanted, dout, create_graph=True))
    return tuple(next(grads) if need else None for need in needed)


def _check_shapes(n: int, score: str, heads: int, c: int, *tensors: torch.Tensor) -> None:
    """One line unless src, dst are (n, heads) (additive) or (n, heads, c) (dot) and x is
    (n, heads, c), all float32 on the cpu: the kernels index them by A's rows and columns."""
    scores = (n, heads) if score == "additive" else (n, heads, c)
    for name, t, want in zip(
        ("src", "dst", "x"), tensors, (scores, scores, (n, heads, c)), strict=True
    ):
        if tuple(t.shape) != want or t.dtype != torch.float32 or t.device.type != "cpu":
            raise ValueError(
                f"attention: {name} is {t.dtype} {tuple(t.shape)} on {t.device}, expected"
                f" float32 {want} on the cpu"
            )


def _fused(p: Pattern) -> FusedAttention:
    if p.fused is None:
        p.fused = FusedAttention(p.tuned.matrix.csr)
    return p.fused


def _unfused(
    p: Pattern,
    score: str,
    param: float,
    src: torch.Tensor,
    dst: torch.Tensor,
    x: torch.Tensor,
    dropout: float = 0.0,
) -> torch.Tensor:
    """The aggregation as differentiable torch ops (the tuned SDDMM and SpMM): with
    attention dropout in training, and for the fused version's second-order gradients."""
    if score == "additive":
        scores = src.index_select(0, p.cols) + dst.index_select(0, p.rows)
        scores = F.leaky_relu(scores, param)
    else:
        scores = dot_scores(p, dst, src) / param
    alpha = edge_softmax(scores, p.rows, p.n, p.lengths)
    if dropout:
        alpha = F.dropout(alpha, p=dropout, training=True)
    return aggregate(p, alpha, x)


def _one_matrix(p: Pattern, heads: int) -> bool:
    """Whether the heads run as one ``kron(A, I_heads)`` product. Not for an adjacency on the
    baseline schedule (a mini-batch's, used for one step): building the heads-times larger
    pattern and its transpose per batch cost more than it saved (GAT, 4 heads, 1M-edge
    graph's NeighborLoader epoch: 3.20 s against 2.93 s per head); on a tuned full graph it
    saves 10-15% of the epoch (pushpull, bcsstk38)."""
    return heads > 1 and p.tune.get("schedule") != "baseline"


def aggregate(p: Pattern, alpha: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``out[:, h] = A_h @ x[:, h]`` with A_h's values ``alpha[:, h]`` (edges x heads; x:
    sources x heads x C): one tuned SpMM of ``kron(A, I_heads)``, or one per head."""
    heads, c = alpha.shape[1], x.shape[2]
    if _one_matrix(p, heads):
        mh = multi_head(p, heads)
        values = alpha.reshape(-1).index_select(0, mh.flat)
        return spmm(mh.tuned, x.reshape(-1, c), values=values).view(-1, heads, c)
    by_head = x.transpose(0, 1).contiguous()  # heads x sources x C: each head contiguous
    values = alpha.t().contiguous()
    return torch.stack([spmm(p.tuned, by_head[h], values=values[h]) for h in range(heads)], 1)


def dot_scores(p: Pattern, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``q_i . k_j`` on A's entries, per head (edges x heads): one tuned SDDMM of
    ``kron(A, I_heads)``, or one per head."""
    heads, c = q.shape[1], q.shape[2]
    if _one_matrix(p, heads):
        mh = multi_head(p, heads)
        scores = sddmm(mh.tuned, q.reshape(-1, c), k.reshape(-1, c), values=mh.ones)
        return scores.index_select(0, mh.order).view(-1, heads)
    qh, kh = q.transpose(0, 1).contiguous(), k.transpose(0, 1).contiguous()
    return torch.stack([sddmm(p.tuned, qh[h], kh[h], values=p.ones) for h in range(heads)], 1)


# --- the layers --------------------------------------------------------------------------


def _warn(layer: Any, reason: str) -> None:
    key = (type(layer).__name__, reason)
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(
            f"cognate.torch.pyg: {key[0]} with {reason} is not on cognate's kernels; it runs"
            " PyG's own path (same results)",
            stacklevel=4,
        )


def _unsupported(layer: Any, x: Any, entry: Any, **given: Any) -> str | None:
    """Why this call cannot run on cognate (None: it can)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        return "bipartite or non-2-D features"
    for name, value in given.items():
        if value is not None and value is not False:
            return name
    if getattr(layer, "lin_edge", None) is not None or getattr(layer, "edge_dim", None):
        return "edge_dim"
    if getattr(layer, "explain", None) or getattr(layer, "decomposed_layers", 1) != 1:
        return "an explainer or decomposed layers"
    if any(getattr(layer, hook, None) for hook in _HOOKS):
        return "propagate hooks"
    if entry.edges is not None and entry.edges.multi is not None:
        return "duplicated edges"
    return None


def edge_list(entry: Any) -> torch.Tensor:
    """The edge list behind an adjacency: the caller's own ``edge_index`` (its duplicates
    and its order, the order of any ``edge_attr``), else the CSR's entries (source, target):
    what the fallback gives PyG."""
    edges = entry.edges
    if edges is not None and edges.edge_index is not None:
        return edges.edge_index.long()
    csr = entry.tuned.matrix.csr
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
    return torch.from_numpy(np.vstack([csr.indices.astype(np.int64), rows]))


def _fallback(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(layer: Any, entry: Any, reason: str, x: Any, *args: Any, **kwargs: Any) -> Any:
        _warn(layer, reason)
        return original(layer, x, edge_list(entry), *args, **kwargs)

    return run


def _finish(layer: Any, out: torch.Tensor, res: torch.Tensor | None) -> torch.Tensor:
    out = out.reshape(out.shape[0], -1) if layer.concat else out.mean(dim=1)
    if res is not None:
        out = out + res
    return out if layer.bias is None else out + layer.bias


def _on_cognate(
    entry_of: EntryOf,
    original: Callable[..., Any],
    params: tuple[str, ...],
    run: Callable[[Any, torch.Tensor, Any], torch.Tensor],
) -> Callable[..., Any]:
    """A layer's forward: None for an adjacency that is not cognate's (PyG's own forward runs),
    PyG's forward with one warning where an argument in ``params`` or the layer's settings are
    not supported, else ``run(layer, x, entry)``."""
    fallback = _fallback(original)

    def forward(layer: Any, x: Any, edge_index: Any, *args: Any, **kwargs: Any) -> Any:
        entry = entry_of(edge_index)
        if entry is None:
            return None
        given = {**dict(zip(params, args, strict=False)), **kwargs}
        reason = _unsupported(layer, x, entry, **given)
        if reason is not None:
            return fallback(layer, entry, reason, x, *args, **kwargs)
        return run(layer, x, entry)

    return forward


def _gat(layer: Any, x: torch.Tensor, entry: Any) -> torch.Tensor:
    heads, c = layer.heads, layer.out_channels
    res = layer.res(x) if layer.res is not None else None
    if layer.lin is not None:
        x_src = x_dst = layer.lin(x).view(-1, heads, c)
    else:
        x_src = layer.lin_src(x).view(-1, heads, c)
        x_dst = layer.lin_dst(x).view(-1, heads, c)
    a_src = (x_src * layer.att_src).sum(dim=-1)
    a_dst = (x_dst * layer.att_dst).sum(dim=-1)
    p = pattern(entry, layer.add_self_loops)
    return _finish(layer, gat_attention(p, layer, a_src, a_dst, x_src), res)


def gat_attention(
    p: Pattern, layer: Any, a_src: torch.Tensor, a_dst: torch.Tensor, x_src: torch.Tensor
) -> torch.Tensor:
    """GAT's aggregation after its projections: the edges' scores ``leaky_relu(a_src[j] +
    a_dst[i])``, their softmax per target, attention dropout, and the weighted SpMM of
    ``x_src`` (sources x heads x C). Without dropout (PyG's default, or eval mode) all of it
    is one fused kernel each way (``_FusedAggregate``)."""
    return _attend(p, layer, "additive", float(layer.negative_slope), a_src, a_dst, x_src)


def _attend(
    p: Pattern,
    layer: Any,
    score: str,
    param: float,
    src: torch.Tensor,
    dst: torch.Tensor,
    x: torch.Tensor,
) -> torch.Tensor:
    dropout = layer.dropout if layer.training else 0.0
    if dropout or not attention_family.fits(x.shape[1], x.shape[2]):  # no kernel: torch ops
        return _unfused(p, score, param, src, dst, x, dropout)
    return _FusedAggregate.apply(src, dst, x, p, score, param)


def _gatv2(layer: Any, x: torch.Tensor, entry: Any) -> torch.Tensor:
    heads, c = layer.heads, layer.out_channels
    res = layer.res(x) if layer.res is not None else None
    x_l = layer.lin_l(x).view(-1, heads, c)
    x_r = x_l if layer.share_weights else layer.lin_r(x).view(-1, heads, c)
    p = pattern(entry, layer.add_self_loops)
    z = x_r.index_select(0, p.rows) + x_l.index_select(0, p.cols)
    z = F.leaky_relu(z, layer.negative_slope)
    alpha = edge_softmax((z * layer.att).sum(dim=-1), p.rows, p.n, p.lengths)
    alpha = F.dropout(alpha, p=layer.dropout, training=layer.training)
    return _finish(layer, aggregate(p, alpha, x_l), res)


def _transformer(layer: Any, x: torch.Tensor, entry: Any) -> torch.Tensor:
    heads, c = layer.heads, layer.out_channels
    query = layer.lin_query(x).view(-1, heads, c)
    key = layer.lin_key(x).view(-1, heads, c)
    value = layer.lin_value(x).view(-1, heads, c)
    p = pattern(entry, loops=False)
    out = dot_attention(p, layer, query, key, value)
    out = out.reshape(out.shape[0], -1) if layer.concat else out.mean(dim=1)
    if layer.root_weight:
        x_r = layer.lin_skip(x)
        if layer.lin_beta is not None:
            beta = layer.lin_beta(torch.cat([out, x_r, out - x_r], dim=-1)).sigmoid()
            out = beta * x_r + (1 - beta) * out
        else:
            out = out + x_r
    return out


def dot_attention(
    p: Pattern, layer: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> torch.Tensor:
    """TransformerConv's aggregation after its projections: the scores ``q_i . k_j /
    sqrt(C)``, their softmax per target, attention dropout, and the weighted SpMM of
    ``value`` (nodes x heads x C). Without dropout (PyG's default, or eval mode) all of it is
    one fused kernel each way; with dropout in training, the scores are the tuned SDDMM."""
    scale = math.sqrt(query.shape[-1])
    return _attend(p, layer, "dot", scale, key, query, value)


def gat(entry_of: EntryOf, original: Callable[..., Any]) -> Callable[..., Any]:
    return _on_cognate(entry_of, original, ("edge_attr", "size", "return_attention_weights"), _gat)


def gatv2(entry_of: EntryOf, original: Callable[..., Any]) -> Callable[..., Any]:
    return _on_cognate(entry_of, original, ("edge_attr", "return_attention_weights"), _gatv2)


def transformer(entry_of: EntryOf, original: Callable[..., Any]) -> Callable[..., Any]:
    return _on_cognate(entry_of, original, ("edge_attr", "return_attention_weights"), _transformer)


def install(entry_of: EntryOf) -> list[tuple[Any, str, Any]]:
    """Replace the forwards of GATConv, GATv2Conv and TransformerConv; returns (class,
    "forward", PyG's original) for each, for ``unpatch``."""
    from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv

    done = []
    for cls, make in ((GATConv, gat), (GATv2Conv, gatv2), (TransformerConv, transformer)):
        original = cls.__dict__["forward"]
        if getattr(original, "__cognate_projection__", False):
            continue
        cls.forward = _wrapped(original, make(entry_of, original))
        done.append((cls, "forward", original))
    return done
