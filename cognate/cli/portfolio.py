"""``cognate portfolio``: give a trained model a fixed shortlist it ranks first."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from cognate.cli.options import db_option
from cognate.errors import CognateError


def register(main: click.Group, data: click.Group) -> None:
    main.add_command(portfolio)


@click.command()
@click.argument("model", type=click.Path(path_type=Path, dir_okay=False))
@db_option("with the model's training and validation records")
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True)
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), default=None, help="Default: in place."
)
def portfolio(model: Path, db: Path, top_k: int, output: Path | None) -> None:
    """Choose MODEL's portfolio: the greedy fixed M-set of its training matrices, ranked by
    the model ahead of every other config and anchored to its greedy order, M and the anchor
    chosen on its validation matrices (the model alone when that ranks best there). Its
    held-out matrices are not read; a fine-tuned model's fixed set comes from its K
    fine-tuning matrices only."""
    from cognate import transfer
    from cognate.model.checkpoint import read_metadata
    from cognate.model.cost_model import CostModel
    from cognate.model.portfolio import (
        PORTFOLIO_KEY,
        RANKING_KEY,
        choose_portfolio,
        ranking_decision,
        ranking_line,
        ranking_used,
    )
    from cognate.records import load_runs
    from cognate.targets import get_target

    meta = read_metadata(model)
    space = get_target(meta["target"]).space(meta["op"])
    split = meta.get("split", {})
    # a fine-tuned model saw only its K target matrices ("finetune"), not the whole train split
    part = "finetune" if split.get("finetune") else "train"
    train_keys = {m["sha256"] for m in split.get(part, [])}
    val_keys = {m["sha256"] for m in split.get("validation", [])}
    if not train_keys or not val_keys:
        raise CognateError(f"{model}: its metadata names no training and validation matrices")
    runs = load_runs(db, space)
    train = [r for r in runs if r.key in train_keys]
    validation = [r for r in runs if r.key in val_keys]
    if not train or not validation:
        raise CognateError(
            f"{db}: no records of {model.name}'s training ({len(train)}) or validation "
            f"({len(validation)}) matrices"
        )
    transfer.register()  # a fine-tuned model's loader
    cost_model = CostModel.load(model, space)
    entry = choose_portfolio(cost_model, train, validation, top_k)
    cost_model.metadata[PORTFOLIO_KEY] = entry
    which = "fine-tuning" if part == "finetune" else "training"
    greedy_from = f"greedy set chosen on the {len(train_keys)} {which} matrices"
    cost_model.metadata[RANKING_KEY] = ranking_decision(entry, validation, greedy_from)
    written = cost_model.save(output or model)
    console = Console(stderr=True)
    _print_choice(console, entry, written)
    console.print(ranking_line(ranking_used(cost_model.metadata)), soft_wrap=True, markup=False)


def _print_choice(console: Console, entry: dict, written: Path) -> None:
    k = entry["k"]
    table = Table(
        title=f"validation ({entry['chosen_on']}): top-1 and best of top-{k} by portfolio size, "
        "at its best anchor (typical score gaps per greedy position; fixed: the greedy order)"
    )
    for column in ("portfolio size", "anchor", "top-1", f"top-{k}", "product"):
        table.add_column(column, justify="right")

    def rank(row: dict) -> tuple[bool, float]:  # the choice shows, whatever a rounding tie did
        return bool(row.get("chosen")), row["top1"] * row[f"top{k}"]

    best_per_size: dict[int, dict] = {}
    for row in entry["validation"]:  # rows in anchor order: a tie keeps the smaller anchor
        kept = best_per_size.get(row["size"])
        if kept is None or rank(row) > rank(kept):
            best_per_size[row["size"]] = row
    for row in best_per_size.values():
        if row["size"] == 0:
            size, anchor = "none (model alone)", ""
        else:
            size, anchor = str(row["size"]), str(row["anchor"])
        mark = " *" if row.get("chosen") else ""
        product = row["top1"] * row[f"top{k}"]
        table.add_row(
            size + mark, anchor, f"{row['top1']:.3f}x", f"{row[f'top{k}']:.3f}x", f"{product:.3f}"
        )
    console.print(table)
    if not entry["size"]:
        chosen = "none: the model alone ranks best"
    else:
        order = "greedy order" if entry["fixed_order"] else f"anchor {entry['anchor']:.4g}"
        chosen = f"{entry['size']} configs, {order}"
    console.print(f"portfolio: {chosen}; model written to {written}", soft_wrap=True)
