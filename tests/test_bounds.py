"""Resource bounds: tiny adversarial files are refused before anything large is allocated.

Each file goes through the real CLI in a child of a small wrapper process that reports the
child's peak RSS (getrusage), so the bound measured is the cognate process's own. Every
one must give exit 1, one stderr line naming the file, well under 5 s and 500 MB.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

MAX_RSS_MB = 500
# A generous bound on the CPU seconds a refusal may take on top of the CLI's own start-up,
# which the module measures once. CPU time, not wall time: the bound pins the work done
# on the file, which other jobs on the machine do not change.
MAX_SECONDS = 5.0

_WRAPPER = (
    "import resource, subprocess, sys; "
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
    "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr); "
    "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print(u.ru_maxrss // 1024, u.ru_utime + u.ru_stime, file=sys.stderr); "
    "sys.exit(p.returncode)"
)


def _run_bounded(
    *args: str, env: dict[str, str] | None = None
) -> tuple[int, list[str], float, float]:
    """(exit code, stderr lines without the usage line, peak RSS in MB, CPU seconds) of
    `cognate ARGS`."""
    cmd = [sys.executable, "-c", _WRAPPER, sys.executable, "-m", "cognate", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    *lines, usage = proc.stderr.splitlines()
    rss, cpu = usage.split()
    return proc.returncode, lines, float(rss), float(cpu)


def _gzip_with_nuls(path: Path, header: bytes, nul_bytes: int) -> None:
    zeros = bytes(1 << 24)
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(header)
        for _ in range(nul_bytes // len(zeros)):
            out.write(zeros)


@pytest.fixture(scope="module")
def startup_s() -> float:
    """CPU seconds of the CLI's start-up (`cognate --version`)."""
    code, _, _, cpu = _run_bounded("--version")
    assert code == 0
    return cpu


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("adversarial")
    files = {}
    huge = folder / "huge_shape.mtx"  # 71 bytes: 2e9 x 2e9 with one entry
    huge.write_bytes(
        b"%%MatrixMarket matrix coordinate real general\n2000000000 2000000000 1\n1 1 1\n"
    )
    files["huge_shape"] = huge
    bomb = folder / "nul_bomb.mtx.gz"  # a valid header for 1e7 entries, then 256 MB of NULs
    _gzip_with_nuls(
        bomb, b"%%MatrixMarket matrix coordinate real general\n10 10 10000000\n", 256 << 20
    )
    files["nul_bomb"] = bomb
    npz = folder / "npz_bomb.npz"  # a 3e7-entry COO whose arrays unpack to 360 MB
    with zipfile.ZipFile(npz, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, array in (("format", np.array(b"coo")), ("shape", np.array([10, 10]))):
            with archive.open(f"{name}.npy", "w") as f:
                np.lib.format.write_array(f, array)
        for name, dtype in (("row", np.int32), ("col", np.int32), ("data", np.float32)):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.zeros(30_000_000, dtype=dtype))
    files["npz_bomb"] = npz
    return files


