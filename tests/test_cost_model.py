"""The CostModel role: load / save / update / predict, the same for every kind of model,
and the featurizer's cheap-statistics input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from cognate.formats.read import load_matrix
from cognate.matrix_stats import N_STATISTICS, matrix_statistics, scaled_statistics
from cognate.model.cost_model import CostModel
from cognate.model.learned import LearnedModel
from cognate.model.preset import preset_from_dict
from cognate.model.random_model import RandomModel
from cognate.model.train import train
from cognate.records import MatrixRuns
from cognate.synth import generate
from cognate.targets import get_target

pytestmark = pytest.mark.usefixtures("one_torch_thread")
WIDTH = 32


def tiny_preset(statistics: bool, epochs: int = 3):
    return preset_from_dict(
        "tiny",
        {
            "featurizer": {
                "channels": [4, 4, 4],
                "embed_hidden": [16],
                "embedding_dim": 8,
                "statistics": statistics,
            },
            "predictor": {"hidden": [32]},
            "train": {"lr": 0.003, "configs_per_step": 64, "epochs": epochs, "patience": epochs},
        },
    )


@pytest.fixture(scope="module")
def space():
    return get_target("spade").space("spmm")


@pytest.fixture(scope="module")
def runs(suitesparse_files, space) -> list[MatrixRuns]:
    """Every 8th spade config (and the baseline) simulated on 6 small shared matrices."""
    runner = get_target("spade").runner()
    out = []
    for path in suitesparse_files:
        matrix = load_matrix(path)
        if matrix.nnz > 20_000:
            continue
        base = space.baseline(matrix.shape)
        configs = space.candidates()[::8]
        todo = configs if base in configs else [*configs, base]
        measured = [m for m in runner.measure(matrix, "spmm", WIDTH, todo) if m.status == "ok"]
        cfgs = [m.config for m in measured]
        runtimes = np.array([m.runtime_s for m in measured])
        out.append(MatrixRuns(matrix, WIDTH, cfgs, runtimes, cfgs.index(base)))
        if len(out) == 6:
            break
    assert len(out) == 6
    return out


def test_statistics_are_scaled_finite_and_tell_structures_apart() -> None:
    banded = generate("banded", 4096, 4096, nnz=40000, seed=1, bandwidth=8).csr
    uniform = generate("uniform", 4096, 4096, nnz=40000, seed=1).csr
    for a in (banded, uniform):
        scaled = scaled_statistics(a)
        assert scaled.shape == (N_STATISTICS,) and scaled.dtype == np.float32
        assert np.isfinite(scaled).all() and np.abs(scaled).max() < 4
    # same shape and nnz: only the structure statistics differ, and they do
    raw_b, raw_u = matrix_statistics(banded), matrix_statistics(uniform)
    assert np.allclose(raw_b[:4], raw_u[:4])
    assert raw_b[11] > 0.9 > 0.1 > raw_u[11]  # diagonal concentration


def test_a_statistics_model_trains_saves_and_loads(runs, space, tmp_path: Path) -> None:
    model = train(runs, space, tiny_preset(statistics=True), seed=1)
    assert model.network.featurizer.mlp[0].in_features == 4 * 3 + 3 + N_STATISTICS
    path = model.save(tmp_path / "stats.safetensors")
    loaded = CostModel.load(path, space)
    assert isinstance(loaded, LearnedModel) and loaded.path == path
    assert loaded.network.preset.featurizer.statistics is True
    run = runs[0]
    np.testing.assert_allclose(
        loaded.predict(run.matrix, run.configs, WIDTH),
        model.predict(run.matrix, run.configs, WIDTH),
        rtol=1e-5,
        atol=1e-6,
    )


def test_update_trains_on_new_runs_and_says_so(runs, space, tmp_path: Path) -> None:
    """update(runs) continues from the current weights on more measurements: the scores
    move, the metadata lists the update, and the saved model keeps both."""
    model = train(runs[:3], space, tiny_preset(statistics=False, epochs=2), seed=0)
    assert isinstance(model, LearnedModel)
    run = runs[4]
    before = model.predict(run.matrix, run.configs, WIDTH)
    weights = {k: v.clone() for k, v in model.network.state_dict().items()}
    model.update(runs[2:], seed=3)
    after = model.predict(run.matrix, run.configs, WIDTH)
    changed = [k for k, v in model.network.state_dict().items() if not torch.equal(v, weights[k])]
    assert changed and not np.allclose(before, after)
    (update,) = model.metadata["updates"]
    assert sorted(update["matrices"]) == sorted(r.matrix.name for r in runs[2:])
    reloaded = CostModel.load(model.save(tmp_path / "updated.safetensors"), space)
    np.testing.assert_allclose(reloaded.predict(run.matrix, run.configs, WIDTH), after, rtol=1e-5)
    assert update["measurements"] == sum(len(r.configs) for r in runs[2:])
    with pytest.raises(Exception, match="at least 2 measured configs"):
        model.update([replace(runs[0], configs=runs[0].configs[:1], runtimes=runs[0].runtimes[:1])])


def test_update_learns_from_one_matrix_alone(runs, space) -> None:
    """One matrix's measured configs (what ``tune --verify --learn`` has) are their own
    validation: the update runs at most ``epochs`` passes and moves the scores."""
    model = train(runs[:3], space, tiny_preset(statistics=False, epochs=2), seed=0)
    run = runs[4]
    before = model.predict(run.matrix, run.configs, WIDTH)
    model.update([run], seed=1, epochs=3)
    (update,) = model.metadata["updates"]
    assert 1 <= update["epochs"] <= 3 and update["matrices"] == [run.matrix.name]
    assert not np.allclose(before, model.predict(run.matrix, run.configs, WIDTH))
    assert model.network.preset.train.epochs == 2  # the override was for this update only


def test_random_model_is_a_fixed_function_and_a_loadable_file(runs, space, tmp_path) -> None:
    model = RandomModel(space, seed=5)
    run = runs[0]
    scores = model.predict(run.matrix, run.configs, WIDTH)
    assert np.array_equal(scores, model.predict(run.matrix, run.configs, WIDTH))
    assert not np.array_equal(scores, RandomModel(space, 6).predict(run.matrix, run.configs, WIDTH))
    model.update(runs)  # nothing to learn
    loaded = CostModel.load(model.save(tmp_path / "r.json"), space)
    assert np.array_equal(loaded.predict(run.matrix, run.configs, WIDTH), scores)
    other = get_target("spade").space("sddmm")
    with pytest.raises(Exception, match="model is for target spade, op spmm"):
        CostModel.load(tmp_path / "r.json", other)


def test_log_gap_pair_weights_count_costly_swaps_more() -> None:
    from cognate.model.predictor import ranking_loss

    runtimes = torch.tensor([1.0, 1.1, 4.0])
    # the scores swap the near-tie (1.0 vs 1.1) and order 4.0 last: small weighted loss
    near = torch.tensor([0.2, 0.0, 1.0])
    # the scores put the 4x-slower config first: large weighted loss
    far = torch.tensor([0.5, 0.6, 0.0])
    uniform = [float(ranking_loss(s, runtimes, 0.1)) for s in (near, far)]
    weighted = [float(ranking_loss(s, runtimes, 0.1, pair_weight="log_gap")) for s in (near, far)]
    assert weighted[1] / weighted[0] > uniform[1] / uniform[0]
    hinge = torch.relu(0.1 - (near[[1, 2, 2]] - near[[0, 0, 1]]))
    gap = torch.log(torch.tensor([1.1, 4.0, 4.0 / 1.1]))
    assert weighted[0] == pytest.approx(float((hinge * gap).sum() / gap.sum()))
