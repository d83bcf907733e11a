"""What ``cognate tune`` prints: the ranked (and measured) table, the verdict line with its
caveats, and the timing notes."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

VARIANT_MARK = "\u21b3"  # a variant's row, under the config it varies


def _time(seconds: float | None) -> str:
    """Seconds in a readable unit (simulated spade runtimes are microseconds)."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds * 1e9:.4g} ns"


def print_table(console: Console, result: Any) -> None:
    """The top-k in the model's rank order, each config's variants under it, the baseline
    once, and a legend line per mark used."""
    from cognate.hostid import is_simulated
    from cognate.progress import plural

    matrix, verified = result.matrix, result.verified
    simulated = is_simulated(result.target)
    rows = _table_rows(result)
    picks = sum(1 for c in result.candidates if not c.variant)
    variants = len(result.candidates) - picks
    # two short header lines, not a table title: a title wraps mid-phrase at 80 columns
    console.print(f"{matrix.name}: {matrix.shape[0]} x {matrix.shape[1]}, {matrix.nnz} nnz")
    header = f"{result.target} {result.op}, width {result.width}: top {picks} "
    header += f"of {result.n_scored} scored configs"
    console.print(header + (f", {plural(variants, 'variant')} of them" if variants else ""))
    base = result.baseline
    notes = [_notes(c, base) for c, _ in rows]
    table = Table()
    table.add_column("rank", justify="right")
    table.add_column("config")
    table.add_column("score", justify="right")
    if verified:
        table.add_column("simulated" if simulated else "runtime", justify="right")
        table.add_column("vs base", justify="right")
    if any(notes):
        table.add_column("note")
    for (c, parent), note in zip(rows, notes, strict=True):
        cells = _cells(c, parent, base, verified)
        table.add_row(*cells, *([", ".join(note)] if any(notes) else []))
    console.print(table)
    for line in _footnotes(result, rows, notes, simulated and verified):
        console.print(line)


def _table_rows(result: Any) -> list[tuple[Any, Any]]:
    """(candidate, the row it is a variant of, or None) in display order: each ranked config
    in rank order followed by its variants; the baseline once (after the top-k when it is
    not among them) with its variants under it; a variant of a config not shown stands on
    its own at the end."""
    base = result.baseline
    ranked = [c for c in result.candidates if not c.variant]
    if not any(c.config == base.config for c in ranked):
        ranked.append(base)  # shown once: as its own row only when not among the top-k
    rows: list[tuple[Any, Any]] = []
    placed: set[int] = set()
    for parent in ranked:
        rows.append((parent, None))
        for c in result.candidates:
            if c.variant and c.variant_of == parent.config.hash:
                rows.append((c, parent))
                placed.add(id(c))
    rows += [(c, None) for c in result.candidates if c.variant and id(c) not in placed]
    return rows


def _cells(c: Any, parent: Any, base: Any, verified: bool) -> list[str]:
    """A row's cells. A variant under its config shows what it changes, and no rank or
    score of its own (it carries its config's)."""
    if parent is None:
        cells = [str(c.scored_rank or c.rank), c.description, f"{c.score:.4f}"]
    else:
        changed = c.description.removeprefix(parent.description).lstrip(" |")
        cells = ["", f"{VARIANT_MARK} {changed or c.description}", ""]
    if verified:
        ok = c.status == "ok" and c.runtime_s
        spread = f" ±{_time(c.spread_s)}" if ok and c.spread_s else ""  # interquartile
        cells.append(_time(c.runtime_s) + spread if ok else c.status or "-")
        cells.append(f"{base.runtime_s / c.runtime_s:.3f}x" if ok and base.runtime_s else "-")
    return cells


def _notes(candidate: Any, baseline: Any) -> list[str]:
    notes = []
    if candidate.config == baseline.config:
        notes.append("baseline")
    if candidate.portfolio:
        notes.append("portfolio")
    if candidate.family_pick:
        notes.append("family pick")
    if candidate.variant:
        notes.append("variant")
    return notes


