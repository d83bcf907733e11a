"""Benchmark the search of ``cognate tune`` on the cpu target: where the time goes.

For a generated matrix (default 1M nonzeros, uniform random) and N sampled cpu candidates
(default 20k), prints the medians over --repeats of: drawing the candidates, featurizing
the matrix (once), encoding the configs, scoring them, ranking, and the layout check of the
top-k, next to the wall time of measuring ONE config (the baseline) with the cpu runner in
the same run (compile + pack + check against scipy + timed repeats). The point: scoring 20k
configs costs about as much as measuring a handful.

    python scripts/bench_tune.py [--nnz 1000000] [--candidates 20000] [--model PATH] [--threads N]

Without --model the shipped cpu-spmm model is used if present, else an untrained model of
--preset (the weights do not change the time).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp


def random_matrix(rows: int, nnz: int, seed: int):
    from cognate.matrix import Matrix, canonicalize

    rng = np.random.default_rng(seed)
    r = rng.integers(0, rows, size=nnz)
    c = rng.integers(0, rows, size=nnz)
    a = sp.coo_matrix((np.ones(nnz, dtype=np.float32), (r, c)), shape=(rows, rows))
    return Matrix(f"uniform-{rows}-{nnz}", canonicalize(a), source="bench_tune")


def load(model: Path | None, preset: str, space):
    from cognate.errors import CognateError
    from cognate.model.cost_model import CostModel
    from cognate.model.encoding import make_encoder
    from cognate.model.learned import LearnedModel
    from cognate.model.predictor import RankingNetwork
    from cognate.model.preset import load_preset
    from cognate.model.shipped import shipped_model_path

    path = model or shipped_model_path("cpu", space.op)
    why = "no model file"
    if path.is_file():
        try:
            return CostModel.load(path, space), str(path)
        except CognateError as err:  # e.g. trained for an older version of the space
            if model is not None:
                raise
            why = str(err)
    encoder = make_encoder(space)
    cost = RankingNetwork(load_preset(preset), encoder.dim).eval()
    name = f"untrained {preset} (shipped model unusable: {why})"
    return LearnedModel(cost, encoder, {}, space, Path(f"untrained-{preset}")), name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--nnz", type=int, default=1_000_000)
    parser.add_argument("--candidates", type=int, default=20_000)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--preset", default="waco")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from cognate.search import rank, runnable_top
    from cognate.targets import get_target

    target = get_target("cpu")
    space = target.space(args.op)
    matrix = random_matrix(args.rows, args.nnz, seed=0)
    loaded, model_name = load(args.model, args.preset, space)
    print(
        f"matrix {matrix.name}: {matrix.shape[0]}x{matrix.shape[1]}, {matrix.nnz} nnz; "
        f"op {args.op}, width {args.width}; model {model_name}; "
        f"torch threads {torch.get_num_threads()}"
    )

    phases = (
        "candidates_s",
        "featurize_s",
        "encode_s",
        "score_s",
        "rank_s",
        "filter_s",
        "search_s",
    )
    samples: dict[str, list[float]] = {p: [] for p in phases}
    n_scored = 0
    for _ in range(args.repeats):
        ranked, timings = rank(loaded, space, matrix, args.width, args.candidates, seed=0)
        start = time.perf_counter()
        runnable_top(ranked, matrix, args.op, args.width, args.top_k, "cpu")
        timings.filter_s = time.perf_counter() - start
        n_scored = len(ranked)
        for phase in phases:
            samples[phase].append(getattr(timings, phase))
    med = {p: statistics.median(v) for p, v in samples.items()}

    runner = target.runner()
    start = time.perf_counter()
    (one,) = runner.measure(matrix, args.op, args.width, [space.baseline(matrix.shape)])
    measure_wall = time.perf_counter() - start
    runner.close()

    print(f"search over {n_scored} candidates, median of {args.repeats} (seconds):")
    for phase in phases[:-1]:
        print(f"  {phase[:-2]:<11} {med[phase]:8.3f}")
    core = med["featurize_s"] + med["encode_s"] + med["score_s"] + med["rank_s"]
    print(f"  featurize + encode + score + rank, summed = {core:.3f} s")
    # featurize runs beside drawing and encoding the candidates: the wall is what counts.
    print(f"  candidates + featurize + encode + score + rank, wall = {med['search_s']:.3f} s")
    print(
        f"  whole search (wall + filter)              = {med['search_s'] + med['filter_s']:.3f} s"
    )
    runtime = f"{one.runtime_s * 1e3:.3f} ms" if one.runtime_s else one.status
    print(
        f"measuring ONE config (baseline) on the cpu: {measure_wall:.3f} s wall "
        f"(kernel runtime {runtime}); "
        f"search / one measurement = {(med['search_s'] + med['filter_s']) / measure_wall:.2f}"
    )


if __name__ == "__main__":
    main()
