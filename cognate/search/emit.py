"""``tune --emit``: the chosen schedule written out in the target's own form (cpu: the
generated C source; spade: the simulator configuration), as the target's ``artifacts``."""

from __future__ import annotations

from pathlib import Path

from cognate.errors import CognateError
from cognate.search.result import TuneResult
from cognate.targets import get_target
from cognate.util import atomic_write


def _stem(result: TuneResult) -> str:
    """``<matrix>-<target>-<op>-<config hash>``; the matrix part is letters, digits and
    ``-_.`` and never starts with a dot (a matrix named ``.`` or ``.x`` would give hidden
    files) or a dash (read as an option by the tools the files go to)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in result.matrix.name)
    safe = safe.lstrip(".-")
    return f"{safe or 'matrix'}-{result.target}-{result.op}-{result.config.hash}"


def emit(result: TuneResult, directory: str | Path) -> list[Path]:
    """Write the chosen schedule's files into ``directory``; returns them."""
    directory = Path(directory).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CognateError(f"{directory}: cannot create the emit directory: {err}") from None
    best, stem = result.best, _stem(result)
    info = {
        "matrix": result.matrix.name,
        "target": result.target,
        "op": result.op,
        "width": result.width,
        "config": dict(best.config.knobs),
        "description": best.description,
        "predicted_rank": best.rank,
        "runtime_s": best.runtime_s,
    }
    target = get_target(result.target)
    files = []
    for suffix, text in target.artifacts(result.op, result.width, best.config, info):
        path = directory / f"{stem}{suffix}"
        try:
            atomic_write(path, text)
        except OSError as err:
            for written in files:  # all of the schedule's files or none: no orphan source
                written.unlink(missing_ok=True)
            raise CognateError(f"{path}: cannot write: {err.strerror or err}") from None
        files.append(path)
    return files
