"""The spade-inverted target: spade's configs and mapping on a machine whose barrier is swapped."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cognate.cli import main
from cognate.formats.read import load_matrix
from cognate.store import Store
from cognate.targets import get_target
from cognate.targets.spade.simulator import load_machine


@pytest.fixture(scope="module")
def matrix(shared: Path):
    return load_matrix(shared / "matrices" / "suitesparse" / "bcsstk13.mtx.gz")


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_inverted_barrier_true_runs_as_spade_barrier_false(matrix, op: str) -> None:
    spade, inverted = get_target("spade"), get_target("spade-inverted")
    s_space, i_space = spade.space(op), inverted.space(op)
    differs = 0
    for cp in (64, 256, "all"):
        for barrier in (False, True):
            knobs = {**s_space.baseline().knobs, "cp": cp, "barrier": barrier}
            flipped = {**knobs, "barrier": not barrier}
            inv = inverted.measure(matrix, op, 64, [i_space.validate(knobs)])[0]
            same = spade.measure(matrix, op, 64, [s_space.validate(flipped)])[0]
            plain = spade.measure(matrix, op, 64, [s_space.validate(knobs)])[0]
            assert inv.status == same.status == "ok"
            assert inv.runtime_s == same.runtime_s  # the simulator is deterministic
            assert inv.counters == same.counters
            differs += plain.runtime_s != same.runtime_s
    assert differs >= 2  # the barrier changes runtimes here, so the swap is visible


def test_inverted_keeps_spade_labels_mapping_and_machine(matrix) -> None:
    for op in ("spmm", "sddmm"):
        s_space = get_target("spade").space(op)
        i_space = get_target("spade-inverted").space(op)
        assert i_space.target == "spade-inverted" and i_space.name == f"spade-inverted-{op}"
        s_configs, i_configs = s_space.all_configs(), i_space.all_configs()
        assert [c.knobs for c in s_configs] == [c.knobs for c in i_configs]
        assert s_space.baseline().knobs == i_space.baseline().knobs
        for s, i in zip(s_configs, i_configs, strict=True):  # the mapper's view is spade's
            assert s_space.loop_nest(s, matrix.shape, 64) == i_space.loop_nest(i, matrix.shape, 64)
    spade, inverted = load_machine("spade"), load_machine("spade-inverted")
    assert not spade.barrier_inverted and inverted.barrier_inverted
    assert inverted.with_changes(barrier_inverted=False) == spade  # nothing else differs


def test_collect_stores_spade_inverted_records(tmp_path: Path, shared: Path) -> None:
    db = tmp_path / "records.sqlite"
    path = shared / "matrices" / "suitesparse" / "494_bus.mtx.gz"
    args = ["collect", "--target", "spade-inverted", "--op", "spmm", "--all-configs"]
    result = CliRunner().invoke(main, [*args, "--width", "16", "--db", str(db), str(path)])
    assert result.exit_code == 0, result.output
    with Store(db, readonly=True) as store:
        frame = store.frame(target="spade-inverted", op="spmm")
    assert len(frame) == 448 and set(frame["status"]) == {"ok"}
    assert set(frame["host"]) == {"sim"}  # a simulator: host-independent records
    assert frame["is_baseline"].sum() == 1
