"""cognate.bench.roofline: the traffic model exactly on hand-made matrices, the probes, and
scripts/roofline.py end to end (small and short: no timing is asserted)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cognate import timing
from cognate.bench import roofline
from cognate.bench.roofline import Caches, Pattern, Peaks, spmm_bound, spmm_traffic
from cognate.errors import CognateError

REPO = Path(__file__).resolve().parents[1]


def csr_of(rows: list[list[int]], cols: int | None = None) -> sp.csr_matrix:
    """A CSR matrix with ones at each row's listed columns."""
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.array([c for r in rows for c in r], dtype=np.int32)
    cols = cols if cols is not None else (int(indices.max()) + 1 if len(indices) else 1)
    data = np.ones(len(indices), dtype=np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(len(rows), cols))


# rows: {0,1} {1,2} {3,4} {0}: 7 nonzeros, 5 distinct columns
FOUR = [[0, 1], [1, 2], [3, 4], [0]]


def windows_reference(csr: sp.csr_matrix, lo: int, hi: int, cap: int) -> tuple[int, int]:
    """The greedy windows in plain Python (what the C scan must agree with)."""
    total = count = 0
    current: set[int] = set()
    for r in range(lo, hi):
        cols = set(csr.indices[csr.indptr[r] : csr.indptr[r + 1]].tolist())
        if current and len(current | cols) > cap:
            total, count, current = total + len(current), count + 1, set()
        current |= cols
    if current:
        total, count = total + len(current), count + 1
    return total, count


# --- windows and distinct columns -----------------------------------------------------------


@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        (100, (5, 1)),  # everything fits: the distinct columns once
        (5, (5, 1)),  # capacity exactly the distinct count: still one window
        (4, (6, 2)),  # {0,1,2} | {3,4,0}: column 0 again in the second window
        (3, (6, 2)),
        (2, (7, 4)),  # every row its own window
        (1, (7, 4)),  # rows over the capacity alone: one window each
        (0, (7, 4)),
    ],
)
def test_greedy_windows_split_where_the_distinct_columns_would_exceed_the_capacity(
    cap, expected
) -> None:
    assert Pattern(csr_of(FOUR)).windows(0, 4, cap) == expected


def test_a_row_over_the_capacity_is_a_window_of_its_own() -> None:
    pattern = Pattern(csr_of([[0], [1, 2, 3, 4, 5], [0]]))
    # {0} then the 5-column row alone (over 2), then {0} again
    assert pattern.windows(0, 3, 2) == (7, 3)


def test_repeated_columns_count_once_per_window_and_empty_rows_add_nothing() -> None:
    pattern = Pattern(csr_of([[0, 1], [], [1, 0], [], [0]], cols=3))
    assert pattern.windows(0, 5, 2) == (2, 1)
    assert pattern.distinct(0, 5) == 2
    assert Pattern(csr_of([[], []], cols=4)).windows(0, 2, 1) == (0, 0)


def test_windows_over_a_row_range_and_the_distinct_columns_of_a_part() -> None:
    pattern = Pattern(csr_of(FOUR))
    assert pattern.windows(1, 3, 3) == (4, 2)  # {1,2} then {3,4}
    assert pattern.distinct(2, 4) == 3
    assert pattern.distinct(0, 0) == 0
    with pytest.raises(CognateError, match="out of range"):
        pattern.windows(2, 5, 3)


def test_the_c_scan_agrees_with_the_python_reference_on_random_matrices() -> None:
    rng = np.random.default_rng(7)
    for seed in range(5):
        m = sp.random(60, 40, density=0.08 + 0.04 * seed, format="csr", random_state=seed)
        pattern = Pattern(m)
        for cap in (0, 1, 3, 7, 15, 40):
            lo = int(rng.integers(0, 30))
            assert pattern.windows(lo, 60, cap) == windows_reference(m, lo, 60, cap)


def test_parts_split_the_rows_by_nonzeros() -> None:
    pattern = Pattern(csr_of(FOUR))
    assert pattern.parts(1) == [(0, 4)]
    assert pattern.parts(2) == [(0, 2), (2, 4)]
    assert Pattern(csr_of([[0]])).parts(4) == [(0, 1)]


def test_a_pattern_with_a_column_out_of_range_is_refused() -> None:
    bad = csr_of(FOUR)
    bad.indices[0] = 9  # past the 5 columns
    with pytest.raises(CognateError, match="out of range"):
        Pattern(bad)


# --- the traffic model ----------------------------------------------------------------------

# FOUR at N=4: a B row is 16 bytes; A = 4*(4+1) + 8*7 = 76; C = 4*4*4 = 64; distinct B 5*16.
A4, C4, B4 = 76, 64, 80


