"""The spade-calibrated target: spade's configs on the calibrated machine with a scaled L1."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cognate.cli import main
from cognate.formats.read import load_matrix
from cognate.store import Store
from cognate.targets import get_target
from cognate.targets.spade.simulator import load_machine


def test_machine_is_the_calibration_one_with_l1_and_victim_cache_divided_by_8() -> None:
    calibrated, hottiles = load_machine("spade-calibrated"), load_machine("spade-hottiles")
    assert calibrated.l1.bytes * 8 == hottiles.l1.bytes
    assert calibrated.victim_cache.bytes * 8 == hottiles.victim_cache.bytes
    restored = calibrated.with_changes(
        **{"l1.bytes": hottiles.l1.bytes, "victim_cache.bytes": hottiles.victim_cache.bytes}
    )
    assert restored == hottiles  # nothing else differs from the calibrated machine


def test_same_labels_and_mapping_as_spade(shared: Path) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "494_bus.mtx.gz")
    for op in ("spmm", "sddmm"):
        spade, calibrated = get_target("spade").space(op), get_target("spade-calibrated").space(op)
        assert calibrated.name == f"spade-calibrated-{op}"
        assert calibrated.machine_name == "spade-calibrated"
        pairs = zip(spade.all_configs(), calibrated.all_configs(), strict=True)
        for s, c in pairs:
            assert s.knobs == c.knobs and c.target == "spade-calibrated"
            assert spade.loop_nest(s, matrix.shape, 64) == calibrated.loop_nest(c, matrix.shape, 64)
        assert spade.baseline().knobs == calibrated.baseline().knobs


def test_collect_stores_records_that_differ_from_the_scaled_machine(
    tmp_path: Path, shared: Path
) -> None:
    db = tmp_path / "records.sqlite"
    path = shared / "matrices" / "suitesparse" / "494_bus.mtx.gz"
    for target in ("spade", "spade-calibrated"):
        args = ["collect", "--target", target, "--op", "spmm", "--all-configs", "--width", "64"]
        result = CliRunner().invoke(main, [*args, "--db", str(db), str(path)])
        assert result.exit_code == 0, result.output
    with Store(db, readonly=True) as store:
        scaled = store.frame(target="spade", op="spmm").set_index("config_hash")
        frame = store.frame(target="spade-calibrated", op="spmm")
    assert len(frame) == 448 and set(frame["status"]) == {"ok"}
    assert frame["is_baseline"].sum() == 1
    # the two machines time the same schedules differently (bandwidth 161 vs 21.7 GB/s)
    baseline = frame[frame["is_baseline"]].iloc[0]
    scaled_baseline = scaled[scaled["is_baseline"]].iloc[0]
    assert baseline["runtime_s"] < scaled_baseline["runtime_s"]


def test_tune_ranks_with_the_shipped_model(shared: Path) -> None:
    """The shipped spade-calibrated model ranks the space; at N = 256 it picks a row panel
    that keeps the output rows in the vector registers (rp x 256 x 4 B, docs/spade.md)."""
    path = shared / "matrices" / "suitesparse" / "494_bus.mtx.gz"
    args = ["tune", str(path), "--target", "spade-calibrated", "--op", "sddmm", "--json"]
    result = CliRunner().invoke(main, [*args, "--width", "256"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert Path(report["model"]).name == "spade-calibrated-sddmm.safetensors"
    best = get_target("spade-calibrated").space("sddmm").validate(report["best"]["config"])
    assert best.knobs["rp"] <= 16


def test_the_two_calibrated_presets_differ_in_the_source_model_only() -> None:
    from cognate.evaluate.preset import load_experiment

    random, trained = load_experiment("calibrated"), load_experiment("calibrated-trained")
    assert random.target == trained.target == "spade-calibrated"
    assert random.model is None and trained.model["featurizer"]["trainable"] is True
    same = {"model", "pretrain_epochs", "name"}
    assert random.model_dump(exclude=same) == trained.model_dump(exclude=same)
