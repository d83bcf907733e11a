"""Transfer: the config mapper's table, autoencoder reconstruction, finetune end to end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from cognate.cli import main, run
from cognate.model.checkpoint import read_metadata
from cognate.space import LoopNest
from cognate.targets import get_target
from cognate.targets.gpu.space import map_gpu
from cognate.targets.spade.space import map_spade
from cognate.transfer.autoencoder import AutoencoderEncoder, space_rows
from cognate.transfer.mapper import MappedEncoder, RandomMappedEncoder, RawSlotEncoder

SHAPE = (1000, 3000)  # rows, cols
WIDTH = 64

SPADE_BASE = {"rp": 256, "cp": "all", "barrier": False, "bypass": False, "split": 1}
NO_BARRIER = ("i1", "k1", "i0", "k0", "j1", "j0")
BARRIER = ("k1", "i1", "i0", "k0", "j1", "j0")

# (knobs, image): the mapping of docs/architecture.md, Transfer, the same for both ops.
SPADE_TABLE = [
    ({**SPADE_BASE, "sched": "static"}, LoopNest(256, 3000, 64, NO_BARRIER)),
    ({**SPADE_BASE, "rp": 16, "cp": 64, "sched": "dynamic"}, LoopNest(16, 64, 64, NO_BARRIER)),
    (
        {**SPADE_BASE, "rp": 1024, "barrier": True, "sched": "static"},
        LoopNest(1000, 3000, 64, BARRIER),
    ),  # rp clamped to the rows
    (
        {**SPADE_BASE, "cp": 1024, "split": 2, "barrier": True, "bypass": True, "sched": "static"},
        LoopNest(256, 1024, 32, BARRIER),
    ),
    (
        {**SPADE_BASE, "rp": 64, "cp": 256, "split": 2, "sched": "dynamic"},
        LoopNest(64, 256, 32, NO_BARRIER),
    ),
]


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize(("knobs", "image"), SPADE_TABLE)
def test_spade_mapper_table(op: str, knobs: dict, image: LoopNest) -> None:
    space = get_target("spade").space(op)
    assert map_spade(space, space.validate(knobs), SHAPE, WIDTH) == image


GPU_BASE = {"split": "row", "reorder": "none", "num_warps": 4, "num_stages": 3}
# (op, knobs, image) with image = LoopNest(I, K, J, order)
GPU_TABLE = [
    (
        "spmm",
        {"rows_per_program": 1, "dense_tile": 64, "nnz_step": 16},
        LoopNest(1, 16, 64, ("i1", "i0", "k1", "k0", "j1", "j0")),
    ),  # the CSR nest
    (
        "spmm",
        {"rows_per_program": 4, "dense_tile": 32, "nnz_step": 64},
        LoopNest(4, 64, 32, ("i1", "j1", "i0", "k1", "k0", "j0")),
    ),
    (
        "spmm",
        {"rows_per_program": 16, "dense_tile": 128, "nnz_step": 16},
        LoopNest(16, 16, 64, ("i1", "i0", "k1", "k0", "j1", "j0")),
    ),  # tile clamped to the width
    (
        "sddmm",
        {"rows_per_program": 1, "dense_tile": 64, "nnz_step": 16},
        LoopNest(1, 64, 16, ("i1", "i0", "j1", "j0", "k1", "k0")),
    ),  # one reduction tile
    (
        "sddmm",
        {"rows_per_program": 4, "dense_tile": 32, "nnz_step": 64},
        LoopNest(4, 32, 64, ("i1", "i0", "j1", "k1", "j0", "k0")),
    ),
]


@pytest.mark.parametrize(("op", "knobs", "image"), GPU_TABLE)
def test_gpu_mapper_table(op: str, knobs: dict, image: LoopNest) -> None:
    space = get_target("gpu").space(op)
    legal = {k: v[0] for k, v in space.values.items()}
    for name, value in knobs.items():
        if value not in space.values[name]:
            pytest.fail(f"table value {name}={value} left the gpu space {space.values[name]}")
    config = space.validate({**legal, **GPU_BASE, **knobs})
    assert map_gpu(space, config, SHAPE, WIDTH) == image


def test_mapper_refuses_other_target() -> None:
    space = get_target("spade").space("spmm")
    with pytest.raises(Exception, match="spade"):
        map_gpu(space, space.baseline(SHAPE), SHAPE, WIDTH)


def test_random_mapper_is_a_fixed_permutation_of_the_images() -> None:
    space = get_target("spade").space("spmm")
    configs = space.all_configs()
    real = MappedEncoder(space).encode(configs, SHAPE, WIDTH).numpy()
    shuffled = RandomMappedEncoder(space, seed=0).encode(configs, SHAPE, WIDTH).numpy()
    again = RandomMappedEncoder(space, seed=0).encode(configs, SHAPE, WIDTH).numpy()
    assert np.array_equal(shuffled, again)
    assert not np.array_equal(real, shuffled)
    # the same multiset of images, dealt to other configs
    assert sorted(map(tuple, real.tolist())) == sorted(map(tuple, shuffled.tolist()))


def test_no_mapper_puts_raw_knobs_in_the_slot() -> None:
    space = get_target("spade").space("spmm")
    config = space.validate({**SPADE_BASE, "cp": 64, "bypass": True, "sched": "dynamic"})
    row = RawSlotEncoder(space).encode([config], SHAPE, WIDTH)[0].tolist()
    # rp log2, cp log2, barrier, bypass, split log2, sched index, then zero padding
    assert row[:6] == [8.0, 6.0, 0.0, 1.0, 0.0, 1.0]
    assert not any(row[6:])


@pytest.mark.parametrize(("target", "op"), [("spade", "spmm"), ("gpu", "sddmm"), ("cpu", "spmm")])
def test_autoencoder_reconstructs_the_discrete_space_exactly(target: str, op: str) -> None:
    space = get_target(target).space(op)
    encoder = AutoencoderEncoder(space)
    rows = space_rows(space, 4096, 0)
    assert rows.shape[0] > 1
    assert np.array_equal(encoder.reconstruct(rows), rows)
    configs = space.sample(8, 1, SHAPE)  # cpu: 8 csr configs + the kernel-family configs
    latent = encoder.encode(configs, SHAPE, WIDTH)
    assert latent.shape == (len(configs), 64)
    # the cached file gives the same codes
    assert AutoencoderEncoder(space).sha256 == encoder.sha256


# --- finetune end to end -------------------------------------------------------------------

SMALL = ("494_bus", "bcspwr06", "west0479", "west0497", "dwt_878", "olm500")
TINY_PRESET = {
    "featurizer": {"channels": [8, 8, 8], "embed_hidden": [16], "embedding_dim": 16},
    "predictor": {"hidden": [32]},
    "train": {"epochs": 2, "patience": 2, "val_fraction": 0.34},
}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """Two torch threads on 2 shared cores make sparse convolutions ~5x slower here."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, shared: Path) -> Path:
    """spade spmm (target) and sddmm (stand-in source) records of six small real matrices."""
    from cognate.collect import collect

    files = [shared / "matrices" / "suitesparse" / f"{n}.mtx.gz" for n in SMALL]
    db = tmp_path_factory.mktemp("transfer") / "records.db"
    for op in ("spmm", "sddmm"):
        summary = collect("spade", op, 16, files, db_path=db, all_configs=True, jobs=1)
        assert summary.exit_code == 0, summary.line()
    return db