def test_traffic_counts_a_once_c_once_and_b_per_window() -> None:
    # L1: 48 bytes = 3 B rows -> windows of 6 B rows; L2 holds the whole 220-byte footprint.
    caches = Caches(l1=48, l2=A4 + C4 + B4, llc=1 << 20)
    traffic = spmm_traffic(csr_of(FOUR), 4, caches)
    assert traffic.flops == 2 * 7 * 4
    assert traffic.loads == 7 * 16 + A4
    assert traffic.compulsory_bytes == A4 + B4 + C4
    l1, l2, llc = traffic.levels
    assert (l1.level, l1.served_by, l1.fits) == ("L1", "L2", False)
    assert (l1.read_bytes, l1.write_bytes, l1.windows) == (A4 + 6 * 16, C4, 2)
    assert (l2.served_by, l2.fits, l2.bytes) == ("LLC", True, 0)  # fits exactly: nothing below
    assert (llc.served_by, llc.fits, llc.bytes) == ("DRAM", True, 0)


def test_a_footprint_one_byte_over_the_capacity_moves_everything_from_below() -> None:
    caches = Caches(l1=48, l2=A4 + C4 + B4 - 1, llc=A4 + C4 + B4 - 1)
    _, l2, llc = spmm_traffic(csr_of(FOUR), 4, caches).levels
    # 219 bytes hold 13 B rows: one window of the 5 distinct ones
    assert (l2.read_bytes, l2.write_bytes, l2.windows, l2.fits) == (A4 + B4, C4, 1, False)
    assert (llc.read_bytes, llc.write_bytes) == (A4 + B4, C4)


def test_per_core_levels_scan_one_part_per_thread() -> None:
    caches = Caches(l1=16, l2=1 << 20, llc=None)  # L1 holds one B row; no L3
    traffic = spmm_traffic(csr_of(FOUR), 4, caches, threads=2)
    l1, l2 = traffic.levels
    # parts rows 0-1 ({0,1},{1,2}: windows 2 + 2) and rows 2-3 ({3,4},{0}: 2 + 1)
    a_parts = (4 * 3 + 8 * 4) + (4 * 3 + 8 * 3)
    assert (l1.read_bytes, l1.write_bytes, l1.windows) == (a_parts + 7 * 16, C4, 4)
    assert l2.served_by == "DRAM" and l2.fits  # no LLC: L2's misses go to DRAM


def test_a_part_that_fits_moves_nothing_while_the_other_does() -> None:
    # part 1 (rows 0-1): A 44 + C 32 + 3 B rows 48 = 124; part 2 (rows 2-3): A 36 + C 32 + 48
    caches = Caches(l1=124, l2=1 << 20, llc=1 << 20)
    l1 = spmm_traffic(csr_of(FOUR), 4, caches, threads=2).levels[0]
    assert (l1.read_bytes, l1.write_bytes, l1.fits) == (0, 0, True)
    caches = Caches(l1=123, l2=1 << 20, llc=1 << 20)
    l1 = spmm_traffic(csr_of(FOUR), 4, caches, threads=2).levels[0]
    assert (l1.read_bytes, l1.write_bytes, l1.fits) == (44 + 48, 32, False)  # part 1 only


def peaks(gflops=100.0, l1=400.0, l2=200.0, llc=100.0, dram=20.0, write=10.0) -> Peaks:
    reads = {"L1": l1, "L2": l2, "LLC": llc, "DRAM": dram}
    return Peaks(2, Caches(48, 160, 200), {256: gflops / 2, 512: gflops}, reads, write)


def test_the_bound_is_the_largest_term_at_the_measured_peaks() -> None:
    traffic = spmm_traffic(csr_of(FOUR), 4, Caches(48, 160, 200))
    bound = spmm_bound(traffic, peaks())
    l1, l2, llc = traffic.levels
    assert not llc.fits
    expected = {
        "fma": 56 / 100e9,
        "L1": traffic.loads / 400e9,
        "L2": l1.bytes / 200e9,
        "LLC": l2.bytes / 100e9,
        "DRAM": llc.read_bytes / 20e9 + llc.write_bytes / 10e9,
    }
    assert bound.terms == pytest.approx(expected)
    assert bound.binding == "DRAM"
    assert bound.limit_s == pytest.approx(expected["DRAM"])
    assert bound.cold_s == pytest.approx((A4 + B4 + C4) / 20e9)
    assert spmm_bound(traffic, peaks(gflops=1e-3)).binding == "fma"  # the widest vector's rate
    assert spmm_bound(traffic, peaks(l1=1e-3)).binding == "L1"
    assert spmm_bound(traffic, peaks(l2=1e-3)).binding == "L2"
    assert spmm_bound(traffic, peaks(llc=1e-3)).binding == "LLC"


def test_a_matrix_that_fits_everywhere_is_bound_by_the_core() -> None:
    traffic = spmm_traffic(csr_of(FOUR), 4, Caches(1 << 15, 1 << 20, 1 << 25), threads=2)
    bound = spmm_bound(traffic, peaks())
    assert all(level.fits and level.bytes == 0 for level in traffic.levels)
    assert bound.terms["L2"] == bound.terms["LLC"] == bound.terms["DRAM"] == 0
    # 56 flops at 100 GFLOP/s (0.56 ns) over 188 loaded bytes at 400 GB/s (0.47 ns)
    assert bound.binding == "fma"
    assert spmm_bound(traffic, peaks(l1=300.0)).binding == "L1"  # 0.63 ns


