"""The gpu target: its spaces, their loop-nest mapping, and the Triton kernels against scipy.

On a machine without CUDA (CI) the kernels run in Triton's interpreter on CPU tensors
(conftest sets TRITON_INTERPRET=1), which manages a few thousand nonzeros per second, so
the matrices here are small real ones from the shared folder or slices of them. With
TRITON_INTERPRET=0 and a GPU (scripts/gpu_check.sh) the same tests run compiled on CUDA.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from cognate.config import Config
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix, canonicalize
from cognate.space import LOOP_VARS, LoopNest
from cognate.targets import get_target
from cognate.targets.gpu.problem import make_problem
from cognate.targets.gpu.space import KNOB_NAMES, GpuSpace

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
DEVICE = "cpu" if INTERPRETED else "cuda"

# ----------------------------------------------------------------------------- matrices


def _suitesparse(shared: Path, name: str) -> Matrix:
    return load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")


def _slice(m: Matrix, rows: slice, cols: slice, label: str) -> Matrix:
    return Matrix(f"{m.name}[{label}]", canonicalize(m.csr[rows, cols]), source=m.source)


@pytest.fixture(scope="module")
def lp_share1b(shared: Path) -> Matrix:
    """117 x 253, 1179 nonzeros: rectangular, rows of 1..37 nonzeros."""
    return _suitesparse(shared, "lp_share1b")


@pytest.fixture(scope="module")
def with_empty_rows(lp_share1b: Matrix) -> Matrix:
    """lp_share1b's first 100 columns: 117 x 100, 515 nonzeros, 7 empty rows."""
    m = _slice(lp_share1b, slice(None), slice(0, 100), ":,:100")
    assert (np.diff(m.csr.indptr) == 0).sum() == 7
    return m


@pytest.fixture(scope="module")
def dense_row(shared: Path) -> Matrix:
    """arrow's corner, 40 x 1200: row 0 fully dense (1200 nonzeros), the rest a diagonal."""
    m = _slice(_suitesparse(shared, "arrow"), slice(0, 40), slice(0, 1200), ":40,:1200")
    lengths = np.diff(m.csr.indptr)
    assert lengths[0] == 1200 and lengths[1:].max() <= 3
    return m


@pytest.fixture(scope="module")
def olm500(shared: Path) -> Matrix:
    """500 x 500, 1996 nonzeros, square, at most 6 per row."""
    return _suitesparse(shared, "olm500")


# ----------------------------------------------------------------------------- spaces


@pytest.fixture(scope="module", params=["spmm", "sddmm"])
def space(request: pytest.FixtureRequest) -> GpuSpace:
    return GpuSpace(request.param)


def test_space_is_a_few_hundred_legal_distinct_configs(space: GpuSpace) -> None:
    configs = space.all_configs()
    assert 200 <= len(configs) <= 500
    assert len({c.hash for c in configs}) == len(configs)
    assert all(space.validate(c.knobs) == c for c in configs)
    assert all(c["reorder"] == "none" for c in configs if c["split"] == "nnz")
    assert space.baseline((10, 10)) in configs
    assert space.candidates(5, 0, (10, 10)) == configs  # candidates = the whole space


def test_space_through_the_target_registry() -> None:
    target = get_target("gpu")
    assert target.exclusive
    assert target.space("spmm").op == "spmm" and target.space("sddmm").op == "sddmm"


