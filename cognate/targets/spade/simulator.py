"""Python driver of the SPADE-like simulator core (kernels/spade/spade_sim.c).

The driver builds the tiled-COO stream with numpy (vectorised), turns the machine YAML into
the core's parameter arrays and calls the C core through ctypes. The core is deterministic:
the same matrix, machine and schedule always give the same counters.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from cognate.build import compile_c, load_library
from cognate.errors import CognateError
from cognate.paths import configs_dir, kernels_dir
from cognate.util import load_yaml

CORE_SOURCE = "spade/spade_sim.c"

# Parameter and output layouts of spade_simulate (the enums in spade_sim.c, same order).
_IP_FIELDS = (
    "op nrows ncols width npe pes_per_l2 regs l1_lines l1_ways vc_lines vc_ways l2_lines "
    "l2_ways llc_lines llc_ways split barrier bypass dynamic npanels ncpanels stream_buf"
).split()
_DP_FIELDS = (
    "l1_lat vc_lat l2_lat llc_lat dram_lat mlp bw_bytes_per_cycle tile_overhead "
    "dispatch_static dispatch_dynamic sync reduce"
).split()
OUT_FIELDS: tuple[str, ...] = tuple(
    (
        "cycles compute_cycles stall_cycles bw_bound_epochs epochs reg_hits reg_misses "
        "l1_hits l1_misses vc_hits vc_misses l2_hits l2_misses llc_hits llc_misses "
        "dram_read_bytes dram_write_bytes sparse_bytes nnz_passes tiles"
    ).split()
)
OPS = ("spmm", "sddmm")


class _Cache(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bytes: PositiveInt
    ways: PositiveInt
    latency_cycles: float = Field(ge=0)


class _Dram(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bandwidth_gbs: PositiveFloat
    # The most the memory system sustains (row misses, refresh, bus turnarounds); None:
    # the theoretical bandwidth.
    sustained_gbs: PositiveFloat | None = None
    latency_ns: float = Field(ge=0)
    link_latency_ns: float = Field(ge=0)


class _Dispatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    static: float = Field(ge=0)
    dynamic: float = Field(ge=0)


class Machine(BaseModel):
    """The simulated machine (configs/spade.yaml); validated before it reaches the core."""

    model_config = ConfigDict(extra="forbid")
    clock_ghz: PositiveFloat
    pes: int = Field(ge=1, le=4096)
    pes_per_l2: int = Field(ge=1, le=64)
    registers: int = Field(ge=1, le=4096)
    l1: _Cache
    victim_cache: _Cache
    l2: _Cache | None  # None: no L2 (a miss in L1 goes to the LLC or DRAM)
    llc: _Cache | None  # None: no LLC
    dram: _Dram
    # Outstanding line misses a PE overlaps (its miss-handling limit); None: no limit but the
    # register file's (see effective_mlp).
    mlp: PositiveFloat | None
    stream_buffer_bytes: int = Field(ge=0)
    tile_overhead_cycles: float = Field(ge=0)
    dispatch_cycles: _Dispatch
    barrier_sync_cycles: float = Field(ge=0)
    sddmm_reduce_cycles: float = Field(ge=0)
    # The falsification machine (configs/spade-inverted.yaml): the knob labelled barrier=true
    # runs without the barrier and barrier=false with it. The config, its label and the
    # mapper's loop order stay; only the simulated mechanism is swapped, so a transfer that
    # rests on the mapping's barrier -> k1-outermost claim is fed the opposite fact.
    barrier_inverted: bool = False

    def with_changes(self, **changes: Any) -> Machine:
        """A copy with top-level fields or nested ``"dram.bandwidth_gbs"``-style keys changed."""
        data = self.model_dump()
        for key, value in changes.items():
            node = data
            *parents, leaf = key.split(".")
            for part in parents:
                node = node[part]
            node[leaf] = value
        return Machine.model_validate(data)


def effective_mlp(machine: Machine, width: int) -> float:
    """Line misses one PE keeps in flight at dense width ``width``.

    A SPADE PE's loads land in its tag-matched vector registers (SPADE, ISCA'23: the PE is an
    out-of-order, non-speculative vector engine whose 64 registers hold one line each), so it
    can have no more lines in flight than registers left free by the output row it is
    accumulating (ceil(width * 4 / 64) lines). ``machine.mlp``, when set, caps it further.
    """
    row_lines = -(-width * 4 // 64)
    free = max(1, machine.registers - row_lines)
    return float(free) if machine.mlp is None else min(float(machine.mlp), float(free))


def load_machine(name: str = "spade") -> Machine:
    """Read and validate ``configs/<name>.yaml``."""
    path = configs_dir() / f"{name}.yaml"
    if not path.is_file():
        raise CognateError(f"{path}: no such machine file")
    try:
        return Machine.model_validate(load_yaml(path, "machine file"))
    except ValidationError as exc:
        first = str(exc).splitlines()
        raise CognateError(f"{path}: bad machine file: {' '.join(first[:3])}") from None


@dataclass(frozen=True)
class Schedule:
    """One spade schedule in the simulator's terms (cp=None: one column panel)."""

    rp: int
    cp: int | None
    barrier: bool
    bypass: bool
    split: int
    dynamic: bool


