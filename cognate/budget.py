"""The memory budget: what a piece of work on a matrix costs (``Cost``, measured per row,
column and entry) priced against ``$COGNATE_MAX_MEMORY`` before anything is allocated."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from cognate.errors import CognateError, InputError
from cognate.matrix import Matrix

MEMORY_ENV = "COGNATE_MAX_MEMORY"


class Cost(NamedTuple):
    """Measured peak bytes (over the interpreter's start-up) a piece of work on a matrix
    costs per row, per column and per stored entry."""

    per_row: float = 0.0
    per_col: float = 0.0
    per_entry: float = 0.0

    def bytes(self, rows: int, cols: int, entries: int) -> int:
        return int(rows * self.per_row + cols * self.per_col + entries * self.per_entry)


def check_work(matrix: Matrix, what: str, cost: Cost) -> None:
    """Refuse ``what`` (a command, e.g. 'collect --target cpu') on ``matrix`` before it
    allocates anything, when its measured ``cost`` is over the memory budget."""
    rows, cols = matrix.shape
    check_budget(matrix.source or matrix.name, f"{what} on", rows, cols, matrix.nnz, cost)


def check_budget(
    where: str | Path,
    what: str,
    rows: int,
    cols: int,
    entries: int,
    cost: Cost,
    counted: str = "nnz",
) -> None:
    """``InputError`` naming ``where`` when ``what`` on a rows x cols matrix with ``entries``
    entries needs more than the memory budget at ``cost``."""
    needed = cost.bytes(rows, cols, entries)
    budget = memory_budget()
    if needed > budget:
        raise InputError(
            where,
            f"{what} a {rows} x {cols} matrix with {counted} {entries} needs about "
            f"{gib(needed)} GiB, over the memory budget of {gib(budget)} GiB "
            f"({MEMORY_ENV} to change)",
        )


def gib(n: int) -> str:
    return f"{n / 2**30:.3g}"


def memory_budget() -> int:
    """Bytes one matrix may take while loading: ``$COGNATE_MAX_MEMORY`` (bytes, or with a
    K/M/G/T suffix), else half of physical RAM (the other half for the work done on it).

    A setting that is not a positive finite size (``inf``, ``nan``, ``lots``) is a
    ``CognateError`` that names the variable, never the matrix."""
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if not raw:
        return physical_memory() // 2
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    scale = units.get(raw[-1].upper(), 1)
    number = raw[:-1] if raw[-1].upper() in units else raw
    try:
        value = int(float(number) * scale)
    except (ValueError, OverflowError):  # OverflowError: inf
        value = 0
    if value <= 0:
        raise CognateError(f"{MEMORY_ENV}={raw!r}: expected a positive size like 8G")
    return value


def physical_memory() -> int:
    """Bytes of RAM in this machine (a large guess where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume a large machine
        return 2**40
