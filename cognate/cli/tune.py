"""``cognate tune``: rank schedules for one matrix with a cost model, optionally verify them.

torch and the model load inside the command, so ``cognate --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.table import Table

from cognate.cli.options import TARGET, db_option
from cognate.targets import OPS

# Bounds of the options that size the work. Every candidate is drawn, encoded and scored in
# memory: measured ~1.2 KB each (cpu spmm, peak RSS 0.77 GB at 20,000, 0.99 GB at 200,000),
# so 100,000,000 once passed 8 GB; 500,000 (25x the default sample) stays within ~0.6 GB
# of the default. With --verify each of the top-k is measured; 448 is a whole spade space.
MAX_CANDIDATES = 500_000
MAX_TOP_K = 448
PIPE_WIDTH = 160
VARIANT_MARK = "\u21b3"  # a variant's row, under the config it varies


def register(main: click.Group, data: click.Group) -> None:
    main.add_command(tune)


def _time(seconds: float | None) -> str:
    """Seconds in a readable unit (simulated spade runtimes are microseconds)."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds * 1e9:.4g} ns"


def _print_table(console: Console, result: Any) -> None:
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
            "/ register tile or thread schedule (knobs the model does not rank), measured "
            "beside it so that the timing decides; it has that config's rank and score"
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


def _print_summary(console: Console, result: Any) -> None:
    from cognate.hostid import is_simulated

    best = result.best
    sim = " (simulated)" if is_simulated(result.target) else ""
    rank_1_is_base = result.candidates[0].config == result.baseline.config
    if not result.verified:
        if rank_1_is_base:
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


