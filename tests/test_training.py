"""Training the ranking network: encodings, ranking loss, training on real simulated runtimes,
checkpoints, the pretrain command.

Runtimes come from the spade simulator (deterministic, real measurements of a modelled
machine) on the small real SuiteSparse matrices of ../shared.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.model.checkpoint import load_checkpoint, read_metadata, save_checkpoint
from cognate.model.encoding import (
    LoopNestEncoder,
    RawKnobEncoder,
    make_encoder,
    permutation_matrix,
)
from cognate.model.fit import evaluate, split_matrices
from cognate.model.learned import LearnedModel
from cognate.model.predictor import RankingNetwork, pairwise_accuracy, ranking_loss
from cognate.model.preset import load_preset, preset_from_dict
from cognate.model.train import train
from cognate.records import MatrixRuns
from cognate.space import LOOP_VARS
from cognate.targets import get_target

WIDTH = 32
MAX_NNZ = 12_000  # small matrices keep the simulated data set to a few seconds


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors (see conftest)


def small_preset(epochs: int = 15):
    return preset_from_dict(
        "test",
        {
            "featurizer": {
                "channels": [8, 8, 8, 8, 8, 8],
                "embed_hidden": [32],
                "embedding_dim": 16,
            },
            "predictor": {"hidden": [64, 32]},
            "train": {
                "margin": 0.1,
                "tie_rtol": 0.01,
                "lr": 0.003,
                "configs_per_step": 64,
                "epochs": epochs,
                "patience": epochs,
                "val_fraction": 0.25,
            },
        },
    )


@pytest.fixture(scope="module")
def spade_space():
    return get_target("spade").space("spmm")


@pytest.fixture(scope="module")
def spade_runs(suitesparse_files, spade_space) -> list[MatrixRuns]:
    """Every 7th config of the spade space (64) plus the baseline, simulated per matrix."""
    runner = get_target("spade").runner()
    configs = spade_space.candidates()[::7]
    runs = []
    for path in suitesparse_files:
        matrix = load_matrix(path)
        if matrix.nnz > MAX_NNZ:
            continue
        base = spade_space.baseline(matrix.shape)
        todo = configs if base in configs else [*configs, base]
        measured = [m for m in runner.measure(matrix, "spmm", WIDTH, todo) if m.status == "ok"]
        cfgs = [m.config for m in measured]
        runs.append(
            MatrixRuns(
                matrix=matrix,
                width=WIDTH,
                configs=cfgs,
                runtimes=np.array([m.runtime_s for m in measured]),
                baseline=cfgs.index(base),
            )
        )
    assert len(runs) >= 12, "expected at least 12 small shared matrices"
    return runs


def fresh(runs: list[MatrixRuns]) -> list[MatrixRuns]:
    """Copies without cached encodings, so each training starts from the same inputs."""
    return [dataclasses.replace(r, features=None) for r in runs]


# --- encoding ------------------------------------------------------------------------------


def test_permutation_matrix_places_each_loop() -> None:
    order = ("k1", "i1", "i0", "k0", "j1", "j0")
    p = permutation_matrix(order)
    assert p.shape == (6, 6)
    assert (p.sum(0) == 1).all() and (p.sum(1) == 1).all()
    for pos, var in enumerate(order):
        assert p[LOOP_VARS.index(var), pos] == 1
    with pytest.raises(CognateError, match="not a permutation"):
        permutation_matrix(("i1", "i1", "k1", "k0", "j1", "j0"))


def test_encoder_shapes_and_values_on_spade(spade_space) -> None:
    encoder = make_encoder(spade_space)
    configs = spade_space.candidates()
    shape = (5000, 5000)  # larger than every panel size, so no two configs coincide
    features = encoder.encode(configs, shape, WIDTH)
    knob_dim = RawKnobEncoder(spade_space).dim
    assert encoder.dim == LoopNestEncoder.dim + knob_dim == 39 + 2
    assert features.shape == (448, encoder.dim) and features.dtype == torch.float32
    for config, row in zip(configs, features, strict=True):
        nest = spade_space.loop_nest(config, shape, WIDTH)
        expected = [np.log2(nest.i_split), np.log2(nest.j_split), np.log2(nest.k_split)]
        np.testing.assert_allclose(row[:3].numpy(), expected, rtol=1e-6)
        np.testing.assert_array_equal(
            row[3:39].numpy().reshape(6, 6), permutation_matrix(nest.order)
        )
        np.testing.assert_array_equal(row[39:].numpy(), spade_space.knob_features(config))
    assert len({tuple(r.tolist()) for r in features}) == 448  # every config distinguishable


def test_encoder_on_cpu_space() -> None:
    space = get_target("cpu").space("spmm")
    configs = space.sample(50, seed=1, shape=(4000, 3000))
    features = make_encoder(space).encode(configs, (4000, 3000), WIDTH)
    assert features.shape[0] == len(configs)
    perms = features[:, 3:39].reshape(-1, 6, 6)
    assert torch.equal(perms.sum(1), torch.ones(len(configs), 6))


def test_unknown_target_encoding_is_an_error(spade_space) -> None:
    with pytest.raises(CognateError, match="unknown target encoding"):
        make_encoder(spade_space, "nope")


# --- loss ----------------------------------------------------------------------------------


def test_ranking_loss_pushes_faster_config_down() -> None:
    scores = torch.tensor([0.5, 0.0], requires_grad=True)  # config 0 is faster but scored higher
    runtimes = torch.tensor([1.0, 2.0])
    loss = ranking_loss(scores, runtimes, margin=0.1)
    loss.backward()
    assert loss.item() == pytest.approx(0.6)
    assert scores.grad[0] > 0 and scores.grad[1] < 0  # descent lowers 0, raises 1
    assert pairwise_accuracy(scores.detach(), runtimes) == 0.0


def test_ranking_loss_zero_when_order_respected_with_margin() -> None:
    scores = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    loss = ranking_loss(scores, torch.tensor([1.0, 2.0, 3.0]), margin=0.5)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(scores.grad == 0)


def test_ties_carry_no_gradient() -> None:
    scores = torch.tensor([3.0, -1.0, 0.0], requires_grad=True)
    runtimes = torch.tensor([1.0, 1.0, 5.0])  # 0 and 1 tie; both faster than 2
    ranking_loss(scores, runtimes, margin=0.1).backward()
    grad_with_tie = scores.grad.clone()
    # Removing the tied pair's possible contribution changes nothing: it had none.
    only = torch.tensor([3.0, 0.0], requires_grad=True)
    ranking_loss(only, torch.tensor([1.0, 5.0]), margin=0.1).backward()
    assert grad_with_tie[1] == 0  # config 1 is below config 2 by more than the margin
    scores2 = torch.tensor([3.0, -1.0], requires_grad=True)
    loss = ranking_loss(scores2, torch.tensor([1.0, 1.0]), margin=0.1)
    loss.backward()
    assert loss.item() == 0.0 and torch.all(scores2.grad == 0)
    # Near-ties within tie_rtol are ties too.
    scores3 = torch.tensor([1.0, 0.0], requires_grad=True)
    ranking_loss(scores3, torch.tensor([1.0, 1.005]), margin=0.1, tie_rtol=0.01).backward()
    assert torch.all(scores3.grad == 0)


# --- training ------------------------------------------------------------------------------


def test_split_is_by_matrix_seeded_and_disjoint() -> None:
    keys = [f"m{i}" for i in range(20)] * 3  # three widths each
    train_a, val_a = split_matrices(keys, 0.25, seed=3)
    train_b, val_b = split_matrices(keys, 0.25, seed=3)
    assert (train_a, val_a) == (train_b, val_b)
    assert len(val_a) == 5 and not set(train_a) & set(val_a)
    assert set(train_a) | set(val_a) == set(keys)
    assert split_matrices(keys, 0.25, seed=4)[1] != val_a


def test_training_improves_validation_ranking(spade_runs, spade_space) -> None:
    result = train(fresh(spade_runs), spade_space, small_preset(epochs=6), seed=0)
    history = result.metadata["metrics"]["history"]
    untrained, best = history[0], result.metadata["metrics"]["best"]
    assert best["pairwise_accuracy"] > untrained["pairwise_accuracy"] + 0.1
    assert best["pairwise_accuracy"] > 0.7
    assert best["top5"] <= best["oracle"] + 1e-9
    # The returned model is the best epoch's.
    val = [
        r
        for r in spade_runs
        if r.key in {m["sha256"] for m in result.metadata["split"]["validation"]}
    ]
    for r in val:
        r.features = make_encoder(spade_space).encode(r.configs, r.matrix.shape, r.width)
    assert evaluate(result.network, val)["pairwise_accuracy"] == pytest.approx(
        best["pairwise_accuracy"], abs=1e-6
    )


def test_training_is_deterministic_per_seed(spade_runs, spade_space) -> None:
    runs = spade_runs[:8]
    a = train(fresh(runs), spade_space, small_preset(epochs=2), seed=7)
    b = train(fresh(runs), spade_space, small_preset(epochs=2), seed=7)
    c = train(fresh(runs), spade_space, small_preset(epochs=2), seed=8)
    assert a.metadata["metrics"] == b.metadata["metrics"]
    for key, value in a.network.state_dict().items():
        assert torch.equal(value, b.network.state_dict()[key]), key
    assert any(
        not torch.equal(v, c.network.state_dict()[k]) for k, v in a.network.state_dict().items()
    )


def test_frozen_featurizer_trains_only_the_predictor(spade_runs, spade_space) -> None:
    preset = small_preset(epochs=2)
    frozen = preset.model_copy(
        update={"featurizer": preset.featurizer.model_copy(update={"trainable": False})}
    )
    torch.manual_seed(3)
    initial = RankingNetwork(frozen, 41).featurizer.state_dict()
    result = train(fresh(spade_runs[:8]), spade_space, frozen, seed=3)
    for key, value in result.network.featurizer.state_dict().items():
        assert torch.equal(value, initial[key]), key


# --- checkpoints ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(spade_runs, spade_space, tmp_path_factory):
    result = train(fresh(spade_runs[:8]), spade_space, small_preset(epochs=3), seed=1)
    path = result.save(tmp_path_factory.mktemp("model") / "m.safetensors")
    return result, path


def test_checkpoint_round_trip(trained, spade_runs, spade_space) -> None:
    result, path = trained
    assert isinstance(result, LearnedModel)  # train() returns the model role, saved by .save
    model, encoder, meta = load_checkpoint(path, spade_space)
    assert meta == json.loads(json.dumps(result.metadata))
    assert meta["space"] == {"name": "spade-spmm", "version": spade_space.version}
    assert meta["split"]["train"] and meta["split"]["validation"]
    run = spade_runs[0]
    expected = result.network.predict(run.matrix, run.configs, WIDTH, make_encoder(spade_space))
    got = model.predict(run.matrix, run.configs, WIDTH, encoder)
    np.testing.assert_array_equal(got, expected)
    assert torch.equal(model.config_std, result.network.config_std)


def test_checkpoint_for_another_space_version_is_an_error(trained, spade_space) -> None:
    _, path = trained
    changed = copy.copy(spade_space)
    changed.version = "000000000000"
    with pytest.raises(CognateError, match="trained for space spade-spmm version"):
        load_checkpoint(path, changed)
    with pytest.raises(CognateError, match="trained for space spade-spmm"):
        load_checkpoint(path, get_target("spade").space("sddmm"))


def test_checkpoint_of_a_compatible_space_version_ranks_this_space(
    trained, spade_runs, spade_space
) -> None:
    """A model trained before the space gained rp values loads and scores every config of
    the later space (rp reaches it as log2 of the row strip, so new values encode too)."""
    _, path = trained
    later = copy.copy(spade_space)
    later.version, later.compatible_versions = "000000000000", (spade_space.version,)
    model, encoder, meta = load_checkpoint(path, later)
    assert meta["space"]["version"] == spade_space.version
    configs = later.candidates()
    scores = model.predict(spade_runs[0].matrix, configs, WIDTH, encoder)
    assert len(scores) == len(configs) == 448 and np.isfinite(scores).all()
    unrelated = copy.copy(spade_space)
    unrelated.version, unrelated.compatible_versions = "000000000000", ()
    with pytest.raises(CognateError, match="retrain it"):
        load_checkpoint(path, unrelated)


def test_garbage_checkpoint_is_an_error(tmp_path: Path, spade_space) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a model")
    with pytest.raises(CognateError, match="bad.safetensors"):
        read_metadata(bad)
    with pytest.raises(CognateError):
        load_checkpoint(tmp_path / "missing.safetensors", spade_space)


def test_save_checkpoint_uses_a_unique_temp_file(trained, tmp_path: Path, spade_space) -> None:
    """Regression: a fixed ``<name>.tmp`` made concurrent trainings of one path collide."""
    result, _ = trained
    path = tmp_path / "m.safetensors"
    (tmp_path / "m.safetensors.tmp").mkdir()  # another writer's temp name, in the way
    result.save(path)
    result.save(path)  # replaces the first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors", "m.safetensors.tmp"]
    assert path.stat().st_mode & 0o777 == 0o644
    assert load_checkpoint(path, spade_space)[2] == json.loads(json.dumps(result.metadata))


def test_checkpoint_weights_of_another_preset_are_one_error(
    trained, tmp_path: Path, spade_space
) -> None:
    result, _ = trained
    meta = json.loads(json.dumps(result.metadata))
    meta["preset"]["predictor"]["hidden"] = [7]
    path = save_checkpoint(tmp_path / "other.safetensors", result.network, meta)
    with pytest.raises(CognateError, match="weights do not fit preset test"):
        load_checkpoint(path, spade_space)


def test_shipped_presets_build() -> None:
    for name, layers, widest in (("waco", 14, 32), ("cognate", 12, 256)):
        preset = load_preset(name)
        assert len(preset.featurizer.channels) == layers
        assert max(preset.featurizer.channels) == widest
        assert preset.featurizer.first_kernel == 5 and preset.featurizer.kernel == 3
        model = RankingNetwork(preset, 41)
        assert model.featurizer.weights[0].shape == (25, 1, preset.featurizer.channels[0])


# --- the command -----------------------------------------------------------------------------


def run_cli(argv: list[str]) -> int:
    from cognate.cli import run

    with pytest.raises(SystemExit) as exit_info:
        run(argv)
    return exit_info.value.code


@pytest.fixture(scope="module")
def spade_store(spade_runs, spade_space, tmp_path_factory) -> Path:
    """A record store holding the simulated runtimes, as `cognate collect` writes them."""
    from cognate.runner import Measurement
    from cognate.store import Store

    path = tmp_path_factory.mktemp("store") / "records.sqlite"
    with Store(path) as store:
        for run in spade_runs[:10]:
            measured = [
                Measurement(config=c, status="ok", runtime_s=float(t))
                for c, t in zip(run.configs, run.runtimes, strict=True)
            ]
            store.record(
                run.matrix,
                "spade",
                "spmm",
                run.width,
                measured,
                space_version=spade_space.version,
                baseline_hash=spade_space.baseline(run.matrix.shape).hash,
            )
    return path


def test_pretrain_command_writes_a_loadable_model(spade_store, spade_space, tmp_path, capsys):
    out = tmp_path / "model.safetensors"
    argv = ["pretrain", "--db", str(spade_store), "--target", "spade", "--op", "spmm"]
    rc = run_cli([*argv, "--epochs", "2", "--seed", "3", "--threads", "1", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "10 matrices" in err and "model written to" in err
    model, _, meta = load_checkpoint(out, spade_space)
    assert meta["preset"]["name"] == "waco" and meta["seed"] == 3
    assert len(meta["metrics"]["history"]) == 3  # untrained + 2 epochs
    assert len(meta["split"]["train"]) + len(meta["split"]["validation"]) == 10


def test_pretrain_hold_out_never_trains_or_selects_on_its_matrices(
    spade_store, spade_space, tmp_path, capsys
):
    out = tmp_path / "model.safetensors"
    argv = ["pretrain", "--db", str(spade_store), "--target", "spade", "--op", "spmm"]
    rc = run_cli([*argv, "--epochs", "1", "--threads", "1", "--hold-out", "0.3", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "held out (3 matrices, never trained on)" in err
    _, _, meta = load_checkpoint(out, spade_space)
    split = {
        part: {m["sha256"] for m in meta["split"][part]} for part in meta["split"] if part != "seed"
    }
    assert len(split["test"]) == 3
    assert not split["test"] & (split["train"] | split["validation"])
    assert len(split["train"] | split["validation"]) == 7
    test = meta["metrics"]["test"]
    assert 0 < test["top1"] <= test["oracle"] and test["top5"] <= test["oracle"]


def test_pretrain_max_nnz_leaves_larger_matrices_out_of_every_split(
    spade_store, spade_runs, spade_space, tmp_path, capsys
):
    sizes = sorted(run.matrix.nnz for run in spade_runs[:10])
    cap = sizes[6]  # the 7 smallest stay (ties aside)
    kept = {run.key for run in spade_runs[:10] if run.matrix.nnz <= cap}
    out = tmp_path / "model.safetensors"
    argv = ["pretrain", "--db", str(spade_store), "--target", "spade", "--op", "spmm"]
    rc = run_cli(
        [*argv, "--epochs", "1", "--threads", "1", "--hold-out", "0.3"]
        + ["--max-nnz", str(cap), "-o", str(out)]
    )
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"matrices above {cap} nnz left out" in " ".join(err.split())
    _, _, meta = load_checkpoint(out, spade_space)
    seen = {m["sha256"] for part in ("train", "validation", "test") for m in meta["split"][part]}
    assert seen == kept and meta["max_nnz"] == cap


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--db", "/nonexistent/records.sqlite"], "no such record store"),
        (["--max-nnz", "1"], "no spade-spmm records of a matrix with <= 1 nnz"),
        (["--preset", "huge"], "unknown preset 'huge'"),
        (["--op", "sddmm"], "no ok records for target spade, op sddmm"),
    ],
)
def test_pretrain_errors_are_one_line(spade_store, tmp_path, capsys, extra, message):
    base = {"--db": str(spade_store), "--target": "spade", "--op": "spmm", "--preset": "waco"}
    for key, value in zip(extra[::2], extra[1::2], strict=True):
        base[key] = value
    argv = ["pretrain", *[x for kv in base.items() for x in kv], "-o", str(tmp_path / "m")]
    assert run_cli(argv) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "m").exists()
