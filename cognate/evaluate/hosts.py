"""Leave-one-host-out: does a cpu cost model trained on one host rank configs on another?

Hosts are the distinct ``cpu`` values of the records (store schema 4: the CPU's model and
family, so two VMs of one CPU kind with different ids are one host). For each ordered pair
(source S, target T) and each seed:

- **test**: half of T's matrices that the frozen featurizer never trained on (fixed by
  ``test_seed``): held out from everything below, on every host;
- **zero-shot**: the predictor trained on S's runs only (the test matrices left out), the
  host part of its encoding read from each run's records; scored on T's test runs with T's
  host facts: what ``cognate tune`` (rank only) gives a user of a host the model never saw;
- **K matrices**: the zero-shot model fine-tuned on K of T's other matrices (every
  measured config, every width they have);
- **K tunes**: the same, from what ``tune --verify --learn`` measures on each of the K
  matrices (the zero-shot model's top 5, the baseline and the kernel variants of the plain
  CSR pick): what K verified tunes on the new host teach the model;
- **fixed-K**: the greedy fixed set chosen on the same K matrices (its first config is the
  best single one);
- **T full**: a predictor trained on all of T's non-test matrices: the new host's own
  full-data model;
- **featurizer's model**: the model whose featurizer every arm shares, as it ranks (its own
  encoding and predictor; the shipped model, by default): what a user of it gets today.

Per test run (matrix, width): the speedup over T's baseline config of the first pick and of
the best of the first 5, and of the oracle (best measured config). The featurizer is one
trained model's (frozen: each matrix is embedded once), so every arm differs only in what
its predictor learned.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cognate.errors import CognateError
from cognate.model.encoding import (
    ConfigEncoder,
    encode_on,
    make_encoder,
    neutral_host_weights,
)
from cognate.model.fit import encode_all, fit, split_matrices
from cognate.model.fixed_set import greedy_fixed_set
from cognate.model.learned import LearnedModel
from cognate.model.predictor import RankingNetwork
from cognate.model.train import frozen_featurizer_preset
from cognate.records import MatrixRuns
from cognate.space import Space
from cognate.stats import Estimate, bootstrap_ci, geomean, mean_of_ratio

ARMS = ("zero-shot", "K matrices", "K tunes", "fixed-K", "T full", "baseline")
TOP_K = 5
FINETUNE_EPOCHS = 20


@dataclass
class HostData:
    """One host's runs (every matrix and width it measured) and its facts."""

    name: str
    runs: list[MatrixRuns]

    @property
    def keys(self) -> set[str]:
        return {r.key for r in self.runs}


@dataclass
class ArmScores:
    """Per test run key ``sha:width``: speedups over the baseline of top-1 and best-of-5."""

    top1: dict[str, float] = field(default_factory=dict)
    top5: dict[str, float] = field(default_factory=dict)


def run_key(run: MatrixRuns) -> str:
    return f"{run.key}:{run.width}"


def hosts_of(runs: Sequence[MatrixRuns]) -> dict[str, HostData]:
    """Runs grouped by host (the ``cpu`` of their records); runs without the host columns
    are refused: their host is unknown. A matrix and width measured under two ids of one
    CPU kind counts once: the run with more configs."""
    chosen: dict[tuple[str, str], MatrixRuns] = {}
    for run in runs:
        if run.host is None or not run.host.l2_bytes:
            raise CognateError(
                f"matrix {run.matrix.name}: its records carry no host facts (store schema 4"
                " columns); upgrade the data set (scripts/upgrade_records.py --facts)"
            )
        slot = (run.host.cpu_model, run_key(run))
        if slot not in chosen or len(run.configs) > len(chosen[slot].configs):
            chosen[slot] = run
    hosts: dict[str, HostData] = {}
    for (name, _), run in sorted(chosen.items(), key=lambda item: item[0]):
        hosts.setdefault(name, HostData(name, [])).runs.append(run)
    return hosts


def embed_all(model: LearnedModel, runs: Sequence[MatrixRuns], cache: Path | None) -> dict:
    """{matrix sha: embedding} from ``model``'s featurizer, cached in ``cache`` (torch file
    of plain tensors, loaded with weights_only)."""
    known: dict[str, torch.Tensor] = {}
    if cache is not None and cache.is_file():
        known = torch.load(cache, weights_only=True)
    todo = {r.key: r.matrix for r in runs if r.key not in known}
    for n, (key, matrix) in enumerate(todo.items(), start=1):
        known[key] = model.embed(matrix).clone()  # a plain tensor: training reads it
        if cache is not None and (n % 50 == 0 or n == len(todo)):
            torch.save(known, cache)
    return known


