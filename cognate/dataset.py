"""The record store as a portable data set: compressed Parquet, one file per target and op.

A store lives on one machine; the data set under data/records/ travels with the repository,
so a fresh clone can retrain and evaluate without re-measuring (``cognate data export
--dataset DIR`` writes it, ``cognate data import DIR`` loads it into a store).

Matrix sources are written portably: a file under the shared folder becomes
``shared:<relative path>`` and one under the corpus folder ``corpus:<relative path>``, so the
records find their matrices again on a machine whose folders live elsewhere; a generated
corpus file that is missing is regenerated from its recipe when a record is read
(``record_matrix_file``). Column meanings: data/records/README.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cognate.errors import CognateError
from cognate.paths import corpus_dir, shared_dir
from cognate.store.frames import is_missing

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


def record_matrix_file(source: str, sha256: str) -> str:
    """The file a record's (possibly portable) source names on this machine. A generated
    corpus file missing there is first written again from its recipe, checked against the
    records' ``sha256`` and cached in the corpus folder: a fresh clone trains on the
    published data set with no manual step, and only the matrices a command reads are built."""
    path = local_source(source)
    if source.startswith("corpus:") and not Path(path).is_file():
        from cognate.synth.corpus import regenerate  # the generators: only when needed

        regenerate(source[len("corpus:") :], corpus_dir(), sha256)
    return path


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
    from cognate.store import write_frame  # atomic write beside the destination

    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for (target, op), part in frame.groupby(["target", "op"], sort=True):
        name = f"{target}-{op}.parquet"
        part = part.reset_index(drop=True)
        if repeats is not None:
            part = with_repeats(part, repeats)
        part = dataset_frame(part, counters=target not in drop_counters)
        write_frame(part, folder / name, ".parquet", COMPRESSION)
        written[name] = len(part)
    return written


def dataset_files(paths: list[Path]) -> list[Path]:
    """The Parquet files ``paths`` name (files, or folders of ``*.parquet``)."""
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
    return files


def read_dataset(paths: list[Path], log: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Every Parquet file of ``paths`` (files or folders), each checked row by row
    (``check_rows``) and concatenated; ``log`` gets a line per file read."""
    from cognate.store import upgrade_frame  # exports of every schema read as the current one

    frames = []
    for file in dataset_files(paths):
        started = time.perf_counter()
        try:
            frame = pd.read_parquet(file)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise CognateError(f"{file}: not a readable Parquet file ({exc})") from None
        frame = upgrade_frame(frame)  # an export older than schema 3: its spreads moved
        check_rows(frame, file)
        frame, skipped = current_configs(frame)
        frames.append(frame)
        if log:
            seconds = time.perf_counter() - started
            log(f"read {file}: {len(frame)} records, checked ({seconds:.1f} s)")
            if skipped:
                log(f"{file}: skipped {skipped_line(skipped)}")
    df = pd.concat(frames, ignore_index=True)
    if "counters" not in df:
        df["counters"] = "{}"
    df["counters"] = df["counters"].fillna("{}")
    return df


# --- row checks: a data set is data a user hands us, so every row is checked before any of
# it reaches a store (a bad row once went in and failed later, in training, with a traceback).

_TEXT_COLUMNS = (
    "matrix",
    "matrix_sha256",
    "source",
    "target",
    "op",
    "config",
    "config_hash",
    "space_version",
    "status",
    "host",
)
MAX_DIM = 2**31 - 1  # matrices are held with int32 indices
MAX_WIDTH = 1 << 16  # the dense widths a space measures are far below this
MAX_RUNTIME_S = 86_400.0  # one kernel call longer than a day is not a measurement


def check_rows(frame: pd.DataFrame, file: Path) -> None:
    """Refuse ``frame`` (the rows of ``file``) unless every row is a record a store can hold:
    the columns present, texts present, hashes hex of their length, shapes and widths in
    range, target/op/status known, runtimes finite and positive where ok, the config a
    canonical JSON object of scalars and lists whose hash is its ``config_hash``, counters
    JSON objects. Raises ``CognateError`` naming the file and the first bad row (counted
    from 1)."""
    from cognate.store import IMPORT_COLUMNS  # the columns an import reads

    missing = [c for c in IMPORT_COLUMNS if c not in frame.columns]
    if missing:
        raise CognateError(f"{file}: not a record data set: lacks column(s) {', '.join(missing)}")
    for problem, bad in _row_problems(frame):
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise CognateError(f"{file}: row {row + 1}: {problem(row)}")


