"""``tune --verify --learn``: the tuner learns from use.

The configs ``--verify`` measured on a matrix refine a local copy of the model with
``CostModel.update`` (a few epochs on those measurements alone, as their own validation),
saved at ``$COGNATE_HOME/models/<target>-<op>.safetensors`` with provenance: the model it
started from and how many measurements in how many updates refined it. Later ``tune`` runs
without ``--model`` use that copy and say so; ``--model`` given explicitly always wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.model.cost_model import CostModel, LearnedModel
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
    ``model`` given: it, always. Else the local copy when one exists, else None (the
    shipped model)."""
    if model is not None:
        return model, None
    local = local_model_path(target, op)
    if not local.is_file():
        return None, None
    from cognate.model.checkpoint import read_metadata

    learned = read_metadata(local).get(LEARNED_KEY) or {}
    n = learned.get("measurements", 0)
    return local, (
        f"using the local model {local}, refined by {n} measurements of tune --learn "
        "(--model PATH to use another)"
    )


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
    local copy; returns the copy's provenance (``path``, ``measurements`` in all, ...)."""
    run = measured_runs(result)
    if len(run.configs) < 2:
        raise CognateError(
            f"--learn: only {len(run.configs)} config ran ok; nothing to rank, model unchanged"
        )
    space = get_target(result.target).space(result.op)
    model = CostModel.load(result.model_path, space)
    if not isinstance(model, LearnedModel):
        raise CognateError(
            f"--learn: {result.model_path} is not a trained model; nothing to refine"
        )
    model.update([run], seed=seed, epochs=epochs)
    before = model.metadata.get(LEARNED_KEY) or {"from": str(result.model_path)}
    provenance = {
        "from": before["from"],  # the model the first refinement started from
        "measurements": int(before.get("measurements", 0)) + len(run.configs),
        "updates": int(before.get("updates", 0)) + 1,
        "matrices": sorted({*before.get("matrices", []), result.matrix.name})[-1000:],
    }
    model.metadata[LEARNED_KEY] = provenance
    model.metadata["updates"] = model.metadata["updates"][-100:]  # the file stays small
    path = model.save(local_model_path(result.target, result.op))
    return {"path": str(path), "added": len(run.configs), **provenance}
