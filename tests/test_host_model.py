"""One cpu cost model across hosts: host ids and facts, the store's host columns (schema 4),
encodings with every knob and the host, the variants a collection measures, pretraining on a
frozen featurizer, and the leave-one-host-out evaluation's arms."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch

import cognate
from cognate import hostid
from cognate.collect.plan import choose_configs
from cognate.errors import CognateError
from cognate.evaluate import hosts as lohosts
from cognate.formats.read import load_matrix
from cognate.hostid import HostFacts, HostProfile
from cognate.model.encoding import NEW_HOST_PICK_KEY, host_features, make_encoder
from cognate.model.fit import encode_all
from cognate.model.preset import preset_from_dict
from cognate.model.train import train
from cognate.records import load_runs
from cognate.runner import Measurement
from cognate.store import Store
from cognate.targets import get_target

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ZEN3 = HostFacts("avx2", 256, "AMD EPYC (Zen 3)", 32 << 10, 512 << 10, 32 << 20, 2)
XEON = HostFacts("avx512", 512, "Intel Xeon (6/143)", 48 << 10, 2 << 20, 105 << 20, 2)


@pytest.fixture()
def space():
    return get_target("cpu").space("spmm")


def test_machine_id_tells_cpus_of_one_name_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two VMs that both call themselves "AMD EPYC" but differ in family/model (Zen 3 vs
    Zen 4) must not share an id: a collection on one would skip the other's records."""
    ids = []
    for model in ("1", "17"):
        info = {"model name": "AMD EPYC", "cpu family": "25", "model": model, "flags": "avx2"}
        monkeypatch.setattr(hostid, "_cpuinfo", lambda info=info: info)
        hostid.host_profile.cache_clear()
        hostid.machine_id.cache_clear()
        ids.append(hostid.machine_id())
        assert hostid.host_profile().cpu == f"AMD EPYC (25/{model})"
        assert hostid.host_profile().vector_bits == 256
    hostid.host_profile.cache_clear()
    hostid.machine_id.cache_clear()
    assert ids[0] != ids[1] and all(i.startswith("h-") for i in ids)


def test_this_host_profile_reads_caches_and_cores() -> None:
    profile = hostid.host_profile()
    assert profile.cores >= 1 and profile.vector_bits in (128, 256, 512)
    if Path("/sys/devices/system/cpu/cpu0/cache/index0").exists():
        assert 4 << 10 <= profile.l1d_bytes < profile.l2_bytes <= profile.llc_bytes


def _record(store: Store, matrix, space, facts: HostFacts | None, host: str, scale=1.0) -> None:
    base = space.baseline(matrix.shape)
    configs = [base, *space.kernel_variants()[:3]]
    measured = [Measurement(c, "ok", runtime_s=scale * (1 + i)) for i, c in enumerate(configs)]
    store.record(
        matrix, "cpu", "spmm", 64, measured, space_version=space.version,
        baseline_hash=base.hash, host=host, facts=facts,
    )  # fmt: skip


def test_host_facts_are_stored_exported_and_read_into_runs(
    tmp_path: Path, shared: Path, space
) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        _record(store, matrix, space, ZEN3, "h-zen3")
        _record(store, matrix, space, XEON, "h-xeon", 2.0)
        frame = store.frame()
    for facts, host in ((ZEN3, "h-zen3"), (XEON, "h-xeon")):
        rows = frame[frame["host"] == host]
        assert rows[list(HostFacts._fields)].drop_duplicates().values.tolist() == [list(facts)]
    again = tmp_path / "again.sqlite"
    with Store(again) as store:  # an export imported elsewhere keeps every host column
        store.import_frame(frame)
        assert store.frame()[list(HostFacts._fields)].equals(frame[list(HostFacts._fields)])
    runs = {r.host.cpu_model: r for r in load_runs(again, space)}
    assert runs["Intel Xeon (6/143)"].host.l2_bytes == 2 << 20
    assert runs["AMD EPYC (Zen 3)"].host.vector_bits == 256


def test_v3_store_gains_host_columns_filled_for_this_machine_only(
    tmp_path: Path, shared: Path, space
) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    db = tmp_path / "r.sqlite"
    mine = HostFacts.of("avx2", 256)
    with Store(db) as store:
        _record(store, matrix, space, mine, hostid.machine_id())
        _record(store, matrix, space, ZEN3, "h-zen3")
    with sqlite3.connect(db) as conn:  # back to what schema 3 stored: no host columns
        for column in ("cpu", "l1d_bytes", "l2_bytes", "llc_bytes", "cores"):
            conn.execute(f"ALTER TABLE measurements DROP COLUMN {column}")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with Store(db) as store:
        frame = store.frame()
    ours = frame[frame["host"] == hostid.machine_id()]
    theirs = frame[frame["host"] == "h-zen3"]
    assert set(ours["cpu"]) == {hostid.host_profile().cpu}
    assert set(ours["l2_bytes"]) == {hostid.host_profile().l2_bytes}
    assert theirs["cpu"].isna().all() and theirs["l2_bytes"].isna().all()
    assert set(theirs["isa"]) == {"avx2"}  # the schema 3 columns are kept as they were


