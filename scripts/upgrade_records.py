"""Rewrite record data sets exported before store schema 3 in schema 3's columns.

    python scripts/upgrade_records.py data/records data/records/inverted data/records/inverted/control

Each ``*.parquet`` of the given folders (or the files given) without a ``range_s`` column is
read, passed through ``cognate.store.upgrade_frame`` (the rule the store's own migration and
``cognate data import`` apply: an old ``spread_s`` moves to the column of its meaning, the
other is left empty; ``isa`` / ``vector_bits`` empty) and written back in place with the
data set's compression. Files already in schema 3 are left as they are, so a second run
changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from cognate.dataset import COMPRESSION
from cognate.store import upgrade_frame, write_frame


def upgrade_file(path: Path) -> bool:
    """Rewrite ``path`` in schema 3's columns; False when it already has them."""
    frame = pd.read_parquet(path)
    upgraded = upgrade_frame(frame)
    if upgraded is frame:
        return False
    write_frame(upgraded, path, ".parquet", COMPRESSION)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="data set folders or .parquet files")
    args = parser.parse_args(argv)
    files: list[Path] = []
    for path in args.paths:
        if not path.exists():
            print(f"{path}: no such file or folder", file=sys.stderr)
            return 1
        files += sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    for file in files:
        print(f"{file}: {'upgraded' if upgrade_file(file) else 'already schema 3'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
