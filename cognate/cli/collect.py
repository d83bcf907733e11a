"""``cognate collect``: measure schedules of matrices on a target into the record store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cognate.cli.options import db_option
from cognate.collect import DEFAULT_CONFIGS, DEFAULT_RETRIES, DEFAULT_WIDTH, collect
from cognate.targets import OPS, target_names


@click.command("collect")
# Checked by collect itself (one line, exit 1, like every other bad value); the help lists
# the registries' names, so a new target or op shows up here without editing this text.
@click.option(
    "--target",
    "target_name",
    required=True,
    metavar="NAME",
    help=f"One of {', '.join(target_names())}.",
)
@click.option("--op", required=True, metavar="OP", help=f"One of {', '.join(OPS)}.")
@click.option("--width", type=int, default=DEFAULT_WIDTH, show_default=True, help="Dense width N.")
@click.option(
    "--configs",
    "n_configs",
    type=int,
    default=None,
    help=f"Configs sampled per matrix (default {DEFAULT_CONFIGS}), spread over the kernel "
    "families, plus the baseline; with --all-configs, the cap for spaces too large to "
    "enumerate.",
)
@click.option("--all-configs", is_flag=True, help="Every config of the space (spade, gpu).")
@click.option(
    "--all-variants",
    is_flag=True,
    help="Every kernel variant of the baseline (cpu SpMM: 512/256-bit register tiles, row "
    "schedules) on top of the --configs sample, instead of one family of its spread.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@db_option("to record the measurements in (created if new)", "db_path")
@click.option(
    "--ray",
    "ray_address",
    default=None,
    metavar="ADDRESS",
    help="Run on Ray: 'auto', 'local' (start a local cluster) or a cluster address.",
)
@click.option(
    "--jobs",
    type=int,
    default=None,
    help="Local processes (non-exclusive targets; at most 4 per core).",
)
@click.option("--timeout", "timeout_s", type=float, default=None, help="Per-config limit, s.")
@click.option("--repeats", type=int, default=None, help="Timed repeats per config.")
@click.option(
    "--from-model",
    type=click.Path(dir_okay=False),
    default=None,
    help="Measure this cost model's top --configs candidates per matrix (those "
    "`cognate tune` would pick) instead of a random sample: refines the model where it searches.",
)
@click.option(
    "--retries",
    type=int,
    default=DEFAULT_RETRIES,
    show_default=True,
    help="Times a resume measures a stored timeout/error record again.",
)
@click.option("--retry-failed", is_flag=True, help="Re-measure every timeout/error record.")
@click.option(
    "--batch",
    type=int,
    default=1,
    show_default=True,
    help="Configs timed per chunk: one load reading (0.2 s) and one store write per chunk; "
    "a kill loses at most one chunk.",
)
@click.option(
    "--host-id",
    default=None,
    metavar="ID",
    help="This machine's id in the records (default $COGNATE_HOST_ID, else a hash of the "
    "CPU model and family, vector ISA, caches, core count and memory).",
)
@click.argument("matrices", nargs=-1, required=True, type=click.Path())
@click.pass_context
def collect_command(
    ctx: click.Context,
    target_name: str,
    op: str,
    width: int,
    n_configs: int | None,
    all_configs: bool,
    all_variants: bool,
    seed: int,
    db_path: Path,
    ray_address: str | None,
    jobs: int | None,
    timeout_s: float | None,
    repeats: int | None,
    from_model: str | None,
    retries: int,
    retry_failed: bool,
    batch: int,
    host_id: str | None,
    matrices: tuple[str, ...],
) -> None:
    """Measure configs of each MATRIX (files or folders); resumable, Ctrl-C safe. Each
    matrix is stored with its absolute path (and content hash), so training reads it back
    from any directory."""
    # Only the options the user gave reach the runner: each target keeps its own defaults.
    runner_options: dict[str, Any] = {}
    if timeout_s is not None:
        runner_options["timeout_s"] = timeout_s
    if repeats is not None:
        runner_options["repeats"] = repeats
    summary = collect(
        target_name,
        op,
        width,
        matrices,
        db_path=db_path,
        n_configs=DEFAULT_CONFIGS if n_configs is None else n_configs,
        all_configs=all_configs,
        seed=seed,
        ray_address=ray_address,
        jobs=jobs,
        runner_options=runner_options,
        from_model=from_model,
        retries=retries,
        retry_failed=retry_failed,
        host_id=host_id,
        batch=batch,
        all_variants=all_variants,
    )
    click.echo(f"cognate: {summary.line()}")
    ctx.exit(summary.exit_code)


def register(main: click.Group, data: click.Group) -> None:
    main.add_command(collect_command)