def test_encoding_covers_every_knob_and_the_host(space) -> None:
    encoder = make_encoder(space, "knobs+host")
    assert encoder.kind == "loopnest+knobs+host" and encoder.uses_host
    base = space.baseline((100, 100))
    configs = [base, *space.kernel_variants()]
    rows = encoder.encode(configs, (100, 100), 128)
    assert len({tuple(r.tolist()) for r in rows}) == len(configs)  # every variant its own row
    plain = make_encoder(space, "raw").encode(configs, (100, 100), 128)
    assert len({tuple(r.tolist()) for r in plain}) == 1  # what the old encoding could see
    zen3 = HostProfile("AMD EPYC (Zen 3)", "", 256, 32 << 10, 512 << 10, 32 << 20, 2)
    on_zen3 = encoder.encode(configs, (100, 100), 128, host=zen3)
    assert torch.equal(
        on_zen3[:, -5:], torch.from_numpy(host_features(zen3)).expand(len(configs), -1)
    )
    assert host_features(zen3).tolist() == [0.0, 0.0, -1.0, 0.0, 0.0]
    with pytest.raises(CognateError, match="unknown target encoding"):
        make_encoder(space, "knobs+cache")


def test_a_sample_holds_every_kernel_variant_when_asked(shared: Path, space) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    variants = space.kernel_variants()
    baseline, configs = choose_configs(space, matrix, 12, False, 0, None, all_variants=True)
    assert configs[0] == baseline and configs[-len(variants) :] == variants
    assert len(configs) == 1 + 12 + len(variants)
    baseline, spread = choose_configs(space, matrix, 12, False, 0, None)
    assert len(spread) == 1 + 12  # exactly --configs: the variants one family of the spread
    assert 0 < sum(c in variants for c in spread) < len(variants)


def _tiny_preset(epochs: int = 2):
    return preset_from_dict(
        "tiny",
        {
            "featurizer": {"channels": [4, 4], "embed_hidden": [8], "embedding_dim": 8},
            "predictor": {"hidden": [16]},
            "train": {"configs_per_step": 64, "epochs": epochs, "patience": epochs},
        },
    )


@pytest.fixture()
def two_hosts(tmp_path: Path, suitesparse_files, space):
    """10 small shared matrices measured (synthetic runtimes) on two hosts whose best config
    differs: Zen 3 prefers the 2nd variant, the Xeon the 3rd."""
    db = tmp_path / "hosts.sqlite"
    small = [p for p in suitesparse_files if load_matrix(p).nnz < 8000][:10]
    with Store(db) as store:
        for n, path in enumerate(small):
            matrix = load_matrix(path)
            base = space.baseline(matrix.shape)
            configs = [base, *space.kernel_variants()[:6]]
            for facts, best in ((ZEN3, 2), (XEON, 3)):
                times = [1.0 + 0.05 * ((i * 7 + n) % 5) for i in range(len(configs))]
                times[best] = 0.5
                store.record(
                    matrix, "cpu", "spmm", 64,
                    [Measurement(c, "ok", runtime_s=t) for c, t in zip(configs, times, strict=True)],
                    space_version=space.version, baseline_hash=base.hash,
                    host=f"h-{facts.isa}", facts=facts,
                )  # fmt: skip
    return db


def test_frozen_featurizer_pretraining_changes_only_the_predictor(two_hosts, space) -> None:
    runs = load_runs(two_hosts, space)
    first = train(runs, space, _tiny_preset(), encoder=make_encoder(space, "knobs+host"))
    for run in runs:
        run.features = None
    second = train(
        runs, space, _tiny_preset(), seed=1, encoder=make_encoder(space, "knobs+host"),
        featurizer_from=first.network,
    )  # fmt: skip
    assert not second.network.preset.featurizer.trainable
    for name, tensor in first.network.featurizer.state_dict().items():
        assert torch.equal(tensor, second.network.featurizer.state_dict()[name])
    assert second.metadata["encoder"]["kind"] == "loopnest+knobs+host"


