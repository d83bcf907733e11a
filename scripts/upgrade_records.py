"""Rewrite record data sets exported before store schema 4 in schema 4's columns.

    python scripts/upgrade_records.py data/records data/records/inverted data/records/inverted/control
    python scripts/upgrade_records.py data/records --facts h-ecb3aef9b10b ZEN3.json

Each ``*.parquet`` of the given folders (or the files given) is read, passed through
``cognate.store.upgrade_frame`` (the rule the store's own migration and ``cognate data
import`` apply: an old ``spread_s`` moves to the column of its meaning, the other is left
empty; the host columns a file lacks are added empty) and written back in place with the
data set's compression. ``--facts HOST FILE`` fills the host columns of HOST's records
that have none from FILE, a JSON object with ``isa``, ``vector_bits``, ``cpu``,
``l1d_bytes``, ``l2_bytes``, ``llc_bytes`` and ``cores`` (records made before the store
kept them). Files already in schema 4 with nothing to fill are left as they are, so a
second run changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from cognate.dataset import COMPRESSION
from cognate.hostid import HostFacts
from cognate.store import upgrade_frame, write_frame


def read_facts(path: Path) -> dict[str, object]:
    """A host's facts from a JSON file: every HostFacts field, checked by HostFacts."""
    given = json.loads(path.read_text())
    missing = [f for f in HostFacts._fields if f not in given]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    facts = HostFacts(**{f: given[f] for f in HostFacts._fields})
    if not all(
        isinstance(getattr(facts, f), int) for f in HostFacts._fields if f not in ("isa", "cpu")
    ):
        raise ValueError(f"{path}: vector_bits, cache sizes and cores must be integers")
    return facts._asdict()


def upgrade_file(path: Path, facts: dict[str, dict[str, object]]) -> bool:
    """Rewrite ``path`` in schema 4's columns with ``facts`` filled in; False when nothing
    changed."""
    frame = pd.read_parquet(path)
    upgraded = upgrade_frame(frame)
    changed = upgraded is not frame
    for host, values in facts.items():
        empty = (upgraded["host"] == host) & upgraded["cpu"].isna()
        if not empty.any():
            continue
        if not changed:
            upgraded, changed = upgraded.copy(), True
        for column, value in values.items():
            upgraded.loc[empty, column] = value
    if changed:
        write_frame(upgraded, path, ".parquet", COMPRESSION)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="data set folders or .parquet files")
    parser.add_argument(
        "--facts",
        nargs=2,
        action="append",
        default=[],
        metavar=("HOST", "FILE"),
        help="fill HOST's empty host columns from the JSON FILE",
    )
    args = parser.parse_args(argv)
    try:
        facts = {host: read_facts(Path(file)) for host, file in args.facts}
    except (OSError, ValueError, TypeError) as err:
        print(f"--facts: {err}", file=sys.stderr)
        return 1
    files: list[Path] = []
    for path in args.paths:
        if not path.exists():
            print(f"{path}: no such file or folder", file=sys.stderr)
            return 1
        files += sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    for file in files:
        print(f"{file}: {'upgraded' if upgrade_file(file, facts) else 'already schema 4'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
