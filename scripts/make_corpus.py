"""Write the synthetic training corpus (deterministic) used next to the shared real matrices.

The mix covers the structures a sparse autotuner meets: uniform, power-law (R-MAT), banded,
block-diagonal and the structured NN masks (k-diagonal, block, N:M, permuted variants), and
at scale the realistic classes (meshes, community graphs, roads, circuits, LPs, upscaled
real matrices).

    python scripts/make_corpus.py OUT_DIR [--count N] [--set base|extra|scale]
    python scripts/make_corpus.py OUT_DIR --set scale [--max-nnz N]
    python scripts/make_corpus.py OUT_DIR --verify

``base`` (default) writes the first 30 files, byte-identical to the corpus the stored records
were collected on (their permuted variants are saved as the plain logical matrix A, as they
always were). ``extra`` writes ~40 more (nnz 20k..400k, mostly <= 200k): generic kinds of
varied sizes and the layer masks of docs/architecture.md, Structured sparsity, permuted ones with their index maps.
``scale`` writes 304 matrices of the realistic kinds (``cognate.synth.SCALE_KINDS``), sizes
log-uniform over 10^4..5x10^6 nnz within every kind, seeds fixed, plus ``manifest.csv``
(name, kind, seed, options, shape, nnz, sha256 of the file) so the corpus is reproducible
without storing it. It resumes: a file whose manifest row matches its recipe and its bytes
is kept. ``--max-nnz`` leaves out the recipes above a size (a cheaper subset, same names);
``--verify`` re-checks every file of OUT_DIR's manifest against its sha256.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from cognate.errors import CognateError
from cognate.formats.write import save_matrix
from cognate.synth.corpus import (
    BASE_RECIPES,
    EXTRA_RECIPES,
    SMALL_SETS,
    build_set_matrix,
    set_file_name,
    verify,
    write_scale,
)

# The recipe lists live in the package (the records regenerate their matrices from them);
# the names stay here for the scripts and tests that read them.
RECIPES = BASE_RECIPES
EXTRA = EXTRA_RECIPES
SETS = SMALL_SETS


def write_set(out: Path, name: str, indices: Iterable[int] | None = None) -> list[Path]:
    """Write the recipes of set ``name`` (``base`` or ``extra``; all, or those at
    ``indices``) into ``out``; their paths."""
    paths = []
    for index in range(len(SETS[name][1])) if indices is None else indices:
        matrix = build_set_matrix(name, index)
        path = out / set_file_name(name, index)
        save_matrix(matrix, path)
        print(f"{path.name}: nnz {matrix.nnz}")
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=None, help="only the first N recipes")
    parser.add_argument(
        "--set", choices=[*sorted(SETS), "scale"], default="base", dest="recipe_set"
    )
    parser.add_argument("--max-nnz", type=int, default=None, help="scale: leave out larger")
    parser.add_argument("--verify", action="store_true", help="check files against manifest")
    args = parser.parse_args()
    try:
        _run(args)
    except (CognateError, OSError) as exc:
        print(f"make_corpus: error: {' '.join(str(exc).split())}", file=sys.stderr)
        sys.exit(1)


def _run(args: argparse.Namespace) -> None:
    if args.verify:
        bad = verify(args.out)
        sys.exit(1 if bad else 0)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.recipe_set == "scale":
        write_scale(args.out, max_nnz=args.max_nnz, count=args.count)
        return
    count = len(SETS[args.recipe_set][1]) if args.count is None else args.count
    write_set(args.out, args.recipe_set, range(min(count, len(SETS[args.recipe_set][1]))))


if __name__ == "__main__":
    main()
