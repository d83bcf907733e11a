"""Which data of a shipped cpu model a matrix was: only held-out and unseen matrices are
out-of-sample for its ranking, so a benchmark reports them apart."""

from __future__ import annotations

import json
from functools import cache

OUT_OF_SAMPLE = ("held-out", "unseen")  # the model never trained on or selected with them


@cache
def _splits(op: str) -> dict[str, str]:
    from cognate.model.shipped import resolve_model_path

    path = resolve_model_path(None, "cpu", op).with_suffix(".provenance.json")
    found = json.loads(path.read_text())["matrices"] if path.is_file() else {}
    return {name: split for split, names in found.items() for name in names}


def model_data(name: str, op: str = "spmm") -> str:
    """``train``, ``validation``, ``held-out`` (the provenance file's test split) or
    ``unseen`` for the shipped cpu model of ``op``."""
    split = _splits(op).get(name, "unseen")
    return "held-out" if split == "test" else split
