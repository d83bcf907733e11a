"""Verdicts of the transfer evaluation from the harness's per-cell results: summaries with
bootstrap CIs, paired comparisons with fixed-K and the non-learned baselines, and the answers
(one sentence each) that report.md prints. No rendering here (report.py)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from cognate.evaluate.harness import (
    FIXED_K,
    NT,
    TL,
    TL_ACTIVE,
    TL_K_PORTFOLIO,
    TL_PORTFOLIO,
    picked_variant,
)
from cognate.evaluate.preset import ABLATIONS, ExperimentPreset
from cognate.stats import Estimate, bootstrap_ci, mean_of_geomeans, mean_of_ratio
from cognate.transfer.select import PICKERS

MATCH_RTOL = 0.01


BASELINE_LABELS = {
    "fixed": "best fixed config / greedy fixed 5-set",
    "gbt": "cheap-feature GBT selector",
    "random": "random search (expected)",
}


def _arrays(entries: list[dict[str, Any]]) -> tuple[list[str], dict[str, np.ndarray]]:
    names = sorted(set.intersection(*(set(e["test"]) for e in entries)))
    arrays = {
        m: np.array([[e["test"][n][m] for n in names] for e in entries])
        for m in ("top1", "top5", "oracle")
    }
    return names, arrays


def summarize(cell_results: list[dict[str, Any]], n_boot: int) -> list[dict[str, Any]]:
    """One row per (variant, K): mean over seeds of test geomeans with 95% bootstrap CIs."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for result in cell_results:
        groups[(result["variant"], result["k"])].append(result)
    rows = []
    for (variant, k), entries in groups.items():
        entries.sort(key=lambda e: e["seed"])
        names, a = _arrays(entries)
        estimates = {
            m: bootstrap_ci([a[m]], mean_of_geomeans, n_boot) for m in ("top1", "top5", "oracle")
        }
        for m in ("top1", "top5"):
            estimates[f"pct_{m}"] = bootstrap_ci([a[m], a["oracle"]], mean_of_ratio, n_boot)
        per_matrix = {m: a[m].mean(axis=0).tolist() for m in a}
        rows.append(
            {
                "variant": variant,
                "k": k,
                **({"data": entries[0]["data"]} if "data" in entries[0] else {}),
                "seeds": [e["seed"] for e in entries],
                "matrices": names,
                "estimates": {m: vars(e) for m, e in estimates.items()},
                "per_matrix_mean": per_matrix,
                "per_seed": {m: a[m].tolist() for m in ("top1", "top5")},
            }
        )
    return rows


def floor_estimate(random_pick: dict[str, float], n_boot: int) -> Estimate:
    values = np.array([list(random_pick.values())])
    return bootstrap_ci([values], mean_of_geomeans, n_boot)


def estimate(row: dict[str, Any], metric: str) -> Estimate:
    return Estimate(**row["estimates"][metric])


def _paired(mine: dict[str, Any], theirs: dict[str, Any], metric: str, n_boot: int) -> Estimate:
    """Ratio of two rows' per-seed geomeans, paired over seeds and test matrices."""
    a, b = (np.asarray(r["per_seed"][metric]) for r in (mine, theirs))
    return bootstrap_ci([a, b], mean_of_ratio, n_boot)


def find_row(rows: list[dict[str, Any]], variant: str, k: int | None = None) -> dict | None:
    hits = [r for r in rows if r["variant"] == variant and (k is None or r["k"] == k)]
    return hits[0] if hits else None


