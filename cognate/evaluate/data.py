"""The evaluation's data: the records per op (a snapshot of the store, or a small store
collected when none is usable), the matrices complete at the evaluated width, and what each
cell's runs are (``OpData``)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.evaluate.preset import (
    OTHER_OP,
    ExperimentPreset,
)
from cognate.model.portfolio import (
    chooser_words,  # noqa: F401  (evaluate.report reads it here)
)
from cognate.records import MatrixRuns
from cognate.space import Space
from cognate.targets import get_target
from cognate.transfer.finetune import (
    split_target,
)
from cognate.util import atomic_path

Log = Callable[[str], None]


# --- data ----------------------------------------------------------------------------------


def snapshot_db(source: Path, dest: Path) -> Path:
    """Copy a (possibly live, WAL) store with SQLite's backup API; the source is only read."""
    if not source.is_file():
        raise CognateError(f"{source}: no such record store")
    uri = f"{source.resolve().as_uri()}?mode=ro"
    with atomic_path(dest) as tmp:
        with closing(sqlite3.connect(uri, uri=True)) as src, closing(sqlite3.connect(tmp)) as dst:
            src.backup(dst)
    return dest


def load_op_runs(
    db: Path, space: Space, max_nnz: int | None = None, matrices: set[str] | None = None
) -> list[MatrixRuns]:
    from cognate.records import load_runs  # the store's grouping, shared with pretrain

    return load_runs(db, space, max_nnz, matrices)


def usable(db: Path, preset: ExperimentPreset) -> str | None:
    """None when ``db`` has target records of every op of the preset, else why not."""
    if not db.is_file():
        return f"{db} does not exist"
    for op in preset.ops:
        try:  # the store alone: no matrix file is read here
            measured = measured_configs(db, get_target(preset.target).space(op))
        except CognateError as err:
            return str(err)
        if len(measured) < 4:
            return f"{db}: fewer than 4 {preset.target} {op} matrices"
    return None


def collect_small_store(preset: ExperimentPreset, db: Path, shared: Path, log: Log) -> Path:
    """Simulate ``preset.collect``'s matrices for every op of the target (and the other op,
    the stand-in source when there are no cpu records)."""
    from cognate.collect import collect

    if preset.collect is None:
        raise CognateError("this preset does not collect records; give --db a store")
    files = [shared / "matrices" / "suitesparse" / f"{n}.mtx.gz" for n in preset.collect.matrices]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise CognateError(f"preset {preset.name}: matrices not found: {', '.join(missing)}")
    for op in ("spmm", "sddmm"):
        log(f"collecting {preset.target} {op} records of {len(files)} matrices into {db}")
        summary = collect(
            preset.target, op, preset.collect.width, files, db_path=db, all_configs=True, jobs=1
        )
        if summary.exit_code != 0:
            raise CognateError(f"collection failed: {summary.line()}")
    return db


def runs_digest(runs: Sequence[MatrixRuns]) -> str:
    h = hashlib.sha256()
    for run in sorted(runs, key=lambda r: (r.key, r.width)):
        h.update(f"{run.key}:{run.width}:{run.baseline}".encode())
        h.update("".join(c.hash for c in run.configs).encode())
        h.update(np.ascontiguousarray(run.runtimes, dtype=np.float64).tobytes())
    return h.hexdigest()[:16]


def stable_hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class OpData:
    """One op's target records, its split, and the pretraining source."""

    op: str
    space: Space
    runs: list[MatrixRuns]
    train: list[str]
    validation: list[str]
    test: list[str]
    source_name: str
    source_space: Space
    source_runs: list[MatrixRuns]
    shortfalls: list[str] = field(default_factory=list)  # below the preset's data minimum
    # target matrices left out: measured on a sample of the space only (target_all_configs)
    sampled: int = 0
    # matrices left out for having more nonzeros than ``max_nnz``: {"target": n, "source": n}
    over_max_nnz: dict[str, int] = field(default_factory=dict)

    def names(self, keys: Sequence[str]) -> list[str]:
        by_key = {r.key: r.matrix.name for r in self.runs}
        return sorted(by_key[k] for k in keys)

    def train_runs(self) -> list[MatrixRuns]:
        train = set(self.train)
        return [r for r in self.runs if r.key in train and r.baseline is not None]

    def test_runs(self) -> list[MatrixRuns]:
        test = set(self.test)
        return [r for r in self.runs if r.key in test and r.baseline is not None]


