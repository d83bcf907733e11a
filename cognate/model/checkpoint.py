"""What a model file must be before any of it is used: a schema for its metadata, and a size
and finiteness check of its weights.

A checkpoint is a safetensors file whose metadata block holds cognate's JSON. Everything a
user hands to ``tune --model``, ``collect --from-model``, ``finetune --model`` or
``portfolio`` passes here first, and anything that does not fit is one CognateError line
naming the file and the field, never a traceback:

- the JSON is bounded in size and nesting depth *before* it is parsed (``json.loads``
  recurses once per level: 100k nested brackets would be a RecursionError);
- its fields are validated with pydantic (types, ranges, the encoder kind's format, the
  preset's layer widths, the portfolio's shape);
- the network it describes is built on PyTorch's meta device (no memory) and refused when
  its weights would not fit in the file or in the memory budget, so metadata claiming a
  25,000- or 1e9-wide layer never reaches the allocator;
- the file's tensors must be exactly the model's (names and shapes, read from the header
  before any tensor is) and finite: a model of NaN weights would rank by NaN.

Sections that a plugin reads (``transfer``: a fine-tuned model's) are validated by that
plugin's loader (``cognate.transfer.schema``). The file's reading and writing
(``read_metadata``, ``save_checkpoint``, ``load_checkpoint``) live here too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from cognate.errors import CognateError
from cognate.model.encoding import ConfigEncoder, make_encoder
from cognate.model.predictor import RankingNetwork
from cognate.model.preset import ModelPreset, preset_from_dict
from cognate.space import Space
from cognate.util import atomic_write

CHECKPOINT_FORMAT = 1
# The shipped models' metadata is ~50 KB (mostly per-epoch metrics and the portfolio's
# validation table); an evaluation's models stay far below this.
MAX_METADATA_BYTES = 16 << 20
MAX_METADATA_DEPTH = 32
# An encoder kind is "<homogeneous part>+<target part>", e.g. "loopnest+raw", "loopnest-random+ae",
# optionally "+host" (the host part): "loopnest+knobs+host".
ENCODER_KIND = re.compile(r"^[a-z][a-z0-9_-]{0,63}\+[a-z][a-z0-9_-]{0,63}(\+host)?$")

Name = Annotated[str, Field(min_length=1, max_length=200)]


class _Section(BaseModel):
    """A metadata section: its known fields checked, other keys kept (newer writers)."""

    model_config = ConfigDict(extra="allow", strict=True)


class SpaceMeta(_Section):
    name: Name
    version: Name


class EncoderMeta(_Section):
    kind: str
    dim: int = Field(ge=1, le=1 << 16)

    @field_validator("kind")
    @classmethod
    def _kind_format(cls, value: str) -> str:
        if not ENCODER_KIND.match(value):
            raise ValueError(f"{value[:80]!r} is not of the form <part>+<part>[+host]")
        return value


class PortfolioMeta(_Section):
    # knob dicts; each is validated against the space when the model is loaded
    configs: list[dict[str, Any]] = Field([], max_length=4096)
    anchor: float = Field(0.0, ge=0, allow_inf_nan=False)
    fixed_order: bool = False


Speedup = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # of the validation oracle
RankingName = Literal["learned", "fixed-K", "blend"]  # cognate.model.portfolio.RANKINGS


class RankingOption(_Section):
    """One ranking's validation figures (geomean speedups over the baseline)."""

    top1: Speedup
    best_of_k: Speedup
    top1_of_oracle: Share
    best_of_k_of_oracle: Share
    size: int = Field(0, ge=0, le=4096)


class RankingTest(_Section):
    """The shipped ranking scored once on the test matrices, after the choice."""

    top1: Speedup
    best_of_k: Speedup
    oracle: Speedup
    matrices: int = Field(ge=1, le=10_000_000)


