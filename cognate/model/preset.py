"""Model presets from configs/model.yaml, validated with pydantic."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cognate.errors import CognateError
from cognate.paths import configs_dir
from cognate.util import load_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Bounds on the architecture: a preset also arrives inside a model file's metadata, and a
# negative or absurd width there must be refused here, not by torch (a RuntimeError) or by
# the allocator. Models are sized against their file before anything is allocated as well
# (cognate.model.checkpoint); these bounds keep even building that meta-device model cheap.
MAX_WIDTH = 1 << 20
MAX_LAYERS = 16
Width = Annotated[int, Field(ge=1, le=MAX_WIDTH)]


class FeaturizerSpec(_Strict):
    first_kernel: int = Field(5, ge=1, le=9)
    kernel: int = Field(3, ge=1, le=9)
    channels: list[Width] = Field(min_length=1, max_length=32)
    embed_hidden: list[Width] = Field([], max_length=MAX_LAYERS)
    embedding_dim: int = Field(128, ge=1, le=MAX_WIDTH)
    trainable: bool = True
    # Also feed the matrix's cheap structure statistics (cognate/matrix_stats.py) into
    # the embedding MLP, next to the pooled convolution features and log2 (rows, cols, nnz).
    statistics: bool = False


class PredictorSpec(_Strict):
    hidden: list[Width] = Field([256, 128], max_length=MAX_LAYERS)


class TrainSpec(_Strict):
    margin: float = Field(0.1, ge=0)
    tie_rtol: float = Field(0.01, ge=0, lt=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    configs_per_step: int = Field(256, ge=2)
    matrices_per_step: int = Field(1, ge=1)
    epochs: int = Field(40, ge=1)
    patience: int = Field(8, ge=1)
    val_fraction: float = Field(0.2, gt=0, lt=1)
    early_stop_metric: Literal["pairwise_accuracy", "top1", "top5"] = "pairwise_accuracy"
    # How the ranking loss weights a pair: uniform, or by log(slow / fast) runtime.
    pair_weight: Literal["uniform", "log_gap"] = "uniform"


class ModelPreset(_Strict):
    name: str = Field(max_length=200)
    featurizer: FeaturizerSpec
    predictor: PredictorSpec
    train: TrainSpec

    def with_train(self, **changes: Any) -> ModelPreset:
        """A copy with some training settings replaced (CLI overrides such as --epochs)."""
        train = self.train.model_copy(update={k: v for k, v in changes.items() if v is not None})
        return self.model_copy(update={"train": TrainSpec.model_validate(train.model_dump())})


def preset_names() -> list[str]:
    return sorted(_load_all())


def load_preset(name: str) -> ModelPreset:
    """The preset ``name`` of configs/model.yaml; CognateError when unknown or malformed."""
    presets = _load_all()
    if name not in presets:
        raise CognateError(
            f"{configs_dir() / 'model.yaml'}: no preset {name!r}; "
            f"expected one of {', '.join(sorted(presets))}"
        )
    return preset_from_dict(name, presets[name])


def preset_from_dict(name: str, data: dict[str, Any]) -> ModelPreset:
    try:
        return ModelPreset.model_validate({"name": name, **data})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CognateError(f"model preset {name!r}: {where}: {first['msg']}") from None


def _load_all() -> dict[str, Any]:
    path = configs_dir() / "model.yaml"
    data = load_yaml(path, "model presets")
    if not isinstance(data, dict) or not isinstance(data.get("presets"), dict):
        raise CognateError(f"{path}: expected a mapping with a 'presets' mapping")
    return data["presets"]
