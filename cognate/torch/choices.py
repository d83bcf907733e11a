"""Which schedule a ``TunedSparse`` runs at each (op, width): tuned once, then remembered.

A choice is looked up, in order, in this process's memo, in a small JSON file per matrix
under ``<cognate home>/torch-choices/`` (so building the same matrix again in another process
costs no ranking), in a record store when one is given (the fastest measurement of that
matrix, op and width on this host), and only then made by ``cognate.tune``. A verified
choice (``verify=True``) is kept apart from a ranked one and serves both kinds of request.
A file that cannot be read or holds a config the space does not accept (a tampered knob, an
unknown family, a config the space no longer has) is ignored with one warning naming it,
never an error: the choice is then simply tuned again. The file is read through
``cognate.homefiles`` (no links, regular files only, size-bounded) and written atomically
under a lock, so processes building the same matrix at once keep every choice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cognate.config import Config
from cognate.errors import CognateError
from cognate.homefiles import clean_leftovers, home_lock, ignore, read_home
from cognate.matrix import Matrix
from cognate.paths import cognate_home
from cognate.util import atomic_write

# A choice is ~200 bytes; a matrix used at every op, width and model stays far below this.
MAX_CHOICES_BYTES = 1 << 20

_MEMO: dict[tuple[str, str], Config] = {}


@dataclass(frozen=True)
class TuneOptions:
    """How a ``TunedSparse`` tunes: ``cognate.tune``'s options, plus the store to reuse."""

    target: str = "cpu"
    model: Any = None  # a model file, a CostModel, or None (the shipped one)
    verify: bool = False
    store: str | Path | None = None
    candidates: int | None = None
    seed: int | None = None
    threads: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # "baseline": no ranking, the space's baseline schedule (WACO's FixedCSR) at every width:
    # what a matrix used once (a mini-batch's sampled adjacency) runs, chosen in microseconds
    schedule: str | None = None

    def model_key(self, op: str) -> str | None:
        """The model's identity in cache keys (None: a CostModel object, not cached on disk)."""
        from cognate.model.cost_model import CostModel
        from cognate.search.learn import choose_model

        if isinstance(self.model, CostModel):
            return None
        path = choose_model(self.model, self.target, op).model.path  # the one tune ranks with
        stat = path.stat()
        return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


@dataclass
class Choice:
    """One schedule choice: the config, where it came from, and the seconds it took."""

    config: Config
    source: str  # memo | cache | store | ranked | verified | baseline
    seconds: float


def choose(matrix: Matrix, op: str, width: int, options: TuneOptions) -> Choice:
    """The schedule of ``op`` at ``width`` for ``matrix`` (see the module docstring)."""
    start = time.perf_counter()
    if options.schedule == "baseline":
        baseline = _space(options.target, op).baseline(matrix.shape)
        return Choice(baseline, "baseline", time.perf_counter() - start)
    keys = _keys(matrix, op, width, options)
    for key in keys:
        if key in _MEMO:
            return Choice(_MEMO[key], "memo", time.perf_counter() - start)
    space = _space(options.target, op)
    found = _from_file(matrix, keys, options.target, op, space.version)
    source = "cache"
    if found is None and options.store is not None:
        found, source = _from_store(matrix, op, width, options), "store"
    if found is None:
        found, source = (
            _tune(matrix, op, width, options),
            "verified" if options.verify else "ranked",
        )
        _to_file(matrix, keys[0], found, space.version)
    _MEMO[keys[0]] = found
    return Choice(found, source, time.perf_counter() - start)


def _space(target: str, op: str) -> Any:
    from cognate.targets import get_target

    return get_target(target).space(op)


def _keys(matrix: Matrix, op: str, width: int, options: TuneOptions) -> list[tuple[str, str]]:
    """Cache keys, the one a new choice is stored under first: a verified choice also
    answers a ranked request; a ranked one depends on the model and the candidate set."""
    verified = (matrix.sha256, f"{options.target}:{op}:{width}:verified")
    if options.verify:
        return [verified]
    model = options.model_key(op)
    ranked = (
        matrix.sha256,
        f"{options.target}:{op}:{width}:ranked:{model}:{options.candidates}:{options.seed}",
    )
    return [ranked, verified] if model is not None else [verified]


