"""One model resolution: the CLI, ``cognate.tune`` and ``TunedSparse`` rank with the model
``cognate.search.learn.choose_model`` picks (a local refined copy over the shipped one), and
each file is loaded once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import cognate
from cognate.cli import main
from cognate.formats.write import save_matrix
from cognate.model.cost_model import CostModel
from cognate.model.shipped import shipped_model_path
from cognate.search import learn
from cognate.synth import generate
from cognate.torch.choices import TuneOptions


@pytest.fixture()
def local_copy(tmp_path: Path, monkeypatch) -> Path:
    """A local copy of the shipped cpu SpMM model where ``--learn`` keeps its refinement."""
    monkeypatch.setenv("COGNATE_HOME", str(tmp_path / "home"))
    local = learn.local_model_path("cpu", "spmm")
    local.parent.mkdir(parents=True)
    shutil.copyfile(shipped_model_path("cpu", "spmm"), local)
    monkeypatch.setattr(learn, "_LOADED", {})
    return local


@pytest.fixture()
def loads(monkeypatch) -> list[Path]:
    seen: list[Path] = []
    load = CostModel.load

    def counting(path, space):
        seen.append(Path(path))
        return load(path, space)

    monkeypatch.setattr(CostModel, "load", staticmethod(counting))
    return seen


def test_cli_api_and_tunedsparse_resolve_the_same_model(local_copy, loads, tmp_path) -> None:
    matrix = generate("rmat", rows=1024, cols=1024, nnz=8000, seed=1)
    path = tmp_path / "m.npz"
    save_matrix(matrix, path)
    out = CliRunner().invoke(main, ["tune", str(path), "--top-k", "2", "--json", "--no-record"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["model"] == str(local_copy)
    assert cognate.tune(matrix, top_k=2).model_path == local_copy
    assert str(local_copy.resolve()) in TuneOptions().model_key("spmm")
    assert loads == [local_copy]  # one load for all three (the CLI's check included)


def test_a_model_given_wins_and_a_broken_local_copy_falls_back(local_copy, loads) -> None:
    shipped = shipped_model_path("cpu", "spmm")
    assert learn.choose_model(shipped, "cpu", "spmm").model.path == shipped
    local_copy.write_bytes(b"not a model")
    chosen = learn.choose_model(None, "cpu", "spmm")
    assert chosen.model.path == shipped and chosen.note is None