EXPECTED = {
    "huge_shape": r"over the memory budget",
    "nul_bomb": r"binary data \(NUL bytes\)",
    "npz_bomb": r"unpack to .* over the memory budget",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_adversarial_file_is_one_line_fast_and_small(
    bad_files: dict[str, Path], name: str, startup_s: float
) -> None:
    import os
    import re

    path = bad_files[name]
    # The npz under a small budget keeps the file small: the CLI's start-up alone is ~400 MB
    # of RSS, so holding its 360 MB of arrays would cross the 500 MB bound.
    env = {**os.environ, "COGNATE_MAX_MEMORY": "256M"} if name == "npz_bomb" else None
    code, lines, rss_mb, cpu_s = _run_bounded("data", "info", str(path), env=env)
    assert code == 1 and len(lines) == 1, lines
    assert str(path) in lines[0] and re.search(EXPECTED[name], lines[0]), lines[0]
    assert "internal error" not in lines[0]
    assert rss_mb < MAX_RSS_MB, f"peak RSS {rss_mb:.0f} MB"
    assert cpu_s < startup_s + MAX_SECONDS, f"{cpu_s:.1f} s CPU (start-up {startup_s:.1f} s)"


def test_huge_shape_is_refused_under_the_default_budget(bad_files: dict[str, Path]) -> None:
    code, lines, rss_mb, _ = _run_bounded("data", "info", str(bad_files["huge_shape"]))
    assert code == 1 and len(lines) == 1 and "memory budget" in lines[0]
    assert rss_mb < MAX_RSS_MB


def test_bad_memory_budget_setting_is_one_line(bad_files: dict[str, Path]) -> None:
    import os

    env = {**os.environ, "COGNATE_MAX_MEMORY": "lots"}
    code, lines, _, _ = _run_bounded("data", "info", str(bad_files["huge_shape"]), env=env)
    assert code == 1 and len(lines) == 1 and "COGNATE_MAX_MEMORY='lots'" in lines[0]


def test_memory_budget_parses_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    from cognate.budget import memory_budget, physical_memory

    monkeypatch.delenv("COGNATE_MAX_MEMORY", raising=False)
    assert memory_budget() == physical_memory() // 2
    for text, value in (("8G", 8 << 30), ("512m", 512 << 20), ("1000", 1000), ("1.5K", 1536)):
        monkeypatch.setenv("COGNATE_MAX_MEMORY", text)
        assert memory_budget() == value


# --- model metadata ------------------------------------------------------------------------


def _rewrite_model(source: Path, out: Path, change: object) -> Path:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(source), framework="pt") as f:
        meta = json.loads(f.metadata()["cognate"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    change(meta)  # type: ignore[operator]
    save_file(tensors, str(out), metadata={"cognate": json.dumps(meta)})
    return out


def _huge_layer(meta: dict) -> None:
    meta["preset"]["predictor"]["hidden"] = [200_000, 200_000]  # 160 GB of weights


def _no_space(meta: dict) -> None:
    del meta["space"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [(_huge_layer, r"metadata describes a model of \d+ bytes"), (_no_space, r"no 'space'")],
    ids=["huge_layer", "no_space"],
)
def test_bad_model_metadata_is_one_line_and_small(
    shared: Path, tmp_path: Path, change: object, expected: str
) -> None:
    import re

    from cognate.paths import data_dir

    model = _rewrite_model(
        data_dir() / "models" / "cpu-spmm.safetensors", tmp_path / "bad.safetensors", change
    )
    matrix = shared / "matrices" / "suitesparse" / "bcsstk13.mtx.gz"
    args = ["tune", str(matrix), "--target", "cpu", "--op", "spmm", "--model", str(model)]
    code, lines, rss_mb, _ = _run_bounded(*args)
    assert code == 1 and len(lines) == 1, lines
    assert str(model) in lines[0] and re.search(expected, lines[0]), lines[0]
    assert rss_mb < 1000  # torch's import alone is ~400 MB; the huge layer would be 160 GB


# --- the memory model: each path refuses a huge declared shape, or stays in its budget -------

BUDGET = "2G"
_MM = "%%MatrixMarket matrix coordinate real general\n"


def _shape_file(folder: Path, rows: int, cols: int) -> Path:
    path = folder / f"shape_{rows}x{cols}.mtx"  # ~70 bytes declaring rows x cols, one entry
    path.write_text(f"{_MM}{rows} {cols} 1\n1 1 1\n")
    return path


def _budget_env(tmp_path: Path, budget: str = BUDGET) -> dict[str, str]:
    import os

    env = {**os.environ, "COGNATE_MAX_MEMORY": budget, "COGNATE_HOME": str(tmp_path / "home")}
    env.pop("COGNATE_DEBUG", None)
    return env


def _bytes(size: str) -> int:
    return int(size[:-1]) << {"M": 20, "G": 30}[size[-1]]


# (command, rows, cols, what the one line says): each priced path refuses before allocating
REFUSED = {
    "info_rows": (["data", "info"], 130_000_000, 1, r"reading a 130000000 x 1 matrix"),
    "tune_rows": (
        ["tune", "--target", "spade", "--op", "spmm", "--no-record"],
        130_000_000,
        1,
        r"reading a 130000000 x 1 matrix",
    ),
    "featurize_cols": (
        ["tune", "--target", "spade", "--op", "spmm", "--no-record"],
        1,
        130_000_000,
        r"featurizing a 1 x 130000000 matrix",
    ),
    "tune_verify_cols": (
        ["tune", "--target", "cpu", "--op", "spmm", "--no-record", "--verify"],
        1,
        16_000_000,  # B alone is gigabytes: one config is measured at a time
        r"tune --target cpu on a 1 x 16000000 matrix",
    ),
    "collect_cpu_cols": (
        ["collect", "--target", "cpu", "--op", "spmm", "--configs", "2"],
        1,
        16_000_000,
        r"collect --target cpu on a 1 x 16000000 matrix",
    ),
    "collect_spade_rows": (
        ["collect", "--target", "spade", "--op", "spmm", "--configs", "2"],
        130_000_000,
        1,
        r"reading a 130000000 x 1 matrix",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_huge_declared_shape_is_refused_in_one_line(tmp_path: Path, case: str) -> None:
    import re

    command, rows, cols, expected = REFUSED[case]
    path = _shape_file(tmp_path, rows, cols)
    args = [*command, str(path)]
    if command[0] == "collect":
        args[-1:-1] = ["--db", str(tmp_path / "store.sqlite")]
    code, lines, rss_mb, _ = _run_bounded(*args, env=_budget_env(tmp_path))
    assert code == 1 and len(lines) == 1, lines
    assert str(path) in lines[0] and re.search(expected, lines[0]), lines[0]
    assert "over the memory budget of 2 GiB" in lines[0] and "internal error" not in lines[0]
    assert rss_mb < 1000  # refused before the declared shape was allocated


# (command, rows, cols, budget): accepted shapes near their limit stay under budget + start-up
ACCEPTED = {
    "info_rows": (["data", "info"], 12_000_000, 1, "512M"),  # 12e6 x 40 B = 458 MiB priced
    "info_cols": (["data", "info"], 1, 130_000_000, BUDGET),
    "collect_spade_cols": (
        ["collect", "--target", "spade", "--op", "spmm", "--configs", "2"],
        1,
        60_000_000,
        BUDGET,
    ),
    "featurize_cols": (
        ["tune", "--target", "spade", "--op", "spmm", "--no-record"],
        1,
        20_000_000,
        BUDGET,
    ),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_accepted_shape_stays_within_its_budget(tmp_path: Path, case: str) -> None:
    command, rows, cols, budget = ACCEPTED[case]
    env = _budget_env(tmp_path, budget)
    peaks = []
    for shape in ((2, 2), (rows, cols)):  # the same command on a 2 x 2 matrix: its start-up
        args = [*command, str(_shape_file(tmp_path, *shape))]
        if command[0] == "collect":
            args[-1:-1] = ["--db", str(tmp_path / f"store{shape[0]}x{shape[1]}.sqlite")]
        code, lines, rss_mb, _ = _run_bounded(*args, env=env)
        assert code == 0, lines
        peaks.append(rss_mb)
    startup_mb, peak_mb = peaks
    assert peak_mb <= startup_mb + _bytes(budget) / 2**20, (startup_mb, peak_mb)


@pytest.mark.parametrize("setting", ["inf", "nan", "-1G", "1e999", "G"])
def test_non_number_budget_blames_the_variable(tmp_path: Path, setting: str) -> None:
    path = _shape_file(tmp_path, 3, 3)
    env = _budget_env(tmp_path, setting)
    code, lines, _, _ = _run_bounded("data", "info", str(path), env=env)
    assert code == 1 and len(lines) == 1, lines
    assert (
        lines[0]
        == f"cognate: error: COGNATE_MAX_MEMORY={setting!r}: expected a positive size like 8G"
    )


def test_measured_costs_cover_featurizer_presets() -> None:
    """The featurizer's price grows with its widest kernel and channels (measured: a 9 x 9
    first kernel on a dense block costs ~5.5 KB per nonzero, 256 channels ~2.2 KB)."""
    from cognate.model.featurizer import Featurizer
    from cognate.model.preset import FeaturizerSpec

    small = Featurizer(FeaturizerSpec(first_kernel=3, channels=[8])).memory_cost()
    wide = Featurizer(FeaturizerSpec(first_kernel=9, channels=[256])).memory_cost()
    assert small.per_entry < 1000 < 5500 < wide.per_entry
