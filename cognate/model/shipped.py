"""Where the shipped cost models live, and which model file a command uses."""

from __future__ import annotations

from pathlib import Path

from cognate.errors import CognateError
from cognate.paths import data_dir


def shipped_model_path(target: str, op: str) -> Path:
    """Where the shipped model for (target, op) lives: data/models/<target>-<op>.safetensors."""
    return data_dir() / "models" / f"{target}-{op}.safetensors"


def resolve_model_path(model: str | Path | None, target: str, op: str) -> Path:
    """The model file to use; a missing file is a one-line error saying how to get one."""
    if model is not None:
        path = Path(model).expanduser()
        if not path.is_file():
            raise CognateError(f"{path}: no such model file")
        return path
    path = shipped_model_path(target, op)
    if not path.is_file():
        raise CognateError(
            f"no shipped model for target {target}, op {op} ({path}); train one with "
            f"`cognate pretrain --db STORE --target {target} --op {op} -o {path}` "
            "(or scripts/train_shipped_models.sh), or pass --model PATH"
        )
    return path
