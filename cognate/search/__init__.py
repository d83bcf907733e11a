"""Search: rank a target's candidate schedules for one matrix with a cost model, verify the
top, write the choice out. One module per job (docs/architecture.md):

- ``rank``: candidate sets, scoring with a ``CostModel``, ranking, the runnable top-k;
- ``result``: ``TuneResult`` (the choice, its measurements, the callable kernel, the JSON);
- ``verify``: the top-k and the baseline measured by the target, recorded in the store;
- ``emit``: the chosen schedule in the target's own form;
- ``saved``: a run's result kept as JSON: its pick emitted or run later, not re-timed;
- ``ranking_json``: the ``ranking`` object of the JSON, one shape for every target;
- ``learn``: ``tune --verify --learn``, the measured configs refine a local model copy;
- ``tune``: the whole search (``tune_matrix``).

torch is imported inside the functions that need it so that ``cognate --help`` stays fast.
"""

from __future__ import annotations

from cognate.model.cost_model import CostModel
from cognate.model.shipped import resolve_model_path, shipped_model_path
from cognate.search.emit import emit
from cognate.search.rank import (
    DEFAULT_CANDIDATES,
    DEFAULT_SEED,
    SCORE_BATCH,
    Candidate,
    Timings,
    candidate_set,
    rank,
    runnable_top,
    score_configs,
)
from cognate.search.result import TuneResult
from cognate.search.saved import emit_from_json, kernel_from_json, load_result, save_result
from cognate.search.tune import load_model, tune_matrix
from cognate.search.verify import record_verified, verify

__all__ = [
    "DEFAULT_CANDIDATES",
    "DEFAULT_SEED",
    "SCORE_BATCH",
    "Candidate",
    "CostModel",
    "Timings",
    "TuneResult",
    "candidate_set",
    "emit",
    "emit_from_json",
    "kernel_from_json",
    "load_result",
    "load_model",
    "rank",
    "record_verified",
    "resolve_model_path",
    "runnable_top",
    "save_result",
    "score_configs",
    "shipped_model_path",
    "tune_matrix",
    "verify",
]
