"""The minmax family: the (max, x) / (min, x) SpMM that keeps the winning entry (its arg),
and its backward, which routes the output's gradient through the args (PyG's max / min
aggregations, cognate.torch.pyg).

A config is ``{"family": "minmax", "reduce": "max" | "min", "chunk": rows per task}`` and
optionally ``"tile"`` (1, 2, 4, 8: vectors of the output held in registers per pass over a
row; default 4) and ``"args"`` (1, the default: keep the args; 0: the output alone, for an
input that needs no gradient); two ops share its packed A (A's CSR arrays as the kernel
reads them: int32 offsets and columns, float32 values; a column may repeat within a row,
i.e. a duplicated edge is one more candidate):

- ``spmm``: operand X (A.cols x width, float32), outputs C and arg (A.rows x width, float32
  and int32): ``C[i, j] = max_k A[i, k] * X[k, j]``, ``arg[i, j]`` = that entry (-1 for an
  empty row, -2 for a NaN output);
- ``route``: operands G (A.rows x width, float32) and arg (A.rows x width, int32), output dX
  (A.cols x width, float32; the kernel zeroes it): ``dX[col[arg], j] += val[arg] * G[i, j]``.

The kernels are kernels/pyg/spmm_minmax.c with the dense width and the reduce (as 0 / 1)
filled in, both checked against this module's whitelists: no config string reaches C. Not a
tuning family (no space lists it): the pipeline packs, builds and binds it like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from string import Template
from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.paths import kernels_dir
from cognate.targets.cpu.call import BoundKernel
from cognate.targets.cpu.codegen import MAX_SPECIALISED_WIDTH
from cognate.targets.cpu.families.base import PackSource
from cognate.targets.cpu.isa import host_isa
from cognate.targets.cpu.knobs import named_knob, runtime_knob
from cognate.targets.cpu.operands import zero_pages

FAMILY = "minmax"
OPS = ("spmm", "route")
REDUCES = {"max": 0, "min": 1}  # the reduce knob -> the template's is_min
ARG_EMPTY, ARG_NAN = -1, -2  # the arg of an empty row / a NaN output
TILES = (1, 2, 4, 8)  # vectors of out and arg held in registers per pass over a row
DEFAULT_TILE = 4
ARGS = (0, 1)  # 1: keep the args for the backward; 0: the output alone (no gradient needed)
KNOBS = {"reduce": tuple(REDUCES), "tile": TILES, "args": ARGS}
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class MinMaxKernel:
    """The compile-time part of a minmax config: op, reduce (0 max / 1 min), dense width,
    the forward's register tile (vectors per pass) and vector bytes (the host's widest)."""

    op: str
    is_min: int
    width: int
    tile: int = DEFAULT_TILE
    vbytes: int = 32
    args: int = 1

    @property
    def function(self) -> str:
        return f"cognate_minmax_{self.op}"


def kernel_of(op: str, knobs: Mapping[str, Any], width: int) -> MinMaxKernel:
    """The checked compile-time part of a config (its chunk checked too)."""
    if op not in OPS:
        raise CognateError(f"cpu minmax: op must be one of {', '.join(OPS)}, got {op!r}")
    is_min = named_knob(knobs, "reduce", REDUCES, "cpu minmax")
    if not isinstance(width, int) or isinstance(width, bool):
        raise CognateError(f"cpu minmax: the dense width must be an integer, got {width!r}")
    if not 1 <= width <= MAX_SPECIALISED_WIDTH:
        raise CognateError(f"cpu minmax: dense width {width} outside 1..{MAX_SPECIALISED_WIDTH}")
    runtime_knob(knobs, "chunk")
    tile = knobs.get("tile", DEFAULT_TILE)
    if isinstance(tile, bool) or tile not in TILES:
        raise CognateError(f"cpu minmax: tile must be one of {', '.join(map(str, TILES))}")
    args = knobs.get("args", 1)
    if isinstance(args, bool) or args not in ARGS:
        raise CognateError("cpu minmax: args must be 0 or 1")
    vbytes = host_isa().vector_bits // 8
    if op == "route":  # the backward depends on none of them: one library serves every config
        return MinMaxKernel(op, 0, width, DEFAULT_TILE, vbytes)
    return MinMaxKernel(op, is_min, width, int(tile), vbytes, int(args))


@dataclass
class MinMaxPacked:
    """A's CSR arrays for a minmax kernel (views of A's own arrays when they are int32 /
    float32 already: packing copies nothing then)."""

    kernel: MinMaxKernel
    shape: tuple[int, int]
    indptr: np.ndarray  # int32, rows + 1
    indices: np.ndarray  # int32, nnz
    values: np.ndarray  # float32, nnz

    @property
    def structure(self) -> MinMaxKernel:  # what the pipeline reads (its op)
        return self.kernel

    @property
    def stored_entries(self) -> int:
        return int(self.indptr.size + self.indices.size + self.values.size)


def pack(
    source: PackSource,
    op: str,
    knobs: Mapping[str, Any],
    width: int | None,
    max_entries: int | None = None,
) -> MinMaxPacked:
    """A's CSR as the kernels read it (``max_entries`` is ignored: CSR is never larger)."""
    if width is None:
        raise CognateError("cpu minmax: a minmax kernel needs the dense width")
    kernel = kernel_of(op, knobs, width)
    csr = source.csr
    if csr.nnz > INT32_MAX:  # the kernels' offsets and args are int32
        raise CognateError(f"cpu minmax: {csr.nnz} entries, over {INT32_MAX}")
    return MinMaxPacked(
        kernel,
        (int(csr.shape[0]), int(csr.shape[1])),
        np.ascontiguousarray(csr.indptr, dtype=np.int32),
        np.ascontiguousarray(csr.indices, dtype=np.int32),
        np.ascontiguousarray(csr.data, dtype=np.float32),
    )


