"""Running the evaluation protocol (docs/architecture.md, Evaluation protocol).

Per op: the target's matrices are split once (``split_seed``) into train / validation /
test by matrix. The source model is pretrained on the source records minus the target's
validation and test matrices. Every cell (variant, K target matrices, seed) fine-tunes
each candidate setting of ``select`` with early stopping on validation, keeps the
candidate with the best validation metric, and only that one is scored on test, per test
matrix. finetune() also computes test metrics internally; the harness drops them unread.

Trained models are cached in ``<out>/models`` under a hash of everything they depend on
(the records, the source model, the options, the space versions), so a rerun retrains only
what changed. A frozen featurizer's embeddings are cached per (featurizer weights, matrix)
in ``<out>/embeddings`` (``EmbeddingCache``): embedding was most of a fine-tune's time.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cognate.config import Config
from cognate.errors import CognateError
from cognate.evaluate import baselines
from cognate.evaluate.data import (  # noqa: F401 - the data half of the harness, re-exported
    OpData,
    _complete_matrices,
    collect_small_store,
    load_op_runs,
    measured_configs,
    prepare_op,
    runs_digest,
    snapshot_db,
    stable_hash,
    usable,
)
from cognate.evaluate.preset import (
    ABLATIONS,
    FEATURIZER,
    RANDOM_FEATURIZER,
    ExperimentPreset,
)
from cognate.model.cost_model import CostModel
from cognate.model.fit import Embedder
from cognate.model.learned import LearnedModel
from cognate.model.portfolio import (
    PORTFOLIO_KEY,
    choose_portfolio,
    chooser_words,  # noqa: F401  (evaluate.report reads it here)
    order_words,
    portfolio_anchor,
    portfolio_order,
    portfolio_positions,
)
from cognate.model.preset import ModelPreset, preset_from_dict
from cognate.model.train import train
from cognate.records import MatrixRuns
from cognate.space import Space
from cognate.transfer.autoencoder import transfer_settings
from cognate.transfer.finetune import (
    EmbeddingCache,
    FinetuneOptions,
    finetune,
    pick_matrices,
    transfer_encoder,
)

Log = Callable[[str], None]
TL, NT, ZERO_SHOT = "TL", "NT", "zero-shot"


def picked_variant(selection: str) -> str:
    """The variant of TL fine-tuned on matrices a non-random picker chose ("TL active")."""
    return f"{TL} {selection}"


TL_ACTIVE = picked_variant("active")
TL_PORTFOLIO = "TL + portfolio"
# TL-K's model with a portfolio greedy-chosen on its own K fine-tuning matrices, its size
# and anchor chosen on validation: the validation picks the learned ranking (size 0), the
# fixed-K lookup (the greedy order kept) or a blend, with no more target data than TL-K.
TL_K_PORTFOLIO = "TL + K portfolio"
# The K-matched lookup: per (K, seed), the best fixed config (top-1) and the greedy fixed
# 5-set (best of 5) chosen on the same K training matrices TL-K and NT-K of that seed
# fine-tune on. Its rows read "fixed-K"; nothing is trained.
FIXED_K = "fixed"


# --- models --------------------------------------------------------------------------------


def model_preset(preset: ExperimentPreset, featurizer: str | None = None) -> ModelPreset:
    """The source model's preset; ``featurizer=RANDOM_FEATURIZER``: the same network with its
    featurizer frozen at the seeded random initialisation (the ablation)."""
    spec = preset.model or transfer_settings()["experiment"]["preset"]
    out = preset_from_dict(f"{preset.name}-model", spec).with_train(epochs=preset.pretrain_epochs)
    if featurizer == RANDOM_FEATURIZER:
        frozen = out.featurizer.model_copy(update={"trainable": False})
        out = out.model_copy(update={"featurizer": frozen})
    return out


def pretrained_model(
    data: OpData,
    preset: ExperimentPreset,
    models: Path,
    log: Log,
    featurizer: str | None = None,
) -> Path:
    """The source model for ``data.op``, trained once per input (records, preset, and which
    featurizer: the preset's, or a random frozen one)."""
    spec = model_preset(preset, featurizer)
    # the space's version too: a model of an older space version no longer loads
    key = stable_hash(
        "pretrain",
        runs_digest(data.source_runs),
        spec.model_dump(),
        data.source_name,
        data.source_space.version,
    )
    path = models / f"pretrained-{data.op}-{key}.safetensors"
    if path.is_file():
        log(f"{data.op}: reusing pretrained model {path.name}")
        return path
    n = len({r.key for r in data.source_runs})
    what = " (featurizer frozen at random)" if featurizer == RANDOM_FEATURIZER else ""
    log(f"{data.op}: pretraining{what} on {data.source_name}, {n} matrices")
    encoder = transfer_encoder(data.source_space, "cognate", "ae")
    model = train(data.source_runs, data.source_space, spec, seed=0, encoder=encoder)
    return model.save(path)


@dataclass
class Candidate:
    """One fine-tuned setting of a cell: what selection may look at (no test numbers)."""

    key: str
    options: dict[str, Any]
    validation: dict[str, float]
    best_epoch: int
    finetune_matrices: list[str]
    path: Path = field(repr=False)
    # loaded from ``<out>/models`` (trained by an earlier run), not trained by this one
    reused: bool = field(default=False, repr=False, compare=False)


def select_candidate(candidates: Sequence[Candidate], metric: str) -> Candidate:
    """The best candidate by its validation ``metric`` (NaN last; ties: the first)."""
    if not candidates:
        raise ValueError("no candidates to select from")

    def value(c: Candidate) -> float:
        v = c.validation[metric]
        return -math.inf if v != v else v

    return max(candidates, key=value)  # max keeps the first of equal values


def _finetuned(
    data: OpData,
    pretrained: Path,
    opts: FinetuneOptions,
    models: Path,
    digest: str,
    cache: EmbeddingCache | None,
) -> Candidate:
    key = stable_hash("finetune", pretrained.name, digest, asdict(opts), data.space.version)
    path, meta_path = models / f"{key}.safetensors", models / f"{key}.json"
    if path.is_file() and meta_path.is_file():
        saved = json.loads(meta_path.read_text())
        return Candidate(**saved, path=path, reused=True)
    out = finetune(pretrained, data.runs, data.space, opts, cache=cache)
    out.metadata["metrics"].pop("test", None)  # selection must never see test numbers
    out.save(path)
    record = {
        "key": key,
        "options": asdict(opts),
        "validation": out.metadata["metrics"]["best"],
        "best_epoch": out.metadata["metrics"]["best_epoch"],
        "finetune_matrices": [m["name"] for m in out.metadata["split"]["finetune"]],
    }
    meta_path.write_text(json.dumps(record, indent=1))
    return Candidate(**record, path=path)


@torch.no_grad()
def score_test(
    path: Path,
    space: Space,
    runs: Sequence[MatrixRuns],
    cache: EmbeddingCache | None = None,
    portfolio: Sequence[Config] = (),
    anchor: float = 0.0,
) -> dict[str, dict[str, float]]:
    """Per test matrix: speedup over the baseline config of top-1, best of top-5, oracle;
    with a ``portfolio``, its configs ranked ahead of the rest, held to their greedy order by
    ``anchor`` (``cognate.model.portfolio``)."""
    model = CostModel.load(path, space)
    if not isinstance(model, LearnedModel) or not model.transferred:
        raise CognateError(f"{path}: not a fine-tuned model (no transfer metadata)")
    frozen = model.metadata["transfer"]["options"]["freeze_featurizer"]
    # the backend training used; a frozen featurizer's embeddings may come from the cache
    embeddings = (cache.embeddings if cache and frozen else _embed_all)(model.network, runs)
    scores = {}
    for run in runs:
        features = model.encode(run.configs, run.matrix.shape, run.width)
        scores_of_run = model.score(embeddings[run.key], features, run.width)
        positions = portfolio_positions(run.configs, portfolio)
        order = portfolio_order(scores_of_run, positions, anchor)
        base = run.runtimes[run.baseline]
        scores[run.matrix.name] = {
            "top1": float(base / run.runtimes[order[0]]),
            "top5": float(base / run.runtimes[order[:5]].min()),
            "oracle": float(base / run.runtimes.min()),
        }
    return scores


def _embed_all(model: Any, runs: Sequence[MatrixRuns]) -> dict[str, torch.Tensor]:
    return Embedder(model).all(runs)


def random_pick(runs: Sequence[MatrixRuns]) -> dict[str, float]:
    """Per matrix: the expected (log-mean) speedup of a uniformly random config, the floor."""
    return {
        r.matrix.name: float(np.exp(np.mean(np.log(r.runtimes[r.baseline] / r.runtimes))))
        for r in runs
        if r.baseline is not None
    }


# --- K-matched fixed configs ---------------------------------------------------------------


def fixed_k_draw(data: OpData, k: int, seed: int) -> list[str]:
    """The K training matrices (sha256s) a random-selection TL-K / NT-K cell of ``seed``
    fine-tunes on: the same draw finetune() makes from the same split."""
    return pick_matrices(data.train, k, seed)


def fixed_k_results(data: OpData, preset: ExperimentPreset, k_best: int = 5) -> list[dict]:
    """Per (K, seed) of the TL / NT cells: the best fixed config (top1) and the greedy fixed
    ``k_best``-set (top5) chosen on that cell's K fine-tuning matrices, scored on the test
    matrices like a cell (variant ``FIXED_K``). Nothing is trained: a lookup with the same
    target data the learned rows had."""
    by_key = {r.key: r for r in data.train_runs()}
    test = data.test_runs()
    oracle = {r.matrix.name: float(r.runtimes[r.baseline] / r.runtimes.min()) for r in test}
    out = []
    for seed in preset.seeds:
        for k in sorted({min(k, len(data.train)) for k in preset.matrices}):
            picked = fixed_k_draw(data, k, seed)
            runs = [by_key[key] for key in picked if key in by_key]
            picks = baselines.fixed_picks(runs, test, k_best)
            scores = {
                name: {"top1": picks.top1[name], "top5": picks.topk[name], "oracle": best}
                for name, best in oracle.items()
            }
            chosen = baselines.greedy_fixed_set(runs, k_best)
            out.append(
                {
                    "variant": FIXED_K,
                    "k": k,
                    "seed": seed,
                    "finetune_matrices": data.names(picked),
                    "configs": [_knobs_of(runs, h) for h in chosen],
                    "test": scores,
                }
            )
    return out


def _knobs_of(runs: Sequence[MatrixRuns], config_hash: str) -> dict[str, Any]:
    for run in runs:
        for config in run.configs:
            if config.hash == config_hash:
                return dict(config.knobs)
    raise KeyError(config_hash)


def check_fixed_k_pairing(
    cells_done: Sequence[dict[str, Any]], fixed: Sequence[dict[str, Any]]
) -> None:
    """Each random-selection TL / NT cell fine-tuned on the matrices its fixed-K row was
    chosen on; a mismatch would unpair the comparison, so it stops the run."""
    draws = {(f["k"], f["seed"]): f["finetune_matrices"] for f in fixed}
    for cell in cells_done:
        if cell["variant"] not in (TL, NT) or (cell["k"], cell["seed"]) not in draws:
            continue
        used = sorted(cell["chosen"]["finetune_matrices"])
        if used != draws[(cell["k"], cell["seed"])]:
            raise CognateError(
                f"{cell['variant']}-{cell['k']} seed {cell['seed']} fine-tuned on other "
                "matrices than its fixed-K draw; the K-matched comparison would not be paired"
            )


# --- cells ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    variant: str
    k: int
    seed: int
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def featurizer(self) -> str | None:
        """Which source model the cell starts from: None = the preset's, else an ablation's."""
        return dict(self.extra).get(FEATURIZER)

    def finetune_extra(self) -> dict[str, Any]:
        return {k: v for k, v in self.extra if k != FEATURIZER}


def ablations(preset: ExperimentPreset) -> list[str]:
    """The preset's ablations that differ from the main run: a random featurizer only when
    the preset trains its featurizer."""
    trained = model_preset(preset).featurizer.trainable
    return [
        name
        for name in preset.ablations
        if trained or ABLATIONS[name].get(FEATURIZER) != RANDOM_FEATURIZER
    ]


def cells(preset: ExperimentPreset, n_train: int) -> list[Cell]:
    """Every (variant, K, seed) the preset asks for, K capped at the training split."""
    ks = sorted({min(k, n_train) for k in preset.matrices})
    k_abl = sorted({min(k, n_train) for k in preset.ablation_matrices})
    active = sorted({min(k, n_train) for k in preset.active_matrices})
    names = ablations(preset)
    out = []
    for seed in preset.seeds:
        out += [Cell(v, k, seed) for k in ks for v in (TL, NT)]
        out += [
            Cell(picked_variant(name), k, seed, (("select", name),))
            for name in preset.active_selections
            for k in active
        ]
        if preset.zero_shot:
            out.append(Cell(ZERO_SHOT, k_abl[-1], seed, (("zero_shot", True),)))
        out += [
            Cell(f"TL {name}", k, seed, tuple(ABLATIONS[name].items()))
            for k in k_abl
            for name in names
        ]
    return out


def _options(preset: ExperimentPreset, cell: Cell) -> list[FinetuneOptions]:
    base = {
        "matrices": cell.k,
        "seed": cell.seed,
        "epochs": preset.finetune_epochs,
        "patience": preset.patience,
        "val_fraction": preset.val_fraction,
        "test_fraction": preset.test_fraction,
        "split_seed": preset.split_seed,
        "from_scratch": cell.variant == NT,
        **cell.finetune_extra(),
    }
    if cell.variant == ZERO_SHOT:  # nothing is trained: no setting to choose
        return [FinetuneOptions(**base, freeze_featurizer=True, lr=preset.select.lr[0])]
    grid = itertools.product(preset.select.freeze_featurizer, preset.select.lr)
    return [FinetuneOptions(**base, freeze_featurizer=f, lr=lr) for f, lr in grid]


def run_cell(
    data: OpData,
    preset: ExperimentPreset,
    cell: Cell,
    pretrained: Path,
    models: Path,
    digest: str,
    cache: EmbeddingCache | None = None,
    log: Log | None = None,
) -> dict[str, Any]:
    """Fine-tune every candidate, select on validation, score the chosen one on test once.
    ``cache`` shares frozen-featurizer embeddings between fine-tunes (same numbers); ``log``
    gets a line per fine-tune (a long cell is not silent)."""
    options = _options(preset, cell)
    candidates = []
    for i, opts in enumerate(options, start=1):
        started = time.time()
        candidates.append(_finetuned(data, pretrained, opts, models, digest, cache))
        if log is not None:
            how = "reused" if candidates[-1].reused else f"{time.time() - started:.1f}s"
            log(
                f"  fine-tune {i}/{len(options)} (freeze_featurizer {opts.freeze_featurizer}, "
                f"lr {opts.lr:g}): {how}"
            )
    chosen = select_candidate(candidates, preset.select.metric)
    test_path = models / f"{chosen.key}.test.json"
    if test_path.is_file():
        test = json.loads(test_path.read_text())
    else:
        test = score_test(chosen.path, data.space, data.test_runs(), cache)
        test_path.write_text(json.dumps(test, indent=1))
    result = {
        "variant": cell.variant,
        "k": cell.k,
        "seed": cell.seed,
        "candidates": len(candidates),
        "chosen": {k: v for k, v in asdict(chosen).items() if k not in ("path", "reused")},
        "test": test,
        "fine_tunes_reused": sum(c.reused for c in candidates),
    }
    portfolio_ks = {min(k, len(data.train)) for k in preset.portfolio_matrices}
    if cell.variant == TL and cell.k in portfolio_ks:
        result["portfolio"] = portfolio_test(data, chosen, models, cache)
        names = chosen.finetune_matrices
        result["k_portfolio"] = portfolio_test(data, chosen, models, cache, names)
    return result


def portfolio_test(
    data: OpData,
    chosen: Candidate,
    models: Path,
    cache: EmbeddingCache | None,
    greedy_from: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The chosen model with a portfolio (the greedy fixed set of all training matrices, as
    the baselines are chosen, or with ``greedy_from`` of those matrices (names) only; its
    size and anchor chosen on validation), scored on test once."""
    # holds test numbers: named so; "anchored": files of unanchored portfolios are stale
    kind = "anchored-portfolio" if greedy_from is None else "k-portfolio"
    path = models / f"{chosen.key}.{kind}.test.json"
    if path.is_file():
        return json.loads(path.read_text())
    model = CostModel.load(chosen.path, data.space)
    validation = set(data.validation)
    val_runs = [r for r in data.runs if r.key in validation and r.baseline is not None]
    train = data.train_runs()
    if greedy_from is not None:
        train = [r for r in train if r.matrix.name in set(greedy_from)]
    entry = choose_portfolio(model, train, val_runs, k=5)
    configs = [data.space.validate(knobs) for knobs in entry["configs"]]
    anchor = portfolio_anchor({PORTFOLIO_KEY: entry})
    test = score_test(chosen.path, data.space, data.test_runs(), cache, configs, anchor)
    out = {
        **{k: entry[k] for k in ("size", "anchor", "fixed_order", "anchor_unit", "validation")},
        "test": test,
    }
    path.write_text(json.dumps(out, indent=1))
    return out


def portfolio_results(
    results: Sequence[dict[str, Any]], n_train: int | None = None
) -> list[dict[str, Any]]:
    """The TL cells' portfolio scores as cells of their own (variant ``TL_PORTFOLIO``),
    labelled with the data the portfolio was chosen on (all ``n_train`` training matrices,
    not the cell's K)."""
    data = f"all {n_train} training matrices" if n_train else None
    out = []
    for key, variant in (("portfolio", TL_PORTFOLIO), ("k_portfolio", TL_K_PORTFOLIO)):
        for r in results:
            if key not in r:
                continue
            label = data if variant == TL_PORTFOLIO else f"its {r['k']} fine-tuning matrices"
            out.append(
                {
                    "variant": variant,
                    **({"data": label} if label else {}),
                    "k": r["k"],
                    "seed": r["seed"],
                    "portfolio_size": r[key]["size"],
                    "portfolio_order": order_words(r[key]),
                    "chosen": r["chosen"],
                    "test": r[key]["test"],
                }
            )
    return out