def answers(rows: list[dict[str, Any]], tl_k: int) -> list[str]:
    """Plain answers: does TL-k reach >= 95% of the oracle; what K does NT need to match it."""
    tl = find_row(rows, TL, tl_k)
    if tl is None:
        return [f"No TL-{tl_k} result: the questions cannot be answered from this run."]
    lines = []
    for metric in ("pct_top5", "pct_top1"):
        e = estimate(tl, metric)
        what = "best of top-5" if metric == "pct_top5" else "top-1"
        if e.low >= 0.95:
            verdict = "Yes"
        elif e.mean >= 0.95:
            verdict = "Not conclusively: the mean reaches 95% but the CI dips below"
        elif e.high >= 0.95:
            verdict = "No on the mean (the CI still reaches 95%)"
        else:
            verdict = "No"
        lines.append(
            f"Does TL-{tl_k} ({what}) reach >= 95% of the oracle? **{verdict}**: "
            f"{e.text('{:.1%}')} of the oracle (mean over {e.seeds} seeds, 95% bootstrap CI)."
        )
    nt_rows = sorted((r for r in rows if r["variant"] == NT), key=lambda r: r["k"])
    for metric in ("top5", "top1"):
        target = estimate(tl, metric)
        # "match": NT's mean within MATCH_RTOL of TL's (equal to the printed precision)
        bar = target.mean * (1 - MATCH_RTOL)
        match = next((r for r in nt_rows if estimate(r, metric).mean >= bar), None)
        label = "best of top-5" if metric == "top5" else "top-1"
        if match is None:
            best = max(nt_rows, key=lambda r: estimate(r, metric).mean) if nt_rows else None
            tail = (
                f"its best is NT-{best['k']} at {estimate(best, metric).text()}"
                if best
                else "no NT rows"
            )
            lines.append(
                f"How many target matrices does NT need to match TL-{tl_k} ({label}, "
                f"{target.text()})? **More than the largest K evaluated**: {tail}."
            )
        else:
            e = estimate(match, metric)
            overlap = "overlapping" if e.low <= target.high and target.low <= e.high else "disjoint"
            lines.append(
                f"How many target matrices does NT need to match TL-{tl_k} ({label}, "
                f"{target.text()})? **{match['k']}**: NT-{match['k']} reaches {e.text()} "
                f"(within {MATCH_RTOL:.0%} of TL's mean; CIs {overlap})."
            )
    return lines


def active_answers(rows: list[dict[str, Any]], n_boot: int) -> list[str]:
    """Does TL with K actively chosen matrices reach TL with more random ones (paired)?"""
    lines = []
    randoms = sorted((r for r in rows if r["variant"] == TL), key=lambda r: r["k"])
    pickers = {picked_variant(name): name for name in PICKERS}
    picked = [r for r in rows if r["variant"] in pickers]
    for active in sorted(picked, key=lambda r: (r["variant"] != TL_ACTIVE, r["variant"], r["k"])):
        name = pickers[active["variant"]]
        for random in [r for r in randoms if r["k"] >= active["k"]][:2]:
            if active["seeds"] != random["seeds"] or active["matrices"] != random["matrices"]:
                continue  # not paired: no claim
            for metric, what in (("top5", "best of top-5"), ("top1", "top-1")):
                e = _paired(active, random, metric, n_boot)
                verdict = "Yes" if e.low >= 1 else ("On the mean" if e.mean >= 1 else "No")
                lines.append(
                    f"Does TL-{active['k']}-{name} ({what}) reach TL-{random['k']}-random? "
                    f"**{verdict}**: ratio {e.text()} (paired over seeds and test matrices)."
                )
    return lines


def ablation_answers(rows: list[dict[str, Any]], n_boot: int) -> list[str]:
    """Does TL-K beat each of its ablations at the same K (paired: same seeds and test
    matrices)? A ratio above 1 means the ablated part earns something."""
    lines = []
    names = {f"TL {name}": name for name in ABLATIONS}  # the harness's ablation variants
    ablated = [r for r in rows if r["variant"] in names]
    for row in sorted(ablated, key=lambda r: (r["k"], r["variant"])):
        tl = find_row(rows, TL, row["k"])
        if tl is None or tl["seeds"] != row["seeds"] or tl["matrices"] != row["matrices"]:
            continue  # not paired: no claim
        name = names[row["variant"]]
        for metric, what in (("top5", "best of top-5"), ("top1", "top-1")):
            e = _paired(tl, row, metric, n_boot)
            verdict = paired_verdict(e)
            lines.append(
                f"Does TL-{row['k']} ({what}) beat TL-{row['k']} with {name}? **{verdict}**: "
                f"TL / ablation {e.text()} (paired over seeds and test matrices)."
            )
    return lines