def test_traffic_scales_to_a_million_nonzeros_in_about_a_second() -> None:
    import time

    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, 100_000, 1_000_000), rng.integers(0, 100_000, 1_000_000)
    m = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(100_000, 100_000))
    start = time.perf_counter()
    for width in (32, 128, 512):
        spmm_traffic(m, width, Caches(32 << 10, 1 << 20, 32 << 20), threads=2)
    assert time.perf_counter() - start < 5.0  # three widths; about 0.1 s on a quiet machine


# --- caches and probes ----------------------------------------------------------------------


def test_cache_sizes_from_sysfs_and_the_fallback(tmp_path) -> None:
    for i, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
         (3, "Unified", "105M")]
    ):  # fmt: skip
        folder = tmp_path / f"index{i}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    caches = roofline.host_caches(tmp_path)
    assert (caches.l1, caches.l2, caches.llc) == (48 << 10, 2 << 20, 105 << 20)
    fallback = roofline.host_caches(tmp_path / "missing")
    assert fallback.source.startswith("assumed") and fallback.l1 == 32 << 10
    assert roofline.parse_size("512") == 512
    with pytest.raises(CognateError):
        roofline.parse_size("lots")


def test_probe_sizes_sit_in_each_level() -> None:
    sizes = roofline.probe_sizes(Caches(32 << 10, 1 << 20, 32 << 20), threads=2)
    assert sizes == {"L1": 16 << 10, "L2": 512 << 10, "LLC": 8 << 20, "DRAM": 128 << 20}
    assert "LLC" not in roofline.probe_sizes(Caches(32 << 10, 1 << 20, None), threads=2)


def test_probe_sources_take_only_validated_integers() -> None:
    with pytest.raises(CognateError):
        roofline.fma_source(300)
    with pytest.raises(CognateError):
        roofline.fma_source(256, accumulators="4); system(1")  # type: ignore[arg-type]
    with pytest.raises(CognateError):
        roofline.read_source(1024)


@pytest.fixture
def private_lock(tmp_path, monkeypatch) -> None:
    """A timing lock of this test's own: other processes' timings do not hold it up."""
    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))


def test_the_probes_compile_and_return_positive_finite_numbers(private_lock) -> None:
    caches = Caches(32 << 10, 1 << 20, 32 << 20)
    sizes = {"L1": 4 << 10, "L2": 64 << 10, "LLC": 256 << 10, "DRAM": 1 << 20}
    found = roofline.measure_peaks(2, caches, sizes=sizes, target_s=1e-3, repeats=1)
    from cognate.targets.cpu.isa import host_isa

    assert set(found.gflops) == set(host_isa().widths)
    numbers = [*found.gflops.values(), *found.read_gbs.values(), found.write_gbs]
    numbers += list(found.call_us.values())
    assert all(math.isfinite(x) and x > 0 for x in numbers)
    assert set(found.read_gbs) == {"L1", "L2", "LLC", "DRAM"}
    assert any(line.startswith("peak FMA") for line in found.lines())
    json.dumps(found.as_dict())


# --- the script -------------------------------------------------------------------------------


def run_script(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, timing.LOCK_ENV: str(tmp_path / "timing.lock")}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "roofline.py"), *args],
        capture_output=True, text=True, env=env, timeout=120, cwd=REPO,
    )  # fmt: skip


def test_script_prints_the_host_and_its_peaks(tmp_path) -> None:
    out = tmp_path / "peaks.json"
    args = ["--peaks-only", "--probe-seconds", "0.002", "--probe-repeats", "1", "--json", str(out)]
    done = run_script(args, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("host: ")
    assert "MKL code path" in done.stdout and "peak read GB/s" in done.stdout
    saved = json.loads(out.read_text())
    assert saved["rows"] == [] and saved["peaks"]["read_gbs"]["DRAM"] > 0


def test_script_quick_row_with_the_baseline_and_mkl(tmp_path, shared) -> None:
    out = tmp_path / "rows.json"
    args = [
        "--quick", "--widths", "8", "--rounds", "1", "--no-tune", "--probe-seconds", "0.002",
        "--probe-repeats", "1", "--json", str(out),
    ]  # fmt: skip
    done = run_script(args, tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["width"] == 8 and row["binding"] in roofline.TERMS
    assert row["limit_s"] > 0 and "baseline" in row["seconds"]
    assert "N=8: achieved / limit geomean" in done.stdout


def test_script_row_of_a_structured_layer(tmp_path) -> None:
    out = tmp_path / "layer.json"
    args = [
        "--layers", "kdiag:384x96:0.9", "--widths", "16", "--rounds", "1", "--no-tune",
        "--probe-seconds", "0.002", "--probe-repeats", "1", "--json", str(out),
    ]  # fmt: skip
    done = run_script(args, tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["rows"]  # the layer alone: no shared matrix
    assert row["matrix"].startswith("kdiag") and row["nnz"] > 0 and row["limit_s"] > 0
    bad = run_script(["--layers", "kdiag:3072by768", "--peaks-only"], tmp_path)
    assert bad.returncode == 2 and "kdiag:3072x768:0.9" in bad.stderr