class RankingMeta(_Section):
    """Which ranking a model uses and the validation figures that chose it."""

    chosen: RankingName
    k: int = Field(ge=1, le=256)
    oracle: Speedup
    validation_matrices: int = Field(ge=1, le=10_000_000)
    greedy_from: Name
    options: dict[RankingName, RankingOption] = Field(min_length=1, max_length=3)
    test: RankingTest | None = None

    @field_validator("options")
    @classmethod
    def _has_chosen(cls, value: dict[str, RankingOption], info: Any) -> dict:
        chosen = info.data.get("chosen")
        if chosen is not None and chosen not in value:
            raise ValueError(f"the chosen ranking {chosen!r} has no validation figures")
        return value


class LearnedMeta(_Section):
    """A local copy refined by ``tune --verify --learn`` (``cognate.search.learn``)."""

    from_: str = Field(alias="from", min_length=1, max_length=4096)
    measurements: int = Field(ge=0, le=1_000_000_000)
    updates: int = Field(ge=1, le=1_000_000_000)
    matrices: list[Name] = Field([], max_length=1000)


class UpdateMeta(_Section):
    """One ``CostModel.update`` of a local copy (``tune --verify --learn``)."""

    matrices: list[Name] = Field([], max_length=1000)
    measurements: int = Field(ge=0, le=1_000_000_000)
    epochs: int = Field(ge=0, le=1_000_000)
    seed: int


class MatrixRef(_Section):
    sha256: Name
    name: str = ""


class SplitMeta(_Section):
    train: list[MatrixRef] = []
    validation: list[MatrixRef] = []
    test: list[MatrixRef] = []
    finetune: list[MatrixRef] = []


class CheckpointMeta(_Section):
    format: Literal[1]
    preset: dict[str, Any]
    target: Name
    op: Name
    space: SpaceMeta
    encoder: EncoderMeta
    portfolio: PortfolioMeta | None = None
    ranking: RankingMeta | None = None
    learned: LearnedMeta | None = None
    updates: list[UpdateMeta] | None = Field(None, max_length=1000)
    split: SplitMeta | None = None
    transfer: dict[str, Any] | None = None  # its loader's schema checks the inside

    @field_validator("preset")
    @classmethod
    def _preset(cls, value: dict[str, Any]) -> dict[str, Any]:
        ModelPreset.model_validate(value)
        return value


def first_error(err: ValidationError, prefix: str = "") -> str:
    """The first problem of a pydantic error as "where: what", or "has no 'where'" for a
    missing field (one line); ``prefix`` goes before the field's dotted path."""
    first = err.errors()[0]
    where = prefix + (".".join(str(p) for p in first["loc"]) or "(top)")
    if first["type"] == "missing":
        return f"has no {where!r}"
    return " ".join(f"{where}: {first['msg']}".split())


def json_depth(text: str) -> int:
    """The deepest nesting of brackets in JSON ``text`` (outside strings), computed without
    recursion: strings are blanked, then a running sum of opens minus closes."""
    blanked = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    codes = np.frombuffer(blanked.encode("utf-8", "replace"), dtype=np.uint8)
    opens = (codes == ord("[")) | (codes == ord("{"))
    closes = (codes == ord("]")) | (codes == ord("}"))
    running = np.cumsum(opens.astype(np.int32) - closes.astype(np.int32))
    return int(running.max()) if running.size else 0


def parse_metadata(path: str | Path, raw: str) -> dict[str, Any]:
    """The checkpoint metadata in ``raw`` (the JSON of the file's ``cognate`` entry),
    bounded, parsed and validated; its plugin sections are left to their loaders."""
    if len(raw) > MAX_METADATA_BYTES:
        raise CognateError(f"{path}: model metadata is larger than {MAX_METADATA_BYTES} bytes")
    if json_depth(raw) > MAX_METADATA_DEPTH:
        raise CognateError(f"{path}: model metadata is nested deeper than {MAX_METADATA_DEPTH}")
    try:
        meta = json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        raise CognateError(f"{path}: corrupt cognate metadata") from None
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise CognateError(f"{path}: checkpoint format {found!r} is not {CHECKPOINT_FORMAT}")
    try:
        CheckpointMeta.model_validate(meta)
    except ValidationError as err:
        raise CognateError(f"{path}: model metadata {first_error(err)}") from None
    return meta


