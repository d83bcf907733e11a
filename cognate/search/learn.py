"""``tune --verify --learn``: the tuner learns from use.

The configs ``--verify`` measured on a matrix refine a local copy of the model with
``CostModel.update`` (a few epochs on those measurements alone, as their own validation),
saved at ``$COGNATE_HOME/models/<target>-<op>.safetensors`` with provenance: the model it
started from and how many measurements in how many updates refined it. Later ``tune`` runs
without ``--model`` use that copy and say so; ``--model`` given explicitly always wins.

Several ``--learn`` runs may finish at once: each refines and replaces the copy holding its
lock, starting from the copy as it is then (another run's refinement included), so every
refinement lands; a refinement of another model than the copy's supersedes it and says so.
Temp files of a writer killed mid-write are removed under the same lock. A local copy that
does not load (damaged, tampered, or not a regular file) is ignored with one warning naming
it and how to remove it: tune then uses the shipped model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cognate import transfer
from cognate.errors import CognateError
from cognate.homefiles import clean_leftovers, home_lock, ignore, open_regular
from cognate.model.cost_model import CostModel
from cognate.model.learned import LearnedModel
from cognate.model.shipped import resolve_model_path
from cognate.paths import cognate_home
from cognate.records import MatrixRuns
from cognate.search.result import TuneResult
from cognate.targets import get_target

LEARNED_KEY = "learned"  # the local copy's provenance in its metadata
LEARN_EPOCHS = 5  # passes over one matrix's few measured configs: a nudge, not a retraining


def local_model_path(target: str, op: str) -> Path:
    """Where ``--learn`` keeps the refined copy: $COGNATE_HOME/models/<target>-<op>.safetensors."""
    return cognate_home() / "models" / f"{target}-{op}.safetensors"


@dataclass(frozen=True)
class ModelChoice:
    """The cost model a tune uses, and the line that says why when it is the local copy."""

    model: CostModel
    note: str | None = None


def choose_model(model: str | Path | CostModel | None, target: str, op: str) -> ModelChoice:
    """The one resolution of which model ranks (the CLI, ``cognate.tune`` and
    ``TunedSparse`` all ask here): a CostModel or a model file given, always; else the local
    copy ``--learn`` refined when one exists and loads (a copy that does not load is one
    warning line); else the shipped model. Each file is loaded once per process (and again
    only when it changes on disk)."""
    space = get_target(target).space(op)
    if isinstance(model, CostModel):
        if (model.space.name, model.space.version) != (space.name, space.version):
            raise CognateError(
                f"the cost model given is for space {model.space.name}, not {space.name}"
            )
        return ModelChoice(model)
    if model is not None:
        return ModelChoice(_loaded(resolve_model_path(model, target, op), space))
    local = local_model_path(target, op)
    try:
        found = _local(local, space)
    except FileNotFoundError:
        return ModelChoice(_loaded(resolve_model_path(None, target, op), space))
    except CognateError as err:
        why = str(err).removeprefix(f"{local}: ")
        ignore(local, why, f"using the shipped model (remove it: rm {local})")
        return ModelChoice(_loaded(resolve_model_path(None, target, op), space))
    n = (found.metadata.get(LEARNED_KEY) or {}).get("measurements", 0)
    note = (
        f"using the local model {local}, refined by {n} measurements of tune --learn "
        "(--model PATH to use another)"
    )
    return ModelChoice(found, note)


# (resolved path, size, mtime, space name, space version) -> the model loaded from it
_LOADED: dict[tuple, CostModel] = {}


def _loaded(path: Path, space: Any) -> CostModel:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, space.name, space.version)
    if key not in _LOADED:
        transfer.register()  # a fine-tuned model's loader
        _LOADED[key] = CostModel.load(path, space)
    return _LOADED[key]


def _local(local: Path, space: Any) -> CostModel:
    """The local copy loaded as tune will use it (weights included); ``FileNotFoundError``
    when there is none, ``CognateError`` when it does not load."""
    open_regular(local).close()  # no links, FIFOs or folders: raises FileNotFoundError too
    try:
        return _loaded(local, space)
    except CognateError:
        raise
    except Exception as err:  # a damaged file may fail in the reader's own terms
        raise CognateError(f"does not load ({type(err).__name__})") from None


def measured_runs(result: TuneResult) -> MatrixRuns:
    """The ok measurements of a verified result (top-k and baseline) as training data."""
    if not result.verified:
        raise CognateError("--learn needs --verify: it learns from the measured configs")
    seen: dict[str, tuple[Any, float]] = {}
    for c in [*result.candidates, result.baseline]:
        if c.status == "ok" and c.runtime_s and c.config.hash not in seen:
            seen[c.config.hash] = (c.config, float(c.runtime_s))
    configs = [config for config, _ in seen.values()]
    baseline_hash = result.baseline.config.hash
    return MatrixRuns(
        matrix=result.matrix,
        width=result.width,
        configs=configs,
        runtimes=np.array([t for _, t in seen.values()], dtype=np.float64),
        baseline=list(seen).index(baseline_hash) if baseline_hash in seen else None,
    )


def learn(result: TuneResult, seed: int = 0, epochs: int = LEARN_EPOCHS) -> dict[str, Any]:
    """Refine the model ``result`` was ranked with on its measurements and save it as the
    local copy; returns the copy's provenance (``path``, ``measurements`` in all, ...,
    ``superseded``: the path of a local copy of another model this one replaced, or None)."""
    run = measured_runs(result)
    if len(run.configs) < 2:
        raise CognateError(
            f"--learn: only {len(run.configs)} config ran ok; nothing to rank, model unchanged"
        )
    local = local_model_path(result.target, result.op)
    space = get_target(result.target).space(result.op)
    with home_lock(local) as locked:
        if not locked:
            raise CognateError(f"--learn: cannot lock {local} for writing; model unchanged")
        clean_leftovers(local)  # a writer killed mid-write leaves its temp file
        start, superseded = _starting_model(result, local)
        transfer.register()
        model = CostModel.load(start, space)
        if not isinstance(model, LearnedModel):
            raise CognateError(f"--learn: {start} is not a trained model; nothing to refine")
        model.update([run], seed=seed, epochs=epochs)
        before = model.metadata.get(LEARNED_KEY) or {"from": str(start)}
        provenance = {
            "from": before["from"],  # the model the first refinement started from
            "measurements": int(before.get("measurements", 0)) + len(run.configs),
            "updates": int(before.get("updates", 0)) + 1,
            "matrices": sorted({*before.get("matrices", []), result.matrix.name})[-1000:],
        }
        model.metadata[LEARNED_KEY] = provenance
        model.metadata["updates"] = model.metadata["updates"][-100:]  # the file stays small
        path = model.save(local)
    return {"path": str(path), "added": len(run.configs), **provenance, "superseded": superseded}


def _starting_model(result: TuneResult, local: Path) -> tuple[Path, str | None]:
    """Which model this refinement starts from, and what it supersedes: the local copy as
    it is now when it refines the same model (another run's refinement since this tune read
    it is kept), else the model ``result`` was ranked with (the copy is then replaced)."""
    ranked_with = Path(result.model_path)
    try:
        space = get_target(result.target).space(result.op)
        learned = _local(local, space).metadata.get(LEARNED_KEY) or {}
    except FileNotFoundError:
        return ranked_with, None
    except CognateError:
        return ranked_with, None  # damaged: replaced (tune warned about it)
    same = ranked_with == local or learned.get("from") == str(ranked_with)
    return (local, None) if same else (ranked_with, str(learned.get("from")))