def test_sample_is_seeded_distinct_and_legal(space: GpuSpace) -> None:
    first = space.sample(40, 7, (100, 100))
    assert first == space.sample(40, 7, (100, 100))
    assert first != space.sample(40, 8, (100, 100))
    assert len(set(first)) == 40
    assert set(first) <= set(space.all_configs())
    assert len(space.sample(10_000, 1, (5, 5))) == len(space.all_configs())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dense_tile": 48}, "dense_tile=48 is not one of"),
        ({"rows_per_program": True}, "rows_per_program=True is not one of"),
        ({"rows_per_program": 4.0}, "rows_per_program=4.0 is not one of"),
        ({"split": "diagonal"}, "split='diagonal' is not one of"),
        ({"split": "nnz", "reorder": "length"}, "reorder=length needs split=row"),
        ({"unroll": 2}, "unknown knobs ['unroll']"),
    ],
)
def test_validate_rejects_illegal_knobs(space: GpuSpace, change: dict, message: str) -> None:
    knobs = dict(space.baseline((1, 1)).knobs) | change
    with pytest.raises(CognateError) as err:
        space.validate(knobs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_validate_rejects_missing_knob(space: GpuSpace) -> None:
    knobs = dict(space.baseline((1, 1)).knobs)
    del knobs["nnz_step"]
    with pytest.raises(CognateError, match=r"missing knobs \['nnz_step'\]"):
        space.validate(knobs)


@pytest.mark.parametrize(
    ("yaml_change", "message"),
    [
        (("dense_tile: [32, 64, 128]", "dense_tile: [32, 48]"), "48 is not a power of two"),
        (("num_warps: [2, 4, 8]", "num_warps: [3]"), "num_warps"),
        (("split: [row, nnz]", "split: [row, '; rm -rf /']"), "split"),
        (("nnz_step: [16, 64]", "nnz_step: [16, 64]\n  unroll: [1]"), "unroll"),
    ],
)
def test_space_file_values_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, yaml_change: tuple[str, str], message: str
) -> None:
    """Knob values become compiled code: the YAML's own value sets are checked first."""
    text = (Path(__file__).parents[1] / "configs" / "gpu-spmm.yaml").read_text()
    old, new = yaml_change
    assert old in text
    (tmp_path / "gpu-spmm.yaml").write_text(text.replace(old, new))
    monkeypatch.setattr("cognate.space.configs_dir", lambda: tmp_path)
    with pytest.raises(CognateError) as err:
        GpuSpace("spmm")
    assert "gpu-spmm.yaml" in str(err.value) and message in str(err.value)


# The mapping into the CPU loop vocabulary (docs/architecture.md, Transfer): rows per program -> I,
# dense tile -> J (SpMM) / K (SDDMM), nonzero step -> K (SpMM) / J (SDDMM); unit-length
# loops sit next to their partner. Shape 1000 x 500 throughout.
MAPPING = [
    # op, rows, tile, step, width -> i, j, k, order
    ("spmm", 1, 64, 16, 32, 1, 32, 16, "i1 i0 k1 k0 j1 j0"),
    ("spmm", 1, 32, 16, 128, 1, 32, 16, "i1 i0 j1 k1 k0 j0"),
    ("spmm", 4, 32, 64, 128, 4, 32, 64, "i1 j1 i0 k1 k0 j0"),
    ("spmm", 16, 128, 64, 64, 16, 64, 64, "i1 i0 k1 k0 j1 j0"),
    ("spmm", 16, 128, 64, 256, 16, 128, 64, "i1 j1 i0 k1 k0 j0"),
    ("sddmm", 1, 32, 16, 32, 1, 16, 32, "i1 i0 j1 j0 k1 k0"),
    ("sddmm", 4, 16, 64, 32, 4, 64, 16, "i1 i0 j1 k1 j0 k0"),
    ("sddmm", 16, 64, 16, 256, 16, 16, 64, "i1 i0 j1 k1 j0 k0"),
    ("sddmm", 16, 64, 64, 64, 16, 64, 64, "i1 i0 j1 j0 k1 k0"),
]


@pytest.mark.parametrize(("op", "rows", "tile", "step", "width", "i", "j", "k", "order"), MAPPING)
def test_loop_nest_mapping(
    op: str, rows: int, tile: int, step: int, width: int, i: int, j: int, k: int, order: str
) -> None:
    space = GpuSpace(op)
    knobs = dict(space.baseline((1, 1)).knobs, rows_per_program=rows, dense_tile=tile)
    config = space.validate(knobs | {"nnz_step": step})
    nest = space.loop_nest(config, (1000, 500), width)
    assert nest == LoopNest(i_split=i, k_split=k, j_split=j, order=tuple(order.split()))


def test_loop_nest_clamps_to_the_shape_and_is_a_permutation(space: GpuSpace) -> None:
    for config in space.all_configs():
        nest = space.loop_nest(config, (3, 10), 8)
        assert sorted(nest.order) == sorted(LOOP_VARS)
        assert nest.i_split <= 3 and min(nest.j_split, nest.k_split) <= 10
        assert nest.order.index("j1") < nest.order.index("j0")
        assert nest.order.index("k1") < nest.order.index("k0")
        assert nest.order[0] == "i1"


