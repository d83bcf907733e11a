"""The matrix sets benchmarks run on: the shared real matrices and generated graphs."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.paths import shared_dir

QUICK_MATRIX = "dwt_878"  # small, real, loads in milliseconds: every script's --quick


def shared_paths(ngraph: bool = False, names: Sequence[str] = ()) -> list[Path]:
    """The shared SuiteSparse and WACO matrix files (``ngraph``: the 277 HB / LPnetlib ones
    too), sorted; ``names`` keeps those whose file name contains one of them."""
    root = shared_dir() / "matrices"
    paths = sorted((root / "suitesparse").glob("*.mtx.gz")) + sorted((root / "waco").glob("*.csr"))
    if ngraph:
        paths += sorted((root / "ngraph").glob("*.mtx.gz"))
    if names:
        paths = [p for p in paths if any(name in p.name for name in names)]
    return paths


def _warn(path: Path, exc: CognateError) -> None:
    print(f"skipped {path.name}: {exc}", file=sys.stderr)


def shared_matrices(
    min_nnz: int = 0,
    ngraph: bool = False,
    names: Sequence[str] = (),
    limit: int | None = None,
    on_skip: Callable[[Path, CognateError], object] = _warn,
) -> list[Matrix]:
    """The shared matrices of at least ``min_nnz`` nonzeros; a file that does not load is
    reported through ``on_skip`` and left out (a benchmark over many files goes on)."""
    found = []
    for path in shared_paths(ngraph, names)[: limit or None]:
        try:
            matrix = load_matrix(path)
        except CognateError as exc:
            on_skip(path, exc)
            continue
        if matrix.nnz >= min_nnz:
            found.append(matrix)
    return found


def quick_matrix() -> Matrix:
    return load_matrix(shared_dir() / "matrices" / "suitesparse" / f"{QUICK_MATRIX}.mtx.gz")


def generated_graphs(
    sizes: Sequence[int], kinds: Sequence[str] = ("powerlaw", "road"), seed: int = 0
) -> list[Matrix]:
    """Generated graphs of about each size in nonzeros, each named ``<kind>-<nnz>``, node
    labels as the generators give them."""
    from cognate.synth import generate

    graphs = []
    for nnz in sizes:
        for kind in kinds:
            matrix = generate(kind, nnz=nnz, seed=seed)
            matrix.name = f"{kind}-{matrix.nnz}"
            graphs.append(matrix)
    return graphs