def prepare_op(
    db: Path, preset: ExperimentPreset, op: str, log: Log, max_nnz: int | None = None
) -> OpData:
    """``max_nnz``: matrices with more nonzeros are left out of the target and the source
    (decided from the store, so their files are never read) and counted."""
    target = get_target(preset.target)
    space = target.space(op)
    measured = measured_configs(db, space, preset.width)
    over = {"target": 0, "source": 0}
    if max_nnz is not None:
        big = over_nnz(db, space, max_nnz)
        over["target"] = len(set(measured) & big)
        measured = {k: v for k, v in measured.items() if k not in big}
        if not measured:
            raise CognateError(f"{op}: no {space.name} matrix has <= {max_nnz} nnz")
        if over["target"]:
            log(f"{op}: {over['target']} target matrices with > {max_nnz} nnz left out")
    complete, sampled = _complete_matrices(measured, space, preset)
    if complete is None and max_nnz is not None:
        complete = set(measured)
    runs = _at_width(load_op_runs(db, space, matrices=complete), space, preset)
    if sampled:
        log(f"{op}: {sampled} target matrices measured on a sample of the space left out")
    train_keys, val_keys, test_keys = split_target(
        [r.key for r in runs], preset.val_fraction, preset.test_fraction, preset.split_seed
    )
    name, src_space, src_runs = _source(db, preset, op, log, max_nnz)
    if max_nnz is not None:
        over["source"] = len(
            set(measured_configs(db, src_space)) & over_nnz(db, src_space, max_nnz)
        )
    kept = {r.key for r in runs}
    short = shortfalls(
        preset,
        space,
        {k: v for k, v in measured.items() if k in kept},
        name,
        _kept(measured_configs(db, src_space), src_runs),
    )
    if short and preset.short_data == "refuse":
        raise CognateError(
            f"preset {preset.name}: too little data in {db}: {'; '.join(short)} "
            "(a preset with `short_data: warn` runs anyway)"
        )
    for line in short:
        log(f"[yellow]warning:[/] below the preset's data minimum: {line}")
    held_out = set(val_keys) | set(test_keys)
    src_runs = [r for r in src_runs if r.key not in held_out]  # no test leak via the source
    if len({r.key for r in src_runs}) < 2:
        raise CognateError(f"{op}: fewer than 2 source matrices outside the target's held-out ones")
    return OpData(
        op,
        space,
        runs,
        train_keys,
        val_keys,
        test_keys,
        name,
        src_space,
        src_runs,
        short,
        sampled,
        over if max_nnz is not None else {},
    )


def over_nnz(db: Path, space: Space, max_nnz: int) -> set[str]:
    """The sha256s of ``space``'s matrices in the store with more than ``max_nnz`` nonzeros."""
    from cognate.store import Store

    with Store(db, readonly=True) as store:
        frame = store.frame(target=space.target, op=space.op)
    return set(frame.loc[frame["nnz"] > max_nnz, "matrix_sha256"])


