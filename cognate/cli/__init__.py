"""The ``cognate`` command line: one click group, commands contributed by small modules.

Each module listed in ``_COMMAND_MODULES`` defines ``register(main, data)`` and attaches
its commands. Errors reach the user as one line on stderr and exit code 1, never as a
traceback (set COGNATE_DEBUG=1 to see one).
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from cognate import __version__
from cognate.errors import CognateError
from cognate.lifetime import exit_code_of

_COMMAND_MODULES: tuple[str, ...] = (
    "cognate.cli.data_matrix",
    "cognate.cli.data_suitesparse",
    "cognate.cli.data_store",
    "cognate.cli.data_waco",
    "cognate.cli.collect",
    "cognate.cli.pretrain",
    "cognate.cli.finetune",
    "cognate.cli.portfolio",
    "cognate.cli.tune",
    "cognate.cli.evaluate",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cognate")
def main() -> None:
    """cognate: cost-model-driven autotuning of sparse SpMM / SDDMM schedules."""


@main.group()
def data() -> None:
    """Matrices and records: inspect, generate, fetch, import, export."""


def _register_commands() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # not written yet: its commands are not offered
                continue
            raise
        module.register(main, data)


_register_commands()


def error_line(message: str) -> None:
    """Print one error line to stderr (newlines folded so it stays one line)."""
    click.echo(f"cognate: error: {' '.join(str(message).split())}", err=True)


def run(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    debug = bool(os.environ.get("COGNATE_DEBUG"))
    try:
        rc = main.main(args=argv, prog_name="cognate", standalone_mode=False)
    except click.exceptions.Abort:
        error_line("interrupted")
        sys.exit(130)
    except click.ClickException as exc:  # usage errors: click's own format
        exc.show()
        sys.exit(exc.exit_code)
    except CognateError as exc:
        if debug:
            raise
        error_line(str(exc))
        sys.exit(1)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP where a command stops on them
        error_line("interrupted")
        sys.exit(exit_code_of(exc))
    except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
        if debug:
            raise
        error_line(
            f"internal error: {type(exc).__name__}: {exc} (COGNATE_DEBUG=1 shows a traceback)"
        )
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)
