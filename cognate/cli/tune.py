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

from cognate.cli.options import TARGET, db_option
from cognate.cli.tune_output import print_summary, print_table
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
    "--bf16",
    is_flag=True,
    help="With --verify (cpu SpMM): also time the pick's plain CSR kernel with B rounded to "
    "bfloat16 at each call (float32 sums, about 2^-9 relative error per element of B), "
    "and pick it when it is fastest. Opt-in: it changes the result.",
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
    bf16: bool,
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
    run.update(bf16=bf16)
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
    new_host = _new_host_note(chosen.model)
    if new_host:
        console.print(new_host, soft_wrap=True, markup=False)
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


def _new_host_note(model: Any) -> str | None:
    from cognate.model.encoding import new_host_note

    encoder = getattr(model, "encoder", None)
    return new_host_note(encoder, model.metadata) if encoder is not None else None


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

    print_table(console, result)
    print_summary(console, result)
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
