"""``tune --emit``: the chosen schedule written out in the target's own form (cpu: the
generated C source; spade: the simulator configuration), as the target's ``artifacts``.

The files are made from the result's JSON object (``TuneResult.as_dict``), so writing them
in the run (``tune --verify --emit DIR``) and later from that run's saved JSON
(``tune --from-json FILE --emit DIR``, ``search.saved``) gives the same files: the pick
that was measured, never a re-timed one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cognate.config import Config
from cognate.errors import CognateError
from cognate.search.result import TuneResult
from cognate.targets import get_target
from cognate.util import atomic_write


def _stem(matrix: str, target: str, op: str, config_hash: str) -> str:
    """``<matrix>-<target>-<op>-<config hash>``; the matrix part is letters, digits and
    ``-_.`` and never starts with a dot (a matrix named ``.`` or ``.x`` would give hidden
    files) or a dash (read as an option by the tools the files go to)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in matrix)
    safe = safe.lstrip(".-")
    return f"{safe or 'matrix'}-{target}-{op}-{config_hash}"


def emit(result: TuneResult, directory: str | Path) -> list[Path]:
    """Write the chosen schedule's files into ``directory``; returns them."""
    return emit_choice(result.as_dict(), directory)


def chosen_config(found: dict[str, Any]) -> Config:
    """The chosen config of a result's JSON object, its hash checked against the one stored
    (a hand-edited knob would otherwise write a schedule nobody measured)."""
    best = found["best"]
    config = Config(found["target"], found["op"], dict(best["config"]))
    if best.get("hash") and best["hash"] != config.hash:
        raise CognateError(
            f"the chosen config's knobs do not match its hash {best['hash']} (edited?)"
        )
    return config


def emit_choice(found: dict[str, Any], directory: str | Path) -> list[Path]:
    """Write the chosen schedule of a result's JSON object (``TuneResult.as_dict``) into
    ``directory``; returns the files."""
    directory = Path(directory).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CognateError(f"{directory}: cannot create the emit directory: {err}") from None
    best, config = found["best"], chosen_config(found)
    stem = _stem(found["matrix"], found["target"], found["op"], config.hash)
    info = {
        "matrix": found["matrix"],
        "target": found["target"],
        "op": found["op"],
        "width": found["width"],
        "config": dict(config.knobs),
        "description": best["description"],
        "predicted_rank": best["rank"],
        "runtime_s": best["runtime_s"],
    }
    target = get_target(found["target"])
    files: list[Path] = []
    for suffix, text in target.artifacts(found["op"], found["width"], config, info):
        path = directory / f"{stem}{suffix}"
        try:
            atomic_write(path, text)
        except OSError as err:
            for written in files:  # all of the schedule's files or none: no orphan source
                written.unlink(missing_ok=True)
            raise CognateError(f"{path}: cannot write: {err.strerror or err}") from None
        files.append(path)
    return files
