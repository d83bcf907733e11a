#!/usr/bin/env python
"""Featurizer embedding time vs nnz, on both backends, in one process.

    python scripts/bench_featurizer.py [--sizes 100000,1000000,5000000] [--preset waco]
                                       [--repeats 3] [--kind rmat] [--threads N] [--rows N]

For each size: a synthetic square matrix (R-MAT by default, nnz exact, rows = nnz / 10
unless --rows is given),
the preset's featurizer with fixed random weights, and the median wall time of
``Featurizer.embed`` per backend (after one warm-up call, under cognate's timing lock) (pure PyTorch; MinkowskiEngine when importable), their
ratio, and the largest difference between the two embeddings (they must agree).
"""

from __future__ import annotations

import argparse

import torch

from cognate.model import sparseconv
from cognate.model.featurizer import Featurizer
from cognate.model.preset import load_preset
from cognate.synth import generate
from cognate.timing import time_interleaved


def time_embed(
    featurizer: Featurizer, matrix, backend: str, repeats: int
) -> tuple[float, torch.Tensor]:
    """Median seconds of one embedding over ``repeats`` calls, and the embedding."""
    out: list[torch.Tensor] = []

    def embed() -> None:
        with torch.no_grad():
            out[:] = [featurizer.embed(matrix, backend)]

    timed = time_interleaved({backend: embed}, repeats, 0.0, threads=torch.get_num_threads())
    return timed.seconds[backend], out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000,5000000")
    parser.add_argument("--preset", default="waco")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kind", default="rmat")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    parser.add_argument("--rows", type=int, default=0, help="rows = cols (0 = nnz / 10)")
    # Once MinkowskiEngine has run, torch ops in the same process ran ~10x slower here
    # (OpenMP runtimes clash, docs/architecture.md, Facts measured here): time torch alone with --backends torch.
    parser.add_argument("--backends", default="torch,minkowski", help="subset to time")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    featurizer = Featurizer(load_preset(args.preset).featurizer).eval()
    wanted = args.backends.split(",")
    backends = ["torch"] if "torch" in wanted else []
    if "minkowski" in wanted and sparseconv.minkowski() is not None:
        backends.append("minkowski")
    if "minkowski" in wanted and "minkowski" not in backends:
        print(f"MinkowskiEngine not importable ({sparseconv.minkowski_error()}): torch only")
    print(f"preset {args.preset}, torch threads {torch.get_num_threads()}, repeats {args.repeats}")
    header = f"{'nnz':>9} {'shape':>17} " + " ".join(f"{b + ' s':>12}" for b in backends)
    print(header + ("   torch/ME   max |diff|" if len(backends) == 2 else ""))
    for nnz in (int(s) for s in args.sizes.split(",")):
        n = args.rows or max(nnz // 10, 16)
        matrix = generate(args.kind, n, n, nnz=nnz, seed=0)
        results = {b: time_embed(featurizer, matrix, b, args.repeats) for b in backends}
        line = f"{matrix.nnz:>9} {f'{n}x{n}':>17} " + " ".join(
            f"{results[b][0]:>12.3f}" for b in backends
        )
        if len(backends) == 2:
            ratio = results["torch"][0] / results["minkowski"][0]
            diff = (results["torch"][1] - results["minkowski"][1]).abs().max().item()
            line += f"   {ratio:>8.2f}   {diff:.2e}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
