"""``cognate collect`` in a log: count / ETA lines while it runs, and each matrix stored
under its absolute path, so training reads it back from any directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cognate.cli import run as cli_run
from cognate.store import Store


def test_collect_in_a_log_says_count_and_eta_and_stores_absolute_sources(
    shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("olm500", "west0479", "494_bus"):
        shutil.copy(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz", folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("cognate.collect.state.LINE_EVERY_S", 0.0)
    args = ["collect", "--target", "spade", "--op", "spmm", "--width", "16", "--configs", "3"]
    with pytest.raises(SystemExit) as exit_info:
        cli_run([*args, "--jobs", "1", "--db", "r.sqlite", "mine"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("collect: ")]
    counted = [line for line in lines if line.startswith("collect: 1/3 matrices (33%)")]
    assert counted and "ETA" in counted[0] and "configs measured" in counted[0], err
    assert not any("3/3" in line for line in lines)  # the summary line says the end
    with Store(tmp_path / "r.sqlite", readonly=True) as store:
        sources = set(store.frame(target="spade", op="spmm")["source"])
    assert sources == {str(folder / f"{n}.mtx.gz") for n in ("olm500", "west0479", "494_bus")}


def test_collect_help_lists_every_registered_target_and_op(capsys) -> None:
    from cognate.targets import OPS, target_names

    with pytest.raises(SystemExit):
        cli_run(["collect", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"One of {', '.join(target_names())}." in text and "spade-calibrated" in text
    assert f"One of {', '.join(OPS)}." in text
