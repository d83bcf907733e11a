"""Pin the spade simulator's model (its directions and invariants), and that it reproduces the
published records (data/records) bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from cognate.formats.read import load_matrix
from cognate.matrix import canonicalize
from cognate.paths import data_dir
from cognate.targets.spade.runner import SpadeRunner
from cognate.targets.spade.simulator import (
    Schedule,
    cache_trace,
    load_machine,
    simulate,
    tile,
)
from cognate.targets.spade.space import SpadeSpace

BASE = Schedule(rp=256, cp=None, barrier=False, bypass=False, split=1, dynamic=False)


@pytest.fixture(scope="module")
def machine():
    return load_machine()


@pytest.fixture(scope="module")
def bcsstk13(shared):
    return load_matrix(shared / "matrices" / "suitesparse" / "bcsstk13.mtx.gz")


def pattern(rows, cols, shape) -> sp.csr_matrix:
    data = np.ones(len(rows), dtype=np.float32)
    return canonicalize(sp.csr_matrix((data, (rows, cols)), shape=shape))


def lru_reference(lines: int, ways: int, trace: np.ndarray, hashed: bool) -> np.ndarray:
    """Brute force: one Python list per set, most recent last."""
    sets = max(1, max(lines, ways) // ways)
    content: list[list[int]] = [[] for _ in range(sets)]
    hits = []
    for line in trace.tolist():
        key = ((line * 0x9E3779B97F4A7C15) & (2**64 - 1)) >> 32 if hashed else line
        s = content[key % sets]
        hits.append(line in s)
        if line in s:
            s.remove(line)
        elif len(s) == ways:
            s.pop(0)
        s.append(line)
    return np.array(hits)


@pytest.mark.parametrize(
    "lines,ways,hashed",
    [(64, 4, False), (32, 2, False), (256, 16, True), (8, 8, False), (48, 4, False), (96, 8, True)],
)  # the last two have 12 sets: the modulo path beside the power-of-two mask
def test_lru_cache_matches_brute_force(lines, ways, hashed):
    rng = np.random.default_rng(lines + ways)
    for universe in (lines // 2, lines * 2, lines * 8):
        trace = rng.integers(0, max(universe, 1), size=4000)
        assert np.array_equal(
            cache_trace(lines, ways, trace, hashed), lru_reference(lines, ways, trace, hashed)
        )


def test_tiling_is_a_permutation_in_tile_order(bcsstk13):
    csr = bcsstk13.csr
    t = tile(csr, 64, 256)
    coo = csr.tocoo()
    assert sorted(zip(t.rows.tolist(), t.cols.tolist(), strict=True)) == sorted(
        zip(coo.row.tolist(), coo.col.tolist(), strict=True)
    )
    for k in range(t.tile_panel.size):
        lo, hi = t.tile_ptr[k], t.tile_ptr[k + 1]
        assert np.all(t.rows[lo:hi] // 64 == t.tile_panel[k])
        assert np.all(t.cols[lo:hi] // 256 == t.tile_cpanel[k])
    key = t.tile_panel.astype(np.int64) * t.ncpanels + t.tile_cpanel
    assert np.all(np.diff(key) > 0)


def test_deterministic(bcsstk13, machine):
    sched = Schedule(rp=64, cp=256, barrier=True, bypass=True, split=2, dynamic=True)
    for op in ("spmm", "sddmm"):
        first = simulate(bcsstk13.csr, op, 32, sched, machine)
        second = simulate(bcsstk13.csr, op, 32, sched, machine)
        assert first.counters == second.counters
        assert np.array_equal(first.pe_busy_cycles, second.pe_busy_cycles)


def compulsory_bytes(csr: sp.csr_matrix, op: str, width: int) -> float:
    """Each used dense row read once, the sparse stream once, each output once."""
    lines = -(-width * 4 // 64)
    used_rows = np.count_nonzero(np.diff(csr.indptr))
    used_cols = np.unique(csr.indices).size
    if op == "spmm":
        return 64.0 * lines * (used_cols + used_rows) + 12.0 * csr.nnz
    return 64.0 * lines * (used_cols + used_rows) + 16.0 * csr.nnz


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_dram_bytes_at_least_compulsory(bcsstk13, machine, op):
    bound = compulsory_bytes(bcsstk13.csr, op, 32)
    for sched in (
        BASE,
        Schedule(rp=16, cp=64, barrier=True, bypass=True, split=2, dynamic=True),
        Schedule(rp=1024, cp=1024, barrier=False, bypass=True, split=1, dynamic=False),
    ):
        c = simulate(bcsstk13.csr, op, 32, sched, machine).counters
        assert c["dram_read_bytes"] + c["dram_write_bytes"] >= bound
        # and the time never beats the bandwidth bound
        bw = machine.dram.bandwidth_gbs / machine.clock_ghz
        assert c["cycles"] >= (c["dram_read_bytes"] + c["dram_write_bytes"]) / bw


def test_lower_bandwidth_never_faster(bcsstk13, machine):
    slow = machine.with_changes(**{"dram.bandwidth_gbs": machine.dram.bandwidth_gbs / 4})
    for op in ("spmm", "sddmm"):
        for sched in (
            BASE,
            Schedule(64, 256, True, True, 2, True),
            Schedule(16, None, False, True, 1, False),
        ):
            fast_s = simulate(bcsstk13.csr, op, 32, sched, machine).seconds
            slow_s = simulate(bcsstk13.csr, op, 32, sched, slow).seconds
            assert slow_s >= fast_s


def test_more_pes_never_slow_a_balanced_matrix(machine):
    # 64 identical dense 16 x 16 diagonal blocks: every row panel is the same work
    blocks, size = 64, 16
    rr, cc = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    rows = (np.arange(blocks)[:, None] * size + rr.ravel()).ravel()
    cols = (np.arange(blocks)[:, None] * size + cc.ravel()).ravel()
    csr = pattern(rows, cols, (blocks * size, blocks * size))
    sched = Schedule(rp=size, cp=None, barrier=False, bypass=False, split=1, dynamic=False)
    times = [
        simulate(csr, "spmm", 32, sched, machine.with_changes(pes=p)).seconds
        for p in (1, 2, 4, 8, 16)
    ]
    assert all(b <= a for a, b in zip(times, times[1:], strict=False)), times
    assert times[-1] < times[0] / 2  # until DRAM bandwidth bounds it


def test_barrier_helps_a_shared_dense_panel(machine):
    # every non-empty row reads the same columns; light row panels (4 of 16 rows) race
    # ahead of heavy ones without a barrier, so the PEs stop sharing the LLC's panel
    shared_cols = np.arange(0, 4096, 2)
    rows = [i for i in range(256) if (i // 16) % 2 == 0 or i % 16 < 4]
    r = np.repeat(rows, shared_cols.size)
    c = np.tile(shared_cols, len(rows))
    csr = pattern(r, c, (256, 4096))
    for cp in (256, 1024):
        free = simulate(csr, "spmm", 32, Schedule(16, cp, False, False, 1, False), machine)
        sync = simulate(csr, "spmm", 32, Schedule(16, cp, True, False, 1, False), machine)
        assert sync.seconds < free.seconds
        assert sync.counters["llc_misses"] < free.counters["llc_misses"]


def test_barrier_does_not_help_when_panels_fit_in_l1(machine):
    csr = canonicalize(
        sp.random(2048, 256, density=0.05, rng=np.random.default_rng(0), dtype=np.float32)
    )
    # width 16: a dense row is one line; a 32-column panel is 2 KB, half the 4 KB L1
    free = simulate(csr, "spmm", 16, Schedule(64, 32, False, False, 1, False), machine)
    sync = simulate(csr, "spmm", 16, Schedule(64, 32, True, False, 1, False), machine)
    assert sync.seconds >= free.seconds


def test_bypass_helps_short_output_reuse(machine):
    # one column panel: each output row is finished before the next, so writing it through
    # the caches only evicts the (reused) dense rows
    csr = canonicalize(
        sp.random(16384, 256, density=4 / 256, rng=np.random.default_rng(0), dtype=np.float32)
    )
    through = simulate(csr, "spmm", 32, Schedule(256, None, False, False, 1, False), machine)
    bypass = simulate(csr, "spmm", 32, Schedule(256, None, False, True, 1, False), machine)
    assert bypass.seconds < through.seconds
    assert bypass.counters["dram_read_bytes"] < through.counters["dram_read_bytes"]


def test_bypass_hurts_long_output_reuse(machine):
    # 16 column panels revisit the same 128 output rows (256 lines > 64 registers): the
    # caches keep them between visits, the 32-line victim cache cannot (the KRO effect)
    csr = canonicalize(
        sp.random(128, 4096, density=32 / 4096, rng=np.random.default_rng(0), dtype=np.float32)
    )
    through = simulate(csr, "spmm", 32, Schedule(128, 256, False, False, 1, False), machine)
    bypass = simulate(csr, "spmm", 32, Schedule(128, 256, False, True, 1, False), machine)
    assert bypass.seconds > through.seconds
    assert bypass.counters["dram_read_bytes"] > through.counters["dram_read_bytes"]


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_reproduces_published_records(shared, op):
    """Every published width-64 record of two shared matrices, recomputed: the same seconds.

    The data set is only worth publishing if the shipped simulator regenerates it; this
    also pins every optimisation of the core to the exact model that made the records."""
    frame = pd.read_parquet(data_dir() / "records" / f"spade-{op}.parquet")
    names = ("494_bus", "bcsstk13")
    frame = frame[frame.matrix.isin(names) & (frame.width == 64) & (frame.status == "ok")]
    assert set(frame.matrix) == set(names) and len(frame) == 2 * 256
    space, runner = SpadeSpace(op), SpadeRunner()
    for name, records in frame.groupby("matrix"):
        matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
        runner.begin_batch(matrix, op, 64)
        for knobs, runtime in zip(records.config, records.runtime_s, strict=True):
            got = runner.measure_one(matrix, op, 64, space.validate(json.loads(knobs)))
            assert got.runtime_s == runtime, (name, knobs)
        runner.end_batch()
