"""Option types shared by the commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cognate.targets import is_target, target_names


class TargetName(click.ParamType):
    """A registered target's name, checked when the command runs (not when the CLI module
    is imported), so a target registered by a plugin or a test is accepted too."""

    name = "target"

    def get_metavar(self, *args: Any, **kwargs: Any) -> str:
        return "[" + "|".join(target_names()) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, str) and is_target(value):
            return value
        self.fail(f"{value!r} is not one of {', '.join(map(repr, target_names()))}.", param, ctx)


TARGET = TargetName()
F = TypeVar("F", bound=Callable[..., Any])


DB_HELP = "Record store (SQLite file)"
DB_DEFAULT_HELP = "default: $COGNATE_HOME/records.sqlite"


def _default_db(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
    from cognate.paths import default_db_path

    return value if value is not None else default_db_path()


def db_option(what: str = "", param: str = "db", default: bool = True) -> Callable[[F], F]:
    """The ``--db`` option every command that reads or writes a record store takes: one
    help text ("Record store, an SQLite file" + ``what`` + the default), one path type.
    ``default``: without --db the command gets ``$COGNATE_HOME/records.sqlite`` (the store
    ``data import`` and ``collect`` fill by default); else None, which the command reads as
    its own choice (``what`` then says it)."""
    parts = [DB_HELP + (f" {what}" if what else "")]
    if default:
        parts.append(DB_DEFAULT_HELP)
    # Any path: the store itself refuses a directory or a damaged file in one line (exit 1),
    # where click would print a three-line usage error (exit 2).
    return click.option(
        "--db",
        param,
        type=click.Path(path_type=Path),
        default=None,
        callback=_default_db if default else None,
        help="; ".join(parts) + ".",
    )
