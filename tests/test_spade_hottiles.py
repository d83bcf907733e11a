"""The calibration machine (configs/spade-hottiles.yaml) and the mechanisms it added: caches
that a machine may leave out, the sustained DRAM bandwidth, and the register-bounded
memory-level parallelism."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cognate.synth.published import mycielskian, published
from cognate.targets.spade.simulator import (
    Schedule,
    effective_mlp,
    load_machine,
    simulate,
)

HOTTILES = Schedule(rp=64, cp=None, barrier=False, bypass=True, split=1, dynamic=True)


@pytest.fixture(scope="module")
def hottiles():
    return load_machine("spade-hottiles")


def test_machine_is_hottiles_cold_only_setup(hottiles):
    assert hottiles.pes == 16 and hottiles.clock_ghz == 0.8
    assert hottiles.l1.bytes == 32 * 1024 and hottiles.l2 is None and hottiles.llc is None
    assert hottiles.dram.bandwidth_gbs == 205 and hottiles.dram.sustained_gbs == 161


def test_mlp_is_bounded_by_registers_left_by_the_output_row(hottiles):
    default = load_machine()
    assert effective_mlp(hottiles, 32) == 62  # 64 registers - 2 lines of a 32-wide row
    assert effective_mlp(hottiles, 256) == 48
    assert effective_mlp(hottiles, 4096) == 1  # a row wider than the file still issues
    assert effective_mlp(default, 512) == default.mlp  # the miss-handling cap binds first


def test_without_l2_and_llc_every_l1_miss_is_a_dram_line(hottiles):
    matrix = published("delaunay", 11, seed=2)
    sim = simulate(matrix.csr, "spmm", 32, HOTTILES, hottiles)
    c = sim.counters
    assert c["l2_hits"] == c["l2_misses"] == c["llc_hits"] == c["llc_misses"] == 0
    din_lines = c["l1_misses"]
    # reads: the COO stream, the L1's misses and the output lines read back from DRAM
    # (bypass: only victim-cache misses of rows already written)
    assert c["dram_read_bytes"] >= c["sparse_bytes"] + 64 * din_lines
    assert c["dram_read_bytes"] - c["sparse_bytes"] - 64 * din_lines == 64 * c["vc_misses"]


def test_sustained_bandwidth_bounds_a_streaming_run(hottiles):
    csr = mycielskian(11)
    sim = simulate(csr, "spmm", 32, HOTTILES, hottiles)
    c = sim.counters
    dram = c["dram_read_bytes"] + c["dram_write_bytes"]
    floor = dram / (hottiles.dram.sustained_gbs * 1e9)
    assert sim.seconds >= floor * (1 - 1e-9)
    faster = hottiles.with_changes(**{"dram.sustained_gbs": 205.0})
    assert simulate(csr, "spmm", 32, HOTTILES, faster).seconds <= sim.seconds


def test_more_registers_never_slow_a_latency_bound_run(hottiles):
    csr = published("kron-g500", 12, seed=0).csr
    few = hottiles.with_changes(registers=8)
    times = [simulate(csr, "spmm", 32, HOTTILES, m).seconds for m in (few, hottiles)]
    assert times[1] <= times[0]
    assert np.isfinite(times).all()


def test_one_column_panel_tiling_is_the_row_panels():
    """cp = all takes its tile bounds from indptr; they are the sort-based tiling's."""
    from cognate.synth import generate
    from cognate.targets.spade.simulator import tile

    csr = generate("rmat", 3000, 2000, nnz=20000, seed=4).csr
    keep = np.ones(csr.shape[0], dtype=np.float32)
    keep[100:900] = 0  # empty row panels: they get no tile
    csr = sp.csr_matrix(sp.diags(keep) @ csr)
    csr.eliminate_zeros()
    for rp in (1, 16, 64, 5000):
        tiling = tile(csr, rp, None)
        panel = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr)) // rp
        starts = np.flatnonzero(np.r_[True, panel[1:] != panel[:-1]])
        assert np.array_equal(tiling.tile_ptr, np.r_[starts, csr.nnz])
        assert np.array_equal(tiling.tile_panel, panel[starts])
        assert not tiling.tile_cpanel.any() and tiling.ncpanels == 1
