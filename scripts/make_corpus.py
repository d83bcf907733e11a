"""Write the synthetic training corpus (deterministic) used next to the shared real matrices.

The mix covers the structures a sparse autotuner meets: uniform, power-law (R-MAT), banded,
block-diagonal and the structured NN masks (k-diagonal, block, N:M, permuted variants).
Sizes stay small enough that 100 cpu configs of each collect in about a minute here.

    python scripts/make_corpus.py OUT_DIR [--count N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cognate.io import save_matrix
from cognate.synth import generate

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--count", type=int, default=len(RECIPES))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for index, (kind, rows, cols, density, options) in enumerate(RECIPES[: args.count]):
        options = dict(options)
        permute = options.pop("permute", None)
        matrix = generate(kind, rows, cols, density=density, seed=index, permute=permute, **options)
        suffix = f"_p{permute}" if permute else ""
        path = args.out / f"syn{index:02d}_{kind}_{rows}x{cols}{suffix}.npz"
        save_matrix(matrix, path)
        print(f"{path.name}: nnz {matrix.nnz}")


if __name__ == "__main__":
    main()
