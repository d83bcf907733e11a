"""Small helpers every module shares: atomic file writes, YAML loading, one-line messages.

One home, so a fix (a unique temp name, a readable YAML error) lands everywhere at once.
"""

from __future__ import annotations

import contextlib
import numbers
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


def positive_int(value: object, what: str) -> int:
    """``value`` when it is a positive integer (a numpy integer too, never a bool), else a
    CognateError: "<what> must be a positive integer, got <value>"."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise CognateError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


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


# YAML files cognate reads are small hand-written settings: a bound on their size, on the
# nesting of their collections, and no aliases at all (none of configs/ uses one) keep a
# hostile file (an alias "billion laughs", 50k nested brackets) from costing more than a
# read of MAX_YAML_BYTES.
MAX_YAML_BYTES = 1 << 20
MAX_YAML_DEPTH = 64


def _bounded_loader() -> type:
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """yaml.SafeLoader that refuses aliases and collections nested past MAX_YAML_DEPTH
        (the composer recurses once per level: deep nesting would be a RecursionError)."""

        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.get_event()
                raise yaml.composer.ComposerError(
                    None, None, f"aliases (*{event.anchor}) are not allowed", event.start_mark
                )
            if self.depth >= MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_YAML_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def read_bounded(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``; a missing file or one over ``limit`` bytes is one line."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(limit + 1)
    except OSError as err:
        raise CognateError(f"{path}: cannot read {what}: {err.strerror or err}") from None
    if len(raw) > limit:
        raise CognateError(f"{path}: {what} is larger than {limit} bytes")
    return raw


def parse_yaml(raw: bytes, path: str | Path, what: str = "YAML file") -> Any:
    """The YAML document in ``raw`` (read from ``path``), parsed with the bounds above;
    binary data, bad UTF-8 and malformed or too deep YAML are one CognateError line."""
    import yaml  # imported here: most commands never read YAML, and --help stays fast

    if len(raw) > MAX_YAML_BYTES:
        raise CognateError(f"{path}: {what} is larger than {MAX_YAML_BYTES} bytes")
    if b"\0" in raw:
        raise CognateError(f"{path}: {what} is binary data (NUL bytes), not YAML")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CognateError(f"{path}: {what} is not UTF-8 text (byte {err.start})") from None
    try:
        return yaml.load(text, Loader=_bounded_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        raise CognateError(f"{path}: malformed {what}: {_yaml_problem(err)}") from None
    except RecursionError:  # a belt to the depth bound's braces
        raise CognateError(f"{path}: malformed {what}: nested too deep") from None


def _yaml_problem(err: Any) -> str:
    """A YAML error as "problem (line L, column C)": PyYAML's own text quotes the source
    under a "<unicode string>" name, over several lines."""
    problem = getattr(err, "problem", None)
    mark = getattr(err, "problem_mark", None)
    if not problem:
        return one_line(err, 300)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    context = getattr(err, "context", None)
    return one_line(f"{context + ': ' if context else ''}{problem}{where}", 300)


def load_yaml(path: str | Path, what: str = "YAML file") -> Any:
    """The parsed YAML document at ``path`` (safe, bounded: see ``parse_yaml``); a missing,
    oversized or malformed file is one CognateError line naming the file."""
    return parse_yaml(read_bounded(path, MAX_YAML_BYTES, what), path, what)
