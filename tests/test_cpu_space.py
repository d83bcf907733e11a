"""The cpu schedule space: validation rules, WACO's sampling recipe, candidates, hashes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cases import PLAIN_CSR_SPMM

from cognate.config import Config
from cognate.errors import CognateError
from cognate.targets.cpu.space import CpuSpace, make_space, parallel_loop

SPMM_BASE = PLAIN_CSR_SPMM
SDDMM_BASE = {
    "isplit": 1,
    "jsplit": 1,
    "ksplit": 128,
    "order": ["i1", "i0", "j1", "j0", "k1", "k0"],
    "formats": ["U", "U", "C", "U"],
    "chunk": 32,
}
BASE = {"spmm": SPMM_BASE, "sddmm": SDDMM_BASE}
BLOCK_ORDERS = {
    "spmm": {("i1", "k1", "j1", "i0", "k0", "j0")},
    "sddmm": {
        ("i1", "j1", "k1", "i0", "j0", "k0"),
        ("j1", "i1", "k1", "j0", "i0", "k0"),
        ("i1", "j1", "k1", "j0", "i0", "k0"),
        ("j1", "i1", "k1", "i0", "j0", "k0"),
    },
}


def _shapes(waco_files: list[Path]) -> list[tuple[int, int]]:
    """Real shapes from the shared WACO matrices' headers, plus degenerate tiny ones."""
    real = [tuple(int(x) for x in np.fromfile(p, dtype="<i4", count=2)) for p in waco_files]
    assert len(real) >= 5
    return [*real, (117, 253), (1, 1), (2, 3)]


def _is_block(op: str, config: Config) -> bool:
    """WACO's block-CSR family: a block order, dense inner sparse levels, small sparse splits."""
    space = make_space(op)
    fmt = config["formats"]
    sparse_ok = all(config[space.split_knob[v]] <= 32 for v in space.sparse_vars)
    if op == "spmm":
        fmt_ok = fmt[1:] == ["U", "C", "U"]
    else:
        fmt_ok = fmt[1] == "U" and fmt[3] == "U" and fmt != ["U"] * 4
    return tuple(config["order"]) in BLOCK_ORDERS[op] and fmt_ok and sparse_ok


def _with(op: str, **changes: object) -> dict:
    knobs = {**BASE[op], **changes}
    return {k: v for k, v in knobs.items() if v is not _DROP}


_DROP = object()


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_baseline_is_waco_fixed_csr_and_legal(op: str) -> None:
    space = make_space(op)
    base = space.baseline((1000, 500))
    assert dict(base.knobs) == BASE[op]
    assert space.validate(base.knobs) == base
    assert base.target == "cpu" and base.op == op
    assert parallel_loop(base["order"]) == "i1"


def test_config_hash_is_pinned() -> None:
    """The canonical JSON and hash are part of the store's identity: they must not drift."""
    base = make_space("spmm").baseline((10, 10))
    assert base.json == (
        '{"chunk":32,"formats":["U","U","C","U"],"isplit":1,"jsplit":128,"ksplit":1,'
        '"order":["i1","i0","k1","k0","j1","j0"]}'
    )
    assert base.hash == "af7ca6a348be6055"


