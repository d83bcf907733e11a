"""One ``--db`` option: every command that reads or writes a record store takes it with the
same help text, the same path type and (where a default makes sense) the same default."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from cognate.cli import main
from cognate.cli.options import DB_HELP

STORE_COMMANDS = (
    ("collect",),
    ("pretrain",),
    ("finetune",),
    ("portfolio",),
    ("tune",),
    ("evaluate",),
    ("data", "import"),
    ("data", "export"),
    ("data", "import-waco"),
)
NO_DEFAULT = {("evaluate",)}  # evaluate collects a small store of its own without --db


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return command


def _db(command: click.Command) -> click.Option:
    (option,) = [p for p in command.params if "--db" in getattr(p, "opts", ())]
    return option


def test_every_store_command_has_the_one_db_option() -> None:
    groups = [main, main.commands["data"]]
    with_db = {
        (*(("data",) if group is not main else ()), name)
        for group in groups
        for name, command in group.commands.items()
        if any("--db" in getattr(p, "opts", ()) for p in command.params)
    }
    assert with_db == set(STORE_COMMANDS)
    for path in STORE_COMMANDS:
        option = _db(_command(path))
        assert option.help.startswith(DB_HELP), path
        assert isinstance(option.type, click.Path), path  # a directory: the store says so
        assert option.type.type is Path and not option.required, path
        assert ("$COGNATE_HOME/records.sqlite" in option.help) == (path not in NO_DEFAULT)


@pytest.mark.parametrize("path", STORE_COMMANDS, ids=" ".join)
def test_without_db_the_default_store_is_used(path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COGNATE_HOME", str(tmp_path))
    command = _command(path)
    ctx = click.Context(command)
    value = _db(command).process_value(ctx, None)
    assert value == (None if path in NO_DEFAULT else tmp_path / "records.sqlite")
    given = _db(command).process_value(ctx, str(tmp_path / "x.sqlite"))
    assert given == tmp_path / "x.sqlite"  # an explicit --db always wins
