"""The record store as a portable data set: compressed Parquet, one file per target and op.

A store lives on one machine; the data set under data/records/ travels with the repository,
so a fresh clone can retrain and evaluate without re-measuring (``cognate data export
--dataset DIR`` writes it, ``cognate data import DIR`` loads it into a store).

Matrix sources are written portably: a file under the shared folder becomes
``shared:<relative path>`` and one under the corpus folder ``corpus:<relative path>``, so the
records find their matrices again on a machine whose folders live elsewhere (the corpus is
regenerated from its manifest, ``scripts/make_corpus.py``). Column meanings: data/records/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from cognate.errors import CognateError
from cognate.paths import corpus_dir, shared_dir

_PREFIXES = {"shared:": shared_dir, "corpus:": corpus_dir}
COMPRESSION = {"compression": "zstd", "compression_level": 19}


def portable_source(source: str) -> str:
    """``source`` relative to the shared or corpus folder when it lies under one."""
    if not source or ":" in source.split("/", 1)[0]:
        return source
    path = Path(source)
    for prefix, root in _PREFIXES.items():
        try:
            return prefix + path.resolve().relative_to(root().resolve()).as_posix()
        except (ValueError, OSError):
            continue
    return source


def local_source(source: str) -> str:
    """The file a (possibly portable) source names on this machine."""
    for prefix, root in _PREFIXES.items():
        if source.startswith(prefix):
            return str(root() / source[len(prefix) :])
    return source


def dataset_frame(frame: pd.DataFrame, counters: bool) -> pd.DataFrame:
    """An export frame made portable (sources) and, without ``counters``, smaller."""
    out = frame.copy()
    # a matrix's source repeats on every one of its records: resolve each path once
    sources = {source: portable_source(source) for source in out["source"].unique()}
    out["source"] = out["source"].map(sources)
    if not counters:
        out = out.drop(columns=["counters"])
    return out


REPEAT_COLUMNS = {
    "repeat_s": "repeat_runtime_s",
    "repeat_status": "repeat_status",
    "noisy": "repeat_noisy",
    "time": "repeat_time",
}
_RECORD_KEY = ["matrix_sha256", "target", "op", "width", "config_hash", "host"]


def with_repeats(frame: pd.DataFrame, repeats: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each record's first repeat (the collect protocol's second timing of 5%
    of the configs) as ``repeat_runtime_s``, ``repeat_status``, ``repeat_noisy`` and
    ``repeat_time``; unchanged when no record of it was repeated."""
    if repeats.empty:
        return frame
    first = repeats.drop_duplicates(_RECORD_KEY)[[*_RECORD_KEY, *REPEAT_COLUMNS]]
    merged = frame.merge(
        first.rename(columns=REPEAT_COLUMNS), on=_RECORD_KEY, how="left", validate="one_to_one"
    )
    if merged["repeat_status"].isna().all():
        return frame
    merged["repeat_time"] = pd.to_datetime(merged["repeat_time"], utc=True, format="ISO8601")
    return merged


def write_dataset(
    frame: pd.DataFrame,
    folder: Path,
    drop_counters: set[str],
    repeats: pd.DataFrame | None = None,
) -> dict[str, int]:
    """One ``<target>-<op>.parquet`` per (target, op) in ``frame``; returns rows per file.

    ``drop_counters``: targets whose counters are left out (a deterministic simulator's
    counters are recomputed by rerunning it, and they would dominate the files' size).
    ``repeats`` (``Store.repeats()``): written beside the records they repeat, so the label
    noise of a data set can be measured again after an import.
    """
    from cognate.store import _write_frame  # atomic write beside the destination

    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for (target, op), part in frame.groupby(["target", "op"], sort=True):
        name = f"{target}-{op}.parquet"
        part = part.reset_index(drop=True)
        if repeats is not None:
            part = with_repeats(part, repeats)
        part = dataset_frame(part, counters=target not in drop_counters)
        _write_frame(part, folder / name, ".parquet", COMPRESSION)
        written[name] = len(part)
    return written


def read_dataset(paths: list[Path]) -> pd.DataFrame:
    """Every Parquet file of ``paths`` (files or folders), concatenated."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(path.glob("*.parquet"))
        elif path.is_file():
            files.append(path)
        else:
            raise CognateError(f"{path}: no such file or folder")
    if not files:
        raise CognateError(f"{', '.join(map(str, paths))}: no .parquet files to import")
    frames = []
    for file in files:
        try:
            frames.append(pd.read_parquet(file))
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise CognateError(f"{file}: not a readable Parquet file ({exc})") from None
    df = pd.concat(frames, ignore_index=True)
    if "counters" not in df:
        df["counters"] = "{}"
    df["counters"] = df["counters"].fillna("{}")
    return df


def summary(df: pd.DataFrame) -> str:
    """Counts per (target, op) as one JSON line (for logs and docs)."""
    counts = df.groupby(["target", "op"]).agg(
        records=("status", "size"), matrices=("matrix_sha256", "nunique")
    )
    return json.dumps({f"{t}-{o}": dict(r) for (t, o), r in counts.iterrows()}, default=int)
