"""Option types shared by the commands."""

from __future__ import annotations

from typing import Any

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
