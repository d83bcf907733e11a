"""A ``tune`` run's result kept as JSON, so its pick can be written out or run later
without ranking or timing anything again.

Every ``cognate tune`` saves its JSON object (``TuneResult.as_dict`` plus the matrix file's
absolute path) as ``$COGNATE_HOME/results/<matrix>-<target>-<op>-w<width>-<hash>.json``
(the hash of its content: a later run never replaces the file an earlier hint names; the
newest ``KEEP`` files are kept). The next-step hint names that file:
``cognate tune --from-json FILE --emit DIR`` writes the pick (``emit.emit_choice``) and
``cognate.search.kernel_from_json(FILE)`` runs it on the matrix it was tuned for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cognate.errors import CognateError
from cognate.paths import cognate_home
from cognate.util import atomic_write

REQUIRED = ("matrix", "target", "op", "width", "best")
KEEP = 500  # saved results kept (a few tens of KB each)


def results_dir() -> Path:
    """Where tune keeps each run's result: $COGNATE_HOME/results."""
    return cognate_home() / "results"


def result_path(found: dict[str, Any], text: str) -> Path:
    """The file a result's JSON object (``text``, its serialized form) is saved in."""
    name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in found["matrix"])
    stem = f"{name.lstrip('.-') or 'matrix'}-{found['target']}-{found['op']}-w{found['width']}"
    return results_dir() / f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"


def save_result(found: dict[str, Any]) -> Path:
    """Save a result's JSON object (atomically) and drop all but the newest ``KEEP``
    saved results; returns the file."""
    text = json.dumps(found, indent=2) + "\n"
    path = result_path(found, text)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)
        _prune(path.parent)
    except OSError as err:
        raise CognateError(f"{path}: cannot save the tune result: {err}") from None
    return path


def _prune(folder: Path) -> None:
    """Remove the oldest saved results beyond ``KEEP`` (another run may remove them first)."""
    saved = sorted(folder.glob("*.json"), key=_mtime, reverse=True)
    for old in saved[KEEP:]:
        old.unlink(missing_ok=True)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def load_result(path: str | Path) -> dict[str, Any]:
    """A result's JSON object from ``path`` (``tune --json`` output or a saved result);
    one CognateError line when it is not one."""
    path = Path(path).expanduser()
    try:
        found = json.loads(path.read_text())
    except FileNotFoundError:
        raise CognateError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CognateError(f"{path}: not a tune result (JSON): {err}") from None
    missing = [key for key in REQUIRED if not isinstance(found, dict) or key not in found]
    if missing or not isinstance(found["best"], dict) or "config" not in found["best"]:
        raise CognateError(
            f"{path}: not a tune result (`cognate tune --json`): missing "
            f"{', '.join(missing) or 'best.config'}"
        )
    if found.get("verified") and found.get("all_failed"):
        raise CognateError(f"{path}: every verified config failed in that run: no pick to use")
    return found


def emit_from_json(path: str | Path, directory: str | Path) -> list[Path]:
    """Write the pick of the result in ``path`` into ``directory`` (no ranking, no timing)."""
    from cognate.search.emit import emit_choice

    return emit_choice(load_result(path), directory)


def kernel_from_json(path: str | Path) -> Callable[..., Any]:
    """The pick of the result in ``path`` as a callable kernel on the matrix it was tuned
    for (cpu: ``kernel(B, out=None)``, SDDMM ``kernel(X, Y, out=None)``); the matrix is
    read from the path the result names and must be the one tuned (sha256)."""
    from cognate.formats.read import load_matrix
    from cognate.search.emit import chosen_config
    from cognate.targets import get_target

    found = load_result(path)
    source = found.get("matrix_path")
    if not source:
        raise CognateError(f"{path}: the result names no matrix file (tuned from Python?)")
    matrix = load_matrix(source)
    if found.get("matrix_sha256") and matrix.sha256 != found["matrix_sha256"]:
        raise CognateError(f"{source}: changed since it was tuned (its sha256 differs)")
    return get_target(found["target"]).kernel(matrix, found["op"], chosen_config(found))