def _complete_matrices(
    measured: dict[str, set[str]], space: Space, preset: ExperimentPreset
) -> tuple[set[str] | None, int]:
    """With ``target_all_configs``, the target matrices measured on every config of the space
    (the oracle needs them; None: every matrix) and how many were measured on a sample only.
    Decided from the store alone, so a left-out matrix's file is never read."""
    all_configs = getattr(space, "all_configs", None)  # only an enumerable space
    if not preset.target_all_configs or all_configs is None:
        return None, 0
    # a space that grew (spade's rp values) also counts a matrix measured on exactly every
    # config of an earlier version: its oracle is that version's
    sets = getattr(space, "complete_config_sets", lambda: [{c.hash for c in all_configs()}])()
    every, earlier = sets[0], sets[1:]
    complete = {
        k
        for k, configs in measured.items()
        if every <= configs or any(configs == old for old in earlier)
    }
    if not complete:
        raise CognateError(f"no {space.name} matrix is measured on every config")
    return complete, len(measured) - len(complete)


def _at_width(runs: list[MatrixRuns], space: Space, preset: ExperimentPreset) -> list[MatrixRuns]:
    """The target runs at the preset's width (None: every width)."""
    if preset.width is None:
        return runs
    runs = [r for r in runs if r.width == preset.width]
    if not runs:
        raise CognateError(f"no {space.name} records at width {preset.width}")
    return runs


def measured_configs(db: Path, space: Space, width: int | None = None) -> dict[str, set[str]]:
    """Per matrix (sha256): the configs of ``space`` (versions it accepts; at ``width`` when
    given) measured with any status (a config too large for a matrix was measured: it cannot
    run there)."""
    from cognate.store import Store

    with Store(db, readonly=True) as store:
        frame = store.frame(target=space.target, op=space.op)
    frame = frame[frame["space_version"].map(space.accepts_version)]  # as load_runs
    if width is not None:
        frame = frame[frame["width"] == width]
    return {k: set(g) for k, g in frame.groupby("matrix_sha256")["config_hash"]}


def shortfalls(
    preset: ExperimentPreset,
    space: Space,
    target: dict[str, set[str]],
    source_name: str,
    source: dict[str, set[str]],
) -> list[str]:
    """How the store falls short of the preset's minimum, one line each: >= min_matrices
    source matrices with >= min_configs measured configs each, >= min_matrices target
    matrices (those evaluated: with target_all_configs, the ones measured on every config)."""
    out = []
    enough = sum(len(configs) >= preset.min_configs for configs in source.values())
    if enough < preset.min_matrices:
        out.append(
            f"{enough} {source_name} matrices have >= {preset.min_configs} measured configs "
            f"(of {len(source)}); the preset needs {preset.min_matrices}"
        )
    if len(target) < preset.min_matrices:
        out.append(f"{len(target)} {space.name} matrices; the preset needs {preset.min_matrices}")
    return out


def _source(
    db: Path, preset: ExperimentPreset, op: str, log: Log, max_nnz: int | None = None
) -> tuple[str, Space, list]:
    """The pretraining records: the source target's records of ``op``, else (stand-in or
    fallback) the evaluated target's other op; matrices above the smaller of the preset's
    ``source_max_nnz`` and ``max_nnz`` left out."""
    limits = [n for n in (preset.source_max_nnz, max_nnz) if n is not None]
    limit = min(limits) if limits else None
    words = f" (matrices <= {limit} nnz)" if limit is not None else ""
    if preset.source != OTHER_OP:
        space = get_target(preset.source).space(op)
        try:
            runs = load_op_runs(db, space, limit)
            return f"{preset.source} {op}{words}", space, runs
        except CognateError as err:
            if preset.source_fallback == "none":
                raise CognateError(f"no {preset.source} {op} source records: {err}") from None
            log(
                f"no {preset.source} {op} records ({err}); source falls back to "
                f"{preset.target}'s other op"
            )
    other = "sddmm" if op == "spmm" else "spmm"
    space = get_target(preset.target).space(other)
    why = f": no {preset.source} records" if preset.source != OTHER_OP else ""
    return (
        f"{preset.target} {other} (stand-in source{why}){words}",
        space,
        load_op_runs(db, space, limit),
    )


def _kept(measured: dict[str, set[str]], runs: Sequence[MatrixRuns]) -> dict[str, set[str]]:
    keys = {r.key for r in runs}
    return {k: v for k, v in measured.items() if k in keys}
