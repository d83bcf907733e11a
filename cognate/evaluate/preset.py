"""Experiment presets: configs/experiments/<name>.yaml, validated with pydantic."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cognate.errors import CognateError
from cognate.paths import configs_dir
from cognate.targets import is_target, target_names
from cognate.transfer.select import PICKERS
from cognate.util import load_yaml

OTHER_OP = "other-op"  # source: the target's own other op stands in for a source target

# Cell.extra -> FinetuneOptions, except FEATURIZER: which source model the cell fine-tunes
FEATURIZER = "featurizer"
RANDOM_FEATURIZER = "random"  # the source model's featurizer left at its seeded random init
ABLATIONS: dict[str, dict[str, Any]] = {
    "random mapper": {"mapper": "random"},
    "no mapper": {"mapper": "none"},
    "raw latent (no AE)": {"latent": "raw"},
    # pretrained like the main source model, but with the featurizer frozen at random
    # weights (only the predictor learns): what training the featurizer on the source buys
    "random featurizer": {FEATURIZER: RANDOM_FEATURIZER},
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CollectSpec(_Strict):
    """Records to collect when the store has none usable (spade simulates in seconds)."""

    matrices: list[str] = Field(min_length=4)  # names of shared suitesparse matrices
    width: int = Field(16, ge=1, le=4096)


class SelectSpec(_Strict):
    """Candidate fine-tuning settings; each cell keeps the best on validation."""

    freeze_featurizer: list[bool] = Field([True], min_length=1)
    lr: list[float] = Field([5e-4], min_length=1)
    metric: Literal["pairwise_accuracy", "top1", "top5"] = "pairwise_accuracy"


class ExperimentPreset(_Strict):
    name: str
    # Names of registered targets (validated below); the defaults are the paper's setting.
    target: str = "spade"
    ops: list[Literal["spmm", "sddmm"]] = Field(min_length=1)
    seeds: list[int] = Field(min_length=3)
    split_seed: int = Field(0, ge=0)
    val_fraction: float = Field(0.2, gt=0, lt=0.5)
    test_fraction: float = Field(0.25, gt=0, lt=0.5)
    source: str = "cpu"  # a target's name, or OTHER_OP: the target's other op
    source_fallback: Literal["other-op", "none"] = "none"
    pretrain_epochs: int = Field(10, ge=1)
    # Source matrices above this many nonzeros stay out of pretraining (None: all). Training
    # the featurizer costs ~2.3 KB of memory per nonzero and a minute per step at 4.7M nnz.
    source_max_nnz: int | None = Field(None, ge=1)
    model: dict[str, Any] | None = None  # None: configs/transfer.yaml's experiment preset
    matrices: list[int] = Field(min_length=1)
    # K values of the ablations (a prior matters most at small K); zero-shot uses the largest
    ablation_matrices: list[int] = Field([5], min_length=1)
    ablations: list[str] = list(ABLATIONS)
    # K values at which TL also runs with actively chosen target matrices (k-center in the
    # pretrained embedding space) instead of random ones
    active_matrices: list[int] = []
    # which non-random pickers run there (cognate.transfer.select.PICKERS): each its own rows
    active_selections: list[str] = ["active"]
    # K values at which TL's model also ranks a portfolio first (the greedy fixed set of the
    # training matrices, its size and anchor chosen on validation: cognate.model.portfolio)
    portfolio_matrices: list[int] = []
    zero_shot: bool = True
    finetune_epochs: int = Field(30, ge=1)
    patience: int = Field(6, ge=1)
    select: SelectSpec = SelectSpec()
    bootstrap: int = Field(2000, ge=100)
    collect: CollectSpec | None = None
    # The target's records of this dense width only (None: every width the store holds).
    width: int | None = Field(None, ge=1)
    # The data the protocol needs: >= min_matrices source matrices with >=
    # min_configs measured configs each and >= min_matrices target matrices. With
    # target_all_configs only target matrices measured on every config of the space are
    # evaluated (the oracle needs them); the others are left out and counted in the report.
    min_matrices: int = Field(4, ge=4)
    min_configs: int = Field(1, ge=1)
    target_all_configs: bool = False
    short_data: Literal["refuse", "warn"] = "refuse"

    def only_ops(self, ops: list[str]) -> ExperimentPreset:
        """The same preset restricted to ``ops`` (each one of its own): every cached model
        and cell keeps its key, so runs of disjoint ops can share one output folder."""
        unknown = [op for op in ops if op not in self.ops]
        if unknown:
            raise CognateError(f"preset {self.name!r} evaluates {self.ops}, not {unknown}")
        return self.model_copy(update={"ops": [op for op in self.ops if op in ops]})

    @field_validator("ablation_matrices", mode="before")
    @classmethod
    def _one_k_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, int) else value

    def model_post_init(self, _: Any) -> None:
        unknown = set(self.ablations) - set(ABLATIONS)
        if unknown:
            raise ValueError(f"unknown ablations {sorted(unknown)}; expected {list(ABLATIONS)}")
        if not self.active_selections or set(self.active_selections) - set(PICKERS):
            raise ValueError(
                f"active_selections {self.active_selections}: expected of {list(PICKERS)}"
            )
        if min(self.ablation_matrices) < 1:
            raise ValueError("ablation_matrices must be positive")
        if len(set(self.seeds)) != len(self.seeds) or min(self.matrices) < 1:
            raise ValueError("seeds must be distinct and matrices positive")
        if not is_target(self.target):
            raise ValueError(f"unknown target {self.target!r}; expected one of {target_names()}")
        if self.source != OTHER_OP and not is_target(self.source):
            raise ValueError(f"unknown source {self.source!r}: a target's name or {OTHER_OP!r}")


def experiments_dir() -> Path:
    return configs_dir() / "experiments"


def preset_names() -> list[str]:
    return sorted(p.stem for p in experiments_dir().glob("*.yaml"))


def load_experiment(name: str) -> ExperimentPreset:
    """The preset ``name`` of configs/experiments, or a YAML file's path; a missing or
    malformed file is one CognateError line."""
    if name.endswith((".yaml", ".yml")):
        path = Path(name).expanduser()
        name = path.stem
    elif name.replace("-", "").replace("_", "").isalnum():
        path = experiments_dir() / f"{name}.yaml"
    else:
        raise CognateError(f"bad preset name {name!r}")
    if not path.is_file():
        known = ", ".join(preset_names()) or "none"
        raise CognateError(f"unknown experiment preset {name!r} (known: {known})")
    data = load_yaml(path, "experiment preset") or {}
    try:
        return ExperimentPreset(name=name, **data)
    except (TypeError, ValidationError, ValueError) as err:
        first = str(err).splitlines()
        detail = " ".join(first[:3]) if first else type(err).__name__
        raise CognateError(f"{path}: invalid preset: {detail}") from None
