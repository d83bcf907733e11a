"""A stratified sample of the spade record matrices for re-collection at several widths.

The published spade records (data/records/spade-spmm.parquet, width 64, measured on every
config) span six kinds of matrix: the shared ngraph, SuiteSparse and WACO files and the
generated base, extra and scale corpus sets. This picks, per kind, matrices spread evenly
over nnz (below --max-nnz), so a re-collection that cannot afford the corpus still covers
every kind and the nnz range. Generated matrices are taken only where their file is in
the corpus folder (regenerating the scale set costs minutes per file), so the pick depends
on which generated files exist: the sample the per-width records were collected on is
docs/evaluation/widths-matrices.txt.

    python scripts/spade_width_sample.py > matrices.txt   # one path per line
    python scripts/spade_width_sample.py --counts ngraph=80,suitesparse=24,waco=2,base=8,extra=8,scale=16

The second is the sample of the spade-calibrated records (docs/evaluation/report.md; the
list is docs/evaluation/calibrated-matrices.txt).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from cognate.paths import corpus_dir, shared_dir

RECORDS = Path(__file__).resolve().parent.parent / "data" / "records" / "spade-spmm.parquet"
# matrices per kind: ngraph is most of the shared files, the corpus sets most of the nnz
PER_KIND = {"ngraph": 24, "suitesparse": 8, "waco": 1, "base": 1, "extra": 1, "scale": 1}


def kind_of(source: str) -> str:
    """ngraph / suitesparse / waco for shared files, the set's name for generated ones."""
    if source.startswith("shared:"):
        return source.split("/")[1]
    return source.removeprefix("corpus:").split("/")[0]


def path_of(source: str) -> Path:
    if source.startswith("shared:"):
        return shared_dir() / source.removeprefix("shared:")
    return corpus_dir() / source.removeprefix("corpus:")


def sample(max_nnz: int, per_kind: dict[str, int] = PER_KIND) -> pd.DataFrame:
    """Per kind, ``per_kind`` matrices measured on all configs at width 64, evenly by nnz."""
    records = pd.read_parquet(RECORDS, columns=["matrix", "source", "nnz", "width"])
    records = records[records.width == 64]
    counts = records.groupby("source").size()
    pool = records.drop_duplicates("source").set_index("source")
    pool = pool[counts.reindex(pool.index) == counts.max()].reset_index()
    pool = pool[(pool.nnz <= max_nnz) & pool.source.map(lambda s: path_of(s).is_file())]
    pool["kind"] = pool.source.map(kind_of)
    picks = []
    for kind, group in pool.sort_values(["nnz", "matrix"]).groupby("kind"):
        count = min(per_kind.get(kind, 0), len(group))
        index = np.unique(np.linspace(0, len(group) - 1, num=count).round().astype(int))
        picks.append(group.iloc[index])
    return pd.concat(picks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-nnz", type=int, default=140_000)
    parser.add_argument(
        "--counts",
        default=",".join(f"{k}={v}" for k, v in PER_KIND.items()),
        help="matrices per kind, KIND=N,... (default %(default)s)",
    )
    args = parser.parse_args()
    per_kind = {k: int(v) for k, v in (item.split("=") for item in args.counts.split(","))}
    chosen = sample(args.max_nnz, per_kind)
    for source in chosen.source:
        print(path_of(source))
    summary = chosen.groupby("kind").nnz.agg(["size", "min", "max", "sum"])
    print(summary.to_string(), f"\ntotal nnz {chosen.nnz.sum():,}", file=__import__("sys").stderr)


if __name__ == "__main__":
    main()
