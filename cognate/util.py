"""Small helpers every module shares: atomic file writes, YAML loading, one-line messages.

One home, so a fix (a unique temp name, a readable YAML error) lands everywhere at once.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from cognate.errors import CognateError


def one_line(text: object, limit: int | None = None) -> str:
    """``text`` with every run of whitespace (newlines included) folded to one space,
    cut to ``limit`` characters when given."""
    folded = " ".join(str(text).split())
    return folded[:limit] if limit is not None else folded


def describe(exc: BaseException, limit: int | None = None) -> str:
    """One line for an exception: its class name and its folded message."""
    text = one_line(exc) or "no message"
    return one_line(f"{type(exc).__name__}: {text}", limit)


@contextlib.contextmanager
def atomic_path(path: str | Path, mode: int = 0o644, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path beside ``path``; on a clean exit it is renamed onto ``path``, on an
    exception removed. Readers never see half a file. The temp name is unique (mkstemp), so
    concurrent writers of one path never share a temp file, and it is in the same directory,
    so the rename is atomic. ``mode``: mkstemp makes 0600; shipped files are meant to be read.
    ``suffix``: the temp name's ending (writers that append their own extension need it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path: str | Path, data: bytes | str, mode: int = 0o644) -> Path:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically (see ``atomic_path``)."""
    raw = data.encode() if isinstance(data, str) else data
    with atomic_path(path, mode) as tmp:
        tmp.write_bytes(raw)
    return Path(path)


def atomic_stream(path: str | Path, write: Callable[[IO[bytes]], Any], mode: int = 0o644) -> Path:
    """Atomically write ``path`` through ``write(file)`` (for writers that stream)."""
    with atomic_path(path, mode) as tmp, open(tmp, "wb") as f:
        write(f)
    return Path(path)


def load_yaml(path: str | Path, what: str = "YAML file") -> Any:
    """The parsed YAML document at ``path`` (safe loader); a missing or malformed file is one
    CognateError line naming the file."""
    import yaml  # imported here: most commands never read YAML, and --help stays fast

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise CognateError(f"{path}: cannot read {what}: {err.strerror or err}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise CognateError(f"{path}: malformed {what}: {one_line(err, 300)}") from None