def _scores(network: RankingNetwork, run: MatrixRuns, embeddings: dict) -> np.ndarray:
    with torch.no_grad():
        return network.score(embeddings[run.key], run.width, run.features).numpy()


def score_runs(
    order_of: Callable[[MatrixRuns], list[int]], test: Sequence[MatrixRuns]
) -> ArmScores:
    """top-1 and best-of-5 speedups over the baseline of the ordering ``order_of`` gives."""
    arm = ArmScores()
    for run in test:
        base = run.runtimes[run.baseline]
        order = order_of(run)
        arm.top1[run_key(run)] = float(base / run.runtimes[order[0]])
        arm.top5[run_key(run)] = float(base / run.runtimes[order[:TOP_K]].min())
    return arm


def model_order(network: RankingNetwork, embeddings: dict) -> Callable[[MatrixRuns], list[int]]:
    return lambda run: list(np.argsort(_scores(network, run, embeddings), kind="stable"))


def fixed_order(chosen: Sequence[str]) -> Callable[[MatrixRuns], list[int]]:
    """The fixed set's configs in its order, each where the run measured it; a config the run
    lacks stands for the baseline (a user whose fixed config cannot run falls back to it)."""

    def order(run: MatrixRuns) -> list[int]:
        index = {c.hash: i for i, c in enumerate(run.configs)}
        return [index.get(h, run.baseline) for h in chosen] or [run.baseline]

    return order


@dataclass
class Trainer:
    """Fits predictors on frozen embeddings; every arm uses the same architecture."""

    preset: Any
    source: RankingNetwork  # the network whose featurizer is frozen
    encoder: ConfigEncoder
    embeddings: dict

    def fresh(self, runs: Sequence[MatrixRuns], seed: int) -> RankingNetwork:
        """A new predictor trained on ``runs`` (20% of their matrices pick the epoch)."""
        keys = sorted({r.key for r in runs})
        fit_keys, val_keys = split_matrices(keys, self.preset.train.val_fraction, seed)
        torch.manual_seed(seed)
        network = RankingNetwork(self.preset, self.encoder.dim)
        network.featurizer.load_state_dict(self.source.featurizer.state_dict())
        neutral_host_weights(network, self.encoder)
        fitting = set(fit_keys)
        fit_runs = [r for r in runs if r.key in fitting]
        network.set_normalisation(torch.cat([r.features for r in fit_runs]))
        val_runs = [r for r in runs if r.key not in fitting]
        fit(network, fit_runs, val_runs, seed, None, self._frozen)
        return network.eval()

    def tuned(self, start: RankingNetwork, runs: Sequence[MatrixRuns], seed: int) -> RankingNetwork:
        """``start`` fine-tuned on ``runs`` (their own ranking picks the epoch, as
        ``LearnedModel.update`` does for a user's few matrices)."""
        network = copy.deepcopy(start)
        network.preset = self.preset.with_train(epochs=FINETUNE_EPOCHS)
        torch.manual_seed(seed)
        fit(network, list(runs), list(runs), seed, None, self._frozen)
        network.preset = self.preset
        return network.eval()

    def _frozen(self, runs: Sequence[MatrixRuns]) -> dict:
        return {r.key: self.embeddings[r.key] for r in runs}


def verify_view(run: MatrixRuns, order: Sequence[int], variant_hashes: set[str]) -> MatrixRuns:
    """The part of ``run`` a ``tune --verify`` measures: the top 5 of ``order``, the baseline
    and the kernel variants (vector tiles, row schedules) of the plain CSR pick."""
    keep = sorted(
        set(order[:TOP_K])
        | {run.baseline}
        | {i for i, c in enumerate(run.configs) if c.hash in variant_hashes}
    )
    view = copy.copy(run)
    view.configs = [run.configs[i] for i in keep]
    view.runtimes = run.runtimes[keep]
    view.features = run.features[keep]
    view.baseline = keep.index(run.baseline)
    return view