def test_hashes_are_stable_across_processes() -> None:
    code = (
        "import json; from cognate.targets.cpu.space import make_space\n"
        "out = {op: [c.hash for c in make_space(op).sample(50, 7, (4096, 8192))]"
        " for op in ('spmm', 'sddmm')}\n"
        "print(json.dumps(out))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    theirs = json.loads(result.stdout)
    for op in ("spmm", "sddmm"):
        assert theirs[op] == [c.hash for c in make_space(op).sample(50, 7, (4096, 8192))]


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_sample_follows_waco_recipe(op: str, waco_files: list[Path]) -> None:
    space = make_space(op)
    for shape in _shapes(waco_files):
        configs = space.sample_csr(100, 3, shape)
        assert len(configs) == 100
        assert len({c.hash for c in configs}) == 100, "sampled configs must be distinct"
        for c in configs:
            assert space.validate(c.knobs) == c
            space.check_shape(c, shape)
        block = [c for c in configs if _is_block(op, c)]
        assert len(block) >= 100 // 3, f"block-CSR third missing for {shape}"
        assert all(_is_block(op, c) for c in configs[: 100 // 3]), "the block third comes first"
        rest = configs[100 // 3 :]
        if shape[0] > 2:
            assert len({tuple(c["order"]) for c in rest}) >= 5, "the rest uses random orders"
            assert len({tuple(c["formats"]) for c in rest}) >= 8


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_sample_is_deterministic_per_seed(op: str) -> None:
    space = make_space(op)
    first = space.sample(100, 11, (8032, 8032))
    assert first == space.sample(100, 11, (8032, 8032))
    assert [c.json for c in first] == [c.json for c in CpuSpace(op).sample(100, 11, (8032, 8032))]
    assert first != space.sample(100, 12, (8032, 8032))


def test_sample_splits_respect_wacos_cap() -> None:
    """Sparse splits stay below the dimension (at least two outer iterations), as WACO's."""
    space = make_space("spmm")
    configs = space.sample_csr(400, 0, (100, 40))
    assert max(c["isplit"] for c in configs) == 32
    assert max(c["ksplit"] for c in configs) == 16
    assert max(c["jsplit"] for c in configs) == 128
    assert {c["chunk"] for c in configs} == {1 << p for p in range(9)}
    sddmm = make_space("sddmm").sample_csr(400, 0, (100, 40))
    assert {c["chunk"] for c in sddmm} == {1 << p for p in range(6)}  # WACO's SDDMM chunks


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_candidates_are_many_distinct_and_legal(op: str) -> None:
    space = CpuSpace(op)  # speed: scripts/bench_tune.py times candidate generation
    configs = space.candidates(20000, 0, (14913, 14913))
    family = [c for c in configs if "family" in c.knobs]
    variants = space.kernel_variants()
    # the csr draw, every family config, then the kernel variants (SpMM only)
    assert len(configs) - len(family) - len(variants) == 20000 and len(family) > 100
    assert all("family" not in c.knobs for c in configs[:20000])
    assert configs[len(configs) - len(variants) :] == variants
    assert (len(variants) > 10) == (op == "spmm")
    assert len({c.hash for c in configs}) == len(configs)
    for c in configs[::7]:
        assert space.validate(c.knobs) == c


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_small_space_returns_what_exists(op: str) -> None:
    """A 1 x 1 matrix has a few thousand configs: asking for more returns them, distinct."""
    configs = make_space(op).sample_csr(20_000, 0, (1, 1))
    assert 1000 < len(configs) < 20_000
    assert len({c.hash for c in configs}) == len(configs)


SPMM_ILLEGAL = [
    (_with("spmm", isplit=3), "isplit=3 is not a power of two"),
    (_with("spmm", isplit=0), "isplit=0 is not a power of two"),
    (_with("spmm", ksplit=-4), "ksplit=-4 is not a power of two"),
    (_with("spmm", isplit=True), "isplit must be an integer, got True"),
    (_with("spmm", isplit=np.bool_(True)), "isplit must be an integer"),
    (_with("spmm", isplit=1.0), "isplit must be an integer, got 1.0"),
    (_with("spmm", isplit="1"), "isplit must be an integer, got '1'"),
    (_with("spmm", isplit=None), "isplit must be an integer, got None"),
    (_with("spmm", isplit=1 << 17), "isplit=131072 exceeds its maximum 2^16"),
    (_with("spmm", jsplit=256), "jsplit=256 exceeds its maximum 2^7"),
    (_with("spmm", chunk=512), "chunk=512 exceeds its maximum 2^8"),
    (_with("spmm", chunk=0), "chunk=0 is not a power of two"),
    (_with("spmm", nthreads=48), "unknown knob(s) nthreads"),
    (_with("spmm", threads=48), "schedule knobs come together"),
    (_with("spmm", chunk=_DROP), "missing knob(s) chunk"),
    (_with("spmm", order=["i0", "i1", "k1", "k0", "j1", "j0"]), "i1 must come before i0"),
    (_with("spmm", order=["i1", "i0", "k0", "k1", "j1", "j0"]), "k1 must come before k0"),
    (_with("spmm", order=["j1", "i1", "i0", "k1", "k0", "j0"]), "j1 must come after i1"),
    (_with("spmm", order=["i1", "i0", "j1", "j0", "k1", "k0"]), "j0 must be the innermost loop"),
    (
        _with("spmm", jsplit=4, order=["i1", "k1", "i0", "j1", "k0", "j0"]),
        "j1 j0 must be the two innermost loops when jsplit < 8",
    ),
    (_with("spmm", order=["i1", "i0", "k1", "k0", "j1"]), "order must be 6 of"),
    (_with("spmm", order=["i1", "i1", "k1", "k0", "j1", "j0"]), "order must be a permutation"),
    (_with("spmm", order="i1 i0 k1 k0 j1 j0"), "order must be a list of 6 names"),
    (_with("spmm", order=["i1", "i0", "k1", "k0", "j1", "j0; system(0)"]), "order must be 6 of"),
    (_with("spmm", order=["i1", "i0", "k1", "k0", "j1", 5]), "order must be 6 of"),
    (_with("spmm", formats=["U", "U", "C"]), "formats must be 4 of U C"),
    (_with("spmm", formats=["u", "U", "C", "U"]), "formats must be 4 of U C"),
    (_with("spmm", formats="UUCU"), "formats must be a list of 4 names"),
    (_with("spmm", formats=[1, 1, 0, 1]), "formats must be 4 of U C"),
]
SDDMM_ILLEGAL = [
    (_with("sddmm", ksplit=256), "ksplit=256 exceeds its maximum 2^7"),
    (_with("sddmm", jsplit=6), "jsplit=6 is not a power of two"),
    (_with("sddmm", order=["i1", "i0", "j1", "k1", "k0", "j0"]), "k0 must be the innermost loop"),
    (
        _with("sddmm", ksplit=2, order=["i1", "k1", "i0", "j1", "j0", "k0"]),
        "k1 k0 must be the two innermost loops when ksplit < 8",
    ),
    (_with("sddmm", formats=["U", "U", "U", "U"]), "formats U U U U (A fully dense)"),
    (_with("sddmm", order=["i1", "i0", "k1", "k0", "j1", "j0"]), "k0 must be the innermost"),
]


@pytest.mark.parametrize(("knobs", "message"), SPMM_ILLEGAL)
def test_spmm_rejects_illegal_configs(knobs: dict, message: str) -> None:
    with pytest.raises(CognateError) as info:
        make_space("spmm").validate(knobs)
    assert str(info.value).startswith("cpu spmm config: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("knobs", "message"), SDDMM_ILLEGAL)
def test_sddmm_rejects_illegal_configs(knobs: dict, message: str) -> None:
    with pytest.raises(CognateError, match="^cpu sddmm config: ") as info:
        make_space("sddmm").validate(knobs)
    assert message in str(info.value)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_validate_rejects_non_mappings(op: str) -> None:
    with pytest.raises(CognateError, match="knobs must be a mapping, got list"):
        make_space(op).validate([("isplit", 1)])  # type: ignore[arg-type]


def test_validate_accepts_legal_edge_cases() -> None:
    spmm = make_space("spmm")
    # WACO's block-CSR order is exempt from the dense-pair rule (its generator emits it).
    block = spmm.validate(_with("spmm", jsplit=1, order=["i1", "k1", "j1", "i0", "k0", "j0"]))
    assert block["jsplit"] == 1
    # k loops outside the parallel i1 (WACO's data has 240 such SpMM lines).
    assert spmm.validate(_with("spmm", order=["k1", "k0", "i1", "i0", "j1", "j0"]))
    # numpy integers are integers; the canonical form holds plain ints and lists.
    config = spmm.validate(_with("spmm", isplit=np.int64(4), order=tuple(SPMM_BASE["order"])))
    assert type(config["isplit"]) is int and isinstance(config["order"], list)
    assert config.json == spmm.validate(_with("spmm", isplit=4)).json
    assert spmm.validate(_with("spmm", isplit=1 << 16, formats=["U"] * 4))
    sddmm = make_space("sddmm")
    assert sddmm.validate(_with("sddmm", jsplit=1 << 16, ksplit=1))["ksplit"] == 1


def test_order_counts_match_wacos_generator() -> None:
    """The legal orders are those of WACO's filter (20 SpMM, 30 SDDMM) plus the exemptions."""
    assert len(make_space("spmm").legal_orders(8)) == 20
    assert len(make_space("spmm").legal_orders(4)) == 6 + 1
    assert len(make_space("sddmm").legal_orders(8)) == 30
    assert len(make_space("sddmm").legal_orders(4)) == 6 + 4


def test_parallel_loop_is_outermost_of_i1_j1() -> None:
    assert parallel_loop(["k1", "k0", "i1", "i0", "j1", "j0"]) == "i1"
    assert parallel_loop(["j1", "k1", "j0", "i1", "i0", "k0"]) == "j1"
    config = make_space("sddmm").validate(
        _with("sddmm", order=["j1", "i1", "k1", "j0", "i0", "k0"])
    )
    assert "omp j1 dynamic,32" in make_space("sddmm").describe(config)


def test_check_shape_caps_sparse_splits() -> None:
    spmm = make_space("spmm")
    spmm.check_shape(spmm.validate(_with("spmm", isplit=128, ksplit=64)), (100, 40))
    with pytest.raises(CognateError, match="isplit=256 exceeds 128, the dimension 100 of i"):
        spmm.check_shape(spmm.validate(_with("spmm", isplit=256)), (100, 40))
    with pytest.raises(CognateError, match="ksplit=128 exceeds 64, the dimension 40 of k"):
        spmm.check_shape(spmm.validate(_with("spmm", ksplit=128)), (100, 40))
    sddmm = make_space("sddmm")
    with pytest.raises(CognateError, match="jsplit=64 exceeds 32, the dimension 17 of j"):
        sddmm.check_shape(sddmm.validate(_with("sddmm", jsplit=64)), (100, 17))


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_loop_nest_features_and_describe(op: str) -> None:
    space = make_space(op)
    config = space.sample(10, 0, (5000, 3000))[9]
    nest = space.loop_nest(config, (5000, 3000), 64)
    assert (nest.i_split, nest.j_split, nest.k_split) == (
        config["isplit"],
        config["jsplit"],
        config["ksplit"],
    )
    assert nest.order == tuple(config["order"])
    feats = space.knob_features(config)
    assert feats.dtype == np.float32
    assert feats[:4].tolist() == [float(f == "C") for f in config["formats"]]
    base_feats = space.knob_features(space.baseline((10, 10)))
    assert base_feats[:5].tolist() == pytest.approx([0, 0, 1, 0, 5 / 8])  # as before families
    assert base_feats[5:8].tolist() == [1, 0, 0] and not base_feats[8:].any()  # csr one-hot
    text = space.describe(space.baseline((10, 10)))
    assert "\n" not in text
    assert "order " + " ".join(BASE[op]["order"]) in text
    assert "omp i1 dynamic,32" in text


def test_malformed_space_file_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cognate.space as space_module

    good = (space_module.configs_dir() / "cpu-spmm.yaml").read_text()
    (tmp_path / "cpu-spmm.yaml").write_text(good.replace("chunk_max_log2: 8", "chunk_max: 8", 1))
    monkeypatch.setattr(space_module, "configs_dir", lambda: tmp_path)
    with pytest.raises(CognateError, match="cpu-spmm.yaml: "):
        CpuSpace("spmm")
    with pytest.raises(CognateError, match="unknown op 'spmv'"):
        CpuSpace("spmv")