def _row_problems(frame: pd.DataFrame) -> Iterator[tuple[Callable[[int], str], pd.Series]]:
    """(describe(row) -> text, bad-row mask) per check, in order; masks are built lazily so
    a frame bad in its texts is not also parsed for JSON."""
    from cognate.runner import STATUSES
    from cognate.targets import OPS, target_names

    def value(column: str) -> Callable[[int], str]:
        return lambda row: f"{column} {_shown(frame[column].iloc[row])}"

    for column in _TEXT_COLUMNS:
        text = frame[column]
        yield (lambda row, c=column: f"{c} is missing or not text"), ~text.map(_is_text)
    for column, digits in (("matrix_sha256", 64), ("config_hash", 16)):
        yield (
            (lambda row, c=column, d=digits: f"{value(c)(row)} is not {d} hex digits"),
            ~frame[column].str.fullmatch(f"[0-9a-f]{{{digits}}}").fillna(False).astype(bool),
        )
    for column, low, high in (
        ("rows", 1, MAX_DIM),
        ("cols", 1, MAX_DIM),
        ("nnz", 1, MAX_DIM),
        ("width", 1, MAX_WIDTH),
    ):
        numbers = pd.to_numeric(frame[column], errors="coerce")
        integral = numbers.notna() & (numbers == numbers.round())
        yield (
            (
                lambda row, c=column, lo=low, hi=high: (
                    f"{value(c)(row)} is not an integer in [{lo}, {hi}]"
                )
            ),
            ~(integral & numbers.between(low, high)),
        )
    yield (
        (lambda row: f"nnz {frame['nnz'].iloc[row]} exceeds rows x cols"),
        frame["nnz"].astype("float64")
        > frame["rows"].astype("float64") * frame["cols"].astype("float64"),
    )
    for column, known in (("target", target_names()), ("op", OPS), ("status", STATUSES)):
        yield (
            (lambda row, c=column, k=known: f"{value(c)(row)} is not one of {', '.join(k)}"),
            ~frame[column].isin(known),
        )
    runtime = pd.to_numeric(frame["runtime_s"], errors="coerce")
    ok = frame["status"] == "ok"
    good_ok = runtime.gt(0) & runtime.le(MAX_RUNTIME_S)
    good_other = frame["runtime_s"].isna() | (runtime.ge(0) & runtime.le(MAX_RUNTIME_S))
    yield (
        (
            lambda row: (
                f"{value('runtime_s')(row)} is not a runtime in (0, {MAX_RUNTIME_S:g}] s"
                + (" (status ok)" if ok.iloc[row] else "")
            )
        ),
        ~(good_ok.where(ok, good_other).astype(bool)),
    )
    for column in ("spread_s", "range_s"):
        spread = pd.to_numeric(frame[column], errors="coerce")
        yield (
            (lambda row, c=column: f"{value(c)(row)} is not empty or a time >= 0 s"),
            ~(frame[column].isna() | spread.between(0, MAX_RUNTIME_S)),
        )
    yield (
        (lambda row: f"{value('is_baseline')(row)} is not true or false"),
        ~frame["is_baseline"].map(_is_flag),
    )
    times = pd.to_datetime(frame["time"], utc=True, errors="coerce", format="ISO8601")
    yield (lambda row: f"{value('time')(row)} is not a time"), times.isna()
    yield from _store_column_problems(frame, value)
    yield from _repeat_problems(frame, value)
    yield from _json_problems(frame)


MAX_ATTEMPTS = 1_000_000
MAX_VECTOR_BITS = 1 << 16  # far past any vector register
MAX_HOST_COUNT = 1 << 50  # bytes of a cache, or cores: far past any machine's
MAX_LOAD = 1e6  # a load average or busy-core count past this is no machine's


def _optional_number(frame: pd.DataFrame, column: str, low: float, high: float) -> pd.Series:
    """Bad-row mask of an optional numeric column: empty, or a number in [low, high]
    (booleans and text are not numbers here)."""
    values = frame[column]
    numeric = values.map(lambda v: isinstance(v, (int, float, np.integer, np.floating)))
    numeric &= ~values.map(lambda v: isinstance(v, (bool, np.bool_)))
    numbers = pd.to_numeric(values.where(numeric), errors="coerce")
    return ~(values.isna() | (numeric & numbers.between(low, high)))


def _optional_integer(frame: pd.DataFrame, column: str, low: int, high: int) -> pd.Series:
    """Rows whose ``column`` is set but not a whole number in [low, high]."""
    bad = _optional_number(frame, column, low, high)
    numbers = pd.to_numeric(frame[column].where(~bad), errors="coerce")
    return bad | (numbers.notna() & (numbers != numbers.round()))


