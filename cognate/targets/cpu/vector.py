"""The vector and schedule knobs' variants ``tune --verify`` times beside the model's picks.

The shipped cost models encode a config without its vector and schedule knobs (the space's
``knob_features`` leave them out), so they rank a variant exactly as its base config: the
model cannot choose among them. So the measurement chooses: for the best-ranked plain CSR
SpMM config among the candidates (else the baseline), its variants at every vector width
this host has from 256 bits up, with register tiles that cover the dense width and two
unrolls, and its kernel under the two schedules that won most often in
scripts/bench_space_oracle.py (rows claimed 256 at a time, the merge-path nonzero split; all
threads, no prefetch), are checked and timed with the candidates, and the fastest measured
one wins as any candidate does. The schedules are also tried on the host's whole-row tile
(``row_tile``): the knobs are timed one group at a time, and the best of each group together
was then never measured (test_FW_2500 at N = 128 on AVX-512: the nzsplit schedule on the
base's 512-bit x4 tile ran 29.7 us, on the whole-row 512-bit x8 tile 27.8 us, MKL-IE 35 us).

Where C outgrows the cores' L2 caches, the base's tile and the whole-row tile are also timed
with C's streaming stores (``stream``: kernels/cpu/spmm_csr.c; arrow at N = 128 on AVX-512:
1.48 -> 1.10 ms), which the cost models do not encode either.

``COGNATE_VECTOR_VARIANTS=0`` turns them off (the kernel of a config without these knobs,
256-bit, default schedule, is then the only plain CSR kernel timed).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cognate.config import Config
from cognate.hostid import host_profile
from cognate.targets.cpu.codegen import (
    DEFAULT_VECTOR,
    KERNEL_ONLY_KNOBS,
    VECTOR_KNOBS,
    Schedule,
    VectorTile,
)
from cognate.targets.cpu.isa import host_isa

UNROLLS = (2, 4)
# The schedules verify tries on the base config's kernel (bench_space_oracle.py's most frequent
# winners beside the tasks the kernel runs by default).
SCHEDULES = (Schedule(threads=0, batch=256), Schedule(threads=0, nzsplit=1))


def variants_enabled() -> bool:
    return os.environ.get("COGNATE_VECTOR_VARIANTS", "1").strip() not in ("0", "off", "no")


def tiles_for(width: int, vector_bits: Sequence[int]) -> list[VectorTile]:
    """The register tiles worth timing at dense ``width``: per vector width, the tile that
    holds the whole row (up to 8 registers) and the one of half as many registers."""
    tiles = []
    for vbits in vector_bits:
        cover = _row_registers(width, vbits)
        for vregs in sorted({cover, max(1, cover // 2)}):
            tiles += [VectorTile(vbits, vregs, unroll) for unroll in UNROLLS]
    return tiles


def row_tile(width: int, vector_bits: Sequence[int]) -> VectorTile:
    """The widest vectors' tile that holds the whole dense row (up to 8 registers), unroll 2:
    the tile that won most often on small matrices (scripts/bench_space_oracle.py)."""
    widest = max(vector_bits)
    return VectorTile(widest, _row_registers(width, widest), 2)


def _row_registers(width: int, vbits: int) -> int:
    """Registers of ``vbits`` covering ``width`` columns, at most 8, a power of two as vregs
    allows."""
    cover = min(8, max(1, width // (vbits // 32)))
    return 1 << (cover.bit_length() - 1)


def is_plain_csr_spmm(config: Config) -> bool:
    knobs = config.knobs
    return (
        config.op == "spmm"
        and "family" not in knobs
        and tuple(knobs.get("order", ())) == ("i1", "i0", "k1", "k0", "j1", "j0")
        and knobs.get("isplit") == 1
        and knobs.get("ksplit") == 1
        and list(knobs.get("formats", ())) == ["U", "U", "C", "U"]
    )


def streaming_may_pay(rows: int, width: int) -> bool:
    """Whether C (``rows`` x ``width`` floats) outgrows the L2 caches of all cores, the
    least size where streaming stores won a measured product (below it C's lines are still
    cached when the next row's stores come; 2 MiB where sysfs names no L2)."""
    profile = host_profile()
    l2_total = profile.l2_bytes * profile.cores or 2 << 20
    return rows * width * 4 >= l2_total


def vector_variants(
    op: str,
    width: int,
    configs: Sequence[Config],
    shape: tuple[int, int] | None = None,
    bf16: bool = False,
) -> list[tuple[Config, Config]]:
    """(base, variant) pairs: the new variants of the first plain CSR SpMM config of
    ``configs`` (with ``shape``, A's: also the streamed ones where they may pay; with
    ``bf16``, asked for: the base's tile and the whole-row tile with B read as bfloat16,
    streamed too where streaming may pay)."""
    if op != "spmm" or not variants_enabled():
        return []
    base = next((c for c in configs if is_plain_csr_spmm(c)), None)
    if base is None:
        return []
    plain = {k: v for k, v in base.knobs.items() if k not in KERNEL_ONLY_KNOBS}
    from cognate.targets.cpu.space import make_space

    space = make_space(op)
    widths = host_isa().variant_widths
    seen = {c.hash for c in configs}
    found = []
    own_tile = {k: base.knobs[k] for k in VECTOR_KNOBS if k in base.knobs}
    knobs = [
        {**plain, **tile.knobs}
        for tile in tiles_for(width, widths)
        if "vbits" in base.knobs or tile != DEFAULT_VECTOR  # else: the base's very kernel
    ]
    whole_row = row_tile(width, widths).knobs if widths else own_tile
    knobs += [
        {**plain, **tile, **schedule.knobs}
        for tile in (own_tile, whole_row)
        for schedule in SCHEDULES
    ]
    streams = shape is not None and streaming_may_pay(shape[0], width)
    stores = [{}, {"stream": 1}] if streams else [{}]
    precisions = [{}, {"bf16": 1}] if bf16 else [{}]
    knobs += [
        {**plain, **tile, **store, **precision}
        for tile in (own_tile, whole_row)
        for store in stores
        for precision in precisions
        if store or precision  # the plain twin of each tile is above
    ]
    for variant in knobs:
        config = space.validate(variant)
        if config.hash not in seen:
            seen.add(config.hash)
            found.append((base, config))
    return found
