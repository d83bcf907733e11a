"""The vector knobs' variants ``tune --verify`` times beside the model's picks.

The shipped cost models encode a config without its vector knobs (the space's
``knob_features`` leave them out), so they rank a variant exactly as its base config: the
model cannot choose among them, and retraining on records of the new knobs is not done yet.
So the measurement chooses: for the best-ranked plain CSR SpMM config among the candidates
(else the baseline), its variants at every vector width this host has from 256 bits up,
with register tiles that cover the dense width and two unrolls, are checked and timed with
the candidates, and the fastest measured one wins as any candidate does.

``COGNATE_VECTOR_VARIANTS=0`` turns them off (the kernel of a config without vector knobs,
256-bit, is then the only plain CSR kernel timed: the tuner as it was before the knobs).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cognate.config import Config
from cognate.targets.cpu.codegen import DEFAULT_VECTOR, VECTOR_KNOBS, VectorTile
from cognate.targets.cpu.isa import host_isa

UNROLLS = (2, 4)


def variants_enabled() -> bool:
    return os.environ.get("COGNATE_VECTOR_VARIANTS", "1").strip() not in ("0", "off", "no")


def tiles_for(width: int, vector_bits: Sequence[int]) -> list[VectorTile]:
    """The register tiles worth timing at dense ``width``: per vector width, the tile that
    holds the whole row (up to 8 registers) and the one of half as many registers."""
    tiles = []
    for vbits in vector_bits:
        lanes = vbits // 32
        cover = min(8, max(1, width // lanes))
        cover = 1 << (cover.bit_length() - 1)  # a power of two, as vregs allows
        for vregs in sorted({cover, max(1, cover // 2)}):
            tiles += [VectorTile(vbits, vregs, unroll) for unroll in UNROLLS]
    return tiles


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


def vector_variants(op: str, width: int, configs: Sequence[Config]) -> list[tuple[Config, Config]]:
    """(base, variant) pairs: the new variants of the first plain CSR SpMM config of
    ``configs``."""
    if op != "spmm" or not variants_enabled():
        return []
    base = next((c for c in configs if is_plain_csr_spmm(c)), None)
    if base is None:
        return []
    plain = {k: v for k, v in base.knobs.items() if k not in VECTOR_KNOBS}
    from cognate.targets.cpu.space import make_space

    space = make_space(op)
    widths = [bits for bits in host_isa().widths if bits >= 256]
    seen = {c.hash for c in configs}
    found = []
    for tile in tiles_for(width, widths):
        if "vbits" not in base.knobs and tile == DEFAULT_VECTOR:
            continue  # the base config runs this very kernel
        config = space.validate({**plain, **tile.knobs})
        if config.hash not in seen:
            seen.add(config.hash)
            found.append((base, config))
    return found
