"""The kernel families of the cpu target, one module each, behind one protocol.

A config's ``family`` knob names its family (none: ``csr``, WACO's SuperSchedule). Each family
is a module here (csr.py, dia.py, bcsr.py, reordered.py, panel.py; minmax.py: the (max, x)
/ (min, x) SpMM of PyG's max / min aggregations, and attention.py: GATConv's fused
aggregation, neither with a tuning space) with three functions:

- ``pack(source, op, knobs, width, max_entries=None)``: A (a ``PackSource``) in the config's
  layout; ``TooLarge`` before allocating anything over the size limit;
- ``source(op, knobs, width)``: (C source, entry point, runtime arguments) of the kernel
  specialised to the dense width, every knob checked against its whitelist first;
- ``bind(lib_path, packed, knobs, operands)``: the compiled kernel bound to packed A, the dense
  operands and an output buffer (a ``BoundKernel``, call.py).

A family whose ops take other operands than SpMM's / SDDMM's (minmax, attention) has its
own ``operand_width(op, knobs, shape, operands)``; ``operand_width`` here asks it.

Only the kernel pipeline (cpu/pipeline.py) calls the three: it turns (matrix, config, width)
into the one callable every user of a cpu kernel gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from cognate.build import compile_c
from cognate.errors import CognateError
from cognate.targets.cpu.call import BoundKernel, check_operands
from cognate.targets.cpu.families.base import (
    PackSource,
    TooLarge,
    pack_source,
    size_limit,
    view_of,
)

CSR = "csr"
FAMILIES: tuple[str, ...] = (CSR, "dia", "bcsr", "reordered", "panel", "minmax", "attention")

__all__ = [
    "CSR",
    "FAMILIES",
    "PackSource",
    "TooLarge",
    "bind",
    "build",
    "family_of",
    "kernel_of",
    "kernel_source",
    "module_of",
    "operand_width",
    "pack",
    "pack_source",
    "size_limit",
    "view_of",
]


def family_of(knobs: Mapping[str, Any]) -> str:
    """The config's family: its ``family`` knob, ``csr`` when absent."""
    family = knobs.get("family", CSR)
    if not isinstance(family, str) or family not in FAMILIES:
        raise CognateError(f"cpu config: family must be one of {', '.join(FAMILIES)}")
    return family


def module_of(family: str) -> ModuleType:
    """The module of a family (one of FAMILIES): its pack / source / bind."""
    if family not in FAMILIES:
        raise CognateError(f"cpu: no kernel family {family!r}")
    return import_module(f"cognate.targets.cpu.families.{family}")


def operand_width(
    op: str, knobs: Mapping[str, Any], shape: tuple[int, int], operands: tuple[Any, ...]
) -> int:
    """The dense width of ``operands`` for ``op`` of ``knobs``' family (checked: one line
    naming what is wrong); SpMM's and SDDMM's check unless the family has its own."""
    own = getattr(module_of(family_of(knobs)), "operand_width", None)
    return check_operands(op, shape, operands) if own is None else own(op, knobs, shape, operands)


def pack(
    matrix: Any,
    op: str,
    knobs: Mapping[str, Any],
    width: int | None = None,
    max_entries: int | None = None,
) -> Any:
    """A (a Matrix, canonical CSR, StructuredView or PackSource) packed for ``knobs``.

    ``width`` is the dense width the kernel is specialised to (the csr family alone also runs
    with None: the width at run time)."""
    family = family_of(knobs)
    if width is None and family != CSR:
        raise CognateError(f"cpu {op}: a {family} kernel needs the dense width")
    return module_of(family).pack(pack_source(matrix), op, knobs, width, max_entries)


def kernel_of(op: str, knobs: Mapping[str, Any], width: int) -> Any:
    """The checked compile-time part of a template family's config (FamilyKernel)."""
    family = family_of(knobs)
    if family == CSR:
        raise CognateError(f"cpu {op}: the csr family has no template kernel")
    return module_of(family).kernel_of(op, knobs, width)


def kernel_source(op: str, knobs: Mapping[str, Any], width: int) -> tuple[str, str, dict]:
    """(C source, entry point, runtime arguments) of any cpu config, for ``tune --emit``."""
    return module_of(family_of(knobs)).source(op, knobs, width)


def build(op: str, knobs: Mapping[str, Any], width: int) -> Path:
    """Compile (or find cached) the kernel of any cpu config specialised to ``width``."""
    return _built(op, width, tuple(sorted((k, repr(v)) for k, v in knobs.items())), knobs)


def _built(op: str, width: int, key: tuple, knobs: Mapping[str, Any]) -> Path:
    """The library of a config already built in this process, else compile. Why: a
    mini-batch builds several kernels per step, and generating the source again costs more
    than the kernel runs. The key is every knob's repr, so a config is validated (by
    kernel_source) the first time it is seen, exactly as it is."""
    path = _BUILT.get((op, width, key))
    if path is None:
        path = _compile(kernel_source(op, knobs, width)[0])
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.clear()
        _BUILT[(op, width, key)] = path
    return path


_BUILT: dict[tuple, Path] = {}
_BUILT_MAX = 1024


@lru_cache(maxsize=512)
def _compile(source: str) -> Path:
    return compile_c(source)


def bind(
    packed: Any, knobs: Mapping[str, Any], operands: tuple[np.ndarray, ...], lib_path: str | Path
) -> BoundKernel:
    """The compiled kernel ``lib_path`` of ``knobs`` bound to ``packed`` A and the dense
    ``operands``."""
    return module_of(family_of(knobs)).bind(str(lib_path), packed, knobs, operands)