def split_target(
    target: HostData, featurizer_train: set[str], test_seed: int
) -> tuple[list[str], list[str]]:
    """(test keys, pool keys) of the target host: test is half of the matrices the
    featurizer never trained on."""
    unseen = sorted(target.keys - featurizer_train)
    if len(unseen) < 4:
        raise CognateError(
            f"host {target.name}: {len(unseen)} matrices outside the featurizer's training"
            " split; need at least 4 to hold some out"
        )
    rng = np.random.default_rng(test_seed)
    test = sorted(rng.permutation(unseen)[: len(unseen) // 2].tolist())
    return test, sorted(target.keys - set(test))


def direction(
    source: HostData,
    target: HostData,
    trainer: Trainer,
    featurizer_train: set[str],
    variant_hashes: set[str],
    ks: Sequence[int],
    seeds: Sequence[int],
    test_seed: int = 0,
    log: Callable[[str], None] = print,
    own: LearnedModel | None = None,
) -> dict[str, Any]:
    """Every arm of one (source, target) pair over ``seeds``: {arm: [ArmScores per seed]}."""
    test_keys, pool_keys = split_target(target, featurizer_train, test_seed)
    held, pooled = set(test_keys), set(pool_keys)
    test = [r for r in target.runs if r.key in held and r.baseline is not None]
    source_runs = [r for r in source.runs if r.key not in held]
    pool = [r for r in target.runs if r.key in pooled]
    arms: dict[str, list[ArmScores]] = {}

    def add(arm: str, scores: ArmScores) -> None:
        arms.setdefault(arm, []).append(scores)

    if own is not None:  # deterministic: the same scores for every seed

        def own_order(run: MatrixRuns) -> list[int]:
            # the run's host, not this machine
            encoded = encode_on(own.encoder, run.configs, run.matrix.shape, run.width, run.host)
            scores = own.score(trainer.embeddings[run.key], encoded, run.width)
            return list(np.argsort(scores, kind="stable"))

        shipped = score_runs(own_order, test)
        for _ in seeds:
            add("featurizer's model", shipped)
    baseline = score_runs(lambda r: [r.baseline], test)  # the same for every seed

    for seed in seeds:
        zero = trainer.fresh(source_runs, seed)
        add("zero-shot", score_runs(model_order(zero, trainer.embeddings), test))
        add("baseline", baseline)
        full = trainer.fresh(pool, seed)
        add("T full", score_runs(model_order(full, trainer.embeddings), test))
        rng = np.random.default_rng(1000 + seed)
        zero_order = model_order(zero, trainer.embeddings)
        for k in ks:
            picked = set(rng.permutation(pool_keys)[:k].tolist())
            k_runs = [r for r in pool if r.key in picked]
            tuned = trainer.tuned(zero, k_runs, seed)
            add(f"K matrices, K={k}", score_runs(model_order(tuned, trainer.embeddings), test))
            seen = [verify_view(r, zero_order(r), variant_hashes) for r in k_runs]
            learned = trainer.tuned(zero, seen, seed)
            add(f"K tunes, K={k}", score_runs(model_order(learned, trainer.embeddings), test))
            chosen = greedy_fixed_set([r for r in k_runs if r.baseline is not None], TOP_K)
            add(f"fixed-K, K={k}", score_runs(fixed_order(chosen), test))
        log(f"  {source.name} -> {target.name}: seed {seed} done")
    oracle = {run_key(r): float(r.runtimes[r.baseline] / r.runtimes.min()) for r in test}
    return {
        "source": source.name,
        "target": target.name,
        "test_matrices": len(test_keys),
        "test_runs": len(test),
        "source_matrices": len({r.key for r in source_runs}),
        "pool_matrices": len(pool_keys),
        "arms": arms,
        "oracle": oracle,
    }


def _array(per_seed: Sequence[dict[str, float]], keys: Sequence[str]) -> np.ndarray:
    return np.array([[s[k] for k in keys] for s in per_seed])


def summarize(result: dict[str, Any], ks: Sequence[int], n_boot: int = 2000) -> dict[str, Any]:
    """Per arm: % of the oracle of top-1 and best-of-5 (mean over seeds, bootstrap CI over
    seeds and test runs); per K: learned best-of-5 / fixed-K best-of-5, paired."""
    keys = sorted(result["oracle"])
    oracle = np.array([[result["oracle"][k] for k in keys]])
    out: dict[str, Any] = {"arms": {}, "paired": {}}
    for arm, per_seed in result["arms"].items():
        top1, top5 = (
            _array([s.top1 for s in per_seed], keys),
            _array([s.top5 for s in per_seed], keys),
        )
        ora = np.repeat(oracle, len(per_seed), axis=0)
        out["arms"][arm] = {
            "top1_of_oracle": _estimate(bootstrap_ci([top1, ora], mean_of_ratio, n_boot)),
            "top5_of_oracle": _estimate(bootstrap_ci([top5, ora], mean_of_ratio, n_boot)),
        }
    for k in ks:
        for learned in (f"K matrices, K={k}", f"K tunes, K={k}"):
            mine = _array([s.top5 for s in result["arms"][learned]], keys)
            theirs = _array([s.top5 for s in result["arms"][f"fixed-K, K={k}"]], keys)
            out["paired"][f"{learned} / fixed-K best-of-5"] = _estimate(
                bootstrap_ci([mine, theirs], mean_of_ratio, n_boot)
            )
    return out


def new_host_pick(summary: dict[str, Any]) -> dict[str, Any]:
    """What an unverified tune should pick on a host the model never trained on, from a
    leave-one-host-out summary (``scripts/eval_hosts.py --json``): ``baseline`` when the
    zero-shot rank 1 fell below the baseline config's share of the oracle in any direction,
    else ``model``; with the figures it was decided on (a model's metadata keeps it)."""
    evidence = {}
    for key, row in summary.items():
        arms = row.get("arms") if isinstance(row, dict) else None
        if not arms or "zero-shot" not in arms or "baseline" not in arms:
            continue
        evidence[key] = {
            "zero_shot_top1_of_oracle": arms["zero-shot"]["top1_of_oracle"]["mean"],
            "baseline_top1_of_oracle": arms["baseline"]["top1_of_oracle"]["mean"],
        }
    if not evidence:
        raise CognateError("the summary holds no leave-one-host-out direction")
    lost = any(
        e["zero_shot_top1_of_oracle"] < e["baseline_top1_of_oracle"] for e in evidence.values()
    )
    return {"pick": "baseline" if lost else "model", "evidence": evidence}


def _estimate(e: Estimate) -> dict[str, float]:
    return {"mean": e.mean, "low": e.low, "high": e.high, "seeds": e.seeds, "runs": e.matrices}


def load_featurizer(path: Path, space: Space) -> tuple[LearnedModel, set[str]]:
    """The model whose featurizer every arm shares, and the matrices it trained on."""
    from cognate.model.cost_model import CostModel

    model = CostModel.load(path, space)
    if not isinstance(model, LearnedModel):
        raise CognateError(f"{path}: not a trained model")
    trained = {m["sha256"] for m in model.metadata.get("split", {}).get("train", [])}
    return model, trained


def make_trainer(
    model: LearnedModel, space: Space, runs: Sequence[MatrixRuns], embeddings: dict, epochs: int
) -> Trainer:
    """Encodings (every knob and the host) on every run, and the frozen-featurizer preset."""
    encoder = make_encoder(space, "knobs+host")
    encode_all(runs, encoder)
    preset = frozen_featurizer_preset(model.network.preset, model.network)
    preset = preset.with_train(epochs=epochs)
    return Trainer(preset, model.network, encoder, embeddings)


def held_out_per_host(model: LearnedModel, runs: Sequence[MatrixRuns]) -> dict[str, dict]:
    """A trained model on its own held-out matrices (metadata ``split.test``), per host:
    % of the host's oracle of its top-1 and best-of-5, the greedy fixed set of the same
    host's training matrices (``split.train``) and the baseline config."""
    split = model.metadata.get("split", {})
    test = {m["sha256"] for m in split.get("test", [])}
    train = {m["sha256"] for m in split.get("train", [])}
    if not test:
        raise CognateError("the model names no held-out matrices (pretrain --hold-out)")
    out = {}
    for name, host in hosts_of(runs).items():
        held = [r for r in host.runs if r.key in test and r.baseline is not None]
        fitted = [r for r in host.runs if r.key in train and r.baseline is not None]
        if not held:
            continue
        encode_all(held, model.encoder)
        embeddings = {r.key: model.embed(r.matrix) for r in held}
        oracle = {run_key(r): float(r.runtimes[r.baseline] / r.runtimes.min()) for r in held}
        arms = {
            "model": score_runs(_scored_order(model, embeddings), held),
            "fixed": score_runs(fixed_order(greedy_fixed_set(fitted, TOP_K)), held),
            "baseline": score_runs(lambda r: [r.baseline], held),
        }
        out[name] = {
            "runs": len(held),
            "matrices": len({r.key for r in held}),
            **{f"{arm}_top1": _share(s.top1, oracle) for arm, s in arms.items()},
            **{
                f"{arm}_top5": _share(s.top5, oracle)
                for arm, s in arms.items()
                if arm != "baseline"
            },
        }
    return out


def _scored_order(model: LearnedModel, embeddings: dict) -> Callable[[MatrixRuns], list[int]]:
    def order(run: MatrixRuns) -> list[int]:
        scores = model.score(embeddings[run.key], run.features, run.width)
        return list(np.argsort(scores, kind="stable"))

    return order


def _share(values: dict[str, float], oracle: dict[str, float]) -> float:
    """Geomean of value / oracle over the runs: the share of the oracle reached."""
    return geomean(values[k] / oracle[k] for k in oracle)
