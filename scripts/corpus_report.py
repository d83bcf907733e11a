"""What the record store holds, as markdown for docs/benchmarks.md ("The record store").

    python scripts/corpus_report.py --db records.sqlite [--width 64] [--out FILE]

Prints:
- the corpus: matrices per kind x nnz bucket, real vs generated (kinds of generated matrices
  from each corpus set's manifest.csv, else from the file name);
- the store: records per target / op / width / status, matrices per target / op;
- spade, per op, on matrices measured on all 256 configs: the oracle's geomean speedup over
  the base config, how many distinct configs are some matrix's oracle, and the best single
  fixed config (chosen on a train split of the matrices, the evaluation's split) as % of the
  oracle on the held-out test split, overall and on test matrices of >= 100k nnz;
- cpu label noise, where the store holds repeated measurements (the collect protocol's 5%).
"""

from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from cognate.dataset import local_source, portable_source
from cognate.evaluate.baselines import greedy_set
from cognate.store import Store
from cognate.transfer.finetune import split_target

BUCKETS = [(0, 1e4, "< 10k"), (1e4, 1e5, "10k-100k"), (1e5, 1e6, "100k-1M"), (1e6, 1e9, ">= 1M")]


def bucket(nnz: int) -> str:
    return next(label for low, high, label in BUCKETS if low <= nnz < high)


def _manifest_kinds(folder: Path) -> dict[str, str]:
    path = folder / "manifest.csv"
    if not path.is_file():
        return {}
    with path.open() as f:
        return {row["name"]: row["kind"] for row in csv.DictReader(f)}


def kind_of(source: str, name: str, manifests: dict[Path, dict[str, str]]) -> tuple[str, str]:
    """(origin, kind): origin is real or generated."""
    portable = portable_source(source)
    if portable.startswith("shared:"):
        return "real", portable.split("/")[1]  # suitesparse, ngraph, waco
    folder = Path(local_source(portable)).parent
    if folder not in manifests:
        manifests[folder] = _manifest_kinds(folder)
    kind = manifests[folder].get(name)
    if kind is None:  # older sets: <prefix>_<kind>_<shape>
        parts = name.split("_")
        kind = parts[1] if len(parts) > 2 else "other"
    return "generated", kind


def corpus_table(matrices: pd.DataFrame) -> str:
    manifests: dict[Path, dict[str, str]] = {}
    rows = []
    for m in matrices.itertuples():
        origin, kind = kind_of(m.source, m.name, manifests)
        rows.append({"origin": origin, "kind": kind, "bucket": bucket(m.nnz)})
    df = pd.DataFrame(rows)
    table = pd.crosstab([df["origin"], df["kind"]], df["bucket"], margins=True, margins_name="all")
    table = table.reindex(columns=[b for *_, b in BUCKETS if b in table.columns] + ["all"])
    return _markdown(table.reset_index())


