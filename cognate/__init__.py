"""cognate: a cost-model-driven autotuner for sparse tensor programs (SpMM / SDDMM)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["TuneResult", "__version__", "tune"]


def __getattr__(name: str) -> Any:
    """``cognate.tune`` / ``cognate.TuneResult`` load on first use: ``import cognate`` stays light."""
    if name == "tune":
        from cognate.api import tune

        return tune
    if name == "TuneResult":
        from cognate.search import TuneResult

        return TuneResult
    raise AttributeError(f"module 'cognate' has no attribute {name!r}")
