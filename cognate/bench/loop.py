"""The per-matrix loop every benchmark script runs: one row per matrix, progress on the way,
the rows written as JSON at the end."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from cognate.matrix import Matrix


def run_rows(
    matrices: Iterable[Matrix], one: Callable[[Matrix], dict], json_path: str | Path | None = None
) -> list[dict]:
    """``one(matrix)`` for each matrix, a line per matrix with its time; the rows, also
    written to ``json_path`` when given."""
    rows = []
    for matrix in matrices:
        start = time.perf_counter()
        rows.append(one(matrix))
        print(f"  {matrix.name}: done in {time.perf_counter() - start:.1f} s", flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=2))
    return rows