def _markdown(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    lines = [head, "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def store_table(frame: pd.DataFrame) -> str:
    counts = (
        frame.groupby(["target", "op", "width", "status"])
        .size()
        .unstack(fill_value=0)
        .reset_index()
    )
    matrices = frame.groupby(["target", "op", "width"])["matrix_sha256"].nunique()
    counts["matrices"] = [
        matrices[(t, o, w)] for t, o, w in counts[["target", "op", "width"]].values
    ]
    return _markdown(counts)


def _geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def spade_section(frame: pd.DataFrame, op: str, width: int, space_size: int = 256) -> list[str]:
    ok = frame[(frame.target == "spade") & (frame.op == op) & (frame.width == width)]
    ok = ok[ok.status == "ok"]
    full = ok.groupby("matrix_sha256").filter(lambda g: len(g) >= space_size)
    if full.empty:
        return [f"spade {op}, width {width}: no matrix measured on all {space_size} configs yet."]
    speedups, oracle_configs, nnz = {}, {}, {}
    for sha, g in full.groupby("matrix_sha256"):
        base = g.loc[g.is_baseline, "runtime_s"]
        if base.empty:
            continue
        s = dict(zip(g.config_hash, base.iloc[0] / g.runtime_s, strict=True))
        speedups[sha] = s
        oracle_configs[sha] = max(s, key=s.get)
        nnz[sha] = int(g.nnz.iloc[0])
    keys = sorted(speedups)
    train, _val, test = split_target(keys, 0.2, 0.25, 0)
    fixed = greedy_set([speedups[k] for k in train], 5)
    lines = [
        f"spade {op}, width {width}: {len(keys)} matrices on all {space_size} configs "
        f"(split: {len(train)} train, {len(test)} test).",
        f"- oracle / base config geomean: {_geomean(max(s.values()) for s in speedups.values()):.3f}x",
        f"- distinct oracle configs: {len(set(oracle_configs.values()))}",
    ]
    for label, subset in (
        ("all test", test),
        (">= 100k nnz test", [k for k in test if nnz[k] >= 1e5]),
    ):
        if not subset or not fixed:
            lines.append(f"- {label}: no matrices")
            continue
        oracle = _geomean(max(speedups[k].values()) for k in subset)
        one = _geomean(speedups[k].get(fixed[0], 1.0) for k in subset)
        five = _geomean(max(speedups[k].get(h, 1.0) for h in fixed) for k in subset)
        lines.append(
            f"- {label} ({len(subset)} matrices): best fixed config {100 * one / oracle:.1f}% "
            f"of the oracle, greedy fixed 5-set {100 * five / oracle:.1f}% (chosen on train)"
        )
    sampled = ok.groupby("matrix_sha256").filter(lambda g: len(g) < space_size)
    return lines + _sampled_lines(sampled, fixed)


def _sampled_lines(sampled: pd.DataFrame, fixed: list[str]) -> list[str]:
    """The fixed configs (chosen on the all-config training matrices) on the matrices measured
    on a sample of the space only (the large ones): as % of the best measured config, which
    is at most the oracle, so each figure is an upper bound on the % of the oracle."""
    matrices = sampled.matrix_sha256.nunique()
    if not matrices:
        return []
    one, five = [], []
    for _sha, g in sampled.groupby("matrix_sha256"):
        runtime = dict(zip(g.config_hash, g.runtime_s, strict=True))
        fastest = min(runtime.values())
        if fixed and fixed[0] in runtime:
            one.append(fastest / runtime[fixed[0]])
        if fixed and all(h in runtime for h in fixed):
            five.append(fastest / min(runtime[h] for h in fixed))
    line = f"- sampled matrices (not on all configs, {matrices}): "
    if not one:
        return [line + "the best fixed config was not measured on any of them"]
    line += (
        f"best fixed config {100 * _geomean(one):.1f}% of the best measured config on the "
        f"{len(one)} where it was measured"
    )
    if five:
        line += f", greedy fixed 5-set {100 * _geomean(five):.1f}% on {len(five)}"
    return [line + " (upper bounds on the % of the oracle)"]


def noise_section(frame: pd.DataFrame, repeats: pd.DataFrame) -> list[str]:
    """Agreement of the collect protocol's repeated cpu timings (a fixed 5% of each matrix's
    configs timed again once its sample is done; the store keeps them in ``repeats``), on
    pairs whose both timings were ok and taken on a quiet machine. Pooled over matrices,
    runtimes rank well by the matrices' sizes alone, so the Spearman that says whether labels
    can rank configs is the one of speedups over each matrix's baseline."""
    from scipy.stats import spearmanr

    cpu = repeats[(repeats.target == "cpu")] if not repeats.empty else repeats
    if cpu.empty:
        return ["cpu label noise: the store holds no repeated measurements."]
    # quiet: the load was read and was not busy, for the repeat and for the first timing
    ok = cpu[(cpu.status == "ok") & (cpu.repeat_status == "ok") & (cpu.noisy == 0)]
    base = frame[(frame.target == "cpu") & frame.is_baseline & (frame.status == "ok")]
    key = ["matrix_sha256", "op", "width", "host"]
    base = base[[*key, "runtime_s"]].rename(columns={"runtime_s": "base_s"})
    quiet = frame.noisy.astype("boolean").eq(False).fillna(False)  # NA: load not read
    first_quiet = frame[(frame.target == "cpu") & quiet]
    pairs = ok.merge(base, on=key).merge(
        first_quiet[[*key, "config_hash"]], on=[*key, "config_hash"]
    )
    lines = []
    for op, group in pairs.groupby("op"):
        if len(group) < 3:
            lines.append(
                f"cpu {op} label noise: {len(group)} quiet repeated pairs, too few to say."
            )
            continue
        rho_time = spearmanr(group.first_s, group.repeat_s).statistic
        rho_speedup = spearmanr(
            group.base_s / group.first_s, group.base_s / group.repeat_s
        ).statistic
        spread = (group.first_s - group.repeat_s).abs() / ((group.first_s + group.repeat_s) / 2)
        lines.append(
            f"cpu {op} label noise: {len(group)} quiet repeated (matrix, config) pairs over "
            f"{group.matrix_sha256.nunique()} matrices; Spearman of speedups over the baseline "
            f"{rho_speedup:.3f} (of runtimes {rho_time:.3f}); median relative difference "
            f"{100 * spread.median():.1f}%, 90th percentile {100 * spread.quantile(0.9):.1f}%"
        )
    skipped = len(cpu) - len(pairs)
    if skipped:
        lines.append(
            f"({skipped} repeated pairs left out: not ok, timed on a busy machine or with the "
            "load unread, or their matrix has no ok baseline)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with Store(args.db, readonly=True) as store:
        frame = store.frame()
        matrices = store.matrices()
        repeats = store.repeats()
    lines = ["### Corpus (matrices in the store)", "", corpus_table(matrices), ""]
    lines += ["### Records", "", store_table(frame), ""]
    for op in ("spmm", "sddmm"):
        lines += spade_section(frame, op, args.width) + [""]
    lines += noise_section(frame, repeats)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    np.seterr(divide="ignore")
    main()
