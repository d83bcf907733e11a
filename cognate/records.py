"""Training data from the record store: a store's ok records of one space, grouped per
(matrix, width, host) as ``MatrixRuns`` (``runs_per_host``), with each matrix re-loaded from
its source file and checked against the hash it was measured with. ``pretrain``,
``finetune``, ``evaluate`` and ``tune --learn`` all read their records through here."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cognate.errors import CognateError

if TYPE_CHECKING:  # pandas and torch load only when records are read
    from collections.abc import Callable, Collection

    import pandas as pd
    import torch

    from cognate.config import Config
    from cognate.hostid import HostProfile
    from cognate.matrix import Matrix
    from cognate.space import Space


@dataclass
class MatrixRuns:
    """The measured configs of one matrix at one width (on one host: see ``runs_per_host``)."""

    matrix: Matrix
    width: int
    configs: list[Config]
    runtimes: np.ndarray  # seconds, one per config
    baseline: int | None  # index of the space's baseline config, when measured
    features: torch.Tensor | None = field(default=None, repr=False)  # raw encodings
    # the measuring host as its records describe it (None: this machine, e.g. tune --learn)
    host: HostProfile | None = None

    @property
    def key(self) -> str:
        return self.matrix.sha256


def runs_from_frame(
    frame: pd.DataFrame,
    space: Space,
    load: Callable[[pd.Series], Matrix],
    host: HostProfile | None = None,
) -> list[MatrixRuns]:
    """Group ok records by (matrix, width); repeated configs take the median (callers that
    may hold several hosts split by host first: ``runs_per_host``).

    ``load`` returns the Matrix of a frame row (the first row of each matrix); ``host`` is
    the measuring host every run gets (``record_host`` of the frame). Records of another
    space version are not comparable and must be filtered out by the caller.
    """
    frame = _configs_the_space_takes(
        frame[(frame["status"] == "ok") & (frame["runtime_s"] > 0)], space
    )
    matrices: dict[str, Matrix] = {}
    runs = []
    for (sha, width), rows in frame.groupby(["matrix_sha256", "width"], sort=True):
        if sha not in matrices:
            matrices[sha] = load(rows.iloc[0])
        matrix = matrices[sha]
        per_config = rows.groupby("config_hash", sort=True).agg(
            config=("config", "first"),
            runtime_s=("runtime_s", "median"),
            is_baseline=("is_baseline", "max"),
        )
        configs = [space.validate(json.loads(text)) for text in per_config["config"]]
        baseline_hash = space.baseline(matrix.shape).hash
        flags = [
            bool(b) or c.hash == baseline_hash
            for c, b in zip(configs, per_config["is_baseline"], strict=True)
        ]
        runs.append(
            MatrixRuns(
                matrix=matrix,
                width=int(width),
                configs=configs,
                runtimes=per_config["runtime_s"].to_numpy(dtype=np.float64, copy=True),
                baseline=flags.index(True) if any(flags) else None,
                host=host,
            )
        )
    return runs


def record_host(rows: pd.DataFrame) -> HostProfile | None:
    """The measuring host of ``rows`` (one host's records) from their host columns (store
    schema 4); None for a frame without them. A fact no record holds is 0 (unknown)."""
    from cognate.hostid import HostProfile

    if "host" not in rows or "cpu" not in rows:
        return None

    def first(column: str) -> object:
        values = rows[column].dropna() if column in rows else ()
        return values.iloc[0] if len(values) else None

    cpu = first("cpu")
    return HostProfile(
        cpu_model=str(cpu) if cpu is not None else str(rows["host"].iloc[0]),
        cpu_family="",
        vector_bits=int(first("vector_bits") or 0),
        l1d_bytes=int(first("l1d_bytes") or 0),
        l2_bytes=int(first("l2_bytes") or 0),
        llc_bytes=int(first("llc_bytes") or 0),
        cores=int(first("cores") or 0),
    )


def _configs_the_space_takes(frame: pd.DataFrame, space: Space) -> pd.DataFrame:
    """``frame`` without records whose config ``space`` refuses (a store written before
    ``data import`` checked configs may hold some), with one warning line counting them:
    one bad record does not make the whole store unusable."""
    import sys

    from cognate.progress import plural

    verdicts: dict[str, str] = {}
    for text in frame["config"].unique():
        try:
            space.validate(json.loads(text))
            verdicts[text] = ""
        except (CognateError, TypeError, ValueError) as err:
            verdicts[text] = str(err)
    bad = frame["config"].map(verdicts).ne("")
    if bad.any():
        first = verdicts[frame.loc[bad, "config"].iloc[0]]
        print(
            f"cognate: warning: skipped {plural(int(bad.sum()), 'record')} whose config the "
            f"{space.name} space refuses (first: {first})",
            file=sys.stderr,
            flush=True,
        )
    return frame[~bad]


def load_record_matrix(row: pd.Series) -> Matrix:
    """Re-load a record's matrix from its source file and check it is the one measured."""
    from cognate.dataset import record_matrix_file  # portable sources; regenerates corpus
    from cognate.formats.read import load_matrix

    source = record_matrix_file(str(row["source"]), str(row["matrix_sha256"]))
    if not source or not Path(source).is_file():
        raise CognateError(
            f"matrix {row['matrix']}: its source {source!r} is not a readable file "
            "(re-fetch or regenerate it at that path)"
        )
    matrix = load_matrix(source)
    if matrix.sha256 != row["matrix_sha256"]:
        raise CognateError(f"{source}: the file changed since matrix {row['matrix']} was measured")
    return matrix


