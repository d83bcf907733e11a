"""The evaluation harness behind ``cognate evaluate`` (docs/architecture.md, Evaluation protocol)."""

from cognate.evaluate.preset import ExperimentPreset, load_experiment, preset_names
from cognate.evaluate.run import run_evaluation
from cognate.stats import Estimate, bootstrap_ci, geomean

__all__ = [
    "Estimate",
    "ExperimentPreset",
    "bootstrap_ci",
    "geomean",
    "load_experiment",
    "preset_names",
    "run_evaluation",
]
