"""How the best cpu schedule's kernel family changes with the dense width, from the records.

    .venv/bin/python scripts/report_families.py --db STORE --op spmm --widths 32 128 512

Per (width, host) over the matrices whose records hold the baseline and at least one config
of every listed family (default: the locality families reordered and panel), from the stored
medians alone (nothing is timed here):

- oracle / baseline: the fastest measured config per matrix over the baseline (geomean);
- per family: on how many matrices its best config is the fastest overall, and its best
  over the baseline (geomean);
- the best fixed config chosen leave-one-out (highest geomean speedup over the other
  matrices, among configs measured on all of them) over the baseline, and oracle / fixed.

Runtimes are compared only within one host (a label is a speedup over the same host's
baseline). The oracle picks from the timings it is scored on: an upper bound for a tuner.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cognate.records import record_frame  # noqa: E402
from cognate.stats import geomean  # noqa: E402
from cognate.targets.cpu.families import family_of  # noqa: E402
from cognate.targets.cpu.space import make_space  # noqa: E402


def leave_one_out_fixed(speedups: pd.DataFrame) -> pd.Series:
    """Per matrix (row), the speedup of the config (column) with the best geomean over the
    other matrices; configs with a missing value on any matrix are not candidates."""
    full = speedups.dropna(axis=1)
    logs = np.log(full)
    total = logs.sum(axis=0)
    picks = {}
    for matrix in full.index:
        best = (total - logs.loc[matrix]).idxmax()
        picks[matrix] = full.at[matrix, best]
    return pd.Series(picks)


def report(frame: pd.DataFrame, families: list[str], min_matrices: int) -> None:
    frame = frame.assign(family=frame["config"].map(lambda c: family_of(json.loads(c))))
    for (width, host), part in frame.groupby(["width", "host"], sort=True):
        base = part[part["is_baseline"].astype(bool)].groupby("matrix")["runtime_s"].min()
        has = part.groupby("matrix")["family"].agg(set)
        keep = [m for m in base.index if all(f in has[m] for f in families)]
        if len(keep) < min_matrices:
            continue
        part = part[part["matrix"].isin(keep)]
        speed = base.loc[part["matrix"]].to_numpy() / part["runtime_s"].to_numpy()
        part = part.assign(speedup=speed)
        oracle = part.groupby("matrix")["speedup"].max()
        table = part.pivot_table(index="matrix", columns="config_hash", values="speedup")
        fixed = leave_one_out_fixed(table)
        print(
            f"N={width} host {host}: {len(keep)} matrices; oracle/baseline"
            f" {geomean(oracle):.3f}x; leave-one-out fixed/baseline {geomean(fixed):.3f}x;"
            f" oracle/fixed {geomean(oracle / fixed.loc[oracle.index]):.3f}x"
        )
        winners = part.loc[part.groupby("matrix")["speedup"].idxmax(), "family"]
        for family, group in part.groupby("family"):
            best = group.groupby("matrix")["speedup"].max()
            wins = int((winners == family).sum())
            print(
                f"    {family:9s} fastest on {wins:3d}; its best/baseline {geomean(best):.3f}x"
                f" over {len(best)} (max {best.max():.2f}x)"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--op", choices=["spmm", "sddmm"], default="spmm")
    parser.add_argument("--widths", type=int, nargs="*", default=None)
    parser.add_argument("--families", nargs="*", default=["reordered", "panel"])
    parser.add_argument("--min-matrices", type=int, default=5)
    args = parser.parse_args(argv)
    frame = record_frame(args.db, make_space(args.op))
    if args.widths:
        frame = frame[frame["width"].isin(args.widths)]
    report(frame, args.families, args.min_matrices)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
