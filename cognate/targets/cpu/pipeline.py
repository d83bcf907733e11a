"""The cpu kernel pipeline: pack A, build the kernel, bind the operands, call it.

Every cpu kernel runs through here: collect's worker, ``tune --verify``, ``result.kernel``,
``cognate.torch``, the PyG front end and the benchmark scripts. A ``PreparedKernel`` is
called through one argument vector (call.ArgvCall), so a record, a verify timing and a
user's call time the same call. The families (families/) supply the three steps; nothing
else calls them. The minmax family's ops (PyG's max / min aggregation and its backward) run
here too: ``operand_width`` checks each family's own operands.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.config import Config
from cognate.matrix import Matrix, canonicalize
from cognate.targets.cpu import families
from cognate.targets.cpu.call import BoundKernel
from cognate.targets.cpu.families.base import TooLarge, pack_source

__all__ = [
    "Packs",
    "PreparedKernel",
    "TooLarge",
    "bind",
    "build",
    "layout_key",
    "pack",
    "prepare",
    "prepare_kernel",
    "run_config",
]


def knobs_of(config: Config | Mapping[str, Any]) -> Mapping[str, Any]:
    return config.knobs if isinstance(config, Config) else config


def layout_key(knobs: Mapping[str, Any]) -> tuple:
    """What decides a config's packed A: every knob but the kernel-only ones (vector width,
    register tile, thread schedule, C's stores), which change the compiled code only."""
    from cognate.targets.cpu.codegen import KERNEL_ONLY_KNOBS

    return tuple(sorted((k, str(v)) for k, v in knobs.items() if k not in KERNEL_ONLY_KNOBS))


def pack(
    source: Any,
    op: str,
    config: Config | Mapping[str, Any],
    width: int | None = None,
    max_entries: int | None = None,
) -> Any:
    """A (a Matrix, canonical CSR or PackSource) in the layout of ``config`` for dense width
    ``width`` (the csr family alone packs without one); ``TooLarge`` before allocating
    anything over the size limit (``max_entries``: another limit)."""
    return families.pack(source, op, knobs_of(config), width, max_entries)


def build(op: str, knobs: Mapping[str, Any], width: int) -> Path:
    """The compiled kernel of ``knobs`` at dense width ``width`` (cached on disk)."""
    return families.build(op, knobs, width)


class Packs:
    """The packed A of the last layout, reused by the next config of the same layout: one
    pack of 10^8 nonzeros takes tens of seconds, and the vector and schedule variants of a
    plain CSR config share it."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.packed: Any = None

    def pack(self, source: Any, op: str, knobs: Mapping[str, Any], width: int) -> Any:
        key = (op, width, layout_key(knobs))
        if key != self.key:
            self.key, self.packed = None, None  # the previous layout is freed first
            self.packed, self.key = pack(source, op, knobs, width), key
        return self.packed


class PreparedKernel:
    """One config's kernel bound to packed A, its dense operands and an output buffer.

    ``self()`` (or ``self.run()``, the same call without a Python frame) runs it through its
    argument vector; ``point_at`` swaps the operands' and output's addresses; ``result()``
    reads the output (SpMM: C; SDDMM: the values in A's CSR order).
    """

    def __init__(self, bound: BoundKernel) -> None:
        self.bound = bound
        self.argv = bound.argv_call()
        self.run = self.argv.run
        self.lock = self.argv.lock
        self.op, self.packed = bound.op, bound.packed
        self.pointers = bound._pointers

    def __call__(self) -> None:
        self.run()

    @property
    def out(self) -> np.ndarray:
        return self.bound.out

    def result(self) -> np.ndarray:
        return self.bound.result()

    def point_at(self, addresses: list[int]) -> None:
        """The last ``len(addresses)`` pointer arguments (dense operands, then the output:
        every kernel's signature ends that way) set to these addresses."""
        first = self.pointers - len(addresses)
        for index, address in enumerate(addresses):
            self.argv.set_pointer(first + index, address)

    def set_pointer(self, index: int, address: int) -> None:
        self.argv.set_pointer(index, address)


def prepare(
    matrix: Any,
    op: str,
    config: Config | Mapping[str, Any],
    operands: tuple[np.ndarray, ...],
    lib_path: str | Path | None = None,
    packs: Packs | None = None,
) -> PreparedKernel:
    """Pack A (or take ``packs``' A of the same layout), build the kernel (unless the caller
    built it: ``lib_path``) and bind it to the dense ``operands``, read in place."""
    knobs = knobs_of(config)
    source = pack_source(matrix)
    width = families.operand_width(op, knobs, source.shape, operands)
    packed = packs.pack(source, op, knobs, width) if packs else pack(source, op, knobs, width)
    return bind(packed, knobs, operands, lib_path)


def bind(
    packed: Any,
    config: Config | Mapping[str, Any],
    operands: tuple[np.ndarray, ...],
    lib_path: str | Path | None = None,
) -> PreparedKernel:
    """The kernel of ``config`` (built here unless ``lib_path`` is given) bound to an A
    packed already and to the dense ``operands``."""
    knobs = knobs_of(config)
    op = packed.structure.op
    if lib_path is None:
        lib_path = build(op, knobs, families.operand_width(op, knobs, packed.shape, operands))
    return PreparedKernel(families.bind(packed, knobs, operands, lib_path))


def _as_matrix(matrix: Matrix | sp.spmatrix | sp.sparray) -> Matrix:
    return matrix if isinstance(matrix, Matrix) else Matrix("A", canonicalize(matrix))


def prepare_kernel(
    matrix: Matrix | sp.spmatrix | sp.sparray,
    op: str,
    config: Config | Mapping[str, Any],
    *operands: np.ndarray,
) -> PreparedKernel:
    """``prepare`` for any scipy matrix: pack A and compile once; each call reads the operand
    arrays in place (new values are picked up), ``.result()`` gives the output. A Matrix's
    ``row_perm`` / ``col_perm`` are absorbed by the configs that take them."""
    return prepare(_as_matrix(matrix), op, config, operands)


def run_config(
    matrix: Matrix | sp.spmatrix | sp.sparray,
    op: str,
    config: Config | Mapping[str, Any],
    *operands: np.ndarray,
) -> np.ndarray | sp.csr_matrix:
    """Run one cpu config in this process and return the product.

    SpMM: ``run_config(A, "spmm", cfg, B)`` -> dense ``A @ B`` (float32). SDDMM:
    ``run_config(A, "sddmm", cfg, X, Y)`` -> CSR with A's pattern, ``A * (X @ Y.T)``.
    Raises CognateError for a bad config, bad operands, or a layout over the size limit.
    """
    source = _as_matrix(matrix)
    call = prepare(source, op, config, operands)
    call()
    if op == "spmm":
        return call.result()
    csr = source.csr
    return sp.csr_matrix((call.result(), csr.indices.copy(), csr.indptr.copy()), shape=csr.shape)