def transfer_answers(rows: list[dict[str, Any]], tl_k: int, n_boot: int) -> list[str]:
    """Does TL-K beat NT-K, and does it match NT with more target matrices (paired: the same
    seeds and test matrices)?"""
    tl = next((r for r in rows if r["variant"] == TL and r["k"] == tl_k), None)
    if tl is None:
        return []
    lines = []
    for nt in sorted(
        (r for r in rows if r["variant"] == NT and r["k"] >= tl_k), key=lambda r: r["k"]
    ):
        if nt["seeds"] != tl["seeds"] or nt["matrices"] != tl["matrices"]:
            continue  # not paired: no claim
        for metric, what in (("top5", "best of top-5"), ("top1", "top-1")):
            e = _paired(tl, nt, metric, n_boot)
            if nt["k"] == tl_k:
                verdict = "Yes" if e.low > 1 else ("On the mean" if e.mean > 1 else "No")
                question = f"Does TL-{tl_k} ({what}) beat NT-{tl_k}?"
            else:
                verdict = "Yes" if e.low <= 1 <= e.high or e.low > 1 else "No"
                question = f"Does TL-{tl_k} ({what}) match NT-{nt['k']}?"
            lines.append(
                f"{question} **{verdict}**: TL / NT {e.text()} (paired over seeds and test "
                "matrices)."
            )
    return lines


