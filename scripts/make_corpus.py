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
import dataclasses
import sys
from collections.abc import Iterable
from pathlib import Path

from cognate.errors import CognateError
from cognate.io import save_matrix
from cognate.synth import generate
from cognate.synth.corpus import verify, write_scale

# (kind, rows, cols, density, options): a fixed, reviewed list rather than random draws,
# so the corpus is the same on every machine.
RECIPES: list[tuple[str, int, int, float, dict]] = [
    ("uniform", 4096, 4096, 0.002, {}),
    ("uniform", 16384, 16384, 0.0004, {}),
    ("uniform", 8192, 2048, 0.004, {}),
    ("uniform", 2048, 8192, 0.004, {}),
    ("uniform", 30000, 30000, 0.0002, {}),
    ("rmat", 8192, 8192, 0.002, {}),
    ("rmat", 16384, 16384, 0.0005, {}),
    ("rmat", 32768, 32768, 0.0002, {}),
    ("rmat", 4096, 4096, 0.01, {"a": 0.45, "b": 0.15, "c": 0.15, "d": 0.25}),
    ("rmat", 16384, 16384, 0.001, {"a": 0.7, "b": 0.1, "c": 0.1, "d": 0.1}),
    ("banded", 20000, 20000, 0.0005, {"bandwidth": 16}),
    ("banded", 8192, 8192, 0.004, {"bandwidth": 64}),
    ("banded", 50000, 50000, 0.0001, {"bandwidth": 4}),
    ("banded", 4096, 4096, 0.02, {"bandwidth": 200}),
    ("block-diagonal", 8192, 8192, 0.003, {"block": 32}),
    ("block-diagonal", 16384, 16384, 0.0008, {"block": 16}),
    ("block-diagonal", 4096, 4096, 0.02, {"block": 128}),
    ("kdiag", 768, 768, 0.1, {}),
    ("kdiag", 768, 3072, 0.05, {}),
    ("kdiag", 3072, 768, 0.05, {}),
    ("kdiag", 768, 768, 0.1, {"permute": "both"}),
    ("block", 768, 768, 0.1, {"block": 16}),
    ("block", 3072, 768, 0.05, {"block": 32}),
    ("block", 768, 768, 0.1, {"block": 16, "permute": "rows"}),
    ("nm", 768, 768, 0.5, {"n": 2, "m": 4}),
    ("nm", 768, 3072, 0.125, {"n": 1, "m": 8}),
    ("nm", 3072, 768, 0.25, {"n": 2, "m": 8, "permute": "cols"}),
    ("uniform", 1024, 1024, 0.02, {"permute": "both"}),
    ("rmat", 2048, 2048, 0.01, {"permute": "rows"}),
    ("banded", 12000, 12000, 0.001, {"bandwidth": 8, "permute": "both"}),
]

# More of every kind (nnz 20k..400k, mostly <= 200k so 100 cpu configs collect in ~20 s
# each) and the structured layer masks at 768/3072 shapes, 80-95% sparsity.
EXTRA: list[tuple[str, int, int, float, dict]] = [
    ("uniform", 2048, 2048, 0.01, {}),
    ("uniform", 8192, 8192, 0.002, {}),
    ("uniform", 20000, 20000, 0.0005, {}),
    ("uniform", 4096, 16384, 0.002, {}),
    ("uniform", 16384, 4096, 0.003, {}),
    ("uniform", 60000, 60000, 0.0001, {}),
    ("rmat", 4096, 4096, 0.003, {}),
    ("rmat", 8192, 8192, 0.003, {"a": 0.5, "b": 0.2, "c": 0.2, "d": 0.1}),
    ("rmat", 65536, 65536, 0.00003, {}),
    ("rmat", 16384, 16384, 0.0007, {"a": 0.6, "b": 0.15, "c": 0.15, "d": 0.1}),
    ("banded", 30000, 30000, 0.0002, {"bandwidth": 3}),
    ("banded", 10000, 10000, 0.001, {"bandwidth": 32}),
    ("banded", 4096, 4096, 0.005, {"bandwidth": 20}),
    ("banded", 100000, 100000, 0.00002, {"bandwidth": 1}),
    ("banded", 2048, 2048, 0.05, {"bandwidth": 100}),
    ("block-diagonal", 12000, 12000, 0.001, {"block": 24}),
    ("block-diagonal", 6000, 6000, 0.005, {"block": 64}),
    ("block-diagonal", 32768, 32768, 0.0001, {"block": 8}),
    ("block-diagonal", 2048, 2048, 0.03, {"block": 256}),
    ("kdiag", 768, 768, 0.2, {}),
    ("kdiag", 768, 768, 0.05, {}),
    ("kdiag", 768, 3072, 0.1, {}),
    ("kdiag", 3072, 768, 0.05, {}),
    ("kdiag", 3072, 768, 0.1, {"permute": "both"}),
    ("kdiag", 768, 3072, 0.05, {"permute": "both"}),
    ("kdiag", 768, 768, 0.1, {"permute": "rows"}),
    ("kdiag", 768, 768, 0.2, {"permute": "cols"}),
    ("block", 768, 768, 0.2, {"block": 8}),
    ("block", 768, 3072, 0.1, {"block": 16}),
    ("block", 3072, 768, 0.05, {"block": 4}),
    ("block", 768, 768, 0.1, {"block": 32, "permute": "both"}),
    ("block", 3072, 768, 0.1, {"block": 16, "permute": "both"}),
    ("nm", 768, 768, 0.2, {}),
    ("nm", 768, 3072, 0.1, {}),
    ("nm", 3072, 768, 0.05, {}),
    ("nm", 768, 768, 0.1, {"permute": "both"}),
    ("nm", 768, 3072, 0.05, {"permute": "cols"}),
    ("uniform", 768, 3072, 0.1, {}),
    ("uniform", 768, 768, 0.1, {}),
    ("uniform", 3072, 768, 0.05, {}),
]
EXTRA_SEED = 100  # EXTRA's seeds start here, away from the base list's 0..29
SETS = {"base": ("syn", RECIPES, 0, False), "extra": ("ext", EXTRA, EXTRA_SEED, True)}


def write_set(out: Path, name: str, indices: Iterable[int] | None = None) -> list[Path]:
    """Write the recipes of set ``name`` (``base`` or ``extra``; all, or those at
    ``indices``) into ``out``; their paths."""
    prefix, recipes, first_seed, keep_maps = SETS[name]
    paths = []
    for index in range(len(recipes)) if indices is None else indices:
        kind, rows, cols, density, options = recipes[index]
        options = dict(options)
        permute = options.pop("permute", None)
        matrix = generate(
            kind, rows, cols, density=density, seed=first_seed + index, permute=permute, **options
        )
        if not keep_maps:  # the base corpus predates index maps: keep its files identical
            matrix = dataclasses.replace(matrix, row_perm=None, col_perm=None, _sha256=None)
        suffix = f"_p{permute}" if permute else ""
        path = out / f"{prefix}{index:02d}_{kind}_{rows}x{cols}{suffix}.npz"
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
