"""``cognate tune``: rank schedules for one matrix with a cost model, optionally verify them.

torch and the model load inside the command, so ``cognate --help`` stays fast.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
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
    """The top-k in the model's rank order, the baseline once, and a note per marked row."""
    from cognate.hostid import is_simulated

    matrix, verified = result.matrix, result.verified
    simulated = is_simulated(result.target)
    # two short header lines, not a table title: a title wraps mid-phrase at 80 columns
    console.print(f"{matrix.name}: {matrix.shape[0]} x {matrix.shape[1]}, {matrix.nnz} nnz")
    console.print(
        f"{result.target} {result.op}, width {result.width}: top {len(result.candidates)} "
        f"of {result.n_scored} scored configs"
    )
    base = result.baseline
    rows = list(result.candidates)
    if not any(c.config == base.config for c in rows):
        rows.append(base)  # shown once: as its own row only when not among the top-k
    notes = [_notes(c, base) for c in rows]
    table = Table()
    table.add_column("rank", justify="right")
    table.add_column("config")
    table.add_column("score", justify="right")
    if verified:
        table.add_column("simulated" if simulated else "runtime", justify="right")
        table.add_column("vs base", justify="right")
    if any(notes):
        table.add_column("note")
    for c, note in zip(rows, notes, strict=True):
        cells = [str(c.scored_rank or c.rank), c.description, f"{c.score:.4f}"]
        if verified:
            ok = c.status == "ok" and c.runtime_s
            spread = f" ±{_time(c.spread_s)}" if ok and c.spread_s else ""  # interquartile
            cells.append(_time(c.runtime_s) + spread if ok else c.status or "-")
            cells.append(f"{base.runtime_s / c.runtime_s:.3f}x" if ok and base.runtime_s else "-")
        table.add_row(*cells, *([", ".join(note)] if any(notes) else []))
    console.print(table)
    for line in _footnotes(result, notes, simulated and verified):
        console.print(line)


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


def _footnotes(result: Any, notes: list[list[str]], simulated: bool) -> list[str]:
    marks = {m for note in notes for m in note}
    lines = [
        f"rank: place in the model's ranking of the {result.n_scored} scored configs "
        "(lower score = predicted faster)"
    ]
    if "portfolio" in marks:
        lines.append(
            "portfolio: one of the model's fixed configs (the set that won most often on its "
            "training matrices), ranked ahead of the rest in the portfolio's own order"
        )
    if "family pick" in marks:
        lines.append(
            "family pick: its kernel family's best-ranked config, measured in place of a lower "
            "pick so that every family is tried (--no-cover-families: the plain top-k)"
        )
    if "variant" in marks:
        lines.append(
            "variant: a ranked config with another vector width / register tile or thread "
            "schedule (knobs the model does not rank), measured beside it so that the timing "
            "decides"
        )
    if simulated:
        lines.append(f"runtimes are simulated: the {result.target} simulator, not hardware")
    return lines


def _kept_baseline_text(result: Any, rank_1_is_base: bool, sim: str) -> str:
    """Why the baseline stays, agreeing with the table: either nothing ran faster, or the
    fastest candidate's lead is within the timing spread (named, with both figures)."""
    base = result.baseline
    faster = [
        c
        for c in result.candidates
        if c.config != base.config and c.status == "ok" and c.runtime_s
        if c.runtime_s < base.runtime_s
    ]
    start = "rank 1 is the baseline config" if rank_1_is_base else "kept the baseline config"
    kept = f"keep it ({_time(base.runtime_s)}{sim})"
    if not faster:
        return f"{start}, and no other candidate ran faster: {kept}"
    fastest = min(faster, key=lambda c: c.runtime_s)
    noise = max(fastest.spread_s or 0.0, base.spread_s or 0.0)
    busy = " on a busy machine" if result.unreliable else ""
    name = f"rank {fastest.scored_rank or fastest.rank}"
    name += f"'s variant ({fastest.description})" if fastest.variant else ""
    return (
        f"{start}: {name} ran "
        f"{base.runtime_s / fastest.runtime_s:.3f}x faster ({_time(fastest.runtime_s)}), but "
        f"its lead ({_time(base.runtime_s - fastest.runtime_s)}) is within the timing spread "
        f"(±{_time(noise)}){busy}, so it is not a measured win: {kept}"
    )