@pytest.fixture(scope="module")
def pretrained(store: Path) -> Path:
    from cognate.cli.pretrain import load_runs
    from cognate.model.preset import preset_from_dict
    from cognate.model.train import train
    from cognate.transfer.finetune import transfer_encoder

    space = get_target("spade").space("sddmm")
    runs = load_runs(store, space)
    result = train(
        runs,
        space,
        preset_from_dict("tiny", TINY_PRESET),
        seed=0,
        encoder=transfer_encoder(space, "cognate", "ae"),
    )
    return result.save(store.parent / "pretrained.safetensors")


ABLATIONS = [
    [],
    ["--mapper", "random"],
    ["--mapper", "none"],
    ["--latent", "raw"],
    ["--from-scratch"],
    ["--zero-shot"],
    ["--no-freeze-featurizer"],
    ["--select", "active"],
    ["--select", "representative"],
]


@pytest.mark.parametrize("flags", ABLATIONS, ids=lambda f: " ".join(f) or "default")
def test_finetune_cli_records_each_ablation(
    store: Path, pretrained: Path, tmp_path: Path, flags: list[str]
) -> None:
    out = tmp_path / "tuned.safetensors"
    args = [
        "finetune",
        "--model",
        str(pretrained),
        "--db",
        str(store),
        "--target",
        "spade",
        "--op",
        "spmm",
        "--matrices",
        "2",
        "--seed",
        "1",
        "--epochs",
        "2",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(main, [*args, *flags])
    assert result.exit_code == 0, result.output
    meta = read_metadata(out)
    opts = meta["transfer"]["options"]
    assert opts["mapper"] == (flags[1] if flags[:1] == ["--mapper"] else "cognate")
    assert opts["latent"] == (flags[1] if flags[:1] == ["--latent"] else "ae")
    assert opts["from_scratch"] == ("--from-scratch" in flags)
    assert opts["zero_shot"] == ("--zero-shot" in flags)
    assert opts["select"] == (flags[1] if flags[:1] == ["--select"] else "random")
    assert opts["freeze_featurizer"] == ("--no-freeze-featurizer" not in flags)
    assert meta["transfer"]["source"]["op"] == "sddmm"
    split = meta["split"]
    assert len(split["finetune"]) == 2
    names = {m["name"] for m in split["train"]}
    assert {m["name"] for m in split["finetune"]} <= names
    assert not names & {m["name"] for m in split["validation"] + split["test"]}
    assert len(meta["metrics"]["history"]) == (1 if "--zero-shot" in flags else 3)
    assert meta["metrics"]["test"]["oracle"] >= 1.0
    assert meta["ranking"]["chosen"] in ("learned", "fixed-K", "blend")  # chosen on validation
    if "--from-scratch" in flags:
        assert meta["transfer"]["copied"] == {}
    else:
        # the source is spade-sddmm: its autoencoder's latent means nothing to spade-spmm's
        assert meta["transfer"]["copied"]["heterogeneous"] is False


def test_latent_weights_carry_over_only_within_one_space(
    store: Path, pretrained: Path, tmp_path: Path
) -> None:
    from cognate.cli.pretrain import load_runs
    from cognate.model.preset import preset_from_dict
    from cognate.model.train import train
    from cognate.transfer.finetune import FinetuneOptions, finetune, transfer_encoder

    space = get_target("spade").space("spmm")
    runs = load_runs(store, space)
    encoder = transfer_encoder(space, "cognate", "ae")
    result = train(runs, space, preset_from_dict("tiny", TINY_PRESET), seed=0, encoder=encoder)
    same = result.save(tmp_path / "same.safetensors")
    opts = FinetuneOptions(matrices=2, seed=1, zero_shot=True)
    out = finetune(same, runs, space, opts)
    assert out.metadata["transfer"]["copied"]["heterogeneous"] is True
    z = out.network.predictor[0].weight[:, -encoder.parts[1].dim :]
    source_z = result.network.predictor[0].weight[:, -encoder.parts[1].dim :]
    assert torch.equal(z, source_z)
    # from another space (spade-sddmm) the zero-shot model's latent columns are zero
    other = finetune(pretrained, runs, space, opts)
    assert other.metadata["transfer"]["copied"]["heterogeneous"] is False
    assert not other.network.predictor[0].weight[:, -encoder.parts[1].dim :].any()


def test_zero_shot_without_records_reads_no_runtime_and_keeps_the_source_slot(
    store: Path, pretrained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cognate.cli.pretrain import load_runs
    from cognate.model.cost_model import CostModel
    from cognate.transfer.finetune import load_pretrained
    from cognate.transfer.mapper import HOMOGENEOUS_DIM

    out = tmp_path / "gpu.safetensors"
    base = ["finetune", "--model", str(pretrained), "--db", str(tmp_path / "none.db")]
    base += ["--target", "gpu", "--op", "spmm", "-o", str(out)]
    code, err = _run_cli([*base, "--without-records"], capsys)
    assert code == 1 and "--without-records needs --zero-shot" in err and not out.exists()
    code, err = _run_cli([*base, "--zero-shot", "--without-records"], capsys)
    assert code == 0, err
    assert not (tmp_path / "none.db").exists()  # no store was opened, let alone created
    meta = read_metadata(out)
    assert meta["transfer"]["without_records"] and "metrics" not in meta
    model = CostModel.load(out, get_target("gpu").space("spmm"))
    source, _ = load_pretrained(pretrained)
    w, source_w = model.network.predictor[0].weight, source.predictor[0].weight
    keep = source.featurizer.dim + 1 + HOMOGENEOUS_DIM  # context, then the loop-nest slot
    assert torch.equal(w[:, :keep], source_w[:, :keep])
    assert not w[:, keep:].any()  # the gpu's own knobs: no weight from another space
    assert torch.isfinite(model.network.config_std).all()
    run = load_runs(store, get_target("spade").space("spmm"))[0]
    configs = model.space.all_configs()
    scores = model.predict(run.matrix, configs, 64)
    assert np.isfinite(scores).all() and len(set(np.round(scores, 6))) > 1


def test_finetune_is_reproducible_and_loads(store: Path, pretrained: Path, tmp_path: Path) -> None:
    from cognate.cli.pretrain import load_runs
    from cognate.transfer.finetune import FinetuneOptions, finetune, load_transfer_model

    space = get_target("spade").space("spmm")
    opts = FinetuneOptions(matrices=2, seed=3, mapper="random", epochs=1)
    first = finetune(pretrained, load_runs(store, space), space, opts)
    second = finetune(pretrained, load_runs(store, space), space, opts)
    assert first.metadata["metrics"] == second.metadata["metrics"]

    path = first.save(tmp_path / "m.safetensors")
    model, encoder, meta = load_transfer_model(path, space)
    assert encoder.kind == "loopnest-random+ae"
    run = load_runs(store, space)[0]
    scores = model.predict(run.matrix, run.configs, run.width, encoder, backend="torch")
    expected = first.network.predict(run.matrix, run.configs, run.width, first.encoder, "torch")
    assert np.allclose(scores, expected)


def _run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        run(args)
    return int(stop.value.code), capsys.readouterr().err


def test_finetune_bad_input_is_one_line(
    pretrained: Path, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [
        "finetune",
        "--db",
        str(store),
        "--target",
        "spade",
        "--op",
        "spmm",
        "-o",
        str(tmp_path / "x"),
    ]
    cases = [
        (["--model", str(tmp_path / "nope")], "no such model file"),
        (["--model", str(pretrained), "--matrices", "50"], "training split has only"),
        (["--model", str(pretrained), "--zero-shot", "--from-scratch"], "exclude each other"),
        (["--model", str(store)], "not a readable cognate model"),
    ]
    for flags, message in cases:
        code, err = _run_cli([*base, *flags], capsys)
        assert code == 1 and message in err, err
        errors = [line for line in err.splitlines() if line.startswith("cognate: error:")]
        assert len(errors) == 1 and "Traceback" not in err
    assert not (tmp_path / "x").exists()


# --- a fine-tuned model ships its autoencoder ----------------------------------------------


@pytest.fixture(scope="module")
def tuned(store: Path, pretrained: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """A default (mapper cognate, latent ae) fine-tuned model, saved, and its result."""
    from cognate.cli.pretrain import load_runs
    from cognate.transfer.finetune import FinetuneOptions, finetune

    space = get_target("spade").space("spmm")
    result = finetune(
        pretrained, load_runs(store, space), space, FinetuneOptions(matrices=2, epochs=1)
    )
    path = tmp_path_factory.mktemp("tuned") / "tuned.safetensors"
    return result.save(path), result


def _rewrite(
    src: Path,
    dst: Path,
    edit_meta: Callable[[dict], object] | None = None,
    edit_tensors: Callable[[dict], object] | None = None,
) -> Path:
    """A copy of checkpoint ``src`` with its metadata and/or tensors edited."""
    import json

    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(src), framework="pt") as f:
        meta = json.loads(f.metadata()["cognate"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    if edit_meta:
        edit_meta(meta)
    if edit_tensors:
        edit_tensors(tensors)
    save_file(tensors, str(dst), metadata={"cognate": json.dumps(meta)})
    return dst


def test_finetuned_model_loads_without_the_autoencoder_cache(
    store: Path, tuned: tuple, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the autoencoder was rebuilt from (or retrained into) the local cache."""
    from cognate.cli.pretrain import load_runs
    from cognate.transfer import autoencoder
    from cognate.transfer.finetune import load_transfer_model

    path, result = tuned
    meta = read_metadata(path)
    assert meta["transfer"]["autoencoder"]["columns"]
    assert meta["transfer"]["autoencoder_sha256"] == result.encoder.parts[1].sha256
    empty = tmp_path / "fresh-home"
    monkeypatch.setenv("COGNATE_HOME", str(empty))

    def no_training(*_: object) -> None:
        raise AssertionError("the autoencoder must come from the model file")

    monkeypatch.setattr(autoencoder, "train_autoencoder", no_training)
    space = get_target("spade").space("spmm")
    model, encoder, _ = load_transfer_model(path, space)
    assert encoder.parts[1].sha256 == meta["transfer"]["autoencoder_sha256"]
    assert not empty.exists()  # nothing read from nor written to the cache
    for one in load_runs(store, space)[:3]:
        got = model.predict(one.matrix, one.configs, one.width, encoder, backend="torch")
        want = result.network.predict(one.matrix, one.configs, one.width, result.encoder, "torch")
        np.testing.assert_array_equal(got, want)


def test_finetuned_model_with_another_autoencoder_is_refused(tuned: tuple, tmp_path: Path) -> None:
    from cognate.errors import CognateError
    from cognate.transfer.finetune import load_transfer_model

    path, _ = tuned
    space = get_target("spade").space("spmm")

    def nudge(tensors: dict) -> None:
        tensors["ae.encoder.0.weight"] = tensors["ae.encoder.0.weight"] + 0.01

    tampered = _rewrite(path, tmp_path / "tampered.safetensors", edit_tensors=nudge)
    with pytest.raises(CognateError, match="fine-tuned with autoencoder"):
        load_transfer_model(tampered, space)

    # a file from before the autoencoder was shipped: the cache's must match its sha256
    def legacy(meta: dict, sha: str = "0" * 64) -> None:
        meta["transfer"].pop("autoencoder")
        meta["transfer"]["autoencoder_sha256"] = sha

    def drop_ae(tensors: dict) -> None:
        for key in [k for k in tensors if k.startswith("ae.")]:
            del tensors[key]

    old = _rewrite(path, tmp_path / "old.safetensors", legacy, drop_ae)
    with pytest.raises(CognateError, match="fine-tuned with autoencoder 000000000000"):
        load_transfer_model(old, space)
    sha = read_metadata(path)["transfer"]["autoencoder_sha256"]
    ok = _rewrite(path, tmp_path / "ok.safetensors", lambda m: legacy(m, sha), drop_ae)
    assert load_transfer_model(ok, space)[1].parts[1].sha256 == sha


def test_finetuned_weights_that_do_not_fit_are_one_error(tuned: tuple, tmp_path: Path) -> None:
    """Regression: load_transfer_model let load_state_dict's RuntimeError through."""
    from cognate.errors import CognateError
    from cognate.transfer.finetune import load_transfer_model

    path, _ = tuned
    bad = _rewrite(
        path, tmp_path / "bad.safetensors", edit_tensors=lambda t: t.pop("ae.decoder.2.bias")
    )
    with pytest.raises(CognateError, match="weights do not fit preset"):
        load_transfer_model(bad, get_target("spade").space("spmm"))
