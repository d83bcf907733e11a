"""What the record store holds, as markdown for docs/benchmarks.md ("The record store").

    python scripts/corpus_report.py --db records.sqlite [--width 64] [--out FILE]
        [--space-audit] [--fixed-k] [--only SECTION ...]

Prints:
- the corpus: matrices per kind x nnz bucket, real vs generated (kinds of generated matrices
  from each corpus set's manifest.csv, else from the file name);
- the store: records per target / op / width / status, matrices per target / op;
- spade, per op, on matrices measured on all 256 configs: the oracle's geomean speedup over
  the base config, how many distinct configs are some matrix's oracle, and the best single
  fixed config (chosen on a train split of the matrices, the evaluation's split) as % of the
  oracle on the held-out test split, overall and on test matrices of >= 100k nnz;
- cpu label noise, where the store holds repeated measurements (the collect protocol's 5%),
  pooled and among competitive configs (0.5-2x the baseline), and across hosts (the same
  config timed on two hosts, each speedup over its own host's baseline);
- ``--space-audit`` (spade, per op, docs/evaluation/space-audit.md): per knob, the share of
  matrices whose oracle takes each value, whether that value is an edge of the knob's range,
  and the best config with that value as % of the oracle;
- ``--fixed-k`` (spade, per op): the K-matched lookup of ``cognate evaluate`` (fixed-K) on the
  evaluation's split and draws (split seed 0, seeds 0..4), computed from the store alone.

The space audit lives here, not in ``cognate evaluate``: it needs only the store (no matrix
file, no model) and describes the space and its records, which hold for every evaluation.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np
import pandas as pd

from cognate.dataset import local_source, portable_source
from cognate.model.fixed_set import greedy_set
from cognate.stats import bootstrap_ci, geomean, mean_of_geomeans, mean_of_ratio
from cognate.store import Store
from cognate.targets import get_target
from cognate.transfer.finetune import split_target
from cognate.transfer.select import pick_random

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
        f"- oracle / base config geomean: {geomean(max(s.values()) for s in speedups.values()):.3f}x",
        f"- distinct oracle configs: {len(set(oracle_configs.values()))}",
    ]
    for label, subset in (
        ("all test", test),
        (">= 100k nnz test", [k for k in test if nnz[k] >= 1e5]),
    ):
        if not subset or not fixed:
            lines.append(f"- {label}: no matrices")
            continue
        oracle = geomean(max(speedups[k].values()) for k in subset)
        one = geomean(speedups[k].get(fixed[0], 1.0) for k in subset)
        five = geomean(max(speedups[k].get(h, 1.0) for h in fixed) for k in subset)
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
        f"best fixed config {100 * geomean(one):.1f}% of the best measured config on the "
        f"{len(one)} where it was measured"
    )
    if five:
        line += f", greedy fixed 5-set {100 * geomean(five):.1f}% on {len(five)}"
    return [line + " (upper bounds on the % of the oracle)"]


COMPETITIVE = (0.5, 2.0)  # speedup over the baseline: the configs a tuner chooses between


def _spearman_lines(label: str, a: pd.Series, b: pd.Series, matrices: int) -> str:
    """Spearman of two label sets (speedups), pooled and among competitive configs."""
    from scipy.stats import spearmanr

    mean = np.sqrt(a * b)  # both timings decide whether the pair is competitive
    close = mean.between(*COMPETITIVE)
    parts = [f"{label}: {len(a)} pairs over {matrices} matrices; Spearman of speedups"]
    parts.append(f"pooled {spearmanr(a, b).statistic:.3f}")
    if close.sum() >= 3:
        parts.append(
            f"competitive (0.5-2x the baseline, {int(close.sum())} pairs) "
            f"{spearmanr(a[close], b[close]).statistic:.3f}"
        )
    spread = (a - b).abs() / ((a + b) / 2)
    return (
        f"{parts[0]} {', '.join(parts[1:])}; median relative difference "
        f"{100 * spread.median():.1f}%, 90th percentile {100 * spread.quantile(0.9):.1f}%"
    )


def noise_section(frame: pd.DataFrame, repeats: pd.DataFrame) -> list[str]:
    """Agreement of cpu labels (speedups over the same host's baseline for the same matrix):

    - repeats: the collect protocol's second timing of a fixed 5% of each matrix's configs,
      on pairs whose both timings were ok and taken on a quiet machine;
    - across hosts: the same (matrix, width, config) ok on two hosts.

    Each pooled and among competitive configs (0.5-2x the baseline): pooled over configs,
    labels rank well by how bad the worst configs are, while a tuner chooses among the
    competitive ones."""
    cpu_frame = frame[(frame.target == "cpu") & (frame.status == "ok")]
    key = ["matrix_sha256", "op", "width", "host"]
    base = cpu_frame[cpu_frame.is_baseline.astype(bool)][[*key, "runtime_s"]]
    base = base.rename(columns={"runtime_s": "base_s"})
    lines = _repeat_noise(frame, repeats, base, key)
    return lines + _host_noise(cpu_frame, base, key)


def _repeat_noise(
    frame: pd.DataFrame, repeats: pd.DataFrame, base: pd.DataFrame, key: list[str]
) -> list[str]:
    cpu = repeats[(repeats.target == "cpu")] if not repeats.empty else repeats
    if cpu.empty:
        return ["cpu label noise: the store holds no repeated measurements."]
    # quiet: the load was read and was not busy, for the repeat and for the first timing
    ok = cpu[(cpu.status == "ok") & (cpu.repeat_status == "ok") & (cpu.noisy == 0)]
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
        first, repeat = group.base_s / group.first_s, group.base_s / group.repeat_s
        lines.append(
            _spearman_lines(
                f"cpu {op} label noise, repeats on one host (quiet)",
                first.reset_index(drop=True),
                repeat.reset_index(drop=True),
                group.matrix_sha256.nunique(),
            )
        )
    skipped = len(cpu) - len(pairs)
    if skipped:
        lines.append(
            f"({skipped} repeated pairs left out: not ok, timed on a busy machine or with the "
            "load unread, or their matrix has no ok baseline)"
        )
    return lines


def _host_noise(cpu: pd.DataFrame, base: pd.DataFrame, key: list[str]) -> list[str]:
    """The same config on two hosts, each a speedup over its own host's baseline."""
    hosts = sorted(cpu.host.unique())
    if len(hosts) < 2:
        return [f"cpu label noise across hosts: records of {len(hosts)} host(s) only."]
    labelled = cpu.merge(base, on=key)
    labelled = labelled.assign(speedup=labelled.base_s / labelled.runtime_s)
    cols = ["matrix_sha256", "op", "width", "config_hash"]
    lines = []
    for a, b in [(a, b) for i, a in enumerate(hosts) for b in hosts[i + 1 :]]:
        pair = labelled[labelled.host == a][[*cols, "speedup", "runtime_s"]].merge(
            labelled[labelled.host == b][[*cols, "speedup", "runtime_s"]],
            on=cols,
            suffixes=("_a", "_b"),
        )
        for op, group in pair.groupby("op"):
            if len(group) < 3:
                continue
            ratio = np.exp(np.median(np.log(group.runtime_s_b / group.runtime_s_a)))
            lines.append(
                _spearman_lines(
                    f"cpu {op} label noise across hosts {a} / {b} (runtime ratio {ratio:.2f}x)",
                    group.speedup_a.reset_index(drop=True),
                    group.speedup_b.reset_index(drop=True),
                    group.matrix_sha256.nunique(),
                )
            )
    return lines or ["cpu label noise across hosts: no config was timed on two hosts."]


# --- the spade space audit ------------------------------------------------------------------


def _all_config_speedups(
    frame: pd.DataFrame, op: str, width: int, target: str = "spade"
) -> tuple[dict[str, dict[str, float]], dict[str, dict]]:
    """Per matrix measured ok on every config of ``target``'s space: {config hash: speedup
    over the baseline}; and {config hash: knobs}. Where the space lists earlier versions
    (spade's smaller rp range), the version most matrices were measured on in full counts:
    the published width-64 records are the 256 configs of the earlier spade space."""
    space = get_target(target).space(op)
    every = {c.hash: dict(c.knobs) for c in space.all_configs()}
    ok = frame[
        (frame.target == target)
        & (frame.op == op)
        & (frame.width == width)
        & (frame.status == "ok")
    ]
    sets = getattr(space, "complete_config_sets", lambda: [set(every)])()
    measured = ok.groupby("matrix_sha256").config_hash.agg(set)
    full = [sum(s <= m for m in measured) for s in sets]
    chosen = sets[int(np.argmax(full))] if full and max(full) else sets[0]
    every = {h: k for h, k in every.items() if h in chosen}
    ok = ok[ok.config_hash.isin(every.keys())]
    speedups = {}
    for sha, g in ok.groupby("matrix_sha256"):
        if g.config_hash.nunique() < len(every):
            continue
        base = g.loc[g.is_baseline.astype(bool), "runtime_s"]
        if base.empty:
            continue
        speedups[sha] = dict(zip(g.config_hash, base.iloc[0] / g.runtime_s, strict=True))
    return speedups, every


def space_audit(frame: pd.DataFrame, op: str, width: int, target: str = "spade") -> list[str]:
    """Per knob and value: the share of matrices whose oracle takes it (ties: every config
    within 0.1% of the fastest counts), whether the value is an edge of the knob's range,
    and the best config with that value as % of the oracle (geomean over matrices), with
    the share of matrices where it is within 5% of the oracle."""
    speedups, knobs = _all_config_speedups(frame, op, width, target)
    if not speedups:
        return [f"{target} {op}, width {width}: no matrix measured on every config."]
    space = get_target(target).space(op)
    values = space.values  # the YAML's order, smallest first for ordered knobs
    lines = [
        f"#### {target} {op}, width {width}: {len(speedups)} matrices measured on all "
        f"{len(knobs)} configs",
        "",
        "| knob | value | edge of range | oracle takes it (share of matrices) | best config "
        "with it, % of oracle (geomean) | ... within 5% of oracle (share) |",
        "|---|---|---|---|---|---|",
    ]
    n = len(speedups)
    for knob, every_value in values.items():
        legal = [v for v in every_value if any(k[knob] == v for k in knobs.values())]
        for i, value in enumerate(legal):
            with_value = [h for h, k in knobs.items() if k[knob] == value]
            takes, ratios = 0, []
            for s in speedups.values():
                oracle = max(s.values())
                best = max(s[h] for h in with_value)
                takes += best >= oracle / 1.001
                ratios.append(best / oracle)
            edge = _edge_words(legal, i)
            within = sum(r >= 1 / 1.05 for r in ratios)
            lines.append(
                f"| {knob} | {value} | {edge} | {takes / n:.1%} | "
                f"{geomean(ratios):.1%} | {within / n:.1%} |"
            )
    return lines


def _edge_words(legal: list, i: int) -> str:
    if len(legal) < 2 or all(isinstance(v, bool) for v in legal):
        return "(a switch)"
    if legal[i] == "all":
        return "top (one panel)"
    if all(isinstance(v, str) for v in legal):
        return "(unordered)"
    return "bottom" if i == 0 else ("top" if i == len(legal) - 1 else "")


# --- fixed-K: the K-matched lookup from the store -------------------------------------------


def fixed_k_section(
    frame: pd.DataFrame,
    op: str,
    width: int,
    ks: tuple[int, ...] = (1, 3, 5, 10, 20, 50),
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    n_boot: int = 2000,
    target: str = "spade",
) -> list[str]:
    """fixed-K as ``cognate evaluate`` computes it (the evaluation's split: split seed 0,
    validation 20%, test 25%; the K matrices each seed's TL-K / NT-K cell fine-tunes on),
    from the records alone: geomean speedup over the baseline (mean over seeds, 95%
    bootstrap CI over seeds and test matrices) and % of the oracle; and the mean over
    200 random draws of the K matrices (the README's equal-data figure)."""
    speedups, _ = _all_config_speedups(frame, op, width, target)
    if len(speedups) < 4:
        return [f"{target} {op}: too few all-config matrices for fixed-K."]
    train, _val, test = split_target(sorted(speedups), 0.2, 0.25, 0)
    oracle = np.array([max(speedups[m].values()) for m in test])
    lines = [
        f"#### fixed-K, {target} {op}, width {width}: {len(speedups)} matrices, train "
        f"{len(train)}, test {len(test)} (the evaluation's split and draws)",
        "",
        "| K | fixed-K top-1 | % of oracle | fixed-K 5-set best of 5 | % of oracle | "
        "200 random draws: top-1 / best of 5, % of oracle |",
        "|---|---|---|---|---|---|",
    ]
    for k in ks:
        top1, top5 = [], []
        for seed in seeds:
            one, five = _fixed_scores(speedups, pick_random(train, k, seed), test)
            top1.append(one)
            top5.append(five)
        oracles = np.tile(oracle, (len(seeds), 1))
        cells = []
        for values in (np.array(top1), np.array(top5)):
            cells.append(bootstrap_ci([values], mean_of_geomeans, n_boot).text())
            cells.append(f"{bootstrap_ci([values, oracles], mean_of_ratio, n_boot).mean:.1%}")
        rng = np.random.default_rng(k)
        draws = [
            _fixed_scores(speedups, list(rng.choice(train, k, replace=False)), test)
            for _ in range(200)
        ]
        many = [np.mean([geomean(d[j] / oracle) for d in draws]) for j in (0, 1)]
        lines.append(f"| {k} | {' | '.join(cells)} | {many[0]:.1%} / {many[1]:.1%} |")
    return lines


def _fixed_scores(
    speedups: dict[str, dict[str, float]], picked: list[str], test: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    chosen = greedy_set([speedups[m] for m in picked], 5)
    one = np.array([speedups[m][chosen[0]] for m in test])
    five = np.array([max(speedups[m][h] for h in chosen) for m in test])
    return one, five


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--space-audit", action="store_true", help="add the spade space audit")
    parser.add_argument("--fixed-k", action="store_true", help="add spade fixed-K tables")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("corpus", "records", "spade", "noise", "space-audit", "fixed-k"),
        help="print only these sections",
    )
    parser.add_argument(
        "--target", default="spade", help="the target of the space audit and fixed-K tables"
    )
    args = parser.parse_args()
    wanted = set(args.only or ["corpus", "records", "spade", "noise"])
    wanted |= {"space-audit"} if args.space_audit else set()
    wanted |= {"fixed-k"} if args.fixed_k else set()
    with Store(args.db, readonly=True) as store:
        frame = store.frame()
        matrices = store.matrices()
        repeats = store.repeats()
    lines = []
    if "corpus" in wanted:
        lines += ["### Corpus (matrices in the store)", "", corpus_table(matrices), ""]
    if "records" in wanted:
        lines += ["### Records", "", store_table(frame), ""]
    if "spade" in wanted:
        for op in ("spmm", "sddmm"):
            lines += spade_section(frame, op, args.width) + [""]
    if "noise" in wanted:
        lines += [*noise_section(frame, repeats), ""]
    if "space-audit" in wanted:
        for op in ("spmm", "sddmm"):
            lines += [*space_audit(frame, op, args.width, args.target), ""]
    if "fixed-k" in wanted:
        for op in ("spmm", "sddmm"):
            lines += [*fixed_k_section(frame, op, args.width, target=args.target), ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    np.seterr(divide="ignore")
    main()