def test_knob_features(space: GpuSpace) -> None:
    base = space.baseline((1, 1))
    assert space.knob_features(base).tolist() == [0.0, 0.0, 2.0, 3.0]
    other = space.validate(dict(base.knobs, split="nnz", num_warps=8, num_stages=1))
    assert space.knob_features(other).tolist() == [1.0, 0.0, 3.0, 1.0]
    reordered = space.validate(dict(base.knobs, reorder="length"))
    assert space.knob_features(reordered).tolist() == [0.0, 1.0, 2.0, 3.0]


# ----------------------------------------------------------------------------- plans


def test_nnz_split_plan_covers_every_nonzero_once(dense_row: Matrix) -> None:
    """Chunks tile the nonzeros; the cut rows and their partial slots are in chunk order."""
    from cognate.targets.gpu.kernels import load_kernels

    k = load_kernels()
    a = k.to_device(dense_row.csr, "cpu")
    indptr = dense_row.csr.indptr
    for rows in (1, 4, 16):
        knobs = {"split": "nnz", "reorder": "none", "rows_per_program": rows, "nnz_step": 16}
        plan = k.make_plan(a, knobs, with_fixup=True)
        assert plan.chunk % 16 == 0 and plan.n_chunks * plan.chunk >= dense_row.nnz
        first_last = plan.chunk_rows.numpy().reshape(-1, 2)
        for c, (first, last) in enumerate(first_last):
            lo, hi = c * plan.chunk, min((c + 1) * plan.chunk, dense_row.nnz)
            assert indptr[first] <= lo < indptr[first + 1]
            assert indptr[last] <= hi - 1 < indptr[last + 1]
        # row 0 (1200 nonzeros) is cut whenever a chunk is shorter than it
        fix_rows = plan.fix_rows.numpy().tolist()
        assert (0 in fix_rows) == (plan.chunk < 1200)
        slots = plan.fix_slots.numpy()
        assert np.all(np.diff(slots) > 0)
        pieces = np.diff(plan.fix_start.numpy())
        assert pieces.sum() == len(slots) and np.all(pieces >= 2)


# ----------------------------------------------------------------------------- kernels


def _run(matrix: Matrix, op: str, width: int, knobs: dict) -> str | None:
    """Run one config on ``DEVICE``; None if it matches scipy, else the mismatch."""
    from cognate.targets.gpu.kernels import load_kernels

    k = load_kernels()
    problem = make_problem(matrix, op, width)
    a = k.to_device(matrix.csr, DEVICE)
    dense = {name: torch.from_numpy(v).to(DEVICE) for name, v in problem.inputs.items()}
    plan = k.make_plan(a, knobs, with_fixup=op == "spmm")
    if op == "spmm":
        out = torch.full((matrix.shape[0], width), float("nan"), device=DEVICE)
        k.run_spmm(a, dense["b"], knobs, plan, out)
    else:
        out = torch.full((matrix.nnz,), float("nan"), device=DEVICE)
        k.run_sddmm(a, dense["x"], dense["y"], knobs, plan, out)
    return problem.check(out.cpu().numpy())


def _one_knob_at_a_time(space: GpuSpace) -> list[dict]:
    """The baseline, then each knob's every other value with the rest at the baseline."""
    base = dict(space.baseline((1, 1)).knobs)
    variants = [base]
    for name in KNOB_NAMES:
        for value in space.values[name]:
            if value != base[name]:
                variants.append(dict(space.validate(base | {name: value}).knobs))
    return variants


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_every_knob_value_matches_scipy(op: str, with_empty_rows: Matrix) -> None:
    """Empty rows, a rectangular shape, and a width (40) no dense tile divides."""
    space = GpuSpace(op)
    variants = _one_knob_at_a_time(space)
    assert {v["split"] for v in variants} == {"row", "nnz"}
    for knobs in variants:
        assert _run(with_empty_rows, op, 40, knobs) is None, knobs


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize("rows", [1, 4, 16])
def test_nonzero_split_over_a_dense_row(op: str, rows: int, dense_row: Matrix) -> None:
    """Row 0 (1200 nonzeros) spans many chunks: SpMM sums its pieces in the fix-up kernel."""
    knobs = dict(GpuSpace(op).baseline((1, 1)).knobs, split="nnz", rows_per_program=rows)
    assert _run(dense_row, op, 24, knobs | {"nnz_step": 64}) is None


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize("reorder", ["none", "length"])
def test_row_split_over_a_dense_row(op: str, reorder: str, dense_row: Matrix) -> None:
    knobs = dict(GpuSpace(op).baseline((1, 1)).knobs, rows_per_program=4, reorder=reorder)
    assert _run(dense_row, op, 24, knobs | {"nnz_step": 64}) is None


