"""The attention family: an attention layer's aggregation fused (the edges' scores, their
softmax per target, the weighted SpMM) and its backward, for cognate.torch.pyg: GATConv's
additive scores and TransformerConv's dot products.

A config is ``{"family": "attention", "score": "additive" | "dot", "heads": H, "chunk": rows
per task}``; the dense width is a head's channels C, so the features are (nodes, H * C) and
every per-edge array is (A.nnz, H) in A's CSR order. The scores' source and target operands
(src, dst) are GAT's a_src / a_dst (nodes x H) or TransformerConv's key / query (nodes x
H * C). Three ops (kernels/pyg/edge_attention.c), all float32:

- ``forward``: operands src (A.cols rows), dst (A.rows rows), x (A.cols x H*C) and params
  (1 x 1: GAT's negative slope, or sqrt(C)); outputs out (A.rows x H*C) and alpha (A.nnz x H);
- ``backward``: operands src, dst, x, alpha, dout (A.rows x H*C), params; outputs dpre
  (A.nnz x H: each score's gradient before leaky_relu / the scaling) and ddst (dst's shape);
- ``transpose``: packed A^T with each of its entries' index in A; operands alpha, dpre, dout
  and dst; outputs dx (A.cols x H*C) and dsrc (src's shape).

The source's score kind, heads, channels and vector bytes are integers checked against this
module's whitelists: no config string reaches C. Not a tuning family (no space lists it):
the pipeline packs, builds and binds it like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from string import Template
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.paths import kernels_dir
from cognate.targets.cpu.call import BoundKernel
from cognate.targets.cpu.codegen import MAX_SPECIALISED_WIDTH
from cognate.targets.cpu.families.base import PackSource
from cognate.targets.cpu.isa import host_isa
from cognate.targets.cpu.knobs import named_knob, ranged_knob, runtime_knob
from cognate.targets.cpu.operands import zero_pages

FAMILY = "attention"
OPS = ("forward", "backward", "transpose")
SCORES = {"additive": 0, "dot": 1}  # the score knob -> the template's SCORE
MAX_HEADS = 64
INT32_MAX = 2**31 - 1
# each op's dense operands then outputs: (name, rows ("rows" / "cols" / "nnz" / "one"),
# columns ("heads"; "width": H * C; "score": the scores' operands, H or H * C; "one"))
OPERANDS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "forward": (
        ("src", "cols", "score"),
        ("dst", "rows", "score"),
        ("x", "cols", "width"),
        ("params", "one", "one"),
    ),
    "backward": (
        ("src", "cols", "score"),
        ("dst", "rows", "score"),
        ("x", "cols", "width"),
        ("alpha", "nnz", "heads"),
        ("dout", "rows", "width"),
        ("params", "one", "one"),
    ),
    "transpose": (
        ("alpha", "nnz", "heads"),
        ("dpre", "nnz", "heads"),
        ("dout", "rows", "width"),
        ("dst", "rows", "score"),
    ),
}
OUTPUTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "forward": (("out", "rows", "width"), ("alpha", "nnz", "heads")),
    "backward": (("dpre", "nnz", "heads"), ("ddst", "rows", "score")),
    "transpose": (("dx", "cols", "width"), ("dsrc", "cols", "score")),
}


@dataclass(frozen=True)
class AttentionKernel:
    """The compile-time part of an attention config: op, score kind (0 additive, 1 dot),
    heads, channels per head and the vector bytes (the host's widest)."""

    op: str
    score: int
    heads: int
    channels: int
    vbytes: int = 32

    @property
    def function(self) -> str:
        return f"cognate_attention_{self.op}"


def kernel_of(op: str, knobs: Mapping[str, Any], width: int) -> AttentionKernel:
    """The checked compile-time part of a config (its chunk checked too)."""
    if op not in OPS:
        raise CognateError(f"cpu attention: op must be one of {', '.join(OPS)}, got {op!r}")
    score = named_knob(knobs, "score", SCORES, "cpu attention")
    heads = ranged_knob(knobs, "heads", MAX_HEADS, "cpu attention")
    if not isinstance(width, int) or isinstance(width, bool) or width < 1:
        raise CognateError(
            f"cpu attention: channels per head must be a positive integer, got {width!r}"
        )
    if heads * width > MAX_SPECIALISED_WIDTH:
        raise CognateError(
            f"cpu attention: heads x channels = {heads * width}, over {MAX_SPECIALISED_WIDTH}"
        )
    runtime_knob(knobs, "chunk")
    return AttentionKernel(op, score, heads, width, host_isa().vector_bits // 8)


def fits(heads: int, channels: int) -> bool:
    """Whether a kernel exists for ``heads`` heads of ``channels`` channels (else callers
    take another path)."""
    return 1 <= heads <= MAX_HEADS and 1 <= channels and heads * channels <= MAX_SPECIALISED_WIDTH


@dataclass
class AttentionPacked:
    """A's CSR arrays as the kernels read them (``transpose``: A^T's, with ``entry``: each of
    A^T's entries' index in A's CSR order)."""

    kernel: AttentionKernel
    shape: tuple[int, int]  # A's
    nnz: int
    indptr: np.ndarray  # int32
    indices: np.ndarray  # int32
    entry: np.ndarray | None = None  # int32, transpose only

    @property
    def structure(self) -> AttentionKernel:  # what the pipeline reads (its op)
        return self.kernel

    @property
    def stored_entries(self) -> int:
        extra = 0 if self.entry is None else self.entry.size
        return int(self.indptr.size + self.indices.size + extra)


def pack(
    source: PackSource,
    op: str,
    knobs: Mapping[str, Any],
    width: int | None,
    max_entries: int | None = None,
) -> AttentionPacked:
    """A's (or, for ``transpose``, A^T's) CSR arrays; ``max_entries`` is ignored (never
    larger than CSR)."""
    if width is None:
        raise CognateError("cpu attention: an attention kernel needs the channels per head")
    kernel = kernel_of(op, knobs, width)
    csr = source.csr
    if csr.nnz > INT32_MAX:  # the kernels' offsets are int32
        raise CognateError(f"cpu attention: {csr.nnz} entries, over {INT32_MAX}")
    shape = (int(csr.shape[0]), int(csr.shape[1]))
    if op != "transpose":
        indptr = np.ascontiguousarray(csr.indptr, dtype=np.int32)
        indices = np.ascontiguousarray(csr.indices, dtype=np.int32)
        return AttentionPacked(kernel, shape, int(csr.nnz), indptr, indices)
    # A^T by scipy, carrying each entry's position in A as its value (exact in float64)
    numbered = sp.csr_matrix(
        (np.arange(csr.nnz, dtype=np.float64), csr.indices, csr.indptr), shape=csr.shape
    )
    t = numbered.T.tocsr()
    return AttentionPacked(
        kernel,
        shape,
        int(csr.nnz),
        t.indptr.astype(np.int32),
        t.indices.astype(np.int32),
        t.data.astype(np.int32),
    )


def source(op: str, knobs: Mapping[str, Any], width: int) -> tuple[str, str, dict[str, Any]]:
    """(C source, entry point, runtime arguments) of an attention config at ``width``."""
    kernel = kernel_of(op, knobs, width)
    text = (kernels_dir() / "pyg" / "edge_attention.c").read_text()
    code = Template(text).substitute(
        heads=int(kernel.heads),
        channels=int(kernel.channels),
        score=int(kernel.score),
        vbytes=int(kernel.vbytes),
    )
    return code, kernel.function, {"chunk": runtime_knob(knobs, "chunk")}


def shapes(
    op: str, score: str, shape: tuple[int, int], nnz: int, heads: int, channels: int
) -> tuple[list[tuple[str, tuple[int, int]]], list[tuple[str, tuple[int, int]]]]:
    """(operands, outputs) of ``op`` with ``score`` ("additive" / "dot") as (name, shape)."""
    size = {"rows": shape[0], "cols": shape[1], "nnz": nnz, "one": 1}
    size.update(heads=heads, width=heads * channels)
    size["score"] = heads if score == "additive" else heads * channels

    def of(spec: tuple[tuple[str, str, str], ...]) -> list[tuple[str, tuple[int, int]]]:
        return [(name, (size[r], size[c])) for name, r, c in spec]

    return of(OPERANDS[op]), of(OUTPUTS[op])


def operand_width(
    op: str, knobs: Mapping[str, Any], shape: tuple[int, int], operands: tuple[Any, ...]
) -> int:
    """The channels per head of an attention op's operands (the heads and score kind from
    ``knobs``), else one line naming what is wrong."""
    if op not in OPS or len(operands) != len(OPERANDS[op]):
        raise CognateError(f"cpu attention {op}: expected {len(OPERANDS.get(op, ()))} operands")
    arrays = [np.asarray(a) for a in operands]
    if any(a.ndim != 2 or a.dtype != np.float32 or not a.flags.c_contiguous for a in arrays):
        raise CognateError(f"cpu attention {op}: operands must be C-contiguous 2-D float32 arrays")
    names = [name for name, _, _ in OPERANDS[op]]
    wide = arrays[names.index("x" if "x" in names else "dout")].shape[1]
    heads = ranged_knob(knobs, "heads", MAX_HEADS, "cpu attention")
    if wide % heads:
        raise CognateError(
            f"cpu attention {op}: feature width {wide} is not a multiple of {heads} heads"
        )
    channels = wide // heads
    kernel_of(op, knobs, channels)  # the score kind, heads x channels, chunk
    nnz = arrays[names.index("alpha")].shape[0] if "alpha" in names else -1
    want, _ = shapes(op, knobs["score"], shape, nnz, heads, channels)
    for array, (name, expected) in zip(arrays, want, strict=True):
        if array.shape != expected:
            raise CognateError(
                f"cpu attention {op}: {name} has shape {array.shape}, expected {expected}"
            )
    return int(channels)


def bind(
    lib_path: str, packed: AttentionPacked, knobs: Mapping[str, Any], operands: tuple[Any, ...]
) -> BoundKernel:
    return AttentionCall(lib_path, packed, knobs, operands)


class AttentionCall(BoundKernel):
    """An attention kernel bound to packed A, its operands and zeroed output pages (a caller
    that points the kernel at its own arrays before each call, ``PreparedKernel.point_at``,
    never touches them)."""

    def __init__(
        self,
        lib_path: str,
        packed: AttentionPacked,
        knobs: Mapping[str, Any],
        operands: tuple[Any, ...],
    ) -> None:
        kernel = packed.kernel
        self.op, self.packed = kernel.op, packed
        channels = operand_width(kernel.op, knobs, packed.shape, operands)
        score = knobs["score"]
        want, outs = shapes(
            kernel.op, score, packed.shape, packed.nnz, kernel.heads, kernel.channels
        )
        if channels != kernel.channels or any(
            np.asarray(a).shape != s for a, (_, s) in zip(operands, want, strict=True)
        ):  # a wrong size would overrun rows
            raise CognateError(
                f"cpu attention: kernel built for {kernel.heads} heads of {kernel.channels}"
                f" channels and {packed.nnz} entries; the operands do not match"
            )
        self.operands = tuple(operands)
        self.outputs = [zero_pages(s, np.float32) for _, s in outs]
        self.out = self.outputs[0]
        rows = packed.shape[1] if kernel.op == "transpose" else packed.shape[0]
        arrays = [packed.indptr, packed.indices]
        if packed.entry is not None:
            arrays.append(packed.entry)
        pointers = [*arrays, *self.operands, *self.outputs]
        integers = [rows, packed.shape[1], runtime_knob(knobs, "chunk")]
        self._bind(lib_path, kernel.function, pointers, integers)

    def result(self) -> np.ndarray:
        """The first output (out, dpre or dx); ``self.outputs`` holds both."""
        return self.out
