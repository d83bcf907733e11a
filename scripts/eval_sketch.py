"""Ranking quality of the row-band sketch featurizer against the full one, paired.

The same shipped model ranks the measured configs of each held-out matrix (the model's
provenance ``test`` split) twice: embedded from the whole pattern, and from its row-band
sketch keeping ``--fraction`` of the nonzeros (a 10^8-nnz matrix's sketch keeps 1.5%).
Prints, per width and overall, the geomean speedup over the baseline config of the top-1
and best-of-5 picks and of the oracle, and top-1 / oracle as a share.

    python scripts/eval_sketch.py --target cpu --op spmm --fraction 0.015 --min-nnz 100000
"""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd
import torch

from cognate.model.checkpoint import load_checkpoint
from cognate.model.featurizer import SKETCH_BANDS, sketch_points
from cognate.model.fit import evaluate
from cognate.paths import data_dir
from cognate.records import load_record_matrix, runs_per_host
from cognate.targets import get_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--op", default="spmm")
    parser.add_argument("--fraction", type=float, default=0.015)
    parser.add_argument("--bands", type=int, default=SKETCH_BANDS)
    parser.add_argument("--min-nnz", type=int, default=100_000)
    parser.add_argument("--split", default="test", choices=("test", "validation"))
    args = parser.parse_args()
    space = get_target(args.target).space(args.op)
    models = data_dir() / "models"
    model, encoder, _ = load_checkpoint(models / f"{args.target}-{args.op}.safetensors", space)
    model.eval()
    provenance = json.loads((models / f"{args.target}-{args.op}.provenance.json").read_text())
    held_out = set(provenance["matrices"][args.split])
    frame = pd.read_parquet(data_dir() / "records" / f"{args.target}-{args.op}.parquet")
    frame = frame[frame["matrix"].isin(held_out) & (frame["nnz"] >= args.min_nnz)]
    frame = frame[frame["space_version"].map(space.accepts_version)]
    runs = runs_per_host(frame, space, load_record_matrix)
    for run in runs:
        run.features = encoder.encode(run.configs, run.matrix.shape, run.width)
    featurizer = model.featurizer
    full, sketch = {}, {}
    with torch.no_grad():
        for run in runs:
            if run.key in full:
                continue
            m = run.matrix
            full[run.key] = featurizer.embed(m)
            points = sketch_points(m, max(1, int(m.nnz * args.fraction)), args.bands)
            sketch[run.key] = featurizer(points, featurizer.scalars(m))
    names = sorted({r.matrix.name for r in runs})
    print(f"{len(names)} held-out matrices ({args.split}, nnz >= {args.min_nnz}), {len(runs)} runs")
    print(
        f"{args.target}-{args.op}: sketch fraction {args.fraction}, {args.bands} bands; host ISA: AVX-512, AMD Zen 4 (records' host)"
    )
    groups = {"all": runs} | {
        f"N={w}": [r for r in runs if r.width == w] for w in sorted({r.width for r in runs})
    }
    print(
        f"{'runs':>10} {'n':>4} {'top1 full':>10} {'top1 sk':>8} {'top5 full':>10} {'top5 sk':>8} {'oracle':>7} {'t1/or full':>11} {'t1/or sk':>9} {'pairs full':>11} {'pairs sk':>9}"
    )
    for label, group in groups.items():
        a = evaluate(model, group, full)
        b = evaluate(model, group, sketch)
        share = lambda m: 100 * m["top1"] / m["oracle"]  # noqa: E731
        print(
            f"{label:>10} {len(group):>4} {a['top1']:>10.3f} {b['top1']:>8.3f} {a['top5']:>10.3f}"
            f" {b['top5']:>8.3f} {a['oracle']:>7.3f} {share(a):>10.1f}% {share(b):>8.1f}%"
            ""
            f" {a['pairwise_accuracy']:>11.3f} {b['pairwise_accuracy']:>9.3f}"
        )
    per = []
    for run in runs:
        if run.baseline is None:
            continue
        best = run.runtimes.min()
        score = model.score
        per.append(
            (
                run.matrix.name,
                run.width,
                best
                / run.runtimes[int(torch.argmin(score(full[run.key], run.width, run.features)))],
                best
                / run.runtimes[int(torch.argmin(score(sketch[run.key], run.width, run.features)))],
            )
        )
    same = sum(1 for _, _, x, y in per if math.isclose(x, y))
    print(f"same top-1 pick share of oracle in {same} of {len(per)} runs")


if __name__ == "__main__":
    main()