@pytest.mark.slow  # whole matrices through the interpreter; the small ones above are the fast check
@pytest.mark.parametrize("op", ["spmm", "sddmm"])
def test_full_real_matrices(op: str, lp_share1b: Matrix, olm500: Matrix) -> None:
    """Two whole real matrices (rectangular, square) under a sample of the space."""
    space = GpuSpace(op)
    for seed, matrix in enumerate((lp_share1b, olm500)):
        for config in space.sample(2, seed, matrix.shape):
            assert _run(matrix, op, 16, dict(config.knobs)) is None, config.knobs


def test_nonzero_split_is_deterministic(dense_row: Matrix) -> None:
    from cognate.targets.gpu.kernels import load_kernels

    k = load_kernels()
    space = GpuSpace("spmm")
    knobs = dict(space.baseline((1, 1)).knobs, split="nnz", nnz_step=64)
    a = k.to_device(dense_row.csr, DEVICE)
    b = torch.from_numpy(make_problem(dense_row, "spmm", 8).inputs["b"]).to(DEVICE)
    plan = k.make_plan(a, knobs, with_fixup=True)
    outs = []
    for _ in range(2):
        out = torch.empty((dense_row.shape[0], 8), device=DEVICE)
        k.run_spmm(a, b, knobs, plan, out)
        outs.append(out.cpu().numpy())
    assert np.array_equal(outs[0], outs[1])


def test_check_catches_a_wrong_result(lp_share1b: Matrix) -> None:
    problem = make_problem(lp_share1b, "spmm", 8)
    good = problem.reference.astype(np.float32)
    assert problem.check(good) is None
    bad = good.copy()
    bad[5, 3] += 0.01 * (1 + abs(bad[5, 3]))
    assert "worst at (5, 3)" in problem.check(bad)
    nan = good.copy()
    nan[0, 0] = np.nan
    assert "1 of" in problem.check(nan)