def encoder_target_part(meta: dict[str, Any]) -> str:
    """The target part of a validated metadata's encoder kind ("raw" of "loopnest+raw",
    "knobs+host" of "loopnest+knobs+host")."""
    return meta["encoder"]["kind"].split("+", 1)[1]


def state_bytes(build: Callable[[], Any]) -> int:
    """Bytes of the state (weights and buffers) of the module ``build()`` makes, built on
    the meta device: nothing is allocated, whatever sizes it claims."""
    with torch.device("meta"):
        module = build()
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def check_fits(path: str | Path, build: Callable[[], Any]) -> None:
    """Refuse a model file whose metadata describes more weights than the file holds (they
    cannot be in it) or than the memory budget allows; call before building for real."""
    from cognate.budget import memory_budget

    needed = state_bytes(build)
    size = Path(path).stat().st_size
    if needed > size:
        raise CognateError(
            f"{path}: metadata describes a model of {needed} bytes of weights, "
            f"but the file has only {size} bytes"
        )
    budget = memory_budget()
    if needed > budget:
        raise CognateError(
            f"{path}: the model needs {needed} bytes of weights, over the memory budget of "
            f"{budget} bytes (COGNATE_MAX_MEMORY to change)"
        )


def read_state(path: str | Path, expected: dict[str, tuple[int, ...]], preset: str) -> dict:
    """The file's tensors, which must be exactly ``expected`` (name -> shape; checked on the
    header, before a tensor is read) and finite."""
    try:
        with safe_open(str(path), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
            _check_shapes(path, shapes, expected, preset)
            state = {k: f.get_tensor(k) for k in shapes}
    except (OSError, SafetensorError) as err:
        raise CognateError(f"{path}: not a readable cognate model: {err}") from None
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CognateError(f"{path}: weights {name} hold NaN or infinite values")
    return state


def _check_shapes(
    path: str | Path,
    shapes: dict[str, tuple[int, ...]],
    expected: dict[str, tuple[int, ...]],
    preset: str,
) -> None:
    missing = sorted(set(expected) - set(shapes))
    extra = sorted(set(shapes) - set(expected))
    wrong = sorted(k for k in set(expected) & set(shapes) if shapes[k] != expected[k])
    if not (missing or extra or wrong):
        return
    if wrong:
        k = wrong[0]
        what = f"{k} has shape {list(shapes[k])}, expected {list(expected[k])}"
    elif missing:
        what = f"missing {', '.join(missing[:3])}" + (" ..." if len(missing) > 3 else "")
    else:
        what = f"unexpected {', '.join(extra[:3])}" + (" ..." if len(extra) > 3 else "")
    raise CognateError(f"{path}: weights do not fit preset {preset}: {what}")


def finite_scores(path: str | Path | None, scores: np.ndarray) -> np.ndarray:
    """``scores`` when all are finite; else one line: a ranking by NaN means nothing."""
    if scores.size and not np.isfinite(scores).all():
        bad = int((~np.isfinite(scores)).sum())
        where = path if path is not None else "the cost model"
        raise CognateError(
            f"{where}: the model gives {bad} non-finite scores of {scores.size}; "
            "retrain it or use another model"
        )
    return scores


__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointMeta",
    "check_fits",
    "encoder_target_part",
    "finite_scores",
    "first_error",
    "json_depth",
    "parse_metadata",
    "read_state",
    "state_bytes",
]


# --- checkpoint files --------------------------------------------------------------------