def load_runs(
    db: Path, space: Space, max_nnz: int | None = None, matrices: Collection[str] | None = None
) -> list[MatrixRuns]:
    """The store's ok records for ``space`` (versions it accepts), grouped per matrix, width
    and host; ``max_nnz``: only matrices with at most that many nonzeros; ``matrices``: only
    those sha256s (the others are never read)."""
    return runs_per_host(record_frame(db, space, max_nnz, matrices), space, load_record_matrix)


def runs_per_host(
    frame: pd.DataFrame, space: Space, load: Callable[[pd.Series], Matrix]
) -> list[MatrixRuns]:
    """One ``MatrixRuns`` per (matrix, width, host), sorted by (matrix, width, host).

    Why per host: two cpu hosts time the same config differently (docs/architecture.md,
    Facts measured here), so a label must be a speedup over the same host's baseline for the
    same matrix. Training pairs are formed within one ``MatrixRuns``, so a ranking pair never
    mixes two hosts, and no runtime is a median across hosts. A matrix measured on two hosts
    is two ranking tasks; it still belongs to one split (splits go by matrix). Each matrix
    file is read once.
    """
    loaded: dict[str, Matrix] = {}

    def load_once(row: pd.Series) -> Matrix:
        sha = row["matrix_sha256"]
        if sha not in loaded:
            loaded[sha] = load(row)
        return loaded[sha]

    if "host" not in frame:  # a frame built without hosts: one host
        return runs_from_frame(frame, space, load)
    runs = []
    for _host, part in frame.groupby("host", sort=True):
        runs += runs_from_frame(part, space, load_once, record_host(part))
    # stable: within one (matrix, width) the hosts keep their sorted order
    return sorted(runs, key=lambda r: (r.key, r.width))


def record_frame(
    db: Path, space: Space, max_nnz: int | None = None, matrices: Collection[str] | None = None
) -> pd.DataFrame:
    """The records ``load_runs`` groups, as a frame, without reading any matrix: a caller
    that picks matrices by their keys first reads only the ones it picked."""
    from cognate.store import Store  # the store pulls in pandas/sqlite: only when needed

    if not db.is_file():
        raise CognateError(f"{db}: no such record store")
    with Store(db, readonly=True) as store:
        frame = store.frame(target=space.target, op=space.op, status="ok")
    if frame.empty:
        raise CognateError(f"{db}: no ok records for target {space.target}, op {space.op}")
    current = frame[frame["space_version"].map(space.accepts_version)]
    if current.empty:
        versions = ", ".join(sorted(set(frame["space_version"])))
        raise CognateError(
            f"{db}: records of {space.name} are from space version(s) {versions}, "
            f"not the current {space.version}; collect again"
        )
    if max_nnz is not None:
        current = current[current["nnz"] <= max_nnz]
        if current.empty:
            raise CognateError(f"{db}: no {space.name} records of a matrix with <= {max_nnz} nnz")
    if matrices is not None:
        current = current[current["matrix_sha256"].isin(set(matrices))]
        if current.empty:
            raise CognateError(f"{db}: no {space.name} records of the matrices asked for")
    return current


def read_runs(
    frame: pd.DataFrame, space: Space, what: str = "reading matrices"
) -> list[MatrixRuns]:
    """``runs_per_host`` over ``frame`` with the records' matrices read (and generated
    corpus files regenerated) under a ``Ticker``: reading hundreds of matrices takes minutes."""
    from cognate.progress import Ticker

    ticker = Ticker(what, int(frame["matrix_sha256"].nunique()))  # "reading matrices: 3/9"
    count = 0

    def load(row: pd.Series) -> Matrix:
        nonlocal count
        matrix = load_record_matrix(row)
        count += 1
        ticker.update(count)
        return matrix

    return runs_per_host(frame, space, load)  # labels per host: never a cross-host pair