# ----------------------------------------------------------------------------- runner


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_runner_without_cuda_is_one_clear_line() -> None:
    with pytest.raises(CognateError, match=r"^gpu target: no CUDA device") as err:
        get_target("gpu").runner()
    assert "\n" not in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_collect_without_cuda_exits_1_with_one_line(
    tmp_path: Path, shared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cognate.cli import run

    path = shared / "matrices" / "suitesparse" / "olm500.mtx.gz"
    args = ["collect", "--target", "gpu", "--op", "spmm", "--db", str(tmp_path / "s.db")]
    with pytest.raises(SystemExit) as exit_info:
        run([*args, str(path)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("cognate: error: gpu target: no CUDA device")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.skipif(
    not INTERPRETED and not torch.cuda.is_available(), reason="needs the interpreter or CUDA"
)
def test_runner_statuses(lp_share1b: Matrix, monkeypatch: pytest.MonkeyPatch) -> None:
    """measure(): ok with a time, error for an illegal config, error for a wrong kernel."""
    from cognate.targets.gpu.runner import GpuRunner

    small = _slice(lp_share1b, slice(0, 40), slice(None), ":40")
    runner = GpuRunner(device=DEVICE, repeats=1 if INTERPRETED else 5, warmups=0, timeout_s=60.0)
    space = GpuSpace("sddmm")
    base = space.baseline(small.shape)
    illegal = Config("gpu", "sddmm", dict(base.knobs, nnz_step=3))
    seen = []
    results = runner.measure(small, "sddmm", 8, [base, illegal], progress=seen.append)
    assert [r.status for r in results] == ["ok", "error"] and seen == results
    assert results[0].runtime_s > 0 and results[0].spread_s >= 0
    assert results[0].counters["library_s"] > 0
    assert "nnz_step=3 is not one of" in results[1].error

    real = runner.kernels.run_sddmm

    def off_by_one(a, x, y, knobs, plan, out):  # a kernel that drops the last nonzero
        real(a, x, y, knobs, plan, out)
        out[-1] = 0.0 if out[-1] != 0 else 1.0

    monkeypatch.setattr(runner.kernels, "run_sddmm", off_by_one)
    (wrong,) = runner.measure(small, "sddmm", 8, [base])
    assert wrong.status == "error" and wrong.runtime_s is None
    assert wrong.error.startswith("wrong result: 1 of")


def test_runner_options_are_checked() -> None:
    from cognate.targets.gpu.runner import GpuRunner

    with pytest.raises(CognateError, match="repeats must be >= 1"):
        GpuRunner(device="cpu", repeats=0)
    with pytest.raises(CognateError, match="unknown device 'tpu'"):
        GpuRunner(device="tpu")


def test_tiny_matrix_narrower_than_every_tile() -> None:
    """6 x 5 with width 3: every tile is mostly masked lanes."""
    m = Matrix("tiny", canonicalize(sp.random(6, 5, density=0.5, random_state=1)))
    assert m.csr.indices.dtype == np.int32 and m.csr.data.dtype == np.float32
    assert _run(m, "spmm", 3, dict(GpuSpace("spmm").baseline((1, 1)).knobs)) is None


# ----------------------------------------------------------------------------- compiled

_I32, _F32 = "*i32", "*fp32"
_SIGNATURES = {
    "spmm_rows_kernel": {
        **{"indptr": _I32, "indices": _I32, "values": _F32, "row_map": _I32},
        **{"b_ptr": _F32, "c_ptr": _F32, "M": "i32", "N": "i32"},
    },
    "spmm_nnz_kernel": {
        **{"indptr": _I32, "indices": _I32, "values": _F32, "chunk_rows": _I32, "b_ptr": _F32},
        **{"c_ptr": _F32, "partial_ptr": _F32, "nnz": "i32", "chunk": "i32", "N": "i32"},
    },
    "spmm_fixup_kernel": {
        **{"fix_rows": _I32, "fix_start": _I32, "fix_slots": _I32},
        **{"partial_ptr": _F32, "c_ptr": _F32, "N": "i32"},
    },
    "sddmm_rows_kernel": {
        **{"indptr": _I32, "indices": _I32, "values": _F32, "row_map": _I32, "x_ptr": _F32},
        **{"y_ptr": _F32, "out_ptr": _F32, "M": "i32", "W": "i32"},
    },
    "sddmm_nnz_kernel": {
        **{"indptr": _I32, "indices": _I32, "values": _F32, "chunk_rows": _I32, "x_ptr": _F32},
        **{"y_ptr": _F32, "out_ptr": _F32, "nnz": "i32", "chunk": "i32", "W": "i32"},
    },
}
_COMPILED = [  # kernel, constexprs, num_warps, num_stages: each kernel, the space's extremes
    ("spmm_rows_kernel", {"ROWS": 16, "BN": 128, "NZ": 64, "USE_MAP": True}, 2, 3),
    ("spmm_nnz_kernel", {"BN": 32, "NZ": 16}, 8, 1),
    ("spmm_fixup_kernel", {"BN": 128}, 4, 3),
    ("sddmm_rows_kernel", {"ROWS": 1, "BK": 64, "NZ": 64, "USE_MAP": False}, 2, 3),
    ("sddmm_nnz_kernel", {"BK": 16, "NZ": 16}, 8, 1),
]


_COMPILE_SCRIPT = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from cognate.targets.gpu.kernels import load_kernels

module = load_kernels()
for name, signature, constexprs, warps, stages in json.load(sys.stdin):
    source = ASTSource(fn=getattr(module, name), signature=signature, constexprs=constexprs)
    options = {"num_warps": warps, "num_stages": stages}
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    assert compiled.asm["cubin"], name
    print("compiled", name, flush=True)
"""


def test_kernels_compile_for_hopper() -> None:
    """The interpreter does not type-check as the compiler does: compile each kernel for
    sm_90 (Triton ships ptxas; no GPU needed), in a process without the interpreter."""
    import json
    import subprocess
    import sys

    jobs = [
        (name, _SIGNATURES[name] | dict.fromkeys(constexprs, "constexpr"), constexprs, w, s)
        for name, constexprs, w, s in _COMPILED
    ]
    env = os.environ | {"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE_SCRIPT],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("compiled") == len(_COMPILED)