def test_leave_one_host_out_runs_every_arm_on_held_out_matrices(two_hosts, space) -> None:
    runs = load_runs(two_hosts, space)
    by_host = lohosts.hosts_of(runs)
    assert set(by_host) == {ZEN3.cpu, XEON.cpu}
    source = train(runs, space, _tiny_preset(), encoder=make_encoder(space, "knobs+host"))
    embeddings = lohosts.embed_all(source, runs, None)
    for run in runs:
        run.features = None
    trainer = lohosts.make_trainer(source, space, runs, embeddings, epochs=3)
    variants = {c.hash for c in space.kernel_variants()}
    result = lohosts.direction(
        by_host[ZEN3.cpu], by_host[XEON.cpu], trainer, set(), variants, [1, 2], [0, 1],
        log=lambda line: None,
    )  # fmt: skip
    test_keys = {k.split(":")[0] for k in result["oracle"]}
    assert len(test_keys) == 5 and result["pool_matrices"] == 5
    arms = result["arms"]
    assert set(arms) == {
        "zero-shot", "baseline", "T full", "K matrices, K=1", "K tunes, K=1", "fixed-K, K=1",
        "K matrices, K=2", "K tunes, K=2", "fixed-K, K=2",
    }  # fmt: skip
    for per_seed in arms.values():
        assert len(per_seed) == 2
        for scores in per_seed:
            assert set(scores.top1) == set(result["oracle"])
            for key, value in scores.top5.items():
                assert scores.top1[key] <= value <= result["oracle"][key] + 1e-12
    # the fixed set chosen on the Xeon's own K matrices finds its best config (the 3rd)
    fixed = arms["fixed-K, K=1"][0].top1
    assert all(v == result["oracle"][key] for key, v in fixed.items())
    assert all(v == 1.0 for v in arms["baseline"][0].top1.values())
    table = lohosts.summarize(result, [1, 2], n_boot=50)
    assert table["arms"]["fixed-K, K=1"]["top1_of_oracle"]["mean"] == pytest.approx(1.0)
    assert set(table["paired"]) == {
        "K matrices, K=1 / fixed-K best-of-5", "K tunes, K=1 / fixed-K best-of-5",
        "K matrices, K=2 / fixed-K best-of-5", "K tunes, K=2 / fixed-K best-of-5",
    }  # fmt: skip


def test_runs_without_host_facts_are_refused(tmp_path: Path, shared: Path, space) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        _record(store, matrix, space, None, "h-unknown")
    runs = load_runs(db, space)
    assert runs[0].host is not None and runs[0].host.l2_bytes == 0
    with pytest.raises(CognateError, match="no host facts"):
        lohosts.hosts_of(runs)
    encode_all(runs, make_encoder(space, "knobs+host"))
    assert np.all(runs[0].features[:, -5:].numpy() == 0)  # unknown facts read as the reference


def test_one_host_training_leaves_the_host_part_neutral(two_hosts, space) -> None:
    """Trained on one host's records the host inputs never vary: their weights must stay at
    zero, so another host's facts change no score (rather than feeding random weights)."""
    runs = [r for r in load_runs(two_hosts, space) if r.host.cpu_model == ZEN3.cpu]
    encoder = make_encoder(space, "knobs+host")
    model = train(runs, space, _tiny_preset(), encoder=encoder)
    assert torch.count_nonzero(model.network.predictor[0].weight[:, -5:]) == 0
    run = runs[0]
    embedding = model.embed(run.matrix)
    xeon = HostProfile(XEON.cpu, "", 512, XEON.l1d_bytes, XEON.l2_bytes, XEON.llc_bytes, 2)
    on_xeon = encoder.encode(run.configs, run.matrix.shape, run.width, host=xeon)
    with torch.no_grad():
        here = model.network.score(embedding, run.width, run.features)
        there = model.network.score(embedding, run.width, on_xeon)
    assert torch.allclose(here, there)


def test_a_model_is_scored_per_host_on_its_held_out_matrices(two_hosts, space) -> None:
    runs = load_runs(two_hosts, space)
    keys = sorted({r.key for r in runs})
    held_out = [r for r in runs if r.key in keys[:3]]
    fitted = [r for r in runs if r.key not in keys[:3]]
    model = train(
        fitted, space, _tiny_preset(), encoder=make_encoder(space, "knobs+host"), held_out=held_out
    )
    for run in held_out:
        run.features = None
    table = lohosts.held_out_per_host(model, load_runs(two_hosts, space))
    assert set(table) == {ZEN3.cpu, XEON.cpu}
    for row in table.values():
        assert row["matrices"] == 3 and row["runs"] == 3
        assert row["fixed_top1"] == pytest.approx(1.0)  # each host's best config, found
        assert 0 < row["model_top1"] <= row["model_top5"] <= 1.0 + 1e-9
        assert row["baseline_top1"] == pytest.approx(0.5, abs=0.2)


