"""report.md, its tables and plots, from the verdicts (verdicts.py) of the harness's results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cognate.evaluate import harness
from cognate.evaluate.harness import (
    FIXED_K,
    NT,
    TL,
    TL_K_PORTFOLIO,
    TL_PORTFOLIO,
    ZERO_SHOT,
)
from cognate.evaluate.preset import ExperimentPreset
from cognate.evaluate.verdicts import (
    BASELINE_LABELS,
    ablation_answers,
    active_answers,
    answers,
    baseline_answers,
    estimate,
    find_row,
    fixed_k_answers,
    fixed_k_comparison,
    floor_estimate,
    name_at_k,
    tl_k,
    transfer_answers,
)
from cognate.stats import Estimate

# docs/architecture.md, Evaluation protocol: the COGNATE paper's own numbers (geomean speedup over the baseline config).
PAPER = {
    "spmm": {"top1": 1.40, "top5": 1.47, "oracle": 1.55, "zero-shot": 0.71},
    "sddmm": {"top1": 1.27, "top5": 1.39},
    "no-transfer": {"5": 1.29, "100": 1.38, "1000": 1.43},
}


def fixed_k_table(comparison: list[dict[str, Any]]) -> str:
    head = (
        "| K | fixed-K top-1 | fixed-K 5-set (best of 5) | TL-K / fixed-K (top-1) | "
        "TL-K / fixed-K 5-set (best of 5) | NT-K / fixed-K (top-1) | "
        "NT-K / fixed-K 5-set (best of 5) |"
    )
    lines = [head, "|" + "---|" * 7]
    for c in comparison:
        cells = [
            f"{Estimate(**c[m]).text()} ({Estimate(**c['pct_' + m]).mean:.1%} of oracle)"
            for m in ("top1", "top5")
        ]
        cells += [
            Estimate(**c[f"{v}_{m}"]).text() if f"{v}_{m}" in c else "n/a"
            for v in (TL, NT)
            for m in ("top1", "top5")
        ]
        lines.append(f"| {c['k']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def baseline_table(
    comparison: list[dict[str, Any]], learned_label: str, n_train: int | None = None
) -> str:
    data = f"all {n_train} training matrices" if n_train else "all training matrices"
    head = (
        f"| baseline (chosen on {data}) | top-1 | best of 5 | "
        f"{learned_label} top-1 / baseline top-1 | {learned_label} top-5 / baseline top-5 |"
    )
    lines = [head, "|" + "---|" * 5]
    for row in comparison:
        cells = [Estimate(**row[m]).text() for m in ("top1", "top5")]
        cells += [
            Estimate(**row[f"ratio_{m}"]).text() if f"ratio_{m}" in row else "n/a"
            for m in ("top1", "top5")
        ]
        label = BASELINE_LABELS.get(row["baseline"], row["baseline"])
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _row_label(row: dict[str, Any]) -> str:
    if row["variant"] == ZERO_SHOT:
        return row["variant"]
    if row["variant"] == TL_PORTFOLIO:  # "TL-5 + portfolio (...)": K is TL's, not the portfolio's
        label = f"{TL}-{row['k']} + portfolio"
    elif row["variant"] == TL_K_PORTFOLIO:
        label = name_at_k(TL_K_PORTFOLIO, row["k"])
    else:
        label = f"{row['variant']}-{row['k']}"
    return f"{label} ({row['data']})" if row.get("data") else label


def markdown_table(rows: list[dict[str, Any]], floor: Estimate | None) -> str:
    head = "| variant | top-1 | top-5 | oracle | top-1 % of oracle | top-5 % of oracle |"
    lines = [head, "|" + "---|" * 6]
    for row in rows:
        cells = [estimate(row, m).text() for m in ("top1", "top5", "oracle")]
        cells += [estimate(row, m).text("{:.1%}") for m in ("pct_top1", "pct_top5")]
        lines.append(f"| {_row_label(row)} | " + " | ".join(cells) + " |")
    if floor is not None:
        lines.append(f"| random pick (expected) | {floor.text()} | | | | |")
    return "\n".join(lines)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_per_matrix(row: dict[str, Any], op: str, path: Path) -> Path:
    plt = _pyplot()
    pm = row["per_matrix_mean"]
    order = np.argsort(pm["oracle"])
    x = np.arange(len(order))
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(x) + 2), 4))
    for offset, metric in ((-0.27, "top1"), (0.0, "top5"), (0.27, "oracle")):
        ax.bar(x + offset, np.array(pm[metric])[order], width=0.27, label=metric)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [row["matrices"][i] for i in order], rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("speedup over baseline config")
    ax.set_title(f"{op}: {_row_label(row)} per test matrix (mean over seeds), sorted by oracle")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_efficiency(rows: list[dict[str, Any]], op: str, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant, color in ((TL, "tab:blue"), (NT, "tab:orange"), (FIXED_K, "tab:gray")):
        pts = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["k"])
        if not pts:
            continue
        ks = [r["k"] for r in pts]
        for metric, style in (("top1", "-"), ("top5", "--")):
            est = [estimate(r, metric) for r in pts]
            ax.plot(
                ks,
                [e.mean for e in est],
                style,
                color=color,
                marker="o",
                label=f"{variant} {metric}",
            )
            ax.fill_between(
                ks, [e.low for e in est], [e.high for e in est], color=color, alpha=0.15
            )
    if rows:
        ax.axhline(estimate(rows[0], "oracle").mean, color="green", linestyle=":", label="oracle")
    zero = find_row(rows, ZERO_SHOT)
    if zero:
        ax.axhline(
            estimate(zero, "top1").mean, color="gray", linestyle="-.", label="zero-shot top1"
        )
    ax.set_xscale("log")
    ks = sorted({r["k"] for r in rows if r["variant"] in (TL, NT)})
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("target matrices fine-tuned on (K)")
    ax.set_ylabel("geomean speedup over baseline (95% CI)")
    ax.set_title(f"{op}: data efficiency: transfer (TL), target-only (NT), fixed-K lookup")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ablations(rows: list[dict[str, Any]], k: int, op: str, path: Path) -> Path:
    plt = _pyplot()
    # every variant at K (the ablations run there too) next to zero-shot
    picked = [r for r in rows if r["k"] == k or r["variant"] == ZERO_SHOT]
    x = np.arange(len(picked))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(x) + 2), 4))
    for offset, metric in ((-0.2, "top1"), (0.2, "top5")):
        est = [estimate(r, metric) for r in picked]
        err = [[e.mean - e.low for e in est], [e.high - e.mean for e in est]]
        ax.bar(x + offset, [e.mean for e in est], width=0.4, yerr=err, capsize=3, label=metric)
    if picked:
        ax.axhline(estimate(picked[0], "oracle").mean, color="green", linestyle=":", label="oracle")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [_row_label(r) for r in picked], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("geomean speedup (95% CI)")
    ax.set_title(f"{op}: ablations at K={k}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def paper_table() -> str:
    sp, sd, nt = PAPER["spmm"], PAPER["sddmm"], PAPER["no-transfer"]
    return "\n".join(
        [
            "| paper (SPADE, 256 configs) | top-1 | top-5 | oracle | top-5 % of oracle |",
            "|---|---|---|---|---|",
            f"| SpMM, TL-5 | {sp['top1']:.2f}x | {sp['top5']:.2f}x | {sp['oracle']:.2f}x | "
            f"{sp['top5'] / sp['oracle']:.1%} |",
            f"| SDDMM, TL-5 | {sd['top1']:.2f}x | {sd['top5']:.2f}x | | |",
            f"| no transfer, 5 / 100 / 1000 matrices | {nt['5']:.2f}x / {nt['100']:.2f}x / "
            f"{nt['1000']:.2f}x | | | |",
            f"| zero-shot | {sp['zero-shot']:.2f}x | | | |",
        ]
    )


def write_report(results: dict[str, Any], preset: ExperimentPreset, out: Path) -> Path:
    lines = [
        f"# cognate evaluation: preset `{preset.name}`, target {preset.target}",
        "",
        f"- command: `{results['command']}`",
        f"- git revision: {results['git']}",
        f"- records: {results['db'] or 'collected here'} (read from `{results['records']}`)",
        f"- wall time: {results['wall_s'] / 60:.1f} min{_reuse_words(results)}",
        f"- featurizer: {_featurizer_words(preset)}",
        f"- NT-K (target only): {_target_only_words(preset)}",
        *_ablation_words(preset),
        f"- seeds: {preset.seeds}; split seed {preset.split_seed}; "
        f"validation {preset.val_fraction:.0%}, test {preset.test_fraction:.0%} of the matrices",
        f"- selected on validation ({preset.select.metric}): freeze_featurizer in "
        f"{preset.select.freeze_featurizer}, lr in {preset.select.lr}; epochs by early stopping "
        f"(<= {preset.finetune_epochs}, patience {preset.patience})",
        "",
        "Protocol: matrices are split once by matrix into train / validation / test. The source "
        "model is pretrained on source records minus the target's validation and test matrices. "
        "Each cell fine-tunes every candidate setting on K training matrices, keeps the one with "
        "the best validation score, and scores only that one on test. Numbers: geomean over the "
        "test matrices of the speedup over the space's baseline config, mean over seeds, and a "
        "95% percentile bootstrap CI resampling seeds and test matrices. % of oracle = geomean "
        "speedup / geomean oracle speedup.",
        "",
    ]
    for op, res in results["ops"].items():
        rows = res["rows"]
        k = tl_k(preset, rows)
        floor = floor_estimate(res["random_pick"], preset.bootstrap)
        d = res["data"]
        lines += [
            f"## {preset.target} {op}",
            "",
            f"Data: {d['target_matrices']} target matrices ({d['target_records']} ok records, "
            f"{d['configs_per_matrix'][0]}..{d['configs_per_matrix'][1]} configs per matrix): "
            f"train {d['train']}, validation {d['validation']}, test {d['test']}. Source: "
            f"{res['source']}, {d['source_matrices']} matrices outside the target's validation "
            f"and test splits ({d['source_records']} records, "
            f"{_span(d.get('source_configs_per_matrix'))} configs per matrix)."
            + _sampled_words(res.get("sampled_left_out", 0), preset)
            + _over_nnz_words(res.get("over_max_nnz") or {}, results.get("max_nnz")),
            "",
            *[f"**Below the preset's data minimum**: {line}.\n" for line in res["shortfalls"]],
            "### Answers",
            "",
            *[f"- {line}" for line in answers(rows, k)],
            *[f"- {line}" for line in transfer_answers(rows, k, preset.bootstrap)],
            *[f"- {line}" for line in active_answers(rows, preset.bootstrap)],
            *[f"- {line}" for line in ablation_answers(rows, preset.bootstrap)],
            "",
            "### Results (test split)",
            "",
            markdown_table(rows, floor),
            "",
            *_fixed_k_section(res, preset),
            *_baseline_section(res, k),
        ]
        capped = sorted({m for m in preset.matrices if m > d["train"]})
        if capped:
            lines += [f"K = {capped} capped at the {d['train']} training matrices.", ""]
        pngs = _plots(rows, k, op, out)
        lines += [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    lines += [
        "## The paper's figures (docs/architecture.md, Evaluation protocol), for reference",
        "",
        paper_table(),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def _fixed_k_section(res: dict[str, Any], preset: ExperimentPreset) -> list[str]:
    """The K-matched comparison: the learned rows against a lookup with the same data."""
    comparison = fixed_k_comparison(res["rows"], preset.bootstrap)
    if not comparison:
        return []
    return [
        "### At equal target data: TL-K and NT-K against fixed-K (test split)",
        "",
        "fixed-K is a lookup chosen on exactly the K training matrices TL-K and NT-K of the "
        "same seed fine-tune on (the same draw): its top-1 is the config with the best "
        "geomean speedup over those K matrices, its best of 5 the greedy fixed 5-set on them. "
        "Nothing is trained. Ratios are the learned row's per-seed geomean over fixed-K's, "
        "paired over seeds (draws) and test matrices, with a 95% bootstrap CI; above 1 the "
        "learned ranking earns its training.",
        "",
        *[f"- {line}" for line in fixed_k_answers(comparison)],
        "",
        fixed_k_table(comparison),
        "",
        *_k_portfolio_words(res),
    ]


def _k_portfolio_words(res: dict[str, Any]) -> list[str]:
    """What TL-K's validated K portfolio chose per seed (the tuner's choice, made on the
    validation matrices only): learned ranking, fixed-K, or a blend of the two."""
    cells = [c for c in res["cells"] if c["variant"] == harness.TL_K_PORTFOLIO]
    if not cells:
        return []
    by_k: dict[int, list[str]] = {}
    for c in sorted(cells, key=lambda c: (c["k"], c["seed"])):
        by_k.setdefault(c["k"], []).append(f"seed {c['seed']} {harness.chooser_words(c)}")
    return [
        f"`TL-{k} + K portfolio`: TL-{k}'s model with the greedy fixed set of its own {k} "
        "fine-tuning matrices ranked first, its size (0 = the learned ranking alone) and how "
        "firmly it keeps the greedy order (fixed = the fixed-K lookup) chosen on the "
        f"validation matrices; chosen: {'; '.join(words)}."
        for k, words in by_k.items()
    ] + [""]


def _baseline_section(res: dict[str, Any], k: int) -> list[str]:
    comparison = res.get("baselines")
    if not comparison:
        return []
    label = f"TL-{k}"
    n_train = res["data"]["train"]
    lines = [
        f"### Against non-learned baselines chosen on all {n_train} training matrices (test split)",
        "",
        f"Each baseline is chosen on all {n_train} training matrices (not K: the K-matched "
        "lookup is fixed-K above) and gets "
        "the same budget: one pick (top-1) or five measured picks (top-5). Ratios are "
        f"{label}'s per-seed geomean over the baseline's, paired on the same test matrices, "
        "with a 95% bootstrap CI.",
        "",
        *[f"- {line}" for line in baseline_answers(comparison, label)],
        "",
        baseline_table(comparison, label, n_train),
        "",
        *_headroom(res, comparison, k),
    ]
    with_portfolio = res.get("baselines_portfolio")
    if with_portfolio:
        label = f"TL-{k} + portfolio of all {n_train} training matrices"
        chosen = sorted(
            {
                f"{c['portfolio_size']} ({c.get('portfolio_order', 'anchor 0')})"
                for c in res["cells"]
                if c["variant"] == harness.TL_PORTFOLIO
            }
        )
        lines += [
            f"#### {label}",
            "",
            f"The same TL-{k} models ranking a portfolio first: the greedy fixed set of all "
            f"{n_train} training matrices (not only the K fine-tuning ones: this row uses more "
            f"target data than TL-{k}), its size chosen per seed on the validation matrices among "
            "5..64 configs and none, together with how firmly it keeps its greedy order (an "
            "anchor, in typical score gaps per position: 0 = the model's order, fixed = the "
            "greedy order), by the product of the top-1 and top-5 geomeans (chosen: "
            f"{', '.join(chosen)}; 0 = none).",
            "",
            *[f"- {line}" for line in baseline_answers(with_portfolio, label)],
            "",
            baseline_table(with_portfolio, label, n_train),
            "",
        ]
    return lines


def _headroom(res: dict[str, Any], comparison: list[dict[str, Any]], k: int) -> list[str]:
    """How much the fixed baselines leave to win: what a missed "beat the fixed config" goal
    means depends on it (a space a lookup nearly solves leaves a ranking almost nothing)."""
    fixed = next((c for c in comparison if c["baseline"] == "fixed"), None)
    learned = next((r for r in res["rows"] if r["variant"] == TL and r["k"] == k), None)
    if fixed is None or learned is None:
        return []
    oracle = learned["estimates"]["oracle"]["mean"]
    top1, top5 = fixed["top1"]["mean"], fixed["top5"]["mean"]
    return [
        f"Headroom: on these test matrices the best fixed config reaches {top1 / oracle:.1%} "
        f"of the oracle and the greedy fixed 5-set {top5 / oracle:.1%}, so no model can beat "
        f"them by more than {oracle / top1:.3f}x (top-1) and {oracle / top5:.3f}x (best of 5).",
        "",
    ]


def _reuse_words(results: dict[str, Any]) -> str:
    """How much of the work this run did: a rerun reuses the models an earlier run trained,
    so its wall time alone understates what the numbers cost."""
    counts = [op.get("fine_tunes") for op in results["ops"].values()]
    if not counts or None in counts:
        return ""
    total = sum(c["total"] for c in counts)
    reused = sum(c["reused"] for c in counts)
    if not reused:
        return f" ({total} fine-tunes, all trained by this run)"
    return (
        f" (this run trained {total - reused} of {total} fine-tunes; the other {reused}"
        " were trained by an earlier run into this output folder's models/ and reused)"
    )


def _featurizer_words(preset: ExperimentPreset) -> str:
    """Which featurizer the numbers used: trained with the predictor on the source, or not."""
    spec = harness.model_preset(preset).featurizer
    shape = f"{len(spec.channels)} sparse-conv layers, up to {max(spec.channels)} channels"
    if spec.trainable:
        return f"trained with the cost model on the source records ({shape}); fine-tuning " + (
            "keeps it frozen"
            if preset.select.freeze_featurizer == [True]
            else "may train it (chosen on validation)"
        )
    return f"a fixed, seeded random sparse-conv embedding, never trained ({shape})"


def _target_only_words(preset: ExperimentPreset) -> str:
    """Which featurizer the target-only rows used: theirs starts at a seeded random init."""
    frozen = preset.select.freeze_featurizer
    how = (
        "and stays there (only the predictor learns)"
        if frozen == [True]
        else "and is trained on the K matrices"
        if frozen == [False]
        else "and is frozen or trained on the K matrices (chosen on validation)"
    )
    return (
        f"the same network without the source; its featurizer starts at a seeded random init {how}"
    )


def _ablation_words(preset: ExperimentPreset) -> list[str]:
    names = harness.ablations(preset)
    if not names:
        return []
    ks = sorted(set(preset.ablation_matrices))
    lines = [f"- ablations at K = {ks}: {', '.join(names)}"]
    if "random featurizer" in names:
        lines.append(
            "- `TL random featurizer`: the same source model pretrained with its featurizer "
            "frozen at its seeded random initialisation (only the predictor learns), then "
            "fine-tuned like TL"
        )
    return lines


def _sampled_words(sampled: int, preset: ExperimentPreset) -> str:
    width = f" at width {preset.width}" if preset.width is not None else ""
    if not sampled:
        return f" Target records{width}." if width else ""
    return (
        f" Target records{width}; {sampled} more target matrices, measured on a sample of the "
        "space only, are left out (the oracle needs every config)."
    )


def _over_nnz_words(over: dict[str, int], max_nnz: int | None) -> str:
    if max_nnz is None:
        return ""
    return (
        f" Matrices with > {max_nnz} nnz are left out (--max-nnz): {over.get('target', 0)} "
        f"target and {over.get('source', 0)} source matrices."
    )


def _span(pair: list[int] | None) -> str:
    return f"{pair[0]}..{pair[1]}" if pair else "?"


def _plots(rows: list[dict[str, Any]], k: int, op: str, out: Path) -> list[Path]:
    pngs = [plot_efficiency(rows, op, out / f"{op}-efficiency.png")]
    tl = next((r for r in rows if r["variant"] == TL and r["k"] == k), None)
    if tl:
        pngs.append(plot_per_matrix(tl, op, out / f"{op}-per-matrix-TL-{k}.png"))
    pngs.append(plot_ablations(rows, k, op, out / f"{op}-ablations.png"))
    return pngs
