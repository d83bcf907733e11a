"""Space audit of the spade target per dense width: where the oracle sits per knob.

Simulates every config of an extended spade SpMM space on a sample of real matrices at each
width N, on the records' machine (configs/spade.yaml), and prints per width: for each knob
value the share of matrices whose oracle takes it, the best config with it as a share of
the oracle (geomean) and the share within 5% of it; and the best single fixed config's
share of the oracle. The extended space adds the row panels that fit a few output rows in
the vector registers at every width (rp x N x 4 bytes against 64 x 64 B = 4 KB of
registers: rp = 64 / 32 / 16 / 8 / 4 at N = 16 / 32 / 64 / 128 / 256) to the shipped
rp values.

    python scripts/spade_width_audit.py --sample 10 --workers 2 --csv audit.csv
    python scripts/spade_width_audit.py --from-csv audit.csv      # the tables only
    python scripts/spade_width_audit.py --db STORE --op sddmm     # from collected records
    python scripts/spade_width_audit.py --db STORE --target spade-calibrated

With ``--db`` the tables come from a record store's spade records of the current space
(matrices measured on every config, at every width the store holds) instead of new
simulations; ``--shipped-models`` adds, per width, the top-1 of the shipped spade model
(data/models, trained on the space before rp 4 / 8 / 32 existed) ranking the whole space.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from cognate.errors import CognateError

WIDTHS = (16, 32, 64, 128, 256)
KNOBS = {
    "rp": [4, 8, 16, 32, 64, 256, 1024],
    "cp": [64, 256, 1024, "all"],
    "barrier": [False, True],
    "bypass": [False, True],
    "split": [1, 2],
    "sched": ["static", "dynamic"],
}
SHIPPED_RP = (16, 64, 256, 1024)
RECORDS = Path(__file__).resolve().parent.parent / "data" / "records" / "spade-spmm.parquet"


def sample_matrices(count: int, low: int, high: int) -> list[str]:
    """``count`` record matrices with low <= nnz <= high, spread evenly over nnz."""
    records = pd.read_parquet(RECORDS, columns=["matrix", "source", "nnz"]).drop_duplicates(
        "matrix"
    )
    pool = records[(records.nnz >= low) & (records.nnz <= high)]
    pool = pool[pool.source.str.startswith("shared:")].sort_values(["nnz", "matrix"])
    picks = np.linspace(0, len(pool) - 1, num=min(count, len(pool))).round().astype(int)
    return pool.iloc[np.unique(picks)].source.str.removeprefix("shared:").tolist()


def audit_one(relative: str) -> list[dict]:
    """Every extended config at every width on one matrix (one process)."""
    from cognate.formats.read import load_matrix
    from cognate.paths import shared_dir
    from cognate.targets.spade.simulator import Schedule, load_machine, simulate, tile

    matrix = load_matrix(shared_dir() / relative)
    machine = load_machine()
    rows = []
    tilings = {}
    for values in itertools.product(*KNOBS.values()):
        knobs = dict(zip(KNOBS, values, strict=True))
        cp = None if knobs["cp"] == "all" else knobs["cp"]
        key = (knobs["rp"], cp)
        if key not in tilings:
            tilings[key] = tile(matrix.csr, *key)
        sched = Schedule(
            knobs["rp"],
            cp,
            knobs["barrier"],
            knobs["bypass"],
            knobs["split"],
            knobs["sched"] == "dynamic",
        )
        for width in WIDTHS:
            seconds = simulate(matrix.csr, "spmm", width, sched, machine, tilings[key]).seconds
            rows.append(
                {
                    "matrix": matrix.name,
                    "nnz": matrix.nnz,
                    "width": width,
                    **knobs,
                    "seconds": seconds,
                }
            )
    return rows


def store_frame(db: Path, op: str, target: str = "spade") -> pd.DataFrame:
    """The store's ok records of a spade-like ``target`` and ``op`` on matrices measured on
    every config of the current space at a width, as the frame ``audit_one`` builds (one
    row per run)."""
    from cognate.records import record_frame
    from cognate.targets import get_target

    space = get_target(target).space(op)
    frame = record_frame(db, space)
    frame = frame[frame.status == "ok"]
    size = len(space.all_configs())
    complete = frame.groupby(["matrix_sha256", "width"]).config_hash.transform("nunique")
    frame = frame[complete == size]
    if frame.empty:
        raise CognateError(f"{db}: no {target} {op} matrix measured on all {size} configs")
    knobs = pd.DataFrame([json.loads(c) for c in frame.config], index=frame.index)
    return pd.concat(
        [frame[["matrix", "nnz", "width"]], knobs[list(KNOBS)], frame.runtime_s.rename("seconds")],
        axis=1,
    )


def leave_one_out_share(group: pd.DataFrame) -> float:
    """Geomean share of the oracle of the config chosen on the other matrices (the best
    geomean share there), on each matrix in turn: a fixed config that is not in-sample."""
    shares = group.pivot_table(index="matrix", columns="config", values="share")
    logs = np.log(shares)
    total = logs.sum()
    picked = [logs.loc[m, (total - logs.loc[m]).idxmax()] for m in shares.index]
    return float(np.exp(np.mean(picked)))


def tables(frame: pd.DataFrame, op: str = "spmm", target: str = "spade") -> str:
    """The per-width audit as markdown."""
    frame = frame.copy()
    for knob in KNOBS:  # compare as text: a CSV reads cp back as strings
        frame[knob] = frame[knob].astype(str)
    frame["config"] = frame[list(KNOBS)].apply(lambda r: json.dumps(r.tolist()), axis=1)
    out = []
    for width, group in frame.groupby("width"):
        oracle = group.groupby("matrix").seconds.min()
        ratio = oracle.reindex(group.matrix).to_numpy() / group.seconds.to_numpy()
        group = group.assign(share=ratio)
        matrices = group.matrix.nunique()
        out.append(
            f"#### {target} {op}, N = {width}: {matrices} matrices, {group.config.nunique()} configs\n"
        )
        out.append(
            "| knob | value | oracle takes it | best config with it, % of oracle | within 5% |"
        )
        out.append("|---|---|---|---|---|")
        for knob, values in KNOBS.items():
            for value in values:
                best = group[group[knob] == str(value)].groupby("matrix").share.max()
                takes = (best >= 0.999).mean()
                geo = float(np.exp(np.log(best).mean()))
                mark = "" if knob != "rp" or value in SHIPPED_RP else " (new)"
                out.append(
                    f"| {knob} | {value}{mark} | {takes:.0%} | {geo:.1%} | {(best >= 0.95).mean():.0%} |"
                )
        per_config = group.groupby("config").share.apply(lambda s: float(np.exp(np.log(s).mean())))
        best_config = per_config.idxmax()
        shipped = group[group.rp.isin([str(v) for v in SHIPPED_RP])]
        shipped_oracle = shipped.groupby("matrix").seconds.min()
        gain = float(np.exp(np.log(shipped_oracle / oracle).mean()))
        shipped_share = shipped_oracle.reindex(shipped.matrix).to_numpy() / shipped.seconds
        shipped_best = shipped.assign(share=shipped_share.to_numpy()).groupby("config").share
        shipped_best = shipped_best.apply(lambda s: float(np.exp(np.log(s).mean())))
        out.append("")
        out.append(
            f"Best fixed config {_knobs(best_config)}: {per_config.max():.1%} of the oracle "
            f"(geomean). The new rp values speed the oracle up {gain:.3f}x over the shipped "
            f"space's oracle. In the shipped space (rp in {list(SHIPPED_RP)}) the best fixed "
            f"config {_knobs(shipped_best.idxmax())} reaches {shipped_best.max():.1%} of "
            f"that space's oracle. Chosen on the other matrices (leave one out), the best "
            f"fixed config reaches {leave_one_out_share(group):.1%} of the oracle; "
            f"{_oracle_configs(group)} distinct configs are some matrix's oracle. "
            f"{_fixed_spread_words(group, best_config)}"
        )
        out.append("")
    everywhere = frame.assign(share=_shares(frame)).groupby("config").share
    everywhere = everywhere.apply(lambda s: float(np.exp(np.log(s).mean())))
    out.append(
        f"One config for every width and matrix: {_knobs(everywhere.idxmax())}, "
        f"{everywhere.max():.1%} of the per-width oracle (geomean over matrices and widths)."
    )
    return "\n".join(out)


def _fixed_spread_words(group: pd.DataFrame, config: str) -> str:
    """How far the best fixed config is from each matrix's oracle: whether the landscape
    depends on the matrix."""
    shares = group[group.config == config].set_index("matrix").share
    return (
        f"That config is within 5% of the oracle on {(shares >= 0.95).mean():.0%} of the "
        f"matrices and below 80% on {(shares < 0.8).mean():.0%}; its worst is "
        f"{shares.min():.1%} ({shares.idxmin()})."
    )


def _oracle_configs(group: pd.DataFrame) -> int:
    return group.loc[group.groupby("matrix").seconds.idxmin(), "config"].nunique()


def shipped_model_lines(db: Path, op: str) -> list[str]:
    """Per width: the shipped model's first pick (``cognate tune``'s order: its portfolio,
    then its scores) over the whole space, as a share of the oracle, and how often it
    picks an rp value the model was not trained on."""
    from cognate.model.cost_model import CostModel, shipped_model_path
    from cognate.records import load_runs
    from cognate.targets import get_target

    space = get_target("spade").space(op)
    model = CostModel.load(shipped_model_path("spade", op), space)
    size = len(space.all_configs())
    lines = []
    by_width: dict[int, list[tuple[float, bool]]] = {}
    for run in load_runs(db, space):
        if len(run.configs) != size:
            continue
        order = model.order(run.configs, model.predict(run.matrix, run.configs, run.width))
        pick = run.configs[int(order[0])]
        share = float(run.runtimes.min() / run.runtimes[int(order[0])])
        by_width.setdefault(run.width, []).append((share, pick["rp"] not in SHIPPED_RP))
    for width, picks in sorted(by_width.items()):
        shares = np.array([s for s, _ in picks])
        new_rp = np.mean([n for _, n in picks])
        lines.append(
            f"- N = {width}: shipped {op} model's top-1 {np.exp(np.log(shares).mean()):.1%} of "
            f"the oracle (geomean over {len(picks)} matrices); picks a new rp value on "
            f"{new_rp:.0%} of them"
        )
    return lines


def _knobs(config: str) -> dict:
    return dict(zip(KNOBS, json.loads(config), strict=True))


def _shares(frame: pd.DataFrame) -> np.ndarray:
    """Each run's time over the fastest of its (matrix, width)."""
    oracle = frame.groupby(["matrix", "width"]).seconds.transform("min")
    return (oracle / frame.seconds).to_numpy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=10)
    parser.add_argument(
        "--nnz", type=int, nargs=2, default=(5_000, 40_000), metavar=("LOW", "HIGH")
    )
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--csv", type=Path)
    parser.add_argument("--from-csv", type=Path)
    parser.add_argument("--db", type=Path, help="a record store: tables from its records")
    parser.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    parser.add_argument(
        "--target", default="spade", help="with --db: a spade-like target (spade-calibrated)"
    )
    parser.add_argument("--shipped-models", action="store_true")
    args = parser.parse_args(argv)
    if args.db:
        print(tables(store_frame(args.db, args.op, args.target), args.op, args.target))
        if args.shipped_models:
            if args.target != "spade":
                raise CognateError("--shipped-models: the shipped models are the spade target's")
            print("\n".join(["", *shipped_model_lines(args.db, args.op)]))
        return 0
    if args.from_csv:
        frame = pd.read_csv(args.from_csv)
    else:
        names = sample_matrices(args.sample, *args.nnz)
        print(f"{len(names)} matrices: {', '.join(Path(n).name for n in names)}", flush=True)
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            frame = pd.DataFrame([row for rows in pool.map(audit_one, names) for row in rows])
        if args.csv:
            frame.to_csv(args.csv, index=False)
    print(tables(frame))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CognateError as exc:  # bad input: one line, no traceback
        sys.exit(f"error: {exc}")