def test_a_model_says_when_it_never_saw_a_host_like_this_one(
    two_hosts, space, shared: Path
) -> None:
    from cognate.model.encoding import new_host_note

    runs = load_runs(two_hosts, space)  # Zen 3 and Xeon facts: neither is this machine's
    model = train(runs, space, _tiny_preset(), encoder=make_encoder(space, "knobs+host"))
    assert {h["cpu"] for h in model.metadata["hosts"]} == {ZEN3.cpu, XEON.cpu}
    if any(np.allclose(h["features"], host_features(None)) for h in model.metadata["hosts"]):
        pytest.skip("this machine has the facts of a test host")
    note = new_host_note(model.encoder, model.metadata)
    assert note and "never trained on a host like this one" in note and "--verify" in note
    for run in runs:  # records of this machine (host None) make it a known host
        run.host, run.features = None, None
    here = train(runs, space, _tiny_preset(), encoder=make_encoder(space, "knobs+host"))
    assert new_host_note(here.encoder, here.metadata) is None
    assert new_host_note(make_encoder(space, "raw"), model.metadata) is None  # no host part
    # An unverified tune on a host the model never saw picks the baseline where the
    # model's leave-one-host-out evaluation found its rank 1 below the baseline, its rank 1
    # otherwise, and its rank 1 on a host it trained on whatever the rule.
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    for lost, pick in ((0.05, "baseline"), (-0.05, "model")):
        summary = {"a -> b": _direction(0.9, 0.9), "b -> a": _direction(0.7, 0.7 + lost)}
        rule = lohosts.new_host_pick(summary)
        assert rule["pick"] == pick and set(rule["evidence"]) == {"a -> b", "b -> a"}
        model.metadata[NEW_HOST_PICK_KEY] = rule
        here.metadata[NEW_HOST_PICK_KEY] = rule
        new = cognate.tune(matrix, width=64, top_k=3, model=model, candidates=300)
        assert new.new_host and new.as_dict()["new_host_baseline"] is (pick == "baseline")
        assert new.best is (new.baseline if pick == "baseline" else new.candidates[0])
        if pick == "baseline" and new.candidates[0].config != new.baseline.config:
            assert "pick: the baseline config" in _summary(new)
        known = cognate.tune(matrix, width=64, top_k=3, model=here, candidates=300)
        assert not known.new_host and known.best is known.candidates[0]
    with pytest.raises(CognateError, match="no leave-one-host-out direction"):
        lohosts.new_host_pick({"featurizer": "m.safetensors", "seeds": 5})


def test_eval_hosts_writes_the_new_host_pick_into_a_model(two_hosts, space, tmp_path: Path) -> None:
    import importlib.util
    import json

    from cognate.model.checkpoint import read_metadata

    model = train(
        load_runs(two_hosts, space),
        space,
        _tiny_preset(),
        encoder=make_encoder(space, "knobs+host"),
    )
    path = model.save(tmp_path / "m.safetensors")
    summary = tmp_path / "hosts.json"
    summary.write_text(json.dumps({"seeds": 5, "x -> y": _direction(0.6, 0.7)}))
    script = Path(__file__).resolve().parents[1] / "scripts" / "eval_hosts.py"
    spec = importlib.util.spec_from_file_location("eval_hosts", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--from-json", str(summary), "--write-pick", str(path)]) == 0
    rule = read_metadata(path)["new_host_pick"]
    assert rule["pick"] == "baseline"
    assert rule["evidence"]["x -> y"]["zero_shot_top1_of_oracle"] == pytest.approx(0.6)
    assert read_metadata(path)["hosts"] == model.metadata["hosts"]  # the rest kept
    summary.write_text("{}")  # no direction: one line, exit 1, the model untouched
    assert module.main(["--from-json", str(summary), "--write-pick", str(path)]) == 1
    assert read_metadata(path)["new_host_pick"] == rule


def _direction(zero_shot_top1: float, baseline_top1: float) -> dict:
    """One direction of scripts/eval_hosts.py's summary, as far as new_host_pick reads it."""

    def arm(top1: float) -> dict:
        return {"top1_of_oracle": {"mean": top1}, "top5_of_oracle": {"mean": 1.0}}

    return {"arms": {"zero-shot": arm(zero_shot_top1), "baseline": arm(baseline_top1)}}


def _summary(result) -> str:
    """What ``cognate tune`` prints under its table for ``result``, on one line."""
    import io

    from rich.console import Console

    from cognate.cli.tune_output import print_summary

    console = Console(width=200, file=io.StringIO(), record=True)
    print_summary(console, result)
    return " ".join(console.export_text().split())