def paired_with(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Two rows are paired when they hold the same seeds (hence draws) and test matrices."""
    return mine["seeds"] == theirs["seeds"] and mine["matrices"] == theirs["matrices"]


# the rows paired with fixed-K at their K: the learned rankings, and TL-K's model with its
# validated K portfolio (learned, fixed-K or a blend, chosen on validation)
COMPARED_WITH_FIXED_K = (TL, NT, TL_K_PORTFOLIO)


def name_at_k(variant: str, k: int) -> str:
    if variant == TL_K_PORTFOLIO:
        return f"TL-{k} + K portfolio"
    return f"{variant}-{k}"


def fixed_k_comparison(rows: list[dict[str, Any]], n_boot: int) -> list[dict[str, Any]]:
    """Per K: fixed-K (the best fixed config and greedy 5-set of the K fine-tuning matrices)
    and the paired ratios TL-K / fixed-K and NT-K / fixed-K (top-1 against the fixed config,
    best of 5 against the 5-set): same seeds, same draws of the K matrices, same test set."""
    out = []
    for fixed in sorted((r for r in rows if r["variant"] == FIXED_K), key=lambda r: r["k"]):
        entry: dict[str, Any] = {
            "k": fixed["k"],
            "top1": fixed["estimates"]["top1"],
            "top5": fixed["estimates"]["top5"],
            "pct_top1": fixed["estimates"]["pct_top1"],
            "pct_top5": fixed["estimates"]["pct_top5"],
        }
        for variant in COMPARED_WITH_FIXED_K:
            learned = find_row(rows, variant, fixed["k"])
            if learned is None or not paired_with(learned, fixed):
                continue  # not paired: no claim
            for metric in ("top1", "top5"):
                e = _paired(learned, fixed, metric, n_boot)
                entry[f"{variant}_{metric}"] = vars(e)
        out.append(entry)
    return out


def fixed_k_answers(comparison: list[dict[str, Any]]) -> list[str]:
    """Plainly, per K: does TL-K (and NT-K) beat the lookup with the same K matrices?"""
    lines = []
    for c in comparison:
        for variant in COMPARED_WITH_FIXED_K:
            for metric, what, label in (
                ("top1", "top-1", "fixed-K"),
                ("top5", "best of top-5", "fixed-K 5-set"),
            ):
                key = f"{variant}_{metric}"
                if key not in c:
                    continue
                e = Estimate(**c[key])
                name = name_at_k(variant, c["k"])
                lines.append(
                    f"Does {name} ({what}) beat {label} (K={c['k']})? "
                    f"**{paired_verdict(e)}**: {name} / fixed {e.text()} (paired: same "
                    "seeds, same K matrices, same test matrices)."
                )
    return lines


def baseline_comparison(
    baselines: dict[str, dict[str, dict[str, float]]],
    learned: dict[str, Any] | None,
    n_boot: int,
) -> list[dict[str, Any]]:
    """Per baseline: its top-1 / top-5 and, paired with ``learned`` (same test matrices, each
    seed against the one baseline), the ratio learned / baseline with a bootstrap CI."""
    out = []
    for name, picks in baselines.items():
        names = sorted(picks["top1"])
        row: dict[str, Any] = {"baseline": name, "matrices": names}
        for metric, key in (("top1", "top1"), ("top5", "topk")):
            values = np.array([[picks[key][n] for n in names]])
            row[metric] = vars(bootstrap_ci([values], mean_of_geomeans, n_boot))
            if learned is None:
                continue
            common = [n for n in names if n in learned["matrices"]]
            idx = [learned["matrices"].index(n) for n in common]
            mine = np.asarray(learned["per_seed"][metric])[:, idx]
            theirs = np.tile([picks[key][n] for n in common], (mine.shape[0], 1))
            row[f"ratio_{metric}"] = vars(bootstrap_ci([mine, theirs], mean_of_ratio, n_boot))
        out.append(row)
    return out


# a paired ratio whose whole CI lies this close to 1 is a tie, whichever side it leans to
TIE_WITHIN = 5e-4


def paired_verdict(e: Estimate) -> str:
    """Does a paired ratio's CI say "better"? A CI within TIE_WITHIN of 1 is a tie; one whose
    low end rounds to 1 is not a win."""
    if max(abs(e.low - 1), abs(e.high - 1)) < TIE_WITHIN:
        return "No, a tie (the same picks, or nearly)"
    if e.low > 1 + TIE_WITHIN:
        return "Yes"
    if e.high < 1 - TIE_WITHIN:
        return "No, it loses"
    return "Not conclusively (the CI spans 1)"


def baseline_answers(comparison: list[dict[str, Any]], learned_label: str) -> list[str]:
    """Plainly: does the learned model beat each baseline (paired CI above 1)?"""
    lines = []
    for row in comparison:
        label = BASELINE_LABELS.get(row["baseline"], row["baseline"])
        for metric, what in (("top1", "top-1"), ("top5", "best of top-5")):
            if f"ratio_{metric}" not in row:
                continue
            e = Estimate(**row[f"ratio_{metric}"])
            verdict = paired_verdict(e)
            lines.append(
                f"Does {learned_label} ({what}) beat the {label}? **{verdict}**: "
                f"ratio {e.text()} (paired, same test matrices)."
            )
    return lines


def ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rank = {
        TL: 0,
        TL_PORTFOLIO: 1,
        TL_K_PORTFOLIO: 1,
        NT: 2,
        FIXED_K: 2,
        **{picked_variant(name): 1 for name in PICKERS},
    }
    return sorted(rows, key=lambda r: (rank.get(r["variant"], 2), r["variant"], r["k"]))


def tl_k(preset: ExperimentPreset, rows: list[dict[str, Any]]) -> int:
    """TL-5, or the K the data allows nearest below 5."""
    ks = sorted(r["k"] for r in rows if r["variant"] == TL)
    below = [k for k in ks if k <= 5]
    return below[-1] if below else ks[0]