def checkpoint_metadata(
    model: RankingNetwork, space: Space, encoder: ConfigEncoder, seed: int
) -> dict[str, Any]:
    """The metadata every checkpoint carries (pretrained or fine-tuned): what loading needs
    to rebuild the model and its encoder, and to refuse another space."""
    return {
        "format": CHECKPOINT_FORMAT,
        "preset": model.preset.model_dump(),
        "target": space.target,
        "op": space.op,
        "space": {"name": space.name, "version": space.version},
        "encoder": {"kind": encoder.kind, "dim": encoder.dim},
        "normalisation": {
            "config_mean": model.config_mean.tolist(),
            "config_std": model.config_std.tolist(),
            "log_scale": "log2(rows, cols, nnz, width) / 16",
        },
        "seed": seed,
    }


def save_checkpoint(path: str | Path, model: RankingNetwork, metadata: dict[str, Any]) -> Path:
    """Weights as safetensors; the metadata as JSON in the file's own metadata block."""
    path = Path(path).expanduser()
    tensors = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    atomic_write(path, save(tensors, metadata={"cognate": json.dumps(metadata)}))
    return path


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The metadata of a checkpoint, without loading its weights: bounded and validated
    against its schema (``cognate.model.checkpoint``) before anything reads it."""
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = (f.metadata() or {}).get("cognate")
    except (OSError, SafetensorError) as err:
        raise CognateError(f"{path}: not a readable cognate model: {err}") from None
    if raw is None:
        raise CognateError(f"{path}: safetensors file without cognate metadata")
    return parse_metadata(path, raw)


def check_space(path: str | Path, meta: dict[str, Any], space: Space) -> None:
    """A model is only valid for the space (name and version) it was trained for, or a
    later version of it that says it reads that version's models (``reads_models_of``)."""
    trained = meta["space"]
    if trained["name"] != space.name or not space.reads_models_of(trained["version"]):
        verb = "fine-tuned" if "transfer" in meta else "trained"
        raise CognateError(
            f"{path}: model was {verb} for space {trained['name']} version "
            f"{trained['version']}, but the space here is {space.name} version "
            f"{space.version}; retrain it"
        )


def new_network(
    path: str | Path,
    meta: dict[str, Any],
    encoder_dim: int,
    parts: dict[str, Callable[[], torch.nn.Module]] | None = None,
) -> RankingNetwork:
    """An untrained model of the checkpoint's preset, for weights read by ``load_weights``;
    ``encoder_dim`` is the width of the encoder rebuilt here, which must be the trained one.
    ``parts``: submodules the file also holds (name -> constructor), added to the model."""
    if encoder_dim != meta["encoder"]["dim"]:
        raise CognateError(f"{path}: encoder width {meta['encoder']['dim']} != {encoder_dim} here")
    try:
        preset = preset_from_dict(
            meta["preset"]["name"], {k: v for k, v in meta["preset"].items() if k != "name"}
        )
    except CognateError as err:
        raise CognateError(f"{path}: {err}") from None

    def build() -> RankingNetwork:
        network = RankingNetwork(preset, encoder_dim)
        for name, make in (parts or {}).items():
            network.add_module(name, make())
        return network

    # Sized on the meta device first (no memory): metadata claiming a huge layer is refused
    # before anything is allocated, since the weights it needs cannot be in the file.
    check_fits(path, build)
    return build()


def load_weights(path: str | Path, model: RankingNetwork) -> None:
    """Load the checkpoint's tensors into ``model`` (exactly its names and shapes, all
    finite), then switch it to eval."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = read_state(path, expected, model.preset.name)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise CognateError(
            f"{path}: weights do not fit preset {model.preset.name}: {str(err).splitlines()[0]}"
        ) from None
    model.eval()


def load_checkpoint(
    path: str | Path, space: Space
) -> tuple[RankingNetwork, ConfigEncoder, dict[str, Any]]:
    """Load a model for ``space``; a model trained on another space or version is an error."""
    meta = read_metadata(path)
    check_space(path, meta, space)
    encoder = make_encoder(space, encoder_target_part(meta))
    model = new_network(path, meta, encoder.dim)
    load_weights(path, model)
    return model, encoder, meta
