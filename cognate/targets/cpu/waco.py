"""WACO's SuperSchedule line format: parse into cpu Configs and format back, exactly.

One line per measured schedule (shared/matrices/README.md, WACO's training data)::

    isplit s1 s2 o0 o1 o2 o3 o4 o5 f0 f1 f2 f3 paridx parnum parchunk = runtime_ms

SpMM: s1 = ksplit, s2 = jsplit, formats of i1 i0 k1 k0; SDDMM: s1 = jsplit, s2 = ksplit,
formats of i1 i0 j1 j0. Format 0 = compressed (C), 1 = uncompressed (U). The runtime is in
milliseconds; WACO measured with 48 OpenMP threads and dense width 256 on a Xeon.

What WACO's data taught about our rules (all 1659 peer lines checked, see the tests):
- paridx is not free: it is always the outermost of i1 and j1 in the order (SpMM: always
  i1; SDDMM: j1 on 409 lines). ``parallel_loop`` states the rule; a line that breaks it is
  rejected, and ``format_line`` derives paridx from the order.
- WACO's block-CSR orders appear with small dense splits (128 SpMM, 107 SDDMM lines)
  although its own generator filter would reject them: its generator emits those orders
  without the filter. The space exempts exactly those orders (configs/cpu-*.yaml).
- Every split is within the global bounds (2^16 sparse, 2^7 dense) and chunk <= 256, and
  sparse splits stay below the dimension (WACO's cap) where the matrix is known, so no
  peer line needs a flag or a widened rule beyond the two points above.

Round trip: ``format_line(*parse_line(line))`` equals the line with whitespace collapsed to
single spaces and no line end. The runtime is written with ``%g`` (six significant digits,
C++'s default ostream precision, which is how WACO printed it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from cognate.config import Config
from cognate.errors import CognateError, InputError
from cognate.targets.cpu.space import OPS, make_space, parallel_loop

WACO_TARGET = "waco-xeon"  # the peer's machine, as a target name in the store
WACO_HOST = "waco-xeon"
WACO_WIDTH = 256
WACO_THREADS = 48

# Which knob the second and third number of a line is, per op.
_SPLIT_COLUMNS = {"spmm": ("ksplit", "jsplit"), "sddmm": ("jsplit", "ksplit")}
_FORMAT_OF_CODE = {"0": "C", "1": "U"}
_CODE_OF_FORMAT = {"C": "0", "U": "1"}
_UINT = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?")
_FIELDS = 18


class WacoLine(NamedTuple):
    """One parsed peer line: the config in cognate's cpu schema, seconds, WACO's threads."""

    config: Config
    runtime_s: float
    parnum: int


def _uint(token: str, name: str, where: str) -> int:
    if not _UINT.fullmatch(token):
        raise InputError(where, f"{name} must be a non-negative integer, got {token!r}")
    return int(token)


def parse_line(line: str, op: str, where: str = "line") -> WacoLine:
    """Parse one WACO line for ``op``; InputError naming ``where`` and the problem if bad."""
    if op not in OPS:
        raise CognateError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
    tokens = line.split()
    if len(tokens) != _FIELDS:
        raise InputError(
            where, f"expected {_FIELDS} fields (WACO's line format), got {len(tokens)}"
        )
    s1, s2 = _SPLIT_COLUMNS[op]
    splits = {
        name: _uint(tok, name, where)
        for name, tok in zip(("isplit", s1, s2), tokens[:3], strict=True)
    }
    bad_formats = [t for t in tokens[9:13] if t not in _FORMAT_OF_CODE]
    if bad_formats:
        raise InputError(where, f"formats must be 0 or 1, got {bad_formats[0]!r}")
    knobs = {
        **splits,
        "order": tokens[3:9],
        "formats": [_FORMAT_OF_CODE[t] for t in tokens[9:13]],
        "chunk": _uint(tokens[15], "parchunk", where),
    }
    try:
        config = make_space(op).validate(knobs)
    except CognateError as exc:
        raise InputError(where, str(exc)) from None
    paridx = tokens[13]
    if paridx != parallel_loop(config["order"]):
        raise InputError(
            where, f"paridx {paridx!r} is not the outermost of i1, j1 in the order (WACO's rule)"
        )
    parnum = _uint(tokens[14], "parnum", where)
    if parnum < 1:
        raise InputError(where, "parnum must be at least 1")
    if tokens[16] != "=":
        raise InputError(where, f"expected '=' before the runtime, got {tokens[16]!r}")
    if not _DECIMAL.fullmatch(tokens[17]) or not math.isfinite(ms := float(tokens[17])):
        raise InputError(where, f"runtime must be a non-negative number, got {tokens[17]!r}")
    return WacoLine(config, ms / 1000.0, parnum)


def format_line(config: Config, runtime_s: float, parnum: int = WACO_THREADS) -> str:
    """The WACO line for a cpu config (paridx derived from the order), runtime in ms."""
    if config.op not in OPS:
        raise CognateError(f"unknown op {config.op!r}; expected one of {', '.join(OPS)}")
    s1, s2 = _SPLIT_COLUMNS[config.op]
    fields = [
        str(config["isplit"]),
        str(config[s1]),
        str(config[s2]),
        *config["order"],
        *(_CODE_OF_FORMAT[f] for f in config["formats"]),
        parallel_loop(config["order"]),
        str(parnum),
        str(config["chunk"]),
        "=",
        f"{runtime_s * 1000.0:g}",
    ]
    return " ".join(fields)


def peer_config(config: Config) -> Config:
    """The same knobs as a config of target ``waco-xeon`` (the store keys configs by target)."""
    return Config(WACO_TARGET, config.op, config.knobs)


def read_peer_file(path: str | Path, op: str) -> list[WacoLine]:
    """Every line of one peer file (blank lines skipped); errors name ``path:line``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read WACO peer file: {exc}") from None
    return [
        parse_line(line, op, f"{path}:{number}")
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]


@dataclass(frozen=True)
class PeerFile:
    """One ``<op>/<matrix>.txt`` of a WACO peer folder."""

    op: str
    matrix: str
    path: Path


def peer_files(root: str | Path) -> list[PeerFile]:
    """The ``spmm/*.txt`` and ``sddmm/*.txt`` files under ``root``, sorted."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(root, "no such folder")
    found = [
        PeerFile(op, path.stem, path)
        for op in OPS
        for path in sorted((root / op).glob("*.txt"))
        if path.is_file()
    ]
    if not found:
        raise InputError(root, "no WACO peer files (expected spmm/*.txt or sddmm/*.txt)")
    return found