@dataclass(frozen=True)
class Tiling:
    """The tiled-COO stream: nonzeros ordered by (row panel, column panel, row, column)."""

    rows: np.ndarray  # int32, tiled order
    cols: np.ndarray  # int32
    tile_ptr: np.ndarray  # int64 [ntiles + 1]
    tile_panel: np.ndarray  # int32 [ntiles]
    tile_cpanel: np.ndarray  # int32 [ntiles]
    panel_ptr: np.ndarray  # int64 [npanels + 1], tiles of each row panel
    npanels: int
    ncpanels: int


def tile(csr: sp.csr_matrix, rp: int, cp: int | None) -> Tiling:
    """Tile a CSR matrix into RP x CP tiles of COO (vectorised: one stable sort)."""
    nrows, ncols = csr.shape
    rows = np.repeat(np.arange(nrows, dtype=np.int32), np.diff(csr.indptr))
    cols = np.asarray(csr.indices, dtype=np.int32)
    npanels = -(-nrows // rp)
    width = ncols if cp is None else cp
    ncpanels = -(-ncols // width)
    if ncpanels == 1:  # tiles are row panels: their bounds come from indptr, no sort keys
        bounds = np.asarray(csr.indptr, dtype=np.int64)[np.r_[np.arange(0, nrows, rp), nrows]]
        nonempty = np.flatnonzero(bounds[1:] > bounds[:-1])
        tile_ptr = np.r_[bounds[nonempty], bounds[-1]].astype(np.int64)
        tile_panel = nonempty.astype(np.int32)
        tile_cpanel = np.zeros(nonempty.size, dtype=np.int32)
        panel_ptr = np.searchsorted(tile_panel, np.arange(npanels + 1)).astype(np.int64)
        return Tiling(rows, cols, tile_ptr, tile_panel, tile_cpanel, panel_ptr, npanels, 1)
    panel = rows // rp
    cpanel = cols // width
    key = panel.astype(np.int64) * ncpanels + cpanel
    if ncpanels > 1:  # CSR is row-major already; one column panel keeps that order
        order = np.argsort(key, kind="stable")
        rows, cols, key = rows[order], cols[order], key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, int)
    tile_ptr = np.r_[starts, key.size].astype(np.int64)
    tile_key = key[starts]
    tile_panel = (tile_key // ncpanels).astype(np.int32)
    tile_cpanel = (tile_key % ncpanels).astype(np.int32)
    panel_ptr = np.searchsorted(tile_panel, np.arange(npanels + 1)).astype(np.int64)
    return Tiling(rows, cols, tile_ptr, tile_panel, tile_cpanel, panel_ptr, npanels, ncpanels)


@lru_cache(maxsize=1)
def _core() -> ctypes.CDLL:
    return load_core((kernels_dir() / CORE_SOURCE).read_text())


def load_core(source: str) -> ctypes.CDLL:
    """Compile (once, cached on disk) and load a simulator core from its C source; the
    shipped one is kernels/spade/spade_sim.c (benchmarks load older revisions beside it)."""
    lib = load_library(str(compile_c(source, openmp=False)))
    p = ctypes.c_void_p
    lib.spade_simulate.argtypes = [p, p, p, p, p, p, p, ctypes.c_int64, p, p, p]
    lib.spade_simulate.restype = ctypes.c_int
    i64 = ctypes.c_int64
    lib.spade_cache_trace.argtypes = [i64, i64, ctypes.c_int, p, i64, p]
    lib.spade_cache_trace.restype = ctypes.c_int
    return lib


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def cache_trace(lines: int, ways: int, trace: np.ndarray, hashed: bool = False) -> np.ndarray:
    """Run one set-associative LRU cache of ``lines`` lines over ``trace``; hit per access.

    ``hashed``: the set index is Fibonacci-hashed (L2 and LLC) instead of line % sets.
    """
    trace = np.ascontiguousarray(trace, dtype=np.int64)
    hits = np.zeros(trace.size, dtype=np.uint8)
    lib = _core()
    if lib.spade_cache_trace(lines, ways, int(hashed), _ptr(trace), trace.size, _ptr(hits)):
        raise CognateError("spade cache model: out of memory")
    return hits.astype(bool)


def _params(
    machine: Machine, op: str, shape: tuple[int, int], width: int, sched: Schedule, tiling: Tiling
) -> tuple[np.ndarray, np.ndarray]:
    m = machine
    line = 64
    barrier = int(sched.barrier != m.barrier_inverted)  # the inverted machine swaps it
    ghz = m.clock_ghz
    ints = {
        "op": OPS.index(op), "nrows": shape[0], "ncols": shape[1], "width": width,
        "npe": m.pes, "pes_per_l2": m.pes_per_l2, "regs": m.registers,
        "l1_lines": m.l1.bytes // line, "l1_ways": m.l1.ways,
        "vc_lines": m.victim_cache.bytes // line, "vc_ways": m.victim_cache.ways,
        "l2_lines": m.l2.bytes // line if m.l2 else 0, "l2_ways": m.l2.ways if m.l2 else 1,
        "llc_lines": m.llc.bytes // line if m.llc else 0,
        "llc_ways": m.llc.ways if m.llc else 1,
        "split": sched.split, "barrier": barrier, "bypass": int(sched.bypass),
        "dynamic": int(sched.dynamic), "npanels": tiling.npanels, "ncpanels": tiling.ncpanels,
        "stream_buf": m.stream_buffer_bytes,
    }  # fmt: skip
    llc_lat = m.llc.latency_cycles if m.llc else 0.0
    l2_lat = m.l2.latency_cycles if m.l2 else 0.0
    dram_lat = llc_lat + (m.dram.latency_ns + m.dram.link_latency_ns) * ghz
    bandwidth = min(m.dram.bandwidth_gbs, m.dram.sustained_gbs or m.dram.bandwidth_gbs)
    doubles = {
        "l1_lat": m.l1.latency_cycles, "vc_lat": m.victim_cache.latency_cycles,
        "l2_lat": l2_lat, "llc_lat": llc_lat, "dram_lat": dram_lat,
        "mlp": effective_mlp(m, width), "bw_bytes_per_cycle": bandwidth / ghz,
        "tile_overhead": m.tile_overhead_cycles, "dispatch_static": m.dispatch_cycles.static,
        "dispatch_dynamic": m.dispatch_cycles.dynamic, "sync": m.barrier_sync_cycles,
        "reduce": m.sddmm_reduce_cycles,
    }  # fmt: skip
    ip = np.array([ints[k] for k in _IP_FIELDS], dtype=np.int64)
    dp = np.array([doubles[k] for k in _DP_FIELDS], dtype=np.float64)
    return ip, dp


LINE_BYTES = 64  # spade_sim.c's LINE
# spade_sim.c keeps, per row and per 64-byte line of a row of C, where the line sits
# (``where``, int32) and whether it was written (``touched``, 1 byte): its row region.
ROW_REGION_BYTES_PER_LINE = 5


def row_region_bytes(rows: int, width: int) -> int:
    """Bytes of the simulator's row region for ``rows`` rows of float32 at ``width``."""
    return int(rows) * ROW_REGION_BYTES_PER_LINE * -(-int(width) * 4 // LINE_BYTES)


@dataclass(frozen=True)
class SimResult:
    """Counters of one simulation; ``seconds`` = cycles / clock."""

    seconds: float
    counters: dict[str, float]
    pe_busy_cycles: np.ndarray


def simulate(
    csr: sp.csr_matrix,
    op: str,
    width: int,
    sched: Schedule,
    machine: Machine,
    tiling: Tiling | None = None,
    core: ctypes.CDLL | None = None,
) -> SimResult:
    """Simulate ``op`` (spmm: C = A @ B, B ncols x width; sddmm: A * (X @ Y^T), inner width).

    ``core``: another build of the core (``load_core``), for benchmarks; default the shipped one.
    """
    if op not in OPS:
        raise CognateError(f"spade simulator: unknown op {op!r}")
    if width < 1 or sched.rp < 1 or sched.split < 1 or (sched.cp is not None and sched.cp < 1):
        raise CognateError(f"spade simulator: bad schedule {sched} or width {width}")
    shape = (int(csr.shape[0]), int(csr.shape[1]))
    if tiling is None:
        tiling = tile(csr, sched.rp, sched.cp)
    ip, dp = _params(machine, op, shape, width, sched, tiling)
    out = np.zeros(len(OUT_FIELDS), dtype=np.float64)
    busy = np.zeros(machine.pes, dtype=np.float64)
    t = tiling
    rc = (core or _core()).spade_simulate(
        _ptr(ip), _ptr(dp), _ptr(t.rows), _ptr(t.cols), _ptr(t.tile_ptr), _ptr(t.tile_panel),
        _ptr(t.tile_cpanel), t.tile_panel.size, _ptr(t.panel_ptr), _ptr(out), _ptr(busy),
    )  # fmt: skip
    if rc == -1:  # malloc failed: a failure of this run, never a runtime
        raise MemoryError(
            f"spade simulator: out of memory simulating a {shape[0]} x {shape[1]} matrix at "
            f"width {width} (its row region alone is {row_region_bytes(shape[0], width) / 2**30:.2f} "
            "GiB)"
        )
    if rc != 0:
        raise CognateError(f"spade simulator failed (code {rc}: bad parameters)")
    counters = dict(zip(OUT_FIELDS, out.tolist(), strict=True))
    expected = csr.nnz * sched.split  # every nonzero visited once per dense pass
    if counters["nnz_passes"] != expected:
        raise CognateError(
            f"spade simulator lost work: {counters['nnz_passes']:.0f} of {expected} nonzero passes"
        )
    return SimResult(counters["cycles"] / (machine.clock_ghz * 1e9), counters, busy)
