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

from pathlib import Path
from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.homefiles import clean_leftovers, home_lock, ignore, open_regular
from cognate.model.cost_model import CostModel
from cognate.model.learned import LearnedModel
from cognate.paths import cognate_home
from cognate.records import MatrixRuns
from cognate.search.result import TuneResult
from cognate.targets import get_target

LEARNED_KEY = "learned"  # the local copy's provenance in its metadata
LEARN_EPOCHS = 5  # passes over one matrix's few measured configs: a nudge, not a retraining


def local_model_path(target: str, op: str) -> Path:
    """Where ``--learn`` keeps the refined copy: $COGNATE_HOME/models/<target>-<op>.safetensors."""
    return cognate_home() / "models" / f"{target}-{op}.safetensors"


def model_to_use(model: Path | None, target: str, op: str) -> tuple[Path | None, str | None]:
    """(the model file tune should use, a line saying why when it is the local copy).
    ``model`` given: it, always. Else the local copy when one exists and loads, else None
    (the shipped model; a local copy that does not load is one warning line)."""
    if model is not None:
        return model, None
    local = local_model_path(target, op)
    try:
        learned = _check_local(local, target, op)
    except FileNotFoundError:
        return None, None
    except CognateError as err:
        why = str(err).removeprefix(f"{local}: ")
        ignore(local, why, f"using the shipped model (remove it: rm {local})")
        return None, None
    n = learned.get("measurements", 0)
    return local, (
        f"using the local model {local}, refined by {n} measurements of tune --learn "
        "(--model PATH to use another)"
    )


def _check_local(local: Path, target: str, op: str) -> dict[str, Any]:
    """The provenance of the local copy after loading it as tune will (weights included);
    ``FileNotFoundError`` when there is none, ``CognateError`` when it does not load."""
    open_regular(local).close()  # no links, FIFOs or folders: raises FileNotFoundError too
    try:
        model = CostModel.load(local, get_target(target).space(op))
    except CognateError:
        raise
    except Exception as err:  # a damaged file may fail in the reader's own terms
        raise CognateError(f"does not load ({type(err).__name__})") from None
    return model.metadata.get(LEARNED_KEY) or {}


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
        learned = _check_local(local, result.target, result.op)
    except FileNotFoundError:
        return ranked_with, None
    except CognateError:
        return ranked_with, None  # damaged: replaced (tune warned about it)
    same = ranked_with == local or learned.get("from") == str(ranked_with)
    return (local, None) if same else (ranked_with, str(learned.get("from")))