def _footnotes(
    result: Any, rows: list[tuple[Any, Any]], notes: list[list[str]], simulated: bool
) -> list[str]:
    marks = {m for note in notes for m in note}
    lines = [
        f"rank: place in the model's ranking of the {result.n_scored} scored configs; "
        "score: the model's prediction (lower = predicted faster)"
    ]
    if result.scored_count is not None:
        lines.append(_scored_line(result.scored_count, result.target))
    if "portfolio" in marks:
        line = (
            "portfolio: one of the model's fixed configs (the set that won most often on its "
            "training matrices), ranked ahead of the rest in the portfolio's own order"
        )
        if _scores_disagree(rows):
            used = (result.ranking or {}).get("used", "a portfolio")
            line += (
                f" (validation chose that ranking, {used}: see `ranking:` below), so a "
                "portfolio row may rank above a row with a lower score"
            )
        lines.append(line)
    if "family pick" in marks:
        lines.append(
            "family pick: its kernel family's best-ranked config, measured in place of a lower "
            "pick so that every family is tried (--no-cover-families: the plain top-k)"
        )
    if "variant" in marks:
        lines.append(
            f"variant ({VARIANT_MARK} under its config): that config with another vector width "
            "/ register tile, thread schedule, C's stores or (--bf16) B as bfloat16, measured "
            "beside it so that the timing decides (a model without the knobs encoding cannot "
            "tell them apart; none encodes C's stores or B's precision); it has that config's "
            "rank and score"
        )
    if simulated:
        lines.append(f"runtimes are simulated: the {result.target} simulator, not hardware")
    return lines


def _scored_line(count: Any, target: str) -> str:
    """What the scored configs are, so that the total reads against --candidates."""
    extra = count.from_space - count.requested
    if extra <= 0:
        parts = [f"the whole {target} space ({count.from_space:,} configs)"]
    else:
        parts = [f"{count.requested:,} sampled (--candidates)"]
        families = ", ".join(count.whole_families)
        parts.append(f"{extra:,} that the space always scores in full (families {families})")
    if count.baseline_added:
        parts.append("the baseline config")
    if count.portfolio_added:
        parts.append(f"{count.portfolio_added} portfolio configs the sample missed")
    return f"scored: {count.total:,} = " + " + ".join(parts)


def _scores_disagree(rows: list[tuple[Any, Any]]) -> bool:
    """Whether a shown config of better rank has a higher score than one ranked below it."""
    shown = sorted((c for c, parent in rows if parent is None), key=lambda c: c.scored_rank)
    scores = [c.score for c in shown]
    return any(a > b for a, b in zip(scores, scores[1:], strict=False))


def _name(c: Any, result: Any) -> str:
    """How the summary names a measured candidate: its rank, or its config's variant."""
    if not c.variant:
        return f"rank {c.scored_rank or c.rank}"
    parent = next(
        (p for p in [*result.candidates, result.baseline] if p.config.hash == c.variant_of),
        c,
    )
    changed = c.description.removeprefix(parent.description).lstrip(" |")
    return f"rank {parent.scored_rank or parent.rank}'s variant ({changed or c.description})"


def _with_spread(c: Any, sim: str) -> str:
    return f"{_time(c.runtime_s)}{sim}" + (f" ±{_time(c.spread_s)}" if c.spread_s else "")


def _kept_baseline_text(result: Any, rank_1_is_base: bool, sim: str) -> str:
    """Why the baseline stays, agreeing with the table: either nothing ran faster, or the
    fastest candidate's interval overlaps the baseline's (both named, with their spreads)."""
    base = result.baseline
    start = "rank 1 is the baseline config" if rank_1_is_base else "kept the baseline config"
    kept = f"keep it ({_with_spread(base, sim)})"
    rival = result.closest_rival
    if rival is None:
        return f"{start}, and no other candidate ran faster: {kept}"
    busy = " on a busy machine" if result.unreliable else ""
    return (
        f"{start}: {_name(rival, result)} ran {base.runtime_s / rival.runtime_s:.3f}x faster "
        f"({_with_spread(rival, sim)}), but its lead ({_time(base.runtime_s - rival.runtime_s)})"
        f" is within the timing spread of the two (median ± interquartile range: the "
        f"intervals overlap){busy}, so it is not a measured win: {kept}"
    )


