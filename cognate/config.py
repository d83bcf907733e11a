"""A schedule configuration: a target's knobs in canonical, hashable form."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def canonical_json(knobs: Mapping[str, Any]) -> str:
    """Key-sorted, whitespace-free JSON: equal configs give equal strings."""
    return json.dumps(dict(knobs), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Config:
    """One point of a schedule space. ``knobs`` holds JSON scalars and lists only."""

    target: str
    op: str
    knobs: Mapping[str, Any] = field(hash=False)

    @property
    def json(self) -> str:
        return canonical_json(self.knobs)

    @property
    def hash(self) -> str:
        """Stable 16-hex-digit id over (target, op, knobs)."""
        text = f"{self.target}|{self.op}|{self.json}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __hash__(self) -> int:
        return hash(self.hash)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.hash == other.hash

    def __getitem__(self, key: str) -> Any:
        return self.knobs[key]