def _path(matrix: Matrix) -> Path:
    return cognate_home() / "torch-choices" / f"{matrix.sha256}.json"


def _read(matrix: Matrix) -> dict[str, Any]:
    """The matrix's choices file as a dict; {} when missing or defective (with a warning)."""
    path = _path(matrix)
    raw = read_home(path, MAX_CHOICES_BYTES, then="its choices are tuned again")
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        ignore(path, "not a JSON file of choices", "its choices are tuned again")
        return {}
    if not isinstance(data, dict):
        ignore(path, "not a JSON object of choices", "its choices are tuned again")
        return {}
    return data


def _from_file(
    matrix: Matrix, keys: list[tuple[str, str]], target: str, op: str, version: str
) -> Config | None:
    data = _read(matrix)
    for _, key in keys:
        entry = data.get(key)
        if entry is None:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("knobs"), dict):
            ignore(_path(matrix), f"choice {key!r} is not an object of knobs", "tuned again")
            continue
        if entry.get("space_version") != version:
            continue  # a choice of another version of the space: not comparable
        try:  # the space's own check: knob names, types, ranges and families
            return _space(target, op).validate(entry["knobs"])
        except (CognateError, TypeError, ValueError, OverflowError) as err:
            ignore(_path(matrix), f"choice {key!r}: {err}", "tuned again")
    return None


def _to_file(matrix: Matrix, key: tuple[str, str], config: Config, version: str) -> None:
    """Add one choice to the matrix's file: read, changed and replaced atomically under the
    file's lock (concurrent builders of one matrix keep each other's choices); a cache that
    cannot be written is skipped."""
    path = _path(matrix)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    with home_lock(path) as locked:
        if not locked:
            return
        clean_leftovers(path)  # temp files of writers killed mid-write
        data = _read(matrix)
        data[key[1]] = {"knobs": dict(config.knobs), "space_version": version, "name": matrix.name}
        try:
            atomic_write(path, json.dumps(data, sort_keys=True))
        except OSError:
            return


def _from_store(matrix: Matrix, op: str, width: int, options: TuneOptions) -> Config | None:
    """The fastest ok measurement of this matrix, op and width on this host in the store."""
    from cognate.hostid import host_for
    from cognate.store import Store

    if not Path(options.store).expanduser().is_file():  # type: ignore[arg-type]
        return None
    with Store(options.store, readonly=True) as store:  # type: ignore[arg-type]
        frame = store.frame(options.target, op, status="ok")
    version = _space(options.target, op).version
    rows = frame[
        (frame["matrix_sha256"] == matrix.sha256)
        & (frame["width"] == width)
        & (frame["host"] == host_for(options.target))
        & (frame["space_version"] == version)
    ]
    space = _space(options.target, op)
    for text in rows.sort_values("runtime_s")["config"]:
        try:  # a record the space refuses (an imported one) is passed over, not run
            return space.validate(json.loads(text))
        except (CognateError, TypeError, ValueError):
            continue
    return None


def _tune(matrix: Matrix, op: str, width: int, options: TuneOptions) -> Config:
    from cognate.api import tune

    extra: dict[str, Any] = {}
    if options.candidates is not None:
        extra["candidates"] = options.candidates
    if options.seed is not None:
        extra["seed"] = options.seed
    result = tune(
        matrix,
        target=options.target,
        op=op,
        width=width,
        model=options.model,
        verify=options.verify,
        threads=options.threads,
        record=options.store if options.verify else None,
        **extra,
        **options.extra,
    )
    if options.verify and result.best.status not in (None, "ok"):
        raise CognateError(
            f"{matrix.name}: no schedule of {op} at width {width} ran ({result.best.error})"
        )
    return result.config


def forget(matrix: Matrix) -> None:
    """Drop every remembered choice of ``matrix`` (this process's and its file): the next
    ``TunedSparse`` of it tunes again (what a benchmark of the tuning cost wants)."""
    for key in [k for k in _MEMO if k[0] == matrix.sha256]:
        del _MEMO[key]
    with home_lock(_path(matrix)) as locked:
        if locked:
            try:
                _path(matrix).unlink()
            except OSError:  # missing, or not ours to remove (a folder)
                return