def _best_text(result: Any, sim: str) -> str:
    """The named pick: its time and spread, and its speedup with the baseline's interval
    (the two intervals do not overlap, else the baseline would be kept)."""
    best, base = result.best, result.baseline
    text = f"best: {_name(best, result)}, {_with_spread(best, sim)}, {best.description}"
    if result.speedup_vs_baseline is not None:
        clear = "; the intervals do not overlap" if best.spread_s or base.spread_s else ""
        text += (
            f"; {result.speedup_vs_baseline:.3f}x vs baseline ({_with_spread(base, sim)}{clear})"
        )
    return text


def _library_text(result: Any) -> str:
    """The pick against the fastest library reference, by the same rule as against the
    baseline: a ratio whose intervals overlap is said to be within the spreads."""
    from cognate.search.result import interval

    if result.speedup_vs_library is None:
        return ""
    best, lib = result.best, result.libraries.get(result.library) or {}
    spread = lib.get("spread_s") or 0.0
    text = f"; {result.speedup_vs_library:.3f}x vs {result.library}"
    low, high = result.library_runtime_s - spread, result.library_runtime_s + spread
    best_low, best_high = interval(best)
    if best_high >= low and high >= best_low:
        text += " (within the spreads of the two: not a measured difference)"
    return text


def _caveat(result: Any) -> str:
    """The result line's caveat when the machine was busy while timing."""
    if not result.unreliable:
        return ""
    why = (result.load or {}).get("line") or "timings unreliable: the machine was busy"
    return f" ({why}: this verdict may not hold on a quiet machine)"


def print_summary(console: Console, result: Any) -> None:
    from cognate.hostid import is_simulated

    best = result.best
    sim = " (simulated)" if is_simulated(result.target) else ""
    rank_1_is_base = result.candidates[0].config == result.baseline.config
    if not result.verified:
        if result.new_host_baseline and not rank_1_is_base:
            console.print(
                f"pick: the baseline config, {best.description} (a host the model never"
                f" trained on); its rank 1: {result.candidates[0].description}"
            )
        elif rank_1_is_base:
            console.print(
                f"predicted best (rank 1) is the baseline config itself: {best.description}"
            )
        else:
            console.print(f"predicted best (rank 1): {best.description}")
        return
    if result.all_failed:
        console.print(f"no config ran: {_failures(result)}; no pick (see the table)")
        return
    if result.kept_baseline:
        text = _kept_baseline_text(result, rank_1_is_base, sim)
    else:
        text = _best_text(result, sim)
    text += _library_text(result)
    console.print(text + _caveat(result))
    _print_timing_notes(console, result, best)


def _failures(result: Any) -> str:
    """The measured configs' failures, counted by kind (e.g. "14 error: out of memory")."""
    from collections import Counter

    seen = {c.config.hash: c for c in [*result.candidates, result.baseline]}
    kinds = Counter(f"{c.status}: {c.error}" if c.error else str(c.status) for c in seen.values())
    return ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())


def _print_timing_notes(console: Console, result: Any, best: Any) -> None:
    if result.libraries:
        times = ", ".join(
            f"{name} {_time(t['runtime_s'])}"
            + (f" (+ {_time(t['inspect_s'])} inspection, once)" if t.get("inspect_s") else "")
            for name, t in result.libraries.items()
        )
        console.print(f"library references: {times}")
    if result.library_error:
        console.print(f"library reference not timed: {result.library_error}")
    if result.timing == "sequential":
        console.print("timed one config after another (the interleaved verify failed)")
    if result.timing == "one at a time":
        console.print(
            "timed one config at a time, each prepared, checked and timed alone (holding every"
            " packed A and output at once would pass half the memory budget)"
        )
    if result.checked and result.checked != "every row":
        console.print(
            f"results checked against float64 scipy on {result.checked}: the whole-matrix"
            " reference is over the memory budget"
        )
    policy = (result.load or {}).get("omp_wait_policy")
    if policy:  # which OpenMP waits the medians hold: the user's loop has the same
        words = "default (spin, then sleep)" if policy == "default" else policy
        how = "interleaved rounds" if policy == "passive" else "rounds of blocks"
        how = "consecutive blocks" if result.timing == "one at a time" else how
        console.print(
            f"timed as your own loop calls it: median ± interquartile range of {how},"
            f" OpenMP waits {words} (OMP_WAIT_POLICY of this shell)"
        )
    if (result.load or {}).get("isa"):
        console.print(f"{result.load['isa']}; the pick: {best.description}")
