"""The torch-choices cache (``$COGNATE_HOME/torch-choices/<sha>.json``) never breaks, hangs
or grows the caller: a tampered, linked, special or huge file is ignored with one warning
naming it and the choice is tuned again; concurrent builders keep every choice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import cognate.torch as ct  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402
from cognate.model.random_model import RandomModel  # noqa: E402
from cognate.targets import get_target  # noqa: E402
from cognate.torch import choices  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
KEY_OF_WIDTH_8 = "cpu:spmm:8:"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COGNATE_HOME", str(tmp_path / "home"))
    choices._MEMO.clear()
    yield tmp_path / "home"
    choices._MEMO.clear()


@pytest.fixture
def matrix(shared: Path):
    return load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")


@pytest.fixture
def random_model(tmp_path: Path) -> Path:
    """A random ranking: tuning costs milliseconds (no featurizer), the cache is the same."""
    return RandomModel(get_target("cpu").space("spmm"), 0).save(tmp_path / "random.json")


def _tampered(entry: dict, case: str) -> dict | str:
    knobs = dict(entry["knobs"])
    first = next(k for k, v in knobs.items() if isinstance(v, int) and k != "family")
    if case == "negative":
        knobs[first] = -4
    elif case == "huge":
        knobs[first] = 1e30
    elif case == "unknown_family":
        knobs = {"family": "no-such-family", "chunk": 32}
    return {**entry, "knobs": knobs}


@pytest.mark.parametrize("case", ["negative", "huge", "unknown_family", "deep", "not_json"])
def test_a_tampered_choices_file_is_ignored_with_one_warning(
    home: Path, matrix, random_model: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = ct.TunedSparse(matrix, widths=(8,), model=random_model)
    path = home / "torch-choices" / f"{matrix.sha256}.json"
    data = json.loads(path.read_text())
    if case == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif case == "not_json":
        path.write_bytes(b"\x00\xff garbage")
    else:
        path.write_text(json.dumps({k: _tampered(v, case) for k, v in data.items()}))
    choices._MEMO.clear()
    capsys.readouterr()
    again = ct.TunedSparse(matrix, widths=(8,), model=random_model)  # no exception
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("cognate: warning:")]
    assert len(warnings) >= 1 and all(str(path) in w for w in warnings), err
    assert "Traceback" not in err and "internal error" not in err
    chosen = again.choices[("spmm", "A", 8)]
    assert chosen.source == "ranked" and chosen.config == first.choices[("spmm", "A", 8)].config
    # the choice was written again, valid: the next build reads it
    choices._MEMO.clear()
    assert (
        ct.TunedSparse(matrix, widths=(8,), model=random_model).choices[("spmm", "A", 8)].source
        == "cache"
    )


_BUILD = """
import sys
import cognate.torch as ct
from cognate.formats.read import load_matrix
ts = ct.TunedSparse(load_matrix(sys.argv[1]), widths=(8,), model=sys.argv[2])
print(ts.choices[("spmm", "A", 8)].source)
"""


@pytest.mark.parametrize("case", ["fifo", "link_to_dev_zero", "one_gigabyte", "folder"])
def test_a_special_or_huge_choices_file_neither_hangs_nor_grows_the_caller(
    home: Path, shared: Path, random_model: Path, case: str, tmp_path: Path
) -> None:
    """In a child (a FIFO hung it forever, /dev/zero read until MemoryError, 1 GB cost
    2.5 GB): it finishes within the timeout, warns once naming the file, leaves no temp."""
    from cognate.matrix import Matrix  # noqa: F401 - the sha only

    source = shared / "matrices" / "suitesparse" / "west0479.mtx.gz"
    path = home / "torch-choices" / f"{load_matrix(source).sha256}.json"
    path.parent.mkdir(parents=True)
    if case == "fifo":
        os.mkfifo(path)
    elif case == "link_to_dev_zero":
        path.symlink_to("/dev/zero")
    elif case == "one_gigabyte":
        with open(path, "wb") as f:
            f.truncate(1 << 30)  # sparse: no disk used
    else:
        path.mkdir()
    env = {**os.environ, "COGNATE_HOME": str(home), "OMP_NUM_THREADS": "1"}
    for run in range(2):  # a folder there once leaked a temp file per build
        done = subprocess.run(
            [sys.executable, "-c", _BUILD, str(source), str(random_model)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() in ("ranked", "cache")
        lines = done.stderr.strip().splitlines()
        if run == 1 and case != "folder":  # the bad file was replaced by a valid one
            assert lines == [] and done.stdout.strip() == "cache", done.stderr
            continue
        assert len(lines) == 1 and str(path) in lines[0] and "warning" in lines[0], done.stderr
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


_WRITER = """
import sys
from cognate.formats.read import load_matrix
from cognate.torch.choices import TuneOptions, choose
m = load_matrix(sys.argv[1])
options = TuneOptions(model=sys.argv[2], candidates=4)
first, count = int(sys.argv[3]), int(sys.argv[4])
for width in range(first, first + count):
    choose(m, "spmm", width, options)
"""


@pytest.mark.parametrize("count", [pytest.param(150, marks=pytest.mark.slow), 25])
def test_four_processes_keep_all_their_choices(
    home: Path, shared: Path, random_model: Path, count: int
) -> None:
    """4 processes x 150 choices of one matrix at once: all 600 are in the file (without the
    lock around read-modify-write 217-347 survived). 4 x 25 in the default suite."""
    source = shared / "matrices" / "suitesparse" / "west0479.mtx.gz"
    env = {**os.environ, "COGNATE_HOME": str(home), "OMP_NUM_THREADS": "1"}
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                str(source),
                str(random_model),
                str(1 + count * i),
                str(count),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(4)
    ]
    for writer in writers:
        assert writer.wait(timeout=600) == 0, writer.stderr.read()
    path = home / "torch-choices" / f"{load_matrix(source).sha256}.json"
    widths = {int(key.split(":")[2]) for key in json.loads(path.read_text())}
    assert widths == set(range(1, 4 * count + 1))
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
