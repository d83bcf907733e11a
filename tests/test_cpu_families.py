"""The cpu target's DIA and reordered-BCSR kernel families.

Real kernels through the real runner, checked against scipy: k-diagonal (wrapped) and
block masks built here with numpy, the same with row/column permutations carried as index
maps, and real SuiteSparse matrices. Old CSR-family configs keep their hashes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from cases import permuted

from cognate.build import compile_c
from cognate.config import Config
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix, canonicalize
from cognate.targets.cpu.families import TooLarge, kernel_source, pack
from cognate.targets.cpu.families import pack as pack_family
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference
from cognate.targets.cpu.measure.runner import CpuRunner
from cognate.targets.cpu.pipeline import run_config
from cognate.targets.cpu.space import CpuSpace, make_space
from cognate.targets.spade.space import SpadeSpace

# Computed with the space before the families existed (versions 809a18a81907 / cc1b5efd2de7).
OLD = {
    "spmm": {
        "version": "809a18a81907",
        "baseline": "af7ca6a348be6055",
        "sample_7_4": "ab88e7c1b70115cb",
        "sample_100": "257e6e15d552d213",
        "candidates_3000": "c331849e9a42eb05",
    },
    "sddmm": {
        "version": "cc1b5efd2de7",
        "baseline": "b5cab5f5bf3f235d",
        "sample_7_4": "2f20baabe35c88e5",
        "sample_100": "664a8bacd968cca7",
        "candidates_3000": "38c5878ac5cf36a9",
    },
}
FAMILY_KNOBS = {
    ("spmm", "dia"): [
        {"rtile": 1, "jtile": 64, "chunk": 4},
        {"rtile": 4, "jtile": 16, "chunk": 32},
        {"rtile": 8, "jtile": 32, "chunk": 4},
    ],
    ("sddmm", "dia"): [{"rtile": 1, "chunk": 4}, {"rtile": 16, "chunk": 32}],
    ("spmm", "bcsr"): [
        {"brows": 4, "bcols": 8, "blend": 0.5, "jtile": 32, "chunk": 4},
        {"brows": 16, "bcols": 1, "blend": 0.0, "jtile": 16, "chunk": 32},
        {"brows": 2, "bcols": 16, "blend": 1.0, "jtile": 64, "chunk": 4},
    ],
    ("sddmm", "bcsr"): [
        {"brows": 4, "bcols": 8, "blend": 0.5, "chunk": 4},
        {"brows": 1, "bcols": 16, "blend": 1.0, "chunk": 32},
    ],
}


def _digest(configs: list[Config]) -> str:
    return hashlib.sha256("".join(c.hash for c in configs).encode()).hexdigest()[:16]


def kdiag(rows: int, cols: int, k: int, seed: int = 0) -> sp.csr_matrix:
    """DynaDiag-style mask: k wrapped diagonals, entry (i, (i + o) mod cols), random values."""
    rng = np.random.default_rng(seed)
    offsets = rng.choice(cols, k, replace=False)
    r = np.repeat(np.arange(rows), k)
    c = (r + np.tile(offsets, rows)) % cols
    return canonicalize(sp.csr_matrix((rng.uniform(-1, 1, r.size), (r, c)), shape=(rows, cols)))


def block_mask(rows: int, cols: int, block: int, density: float, seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    keep = rng.random((-(-rows // block), -(-cols // block))) < density
    dense = np.kron(keep, np.ones((block, block)))[:rows, :cols] * rng.uniform(-1, 1, (rows, cols))
    return canonicalize(sp.csr_matrix(dense))


@pytest.fixture(scope="module")
def runner():
    runner = CpuRunner(repeats=1, warmup=0, timeout_s=20.0)
    yield runner
    runner.close()


def _configs(op: str) -> list[Config]:
    space = make_space(op)
    return [
        space.validate({"family": family, **knobs})
        for (o, family), settings in FAMILY_KNOBS.items()
        if o == op
        for knobs in settings
    ]


# --- the space: old configs unchanged ---------------------------------------------------------


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_csr_family_hashes_and_sample_prefix_are_unchanged(op: str) -> None:
    space, old = make_space(op), OLD[op]
    assert space.baseline((1000, 1000)).hash == old["baseline"]
    assert space.sample(10, 7, (1000, 900))[4].hash == old["sample_7_4"]
    assert space.validate({**space.baseline((9, 9)).knobs, "family": "csr"}).hash == old["baseline"]
    sample = space.sample(100, 0, (2000, 1500))
    assert _digest(sample[:100]) == old["sample_100"]
    variants = space.kernel_variants()  # the baseline's kernel variants close the sample
    assert sample[len(sample) - len(variants) :] == variants
    assert all("family" in c.knobs for c in sample[100 : len(sample) - len(variants)])
    assert _digest(space.candidates(3000, 1, (4096, 4096))[:3000]) == old["candidates_3000"]


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_old_versions_are_accepted_as_the_csr_family(op: str) -> None:
    space = make_space(op)
    assert space.version != OLD[op]["version"]
    assert space.accepts_version(OLD[op]["version"]) and space.accepts_version(space.version)
    assert not space.accepts_version("000000000000")
    spade = SpadeSpace(op)  # its own earlier versions only, never a cpu one
    assert spade.accepts_version(spade.version) and not spade.accepts_version(OLD[op]["version"])


def _grid(space, shape: tuple[int, int]) -> list:
    """The family configs of a sample of no csr configs (the kernel variants left out)."""
    return [c for c in space.sample(0, 0, shape) if "family" in c.knobs]


@pytest.mark.parametrize(("op", "count"), [("spmm", 75), ("sddmm", 54)])
def test_sample_appends_every_family_value(op: str, count: int) -> None:
    space = make_space(op)
    family = _grid(space, (65536, 65536))  # wide enough for every panel width
    assert len(family) == count == len({c.hash for c in family})
    assert {c["family"] for c in family} == {"dia", "bcsr", "reordered", "panel"}
    assert all(space.validate(c.knobs) == c for c in family)
    for name, spec in space._spec.families.items():  # every legal value occurs somewhere
        for knob, values in spec.knobs.items():
            seen = {c[knob] for c in family if c["family"] == name}
            assert seen == set(values), (name, knob)
    small = space.sample(0, 0, (6, 3))  # blocks and tiles beyond the shape are left out
    assert all(c.knobs.get("bcols", 1) <= 4 and c.knobs.get("brows", 1) <= 8 for c in small)
    candidates = space.candidates(10, 0, (65536, 65536))
    assert set(family) <= set(candidates) and len(candidates) > 10 + count
    assert set(space.kernel_variants()) <= set(candidates)


def test_locality_families_fit_the_shape() -> None:
    """Panels and row blocks wider than the matrix are left out, except the smallest (one
    panel: the family's plain form); a symmetric renumbering needs a square matrix."""
    space = make_space("spmm")
    small = [c for c in _grid(space, (100, 300)) if c["family"] in ("reordered", "panel")]
    assert {c["pcols"] for c in small if c["family"] == "panel"} == {1024}
    assert {c["rblock"] for c in small if c["family"] == "panel"} == {32, 128}
    assert {c["symmetric"] for c in small if c["family"] == "reordered"} == {0}
    knobs = {"family": "reordered", "by": "rcm", "symmetric": 1, "strip": 128, "chunk": 32}
    with pytest.raises(CognateError, match="100 x 300 is not square"):
        space.check_shape(space.validate(knobs), (100, 300))
    knobs = {"family": "panel", "pcols": 4096, "rblock": 32, "chunk": 1}
    with pytest.raises(CognateError, match="pcols=4096 exceeds 1024"):
        space.check_shape(space.validate(knobs), (100, 300))


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_locality_families_have_distinct_features_and_a_loop_nest(op: str) -> None:
    space = make_space(op)
    configs = [c for c in _grid(space, (65536, 65536)) if c["family"] in ("reordered", "panel")]
    rows = {tuple(space.knob_features(c).tolist()) for c in configs}
    assert len(rows) == len(configs)  # the row order (a name) is one-hot, not lost
    panel = next(c for c in configs if c["family"] == "panel" and c["pcols"] == 4096)
    nest = space.loop_nest(panel, (65536, 65536), 128)
    assert nest.i_split == panel["rblock"] and 4096 in (nest.k_split, nest.j_split)
    assert "column panels: 4096 columns" in space.describe(panel)


BAD_FAMILY = [
    ({"family": "ell", "chunk": 4}, "family='ell' is not one of csr, dia, bcsr, reordered, panel"),
    (
        {"family": "reordered", "by": "metis", "symmetric": 0, "strip": 128, "chunk": 32},
        "reordered by=metis is not one of",
    ),
    (
        {"family": "reordered", "by": 1, "symmetric": 0, "strip": 128, "chunk": 32},
        "reordered by=1 is not one of",
    ),
    ({"family": "panel", "pcols": 2048, "rblock": 32, "chunk": 1}, "panel pcols=2048 is not one"),
    ({"family": "dia", "rtile": 3, "jtile": 16, "chunk": 4}, "dia rtile=3 is not one of"),
    ({"family": "dia", "rtile": True, "jtile": 16, "chunk": 4}, "dia rtile=True"),
    ({"family": "dia", "rtile": 2.0, "jtile": 16, "chunk": 4}, "dia rtile=2.0"),
    ({"family": "dia", "rtile": 2, "chunk": 4}, "dia jtile is missing"),
    ({"family": "dia", "rtile": 2, "jtile": 16, "chunk": 4, "isplit": 1}, "unknown knob(s) isplit"),
    (
        {"family": "bcsr", "brows": 4, "bcols": 4, "blend": "0.5; rm", "jtile": 32, "chunk": 4},
        "bcsr blend=0.5; rm is not one of",
    ),
    ({"family": "bcsr", "brows": 4, "bcols": 32, "blend": 0, "jtile": 32, "chunk": 4}, "bcols=32"),
]


@pytest.mark.parametrize(("knobs", "message"), BAD_FAMILY)
def test_bad_family_knobs_are_one_line_errors(knobs: dict, message: str) -> None:
    with pytest.raises(CognateError) as err:
        make_space("spmm").validate(knobs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_whitelists_guard_the_generated_source_too() -> None:
    with pytest.raises(CognateError, match="rtile must be one of"):
        kernel_source(
            "spmm", {"family": "dia", "rtile": "4; system()", "jtile": 16, "chunk": 1}, 64
        )
    with pytest.raises(CognateError, match="dense width"):
        kernel_source("spmm", {"family": "dia", "rtile": 4, "jtile": 16, "chunk": 1}, 10**6)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_encodings_loop_nests_and_descriptions(op: str) -> None:
    space = make_space(op)
    configs = [space.baseline((64, 64)), *_configs(op)]
    feats = np.stack([space.knob_features(c) for c in configs])
    assert feats.dtype == np.float32 and len({f.shape for f in feats}) == 1
    assert feats[:, 5:8].tolist()[:2] == [[1, 0, 0], [0, 1, 0]]  # family one-hot
    assert not feats[1:, :5].any()  # the csr knobs are zero for other families
    assert len({tuple(f) for f in feats}) == len(configs)
    dia, bcsr = configs[1], next(c for c in configs if c.knobs.get("family") == "bcsr")
    assert space.loop_nest(dia, (64, 64), 64).i_split == dia["rtile"]
    nest = space.loop_nest(bcsr, (64, 64), 64)
    assert nest.i_split == bcsr["brows"] and bcsr["bcols"] in (nest.k_split, nest.j_split)
    for c in configs[1:]:
        text = space.describe(c)
        assert "\n" not in text and ("DIA" in text or "BCSR" in text)


@pytest.mark.slow  # ~10-25 s: the autoencoder trains to exact reconstruction of 512 configs
def test_the_autoencoder_encoder_covers_every_candidate(monkeypatch, tmp_path: Path) -> None:
    from cognate.model.encoding import make_encoder
    from cognate.transfer import autoencoder

    monkeypatch.setattr(
        autoencoder.AESettings,
        "from_config",
        classmethod(lambda cls: cls(latent=16, hidden=64, sample=512)),
    )
    space = CpuSpace("spmm")
    encoder = make_encoder(space, "ae")
    configs = space.candidates(50, 0, (4096, 4096))
    rows = encoder.encode(configs, (4096, 4096), 64)
    assert rows.shape[0] == len(configs) and bool(rows.isfinite().all())


def test_a_small_autoencoder_encoder_covers_every_family(monkeypatch) -> None:
    """The default suite's version of the one above: a smaller sample and a wider code,
    which reach exact reconstruction in well under a second on one torch thread (two
    threads on two busy cores make these tiny steps up to 20x slower)."""
    import torch

    from cognate.model.encoding import make_encoder
    from cognate.transfer import autoencoder

    monkeypatch.setattr(
        autoencoder.AESettings,
        "from_config",
        classmethod(lambda cls: cls(latent=32, hidden=128, sample=128)),
    )
    space = CpuSpace("spmm")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        encoder = make_encoder(space, "ae")
    finally:
        torch.set_num_threads(threads)
    configs = space.candidates(50, 0, (4096, 4096))
    assert {space.family(c) for c in configs} == {"csr", "dia", "bcsr", "reordered", "panel"}
    rows = encoder.encode(configs, (4096, 4096), 64)
    assert rows.shape[0] == len(configs) and bool(rows.isfinite().all())
    assert len({tuple(r.tolist()) for r in rows}) > len(configs) // 2  # configs stay apart


# --- kernels through the runner ---------------------------------------------------------------


def _ok(measurements, label: str) -> None:
    bad = [(m.config.json, m.status, m.error) for m in measurements if m.status != "ok"]
    assert not bad, f"{label}: {bad}"


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_structured_masks_match_scipy_through_the_runner(op: str, runner: CpuRunner) -> None:
    matrices = [
        Matrix("kdiag-sq", kdiag(200, 200, 12)),
        Matrix("kdiag-tall", kdiag(240, 60, 9, seed=2)),
        Matrix("kdiag-wide", kdiag(60, 240, 30, seed=3)),
        Matrix("block", block_mask(130, 90, 8, 0.2)),
        Matrix("tiny", kdiag(21, 5, 2, seed=4)),  # tiles taller than the matrix is wide
    ]
    for matrix in matrices:
        for width in (37, 64):
            _ok(runner.measure(matrix, op, width, _configs(op)), f"{matrix.name} w{width}")


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_permuted_matrices_run_through_their_index_maps(op: str, runner: CpuRunner) -> None:
    s = kdiag(1024, 1024, 8, seed=5)
    a = permuted(s, "kdiag-perm")
    dia = _configs(op)[0]
    with pytest.raises(TooLarge):  # without its maps, A has about all 1024 diagonals
        pack(a.csr, op, dia.knobs, width=32)
    assert pack(a, op, dia.knobs, width=32).stored_entries == 8 * 1025  # S's 8 diagonals
    _ok(runner.measure(a, op, 32, _configs(op)), "permuted k-diagonal")
    _ok(
        runner.measure(permuted(block_mask(96, 80, 4, 0.3), "block-perm"), op, 24, _configs(op)),
        "b",
    )


def test_run_config_absorbs_the_maps_in_process() -> None:
    a = permuted(kdiag(128, 96, 7, seed=9), "p")
    (b,) = dense_operands("spmm", a.shape, 40, 0)
    for config in _configs("spmm"):
        ref, tol = reference(a.csr, "spmm", (b,))
        assert mismatch(run_config(a, "spmm", config, b), ref, tol) is None
    x, y = dense_operands("sddmm", a.shape, 24, 0)
    for config in _configs("sddmm"):
        out = run_config(a, "sddmm", config, x, y)
        assert out.nnz == a.nnz and np.array_equal(out.indices, a.csr.indices)
        ref, tol = reference(a.csr, "sddmm", (x, y))
        assert mismatch(out.data, ref, tol) is None


@pytest.mark.parametrize("shape", [(768, 3072), (3072, 768)])
def test_dynadiag_layer_shapes_from_synth(shape: tuple[int, int]) -> None:
    """The synth generator's k-diagonal layers (DynaDiag's layout), permuted, in process."""
    from cognate.synth import generate

    a = generate("kdiag", *shape, sparsity=0.95, seed=3, permute="both")
    assert a.row_perm is not None and a.col_perm is not None
    (b,) = dense_operands("spmm", a.shape, 16, 0)
    ref, tol = reference(a.csr, "spmm", (b,))
    for config in _configs("spmm")[:2] + _configs("spmm")[3:4]:
        assert mismatch(run_config(a, "spmm", config, b), ref, tol) is None, config.json
    k = -(-0.05 * shape[0] * shape[1] // min(shape))  # DynaDiag's K wrapped diagonals
    dia = pack(a, "spmm", _configs("spmm")[0].knobs, width=16)
    assert dia.kernel.family == "dia" and dia.integers[2] <= k  # one vector per offset class


@pytest.mark.parametrize("name", ["bcsstk13", "west0479", "dwt_878"])
def test_real_matrices_match_scipy(name: str, shared: Path, runner: CpuRunner) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
    for op in ("spmm", "sddmm"):
        found = runner.measure(matrix, op, 32, _configs(op))
        assert all(m.status in ("ok", "too_large") for m in found), [m.error for m in found]
        assert any(m.status == "ok" and m.config["family"] == "bcsr" for m in found)


def test_dia_refuses_a_general_matrix_immediately(
    shared: Path, runner: CpuRunner, monkeypatch
) -> None:
    from cognate.targets.cpu.families import dia as dia_module

    matrix = load_matrix(shared / "matrices" / "suitesparse" / "rajat19.mtx.gz")
    dia = _configs("spmm")[0]
    examined: list[int] = []  # the entries whose diagonal was computed, per call
    offsets = dia_module._offsets

    def counting(col, row, cols):
        examined.append(col.size)
        return offsets(col, row, cols)

    with monkeypatch.context() as patch:
        patch.setattr(dia_module, "_offsets", counting)
        with pytest.raises(TooLarge, match="at least"):  # refused from a small sample
            pack_family(matrix.csr, "spmm", dia.knobs, 64)
    # one sample, never the whole matrix: the full offset pass is not reached
    assert len(examined) == 1 and examined[0] < matrix.nnz // 4, (examined, matrix.nnz)
    (found,) = runner.measure(matrix, "spmm", 64, [dia])
    assert found.status == "too_large"


def test_tune_result_kernel_runs_a_family_config() -> None:
    from cognate.targets import get_target

    a = permuted(kdiag(200, 150, 6, seed=11), "p")
    kernel = get_target("cpu").kernel(a, "sddmm", _configs("sddmm")[-1])
    for seed in (2, 3):  # new operands each call, as result.kernel(...) is used
        x, y = dense_operands("sddmm", a.shape, 16, seed)
        ref, tol = reference(a.csr, "sddmm", (x, y))
        assert mismatch(kernel(x, y).data, ref, tol) is None


def test_emitted_family_source_compiles() -> None:
    for op in ("spmm", "sddmm"):
        for config in _configs(op):
            source, entry, args = kernel_source(op, config.knobs, 48)
            assert entry in source and args == {"chunk": config["chunk"]}
            assert compile_c(source).exists()
