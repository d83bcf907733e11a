"""WACO's line format: every peer line round-trips; import-waco fills a real store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cognate.cli import run
from cognate.errors import CognateError, InputError
from cognate.store import Store
from cognate.targets.cpu.space import make_space
from cognate.targets.cpu.waco import (
    format_line,
    parse_line,
    peer_config,
    peer_files,
    read_peer_file,
)


@pytest.fixture(scope="module")
def peer_dir(shared: Path) -> Path:
    return shared / "peers" / "waco"


def test_every_peer_line_parses_and_round_trips(peer_dir: Path) -> None:
    files = peer_files(peer_dir)
    assert {f.op for f in files} == {"spmm", "sddmm"} and len(files) == 20
    count = 0
    for peer in files:
        raw = [line for line in peer.path.read_text().splitlines() if line.strip()]
        parsed = read_peer_file(peer.path, peer.op)
        assert len(parsed) == len(raw)
        for line, (config, runtime_s, parnum) in zip(raw, parsed, strict=True):
            assert format_line(config, runtime_s, parnum) == " ".join(line.split())
            assert make_space(peer.op).validate(config.knobs) == config
            assert runtime_s > 0 and parnum == 48
            count += 1
        # WACO drew each file's schedules as a set: distinct configs.
        assert len({p.config.hash for p in parsed}) == len(parsed)
    assert count == 1659


def test_spmm_line_fields() -> None:
    line = "128 4096 4 k1 k0 i1 i0 j1 j0 0 1 0 1 i1 48 64 = 3403.94"
    config, runtime_s, parnum = parse_line(line, "spmm")
    assert dict(config.knobs) == {
        "isplit": 128,
        "ksplit": 4096,  # s1 = ksplit for SpMM
        "jsplit": 4,
        "order": ["k1", "k0", "i1", "i0", "j1", "j0"],
        "formats": ["C", "U", "C", "U"],  # 0 = compressed
        "chunk": 64,
    }
    assert runtime_s == pytest.approx(3.40394)
    assert parnum == 48 and config.target == "cpu"


def test_sddmm_line_fields_and_parallel_j1() -> None:
    line = "4096 1 64 j1 j0 i1 k1 i0 k0 1 0 1 1 j1 48 8 = 12.84"
    config, runtime_s, _ = parse_line(line, "sddmm")
    assert (config["isplit"], config["jsplit"], config["ksplit"]) == (4096, 1, 64)
    assert config["formats"] == ["U", "C", "U", "U"]
    assert runtime_s == pytest.approx(0.01284)
    assert format_line(config, runtime_s) == line


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_sampled_configs_round_trip_through_the_line_format(op: str) -> None:
    for config in make_space(op).sample_csr(200, 5, (20000, 9000)):
        line = format_line(config, 0.0123)
        assert parse_line(line, op).config == config


GOOD = "1 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 48 8 = 9.191"
BAD_LINES = [
    ("1 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 48 8 9.191", "expected 18 fields"),
    ("1.5 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 48 8 = 9.191", "isplit must be a non-negative"),
    ("1 +32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 48 8 = 9.191", "ksplit must be a non-negative"),
    ("1 32 128 i1 j1 i0 k1 k0 j0 1 1 2 0 i1 48 8 = 9.191", "formats must be 0 or 1, got '2'"),
    ("1 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 j1 48 8 = 9.191", "paridx 'j1' is not the outermost"),
    ("1 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 0 8 = 9.191", "parnum must be at least 1"),
    ("1 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 48 8 : 9.191", "expected '=' before the runtime"),
    ("1 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 48 8 = nan", "runtime must be a non-negative"),
    ("1 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 48 8 = -1", "runtime must be a non-negative"),
    ("1 32 128 i1 j1 i0 k1 j0 k0 1 1 1 0 i1 48 8 = 9.191", "j0 must be the innermost loop"),
    ("3 32 128 i1 j1 i0 k1 k0 j0 1 1 1 0 i1 48 8 = 9.191", "isplit=3 is not a power of two"),
    ("1 32 128 i1 j1 i0 k1 k0 x0 1 1 1 0 i1 48 8 = 9.191", "order must be 6 of"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_bad_lines_name_place_and_problem(line: str, message: str) -> None:
    assert parse_line(GOOD, "spmm")
    with pytest.raises(InputError) as info:
        parse_line(line, "spmm", "peer.txt:7")
    assert str(info.value).startswith("peer.txt:7: ")
    assert message in str(info.value)


def test_peer_files_errors(tmp_path: Path) -> None:
    with pytest.raises(CognateError, match="no such folder"):
        peer_files(tmp_path / "missing")
    with pytest.raises(CognateError, match="no WACO peer files"):
        peer_files(tmp_path)


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_import_waco_into_a_store(
    peer_dir: Path, shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrices = shared / "matrices" / "waco"
    db = tmp_path / "records.sqlite"
    argv = ["data", "import-waco", str(peer_dir), "--matrices", str(matrices), "--db", str(db)]
    present = [p for p in peer_files(peer_dir) if (matrices / f"{p.matrix}.csr").is_file()]
    missing = [p for p in peer_files(peer_dir) if p not in present]
    assert present and missing  # the shared data has both kinds
    expected = {(p.op, p.matrix): read_peer_file(p.path, p.op) for p in present}
    total = sum(len(lines) for lines in expected.values())

    rc, out, _ = _cli(argv, capsys)
    assert rc == 0
    assert f"imported {total} records from {len(present)} peer files as target waco-xeon" in out
    skipped = [line for line in out.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and skipped[0].startswith(f"skipped {len(missing)} peer files")

    with Store(db) as store:
        frame = store.frame()
    assert len(frame) == total
    assert set(frame["target"]) == {"waco-xeon"} and set(frame["host"]) == {"waco-xeon"}
    assert set(frame["width"]) == {256} and set(frame["status"]) == {"ok"}
    for (op, matrix), lines in expected.items():
        rows = frame[(frame["op"] == op) & (frame["matrix"] == matrix)]
        stored = dict(zip(rows["config_hash"], rows["runtime_s"], strict=True))
        assert stored == {peer_config(c).hash: pytest.approx(r) for c, r, _ in lines}
        assert set(rows["space_version"]) == {make_space(op).version}

    rc, _, _ = _cli(argv, capsys)  # importing again replaces, never duplicates
    assert rc == 0
    with Store(db) as store:
        assert len(store.frame()) == total


def test_import_waco_bad_line_leaves_store_untouched(
    peer_dir: Path, shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    peers = tmp_path / "peers"
    (peers / "spmm").mkdir(parents=True)
    source = peer_dir / "spmm" / "Trec6_16x16_9.txt"
    lines = source.read_text().splitlines()
    lines[4] = lines[4].replace(" = ", " = oops ")
    (peers / "spmm" / "Trec6_16x16_9.txt").write_text("\n".join(lines) + "\n")
    db = tmp_path / "records.sqlite"
    matrices = str(shared / "matrices" / "waco")
    argv = ["data", "import-waco", str(peers), "--matrices", matrices, "--db", str(db)]
    rc, out, err = _cli(argv, capsys)
    assert rc == 1
    assert err.count("\n") == 1 and "Trec6_16x16_9.txt:5: expected 18 fields" in err
    assert not db.exists()

    rc, _, err = _cli([*argv[:2], str(tmp_path / "nowhere"), *argv[3:]], capsys)
    assert rc == 1 and "nowhere: no such folder" in err


def test_import_waco_only_missing_matrices(
    peer_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    peers = tmp_path / "peers"
    (peers / "sddmm").mkdir(parents=True)
    shutil.copy(peer_dir / "sddmm" / "EX1_8x8_4.txt", peers / "sddmm")
    empty = tmp_path / "matrices"
    empty.mkdir()
    db = tmp_path / "records.sqlite"
    argv = ["data", "import-waco", str(peers), "--matrices", str(empty), "--db", str(db)]
    rc, out, _ = _cli(argv, capsys)
    assert rc == 0
    assert "imported 0 records from 0 peer files" in out
    assert f"skipped 1 peer files whose matrix is not in {empty}: sddmm/EX1_8x8_4" in out