@click.command()
@click.argument("matrix", type=click.Path(path_type=Path), required=False)
@click.option("--target", type=TARGET, default="cpu", show_default=True)
@click.option("--op", type=click.Choice(OPS), default="spmm", show_default=True)
@click.option("--width", type=click.IntRange(1, 4096), default=64, show_default=True)
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="Cost model (default: the local copy --learn refined, "
    "$COGNATE_HOME/models/<target>-<op>.safetensors, when there is one, else the shipped "
    "data/models/<target>-<op>.safetensors). Given, it always wins.",
)
@click.option(
    "--top-k",
    "top_k",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help=f"Configs shown (and measured with --verify); at most {MAX_TOP_K}.",
)
@click.option(
    "--candidates",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Sampled candidates (spaces small enough are scored whole; the cpu space adds "
    f"every config of its non-csr families); at most {MAX_CANDIDATES:,} (each costs "
    "~1.2 KB of memory).",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--verify",
    is_flag=True,
    help="Measure the top-k, the baseline and (cpu) the library references on the target "
    "(cpu: interleaved rounds, medians); record them in the store. A candidate is named "
    "faster than the baseline only when its median ± interquartile range clears the "
    "baseline's.",
)
@click.option(
    "--wait-quiet",
    "wait_quiet",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="With --verify: wait up to SECONDS for a quiet machine before timing, and "
    "re-measure (within the same SECONDS) when it was busy while timing.",
)
@click.option(
    "--cover-families/--no-cover-families",
    default=True,
    show_default=True,
    help="Include each kernel family's best-ranked config in the top-k "
    "(cpu: csr, dia, bcsr, reordered, panel).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Threads of the verified kernels and library references (default: all cores).",
)
@db_option("to record the --verify measurements in (and --learn's records)")
@click.option("--no-record", is_flag=True, help="Do not record the --verify measurements.")
@click.option(
    "--learn",
    is_flag=True,
    help="With --verify: refine a local copy of the model on the measured configs "
    "(CostModel.update), saved as $COGNATE_HOME/models/<target>-<op>.safetensors; later "
    "runs without --model use it.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
@click.option(
    "--emit",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the chosen schedule here (cpu: C source; spade: simulator config YAML): "
    "this run's pick, or with --from-json that result's pick, never re-timed.",
)
@click.option(
    "--from-json",
    "from_json",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="A result of an earlier run (its --json output, or the file each run saves under "
    "$COGNATE_HOME/results/): with --emit DIR, write its pick without ranking or timing.",
)
@click.pass_context
def tune(
    ctx: click.Context,
    matrix: Path | None,
    target: str,
    op: str,
    width: int,
    model: Path | None,
    top_k: int,
    candidates: int,
    seed: int,
    verify: bool,
    wait_quiet: float | None,
    cover_families: bool,
    threads: int | None,
    db: Path | None,
    no_record: bool,
    learn: bool,
    as_json: bool,
    emit: Path | None,
    from_json: Path | None,
) -> None:
    """Rank schedules of MATRIX for TARGET with a cost model (lower score = faster).

    `cognate tune --from-json FILE --emit DIR` writes the pick of an earlier run instead."""
    from cognate.errors import CognateError

    if from_json is not None:
        _emit_from_json(ctx, matrix, from_json, emit, as_json)
        return
    if matrix is None:
        raise click.UsageError("Missing argument 'MATRIX' (or --from-json FILE --emit DIR).")
    _check_bounds(top_k, candidates)
    if learn and not verify:
        raise CognateError("--learn refines the model on --verify's measurements: add --verify")
    if wait_quiet is not None and not verify:
        raise CognateError("--wait-quiet waits to time --verify's measurements: add --verify")
    console = _console(as_json)
    _say_if_it_cannot_run_here(target, verify)
    run = dict(target=target, op=op, width=width, top_k=top_k, model=model, verify=verify)
    run.update(candidates=candidates, seed=seed, cover_families=cover_families, threads=threads)
    store = db if verify and not no_record else None
    result, model_note = _run(matrix, run, store, wait_quiet, as_json, console)
    recorded = _record(result, db, no_record)
    learned = _learn(result, seed) if learn and not result.all_failed else None
    files = _emit_files(result, emit)
    out = {**result.as_dict(), "matrix_path": str(Path(matrix).resolve())}
    saved = _save(out)
    if result.unreliable:  # with --json on stderr (and "unreliable": true in the JSON)
        console.print(result.load.get("line") or "timings unreliable: the machine was busy")
    if as_json:
        _print_json(out, files, recorded, model_note, learned, saved)
    else:
        _print_text(console, ctx, result, recorded, learned, files, saved)
    if result.all_failed:  # nothing ran: no pick, and a script must not read success
        ctx.exit(1)


def _run(
    matrix: Path,
    run: dict[str, Any],
    store: Path | None,
    wait_quiet: float | None,
    as_json: bool,
    console: Any,
) -> tuple[Any, str | None]:
    """Load the matrix and the model (``choose_model``: the one cognate.tune and TunedSparse
    resolve, loaded once) and tune; with ``wait_quiet``, wait for a quiet machine first and
    tune again (once it is quiet) while the timings were taken on a busy one, until the
    seconds run out. Returns the result and the line saying which model, if any."""
    import time

    from cognate.api import tune as tune_api
    from cognate.formats.read import load_matrix
    from cognate.progress import say
    from cognate.search.learn import choose_model

    loaded = load_matrix(matrix)
    chosen = choose_model(run["model"], run["target"], run["op"])
    if chosen.note:
        console.print(chosen.note, soft_wrap=True, markup=False)
    run = {**run, "model": chosen.model}
    if store is not None:  # a damaged or unwritable store: one line now, not after timing
        _check_store(store)
    announce = None if as_json else say  # plain lines on stderr: a pipe sees them too
    deadline = None if wait_quiet is None else time.monotonic() + wait_quiet
    if deadline is not None:
        _wait_for_quiet(deadline, run["threads"], run["target"])
    # no spinner while measuring: its count / ETA lines on stderr (a pipe too) say enough
    result = tune_api(loaded, **run, announce=announce)
    while deadline is not None and result.unreliable and time.monotonic() < deadline:
        say("the machine was busy while timing: measuring again once it is quiet")
        if not _wait_for_quiet(deadline, run["threads"], run["target"]):
            break
        result = tune_api(loaded, **run, announce=announce)
    return result, chosen.note


QUIET_POLL_S = 5.0


def _wait_for_quiet(deadline: float, threads: int | None, target: str) -> bool:
    """Wait until the machine is quiet (``timing.machine_load``) or ``deadline`` (monotonic)
    passes; whether it is quiet. A line on stderr says what it waits for."""
    import time

    from cognate.progress import say
    from cognate.targets import get_target
    from cognate.timing import machine_load

    if not get_target(target).exclusive:
        return True  # a simulator's runs do not depend on the load
    threads = threads or get_target(target).timing_threads()
    said = False
    while True:
        load = machine_load(threads)
        if not load.busy:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            say(f"still busy after the --wait-quiet time ({load.line()}): timing anyway")
            return False
        if not said:
            say(f"{load.line()}: waiting up to {left:.0f} s for a quiet machine (--wait-quiet)")
            said = True
        time.sleep(min(QUIET_POLL_S, left))


def _emit_files(result: Any, emit: Path | None) -> list[Path]:
    from cognate.errors import CognateError
    from cognate.search import emit as emit_files

    if emit is None:
        return []
    if result.all_failed:
        raise CognateError(f"--emit {emit}: no config ran, so there is no pick to write")
    return emit_files(result, emit)


def _save(out: dict[str, Any]) -> Path | None:
    """Keep the run's JSON for ``--from-json`` (a home that cannot be written: a warning
    line, the run's output stands)."""
    from cognate.errors import CognateError
    from cognate.search import save_result

    try:
        return save_result(out)
    except CognateError as err:
        click.echo(f"note: {err}", err=True)
        return None


def _print_json(
    out: dict[str, Any],
    files: list[Path],
    recorded: tuple[Path, int] | None,
    model_note: str | None,
    learned: dict[str, Any] | None,
    saved: Path | None,
) -> None:
    out = dict(out)
    if files:
        out["emitted"] = [str(p) for p in files]
    if recorded is not None:
        out["recorded"] = {"db": str(recorded[0]), "rows": recorded[1]}
    if model_note:
        out["model_note"] = model_note
    if learned is not None:
        out["learned"] = learned
    out["saved"] = str(saved) if saved else None
    click.echo(json.dumps(out, indent=2))


def _print_text(
    console: Console,
    ctx: click.Context,
    result: Any,
    recorded: tuple[Path, int] | None,
    learned: dict[str, Any] | None,
    files: list[Path],
    saved: Path | None,
) -> None:
    from cognate.model.portfolio import ranking_line

    _print_table(console, result)
    _print_summary(console, result)
    if recorded is not None:
        console.print(f"recorded {recorded[1]} measurements in {recorded[0]}")
    if result.ranking:
        console.print(ranking_line(result.ranking), soft_wrap=True, markup=False)
    if learned is not None:
        console.print(_learned_line(learned), soft_wrap=True, markup=False)
    for path in files:
        console.print(f"wrote {path}")
    for line in next_steps(ctx, result, saved, bool(files)):
        console.print(line, soft_wrap=True, markup=False)


def _emit_from_json(
    ctx: click.Context, matrix: Path | None, path: Path, emit: Path | None, as_json: bool
) -> None:
    """``tune --from-json FILE --emit DIR``: the saved pick written, nothing ranked or
    timed (options that would rank or time are refused, not ignored)."""
    from cognate.errors import CognateError
    from cognate.search import emit_from_json

    if emit is None:
        raise CognateError("--from-json FILE writes that result's pick: add --emit DIR")
    given = [n for n in _explicit(ctx) if n not in ("from_json", "emit", "as_json")]
    if matrix is not None or given:
        what = ", ".join(["MATRIX"] * (matrix is not None) + [_flag(ctx, n) for n in given])
        raise CognateError(f"--from-json emits a saved pick without ranking or timing: drop {what}")
    files = emit_from_json(path, emit)
    if as_json:
        click.echo(json.dumps({"from_json": str(path), "emitted": [str(p) for p in files]}))
        return
    for written in files:
        click.echo(f"wrote {written}")


# --- the next-step hints: each one a command to copy, with every option of this run --------

HINT_DROPS = ("as_json", "emit", "from_json", "wait_quiet", "learn")
WAIT_QUIET_HINT_S = 600


def _explicit(ctx: click.Context) -> list[str]:
    """The parameters the user gave (command line or environment), in the command's order."""
    names = []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name)
        if param.name != "matrix" and source is not None and source < ParameterSource.DEFAULT:
            names.append(param.name)
    return names


def _flag(ctx: click.Context, name: str) -> str:
    param = next(p for p in ctx.command.params if p.name == name)
    return max(param.opts, key=len)


def command_line(ctx: click.Context, add: tuple[str, ...] = ()) -> str:
    """This run's command as the user can type it again: the matrix, --target / --op /
    --width always, every other option the user gave (not --json, --emit, --from-json,
    --wait-quiet or --learn, which the hints add where they mean them), then ``add``."""
    words = ["cognate", "tune", str(ctx.params["matrix"])]
    names = ["target", "op", "width"]
    names += [n for n in _explicit(ctx) if n not in names and n not in HINT_DROPS]
    for name in names:
        param = next(p for p in ctx.command.params if p.name == name)
        value = ctx.params[name]
        if isinstance(param, click.Option) and param.is_flag:
            if param.secondary_opts:  # --x/--no-x: the one matching the value
                words.append(param.opts[0] if value else param.secondary_opts[0])
            elif value:
                words.append(param.opts[0])
            continue
        words += [max(param.opts, key=len), str(value)]
    return shlex.join([*words, *add])


def next_steps(ctx: click.Context, result: Any, saved: Path | None, emitted: bool) -> list[str]:
    """What to do with the run, as commands to copy: write or run the pick (from the saved
    result: no new ranking or timing), measure it, or measure it again on a quiet machine."""
    from cognate.targets import get_target

    target = get_target(result.target)
    lines = []
    if saved is not None and not result.all_failed:
        if not emitted:
            emit = shlex.join(["cognate", "tune", "--from-json", str(saved), "--emit", "DIR"])
            lines.append(f"to keep this pick: `{emit}` writes it (this run's choice, not re-timed)")
        if target.has_kernel:
            run = "(X, Y, out=values)" if result.op == "sddmm" else "(B, out=C)"
            lines.append(
                f"to run it: in Python, `cognate.search.kernel_from_json({str(saved)!r}){run}` "
                "runs it on your arrays (A packed once)"
            )
    if not result.verified and target.missing() is None:
        lines.append(
            f"to measure the top {ctx.params['top_k']} here: `{command_line(ctx, ('--verify',))}`"
        )
    if result.verified and result.unreliable and ctx.params.get("wait_quiet") is None:
        again = command_line(ctx, ("--wait-quiet", str(WAIT_QUIET_HINT_S)))
        lines.append(f"to measure again when the machine is quiet: `{again}`")
    return lines


def _console(as_json: bool) -> Console:
    """stdout (stderr under --json). Not a terminal (a pipe, a log): 160 columns instead of
    rich's 80, so a config's row stays one line or two instead of wrapping into ten."""
    console = Console(stderr=as_json)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=as_json, width=PIPE_WIDTH)
    return console


