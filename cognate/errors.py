"""The one error type users see: a single line naming what and where."""

from __future__ import annotations

from pathlib import Path


class CognateError(Exception):
    """A user-facing error; the CLI prints ``str(err)`` as one line and exits 1."""


class InputError(CognateError):
    """Bad input file: the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = " ".join(str(problem).split())  # always one line
        super().__init__(f"{self.path}: {self.problem}")