def _store_column_problems(
    frame: pd.DataFrame, value: Callable[[str], Callable[[int], str]]
) -> Iterator[tuple[Callable[[int], str], pd.Series]]:
    """The store's other columns, where a data set has them, typed as the collector writes
    them: attempts an integer >= 1, noisy a flag, the load readings numbers >= 0, error
    text."""
    from cognate.store import LOAD_COLUMNS

    if "attempts" in frame:
        bad = _optional_integer(frame, "attempts", 1, MAX_ATTEMPTS)
        yield (lambda row: f"{value('attempts')(row)} is not an integer >= 1"), bad
    if "noisy" in frame:
        yield (
            (lambda row: f"{value('noisy')(row)} is not empty, true or false"),
            ~frame["noisy"].map(lambda v: is_missing(v) or _is_flag(v)),
        )
    for column in LOAD_COLUMNS:
        if column in frame:
            yield (
                (lambda row, c=column: f"{value(c)(row)} is not empty or a number >= 0"),
                _optional_number(frame, column, 0, MAX_LOAD),
            )
    if "isa" in frame:
        yield (
            (lambda row: f"{value('isa')(row)} is not empty or an ISA name"),
            ~frame["isa"].map(lambda v: is_missing(v) or _is_isa_name(v)),
        )
    if "vector_bits" in frame:
        bad = _optional_integer(frame, "vector_bits", 1, MAX_VECTOR_BITS)
        yield (lambda row: f"{value('vector_bits')(row)} is not empty or a bit count"), bad
    if "cpu" in frame:
        yield (
            (lambda row: f"{value('cpu')(row)} is not empty or a short line of text"),
            ~frame["cpu"].map(lambda v: is_missing(v) or _is_cpu_name(v)),
        )
    for column in ("l1d_bytes", "l2_bytes", "llc_bytes", "cores"):
        if column in frame:
            bad = _optional_integer(frame, column, 1, MAX_HOST_COUNT)
            yield (lambda row, c=column: f"{value(c)(row)} is not empty or a count >= 1"), bad
    if "error" in frame:
        yield (
            (lambda row: f"{value('error')(row)} is not empty or text"),
            ~frame["error"].map(lambda v: is_missing(v) or isinstance(v, str)),
        )


_REPEAT_COLUMNS = ("repeat_runtime_s", "repeat_status", "repeat_time")


def _repeat_problems(
    frame: pd.DataFrame, value: Callable[[str], Callable[[int], str]]
) -> Iterator[tuple[Callable[[int], str], pd.Series]]:
    """A repeat (the collect protocol's second timing of a record) is held to the rules of
    the record itself: a known status, a runtime in range (positive where ok), a time."""
    from cognate.runner import STATUSES

    present = [c for c in (*_REPEAT_COLUMNS, "repeat_noisy") if c in frame]
    if not present:
        return
    missing = [c for c in _REPEAT_COLUMNS if c not in frame]
    if missing:
        yield (
            (lambda row: f"has {', '.join(present)} but not {', '.join(missing)}"),
            pd.Series(True, index=frame.index),
        )
        return
    status = frame["repeat_status"]
    has = status.notna()
    yield (
        (lambda row: f"{value('repeat_status')(row)} is not one of {', '.join(STATUSES)}"),
        has & ~status.isin(STATUSES),
    )
    yield (
        (lambda row: f"{value('repeat_runtime_s')(row)} without a repeat_status"),
        ~has & frame["repeat_runtime_s"].notna(),
    )
    wrong = _optional_number(frame, "repeat_runtime_s", 0, MAX_RUNTIME_S)
    runtime = pd.to_numeric(frame["repeat_runtime_s"].where(~wrong), errors="coerce")
    ok = status == "ok"
    yield (
        (
            lambda row: (
                f"{value('repeat_runtime_s')(row)} is not a runtime in (0, {MAX_RUNTIME_S:g}] s"
                + (" (repeat_status ok)" if ok.iloc[row] else "")
            )
        ),
        has & (wrong | (ok & ~runtime.gt(0))),
    )
    times = pd.to_datetime(
        frame["repeat_time"].where(has).map(lambda v: v if _is_time_like(v) else "bad"),
        utc=True,
        errors="coerce",
        format="ISO8601",
    )
    yield (lambda row: f"{value('repeat_time')(row)} is not a time"), has & times.isna()
    if "repeat_noisy" in frame:
        yield (
            (lambda row: f"{value('repeat_noisy')(row)} is not empty, true or false"),
            ~frame["repeat_noisy"].map(lambda v: is_missing(v) or _is_flag(v)),
        )


def _is_time_like(value: Any) -> bool:
    return isinstance(value, (str, pd.Timestamp, np.datetime64)) or is_missing(value)