def _next_step(result: Any, matrix: Path) -> str:
    """What to do with the choice, in one line: the emit command, and on a target with a
    callable kernel the Python call that runs it."""
    from cognate.targets import get_target

    call = f"--target {result.target} --op {result.op} --width {result.width}"
    call += " --verify" if result.verified else ""
    emit = f"`cognate tune {matrix} {call} --emit DIR` writes the chosen schedule"
    if not get_target(result.target).has_kernel:
        return f"to keep it: {emit}"
    run = "kernel(X, Y, out=values)" if result.op == "sddmm" else "kernel(B, out=C)"
    verify = ", verify=True" if result.verified else ""
    return (
        f"to use it: {emit}; in Python, `cognate.tune(path, target='{result.target}', "
        f"op='{result.op}', width={result.width}{verify}).{run}` runs it on your arrays "
        "(A packed once)"
    )


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
    if best.status != "ok":
        console.print("no top-k candidate ran successfully; see the table")
        return
    if result.kept_baseline:
        text = _kept_baseline_text(result, rank_1_is_base, sim)
    else:
        text = f"best: rank {best.scored_rank or best.rank}, {_time(best.runtime_s)}{sim}, "
        text += best.description
        if result.speedup_vs_baseline is not None:
            text += f"; {result.speedup_vs_baseline:.3f}x vs baseline"
    if result.speedup_vs_library is not None:
        text += f"; {result.speedup_vs_library:.3f}x vs {result.library}"
    console.print(text)
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
@click.argument("matrix", type=click.Path(path_type=Path))
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
    help="Sampled candidates (spaces small enough are scored whole); "
    f"at most {MAX_CANDIDATES:,} (each costs ~1.2 KB of memory).",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--verify",
    is_flag=True,
    help="Measure the top-k, the baseline and (cpu) the library references on the target "
    "(cpu: interleaved rounds, medians); record them in the store.",
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
    help="Write the chosen schedule here (cpu: C source; spade: simulator config YAML).",
)
def tune(
    matrix: Path,
    target: str,
    op: str,
    width: int,
    model: Path | None,
    top_k: int,
    candidates: int,
    seed: int,
    verify: bool,
    cover_families: bool,
    threads: int | None,
    db: Path | None,
    no_record: bool,
    learn: bool,
    as_json: bool,
    emit: Path | None,
) -> None:
    """Rank schedules of MATRIX for TARGET with a cost model (lower score = faster)."""
    from cognate.api import tune as tune_api
    from cognate.errors import CognateError
    from cognate.formats.read import load_matrix
    from cognate.model.portfolio import ranking_line
    from cognate.progress import say
    from cognate.search import emit as emit_files
    from cognate.search.learn import model_to_use

    _check_bounds(top_k, candidates)
    if learn and not verify:
        raise CognateError("--learn refines the model on --verify's measurements: add --verify")
    console = _console(as_json)
    _say_if_it_cannot_run_here(target, verify)
    model, model_note = model_to_use(model, target, op)
    if model_note:
        console.print(model_note, soft_wrap=True, markup=False)
    loaded = load_matrix(matrix)
    if verify and not no_record:
        _check_store(db)
    # no spinner while measuring: its count / ETA lines on stderr (a pipe too) say enough
    result = tune_api(
        loaded,
        target=target,
        op=op,
        width=width,
        top_k=top_k,
        model=model,
        verify=verify,
        candidates=candidates,
        seed=seed,
        cover_families=cover_families,
        threads=threads,
        announce=None if as_json else say,  # plain lines on stderr: a pipe sees them too
    )
    recorded = _record(result, db, no_record)
    learned = _learn(result, seed) if learn else None
    files = emit_files(result, emit) if emit is not None else []
    if result.unreliable:  # with --json on stderr (and "unreliable": true in the JSON)
        console.print(result.load.get("line") or "timings unreliable: the machine was busy")
    if as_json:
        out = result.as_dict()
        if emit is not None:
            out["emitted"] = [str(p) for p in files]
        if recorded is not None:
            out["recorded"] = {"db": str(recorded[0]), "rows": recorded[1]}
        if model_note:
            out["model_note"] = model_note
        if learned is not None:
            out["learned"] = learned
        click.echo(json.dumps(out, indent=2))
        return
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
    if not files:
        console.print(_next_step(result, matrix), soft_wrap=True, markup=False)


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
