"""The schema of a fine-tuned model's ``transfer`` metadata section.

``cognate.model.checkpoint`` validates the sections every checkpoint has; this one is read
only by the transfer loader (``cognate.transfer.finetune.load_transfer_model``), which
validates it here before it rebuilds the encoder or sizes the shipped autoencoder. An empty
block, an unknown mapper, a latent of 1e9 or a codebook of NaNs is one line naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from cognate.errors import CognateError
from cognate.model.checkpoint import first_error
from cognate.transfer.mapper import MAPPERS

LATENTS: tuple[str, ...] = ("ae", "raw")


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class OptionsMeta(_Section):
    mapper: str
    latent: str
    seed: int

    @field_validator("mapper", "latent")
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        names = MAPPERS if info.field_name == "mapper" else LATENTS
        if value not in names:
            raise ValueError(f"{value[:40]!r} is not one of {', '.join(names)}")
        return value


class AESettingsMeta(BaseModel):
    """``AESettings``' fields, with the bounds configs/transfer.yaml is held to."""

    model_config = ConfigDict(extra="forbid", strict=True)
    latent: int = Field(64, ge=1, le=4096)
    hidden: int = Field(128, ge=1, le=65536)
    lr: float = Field(0.01, gt=0, allow_inf_nan=False)
    max_steps: int = Field(3000, ge=0)
    sample: int = Field(4096, ge=1)
    seed: int = 0


Column = Annotated[
    list[Annotated[float, Field(allow_inf_nan=False)]], Field(min_length=1, max_length=65536)
]


class ShippedAutoencoder(_Section):
    settings: AESettingsMeta
    # the distinct values of each knob-feature column (the one-hot codebook)
    columns: list[Column] = Field(min_length=1, max_length=1024)


class TransferMeta(_Section):
    options: OptionsMeta
    autoencoder: ShippedAutoencoder | None = None
    autoencoder_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")


def validate_transfer(path: str | Path, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta``'s transfer section, checked; CognateError naming the first bad field."""
    if "transfer" not in meta:
        raise CognateError(f"{path}: not a fine-tuned model (no transfer metadata)")
    try:
        TransferMeta.model_validate(meta["transfer"])
    except ValidationError as err:
        raise CognateError(f"{path}: model metadata {first_error(err, 'transfer.')}") from None
    return meta["transfer"]