def current_configs(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """``frame`` without the records of a space version the current space accepts whose
    config that space refuses (an unknown knob, a value out of its range, a knob it no
    longer has: hash and JSON may still be consistent), and {reason: records skipped}.
    Such a record would make training and ``TunedSparse(store=...)`` refuse the whole
    store; records of other space versions are kept as they are (nothing uses them as
    current)."""
    from cognate.targets import get_target

    key = ["target", "op", "space_version", "config", "config_hash"]
    verdicts: dict[tuple[str, ...], str] = {}
    spaces: dict[tuple[str, str], Any] = {}
    for target, op, version, text, digest in frame[key].drop_duplicates().itertuples(index=False):
        if (target, op) not in spaces:
            try:
                spaces[(target, op)] = get_target(target).space(op)
            except CognateError:
                spaces[(target, op)] = None
        space = spaces[(target, op)]
        verdict = ""
        if space is not None and space.accepts_version(version):
            try:
                if space.validate(json.loads(text)).hash != digest:
                    verdict = "config not in the space's canonical form"
            except (CognateError, TypeError, ValueError):
                verdict = f"config not in the current {target} {op} space"
        verdicts[(target, op, version, text, digest)] = verdict
    reasons = pd.Series(
        [verdicts[k] for k in frame[key].itertuples(index=False, name=None)], index=frame.index
    )
    bad = reasons.ne("")
    return frame[~bad].reset_index(drop=True), reasons[bad].value_counts().to_dict()


def skipped_line(skipped: dict[str, int]) -> str:
    """ "N records (why), ..." for ``current_configs``' counts."""
    from cognate.progress import plural

    return ", ".join(f"{plural(n, 'record')} ({why})" for why, n in skipped.items())


def _json_problems(frame: pd.DataFrame) -> Iterator[tuple[Callable[[int], str], pd.Series]]:
    """Configs (checked once per distinct (target, op, config, hash)) and counters."""
    from cognate.config import Config

    key = ["target", "op", "config", "config_hash"]
    verdicts: dict[tuple[str, str, str, str], str] = {}
    for target, op, text, digest in frame[key].drop_duplicates().itertuples(index=False):
        verdicts[(target, op, text, digest)] = _config_problem(text) or (
            ""
            if Config(target, op, json.loads(text)).hash == digest
            else "config_hash is not the hash of (target, op, config)"
        )
    problems = pd.Series(
        [verdicts[k] for k in frame[key].itertuples(index=False, name=None)], index=frame.index
    )
    yield (lambda row: problems.iloc[row]), problems.ne("")
    if "counters" in frame:
        counters = frame["counters"]
        bad = counters.map(lambda v: not (is_missing(v) or _is_json_object(v)))
        yield (lambda row: "counters is not a JSON object"), bad


def _config_problem(text: str) -> str:
    """Why ``text`` is not a config (a canonical JSON object of scalars and lists), or ''."""
    from cognate.config import canonical_json

    try:
        knobs = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return f"config {_shown(text)} is not JSON"
    if not isinstance(knobs, dict) or not knobs:
        return f"config {_shown(text)} is not a JSON object of knobs"
    for name, knob in knobs.items():
        items = knob if isinstance(knob, list) else [knob]
        if not all(isinstance(i, (str, int, float, bool)) for i in items):
            return f"config knob {name!r} is not a scalar or a list of scalars"
    if canonical_json(knobs) != text:
        return f"config {_shown(text)} is not canonical JSON (sorted keys, no spaces)"
    return ""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a config can hold")


def _is_flag(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return True
    # A flag column with missing values reaches pandas as float64 (0.0 / 1.0 / NaN): the
    # published repeat_noisy column is one.
    return isinstance(value, (int, np.integer, float, np.floating)) and value in (0, 1)


def _is_cpu_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 200 and value.isprintable()


def _is_isa_name(value: Any) -> bool:
    """A short lower-case name such as 'avx512' (it is shown, never run)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= 32
        and value.isascii()
        and (value.replace("_", "").replace("-", "").isalnum())
    )


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _is_json_object(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return isinstance(json.loads(value), dict)
    except (ValueError, RecursionError):
        return False


def _shown(value: Any) -> str:
    if isinstance(value, np.generic):
        value = value.item()  # 0, not np.int64(0)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def summary(df: pd.DataFrame) -> str:
    """Counts per (target, op) as one JSON line (for logs and docs)."""
    counts = df.groupby(["target", "op"]).agg(
        records=("status", "size"), matrices=("matrix_sha256", "nunique")
    )
    return json.dumps({f"{t}-{o}": dict(r) for (t, o), r in counts.iterrows()}, default=int)