def _check_bounds(top_k: int, candidates: int) -> None:
    """One line (and nothing allocated) for a size past the bounds above."""
    from cognate.errors import CognateError

    if candidates > MAX_CANDIDATES:
        raise CognateError(
            f"--candidates {candidates}: at most {MAX_CANDIDATES:,} (each candidate is held "
            "in memory while it is scored, ~1.2 KB)"
        )
    if top_k > MAX_TOP_K:
        raise CognateError(
            f"--top-k {top_k}: at most {MAX_TOP_K} (a whole spade space; with --verify each "
            "one is measured)"
        )


def _say_if_it_cannot_run_here(target: str, verify: bool) -> None:
    """When this machine cannot run the target's kernels (a gpu target without a CUDA GPU),
    say so first: the errors that may follow (no model, no runner) all come from it."""
    from cognate.errors import CognateError
    from cognate.targets import get_target

    missing = get_target(target).missing()
    if missing is None:
        return
    if verify:
        raise CognateError(f"--target {target} --verify: {missing}")
    # on stderr, where the errors that may follow go
    click.echo(f"note: {missing}", err=True)
    click.echo(
        f"{target} kernels cannot run here: a {target} model can rank them, --verify cannot",
        err=True,
    )


def _learn(result: Any, seed: int) -> dict[str, Any]:
    from cognate.search.learn import learn

    return learn(result, seed=seed)


def _learned_line(learned: dict[str, Any]) -> str:
    from cognate.progress import plural

    line = (
        f"refined the local model {learned['path']} on {learned['added']} measured configs "
        f"({learned['measurements']} in {plural(learned['updates'], 'update')} since "
        f"{learned['from']})"
    )
    if learned.get("superseded"):
        line += f"; it supersedes the local copy refined from {learned['superseded']}"
    return line


def _check_store(db: Path | None) -> None:
    """Open the store --verify will record into, before anything is measured: a damaged or
    unwritable store is one line now, not after minutes of timing."""
    from cognate.store import Store, default_db_path

    with Store(db if db is not None else default_db_path()):
        pass


def _record(result: Any, db: Path | None, no_record: bool) -> tuple[Path, int] | None:
    """Keep the verified measurements in the store (the next training uses them)."""
    if not result.verified or no_record:
        return None
    from cognate.search import record_verified
    from cognate.store import default_db_path

    path = db if db is not None else default_db_path()
    return path, record_verified(result, path)