def source(op: str, knobs: Mapping[str, Any], width: int) -> tuple[str, str, dict[str, Any]]:
    """(C source, entry point, runtime arguments) of a minmax config at ``width``."""
    kernel = kernel_of(op, knobs, width)
    text = (kernels_dir() / "pyg" / "spmm_minmax.c").read_text()
    code = Template(text).substitute(
        width=int(kernel.width),
        is_min=int(kernel.is_min),
        tile=int(kernel.tile),
        vbytes=int(kernel.vbytes),
        args=int(kernel.args),
    )
    return code, kernel.function, {"chunk": runtime_knob(knobs, "chunk")}


def _dense(array: Any, shape: tuple[int, int], dtype: type, what: str) -> np.ndarray:
    array = np.asarray(array)
    if array.shape != shape or array.dtype != dtype or not array.flags.c_contiguous:
        raise CognateError(
            f"cpu minmax: {what} must be a C-contiguous {np.dtype(dtype).name} array of shape"
            f" {shape}, got {array.dtype} {array.shape}"
        )
    return array


def operand_width(
    op: str, knobs: Mapping[str, Any], shape: tuple[int, int], operands: tuple[Any, ...]
) -> int:
    """The dense width of a minmax op's operands (``spmm``: X; ``route``: G, arg), else one
    line naming what is wrong (the knobs do not change their shapes)."""
    rows, cols = shape
    expected = 1 if op == "spmm" else 2
    if op not in OPS or len(operands) != expected:
        raise CognateError(f"cpu minmax {op}: expected {expected} dense operand(s)")
    first = np.asarray(operands[0])
    if first.ndim != 2 or first.shape[1] < 1:
        raise CognateError(f"cpu minmax {op}: dense operands must be 2-D, of width at least 1")
    width = int(first.shape[1])
    if op == "spmm":
        _dense(operands[0], (cols, width), np.float32, "X")
    else:
        _dense(operands[0], (rows, width), np.float32, "the output's gradient")
        _dense(operands[1], (rows, width), np.int32, "the args")
    return width


def bind(
    lib_path: str, packed: MinMaxPacked, knobs: Mapping[str, Any], operands: tuple[Any, ...]
) -> BoundKernel:
    return MinMaxCall(lib_path, packed, knobs, operands)


class MinMaxCall(BoundKernel):
    """A minmax kernel bound to packed A, its dense operands and output buffers (zeroed
    pages until written: a caller that points the kernel at its own arrays before each call,
    ``PreparedKernel.point_at``, never touches them)."""

    def __init__(
        self,
        lib_path: str,
        packed: MinMaxPacked,
        knobs: Mapping[str, Any],
        operands: tuple[Any, ...],
    ) -> None:
        kernel = packed.kernel
        self.op, self.packed = kernel.op, packed
        width = operand_width(kernel.op, knobs, packed.shape, operands)
        if width != kernel.width:  # a wrong width would overrun rows
            raise CognateError(
                f"cpu minmax: kernel built for dense width {kernel.width}, operands have"
                f" width {width}"
            )
        self.operands = tuple(operands)
        rows, cols = packed.shape
        if kernel.op == "spmm":
            self.out = zero_pages((rows, width), np.float32)
            self.arg = zero_pages((rows, width), np.int32)
            outputs = [self.out, self.arg]
        else:
            self.out = zero_pages((cols, width), np.float32)
            outputs = [self.out]
        pointers = [packed.indptr, packed.indices, packed.values, *self.operands, *outputs]
        integers = [rows, cols, runtime_knob(knobs, "chunk")]
        self._bind(lib_path, kernel.function, pointers, integers)

    def result(self) -> np.ndarray:
        """``spmm``: C (its args in ``self.arg``); ``route``: dX."""
        return self.out
