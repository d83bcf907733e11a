"""The user-facing cpu kernel (zero-copy ``kernel(B, out=C)``), the library references
(MKL inspector-executor, torch.sparse), interleaved timing and the CLI's start-up imports."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cognate import synth
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.search import Candidate, Timings, TuneResult
from cognate.targets import get_target
from cognate.targets.cpu.measure import library
from cognate.targets.cpu.measure.interleave import contenders
from cognate.targets.cpu.tuned import TunedKernel
from cognate.timing import Timed, interleaved, tied

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def dwt(shared: Path):
    return load_matrix(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")


def _result(matrix, op: str, config, width: int) -> TuneResult:
    base = Candidate(1, config, 0.0, "")
    return TuneResult(matrix, "cpu", op, width, [base], base, 1, Path("-"), Timings())


def _family_configs(space, matrix, families=("csr", "dia", "bcsr")):
    """The baseline and the first sampled config of each other family that fits."""
    from cognate.targets.cpu.families import TooLarge, pack

    found = {"csr": space.baseline(matrix.shape)}
    for config in space.sample(200, seed=5, shape=matrix.shape):
        name = space.family(config)
        if name in families and name not in found:
            try:
                pack(matrix, space.op, config.knobs, width=16)
            except TooLarge:
                continue
            found[name] = config
    return found


def test_spmm_writes_into_out_in_place_for_every_family() -> None:
    """out is filled completely (NaN-prefilled, so an entry left unwritten shows), returned
    as is, and equals scipy; a permuted layer (index maps) too."""
    layer = synth.generate("kdiag", 192, 96, sparsity=0.9, seed=0, permute="both")
    space = get_target("cpu").space("spmm")
    configs = _family_configs(space, layer)
    assert set(configs) == {"csr", "dia", "bcsr"}
    b = np.random.default_rng(1).uniform(-1, 1, (96, 16)).astype(np.float32)
    want = layer.csr.astype(np.float64) @ b.astype(np.float64)
    for name, config in configs.items():
        out = np.full((192, 16), np.nan, dtype=np.float32)
        got = _result(layer, "spmm", config, 16).kernel(b, out=out)
        assert got is out, name
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_spmm_call_with_out_allocates_nothing_the_size_of_b_or_c(dwt) -> None:
    """Zero-copy: with float32 C-contiguous B and out given, a call allocates no array of
    B's or C's size (the copying wrapper this replaced allocated both on every call)."""
    space = get_target("cpu").space("spmm")
    result = _result(dwt, "spmm", space.baseline(dwt.shape), 64)
    b = np.random.default_rng(2).uniform(-1, 1, (dwt.shape[1], 64)).astype(np.float32)
    out = np.empty((dwt.shape[0], 64), dtype=np.float32)
    result.kernel(b, out=out)  # packs and compiles
    tracemalloc.start()
    try:
        for _ in range(3):
            result.kernel(b, out=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < min(b.nbytes, out.nbytes) / 4, peak
    np.testing.assert_allclose(out, dwt.csr @ b, rtol=1e-4, atol=1e-5)
    # Without out: one fresh array per call, so an earlier result is never overwritten.
    c1 = result.kernel(b)
    c2 = result.kernel(2 * b)
    assert not np.shares_memory(c1, c2)
    np.testing.assert_allclose(c2, 2 * c1, rtol=1e-5, atol=1e-5)


def test_repeated_calls_on_the_same_arrays_see_new_values_and_shapes(dwt) -> None:
    """The repeat path (same B and out as the last call) reads B's current values, and an
    in-place shape change of B is refused, not run on stale arguments."""
    space = get_target("cpu").space("spmm")
    result = _result(dwt, "spmm", space.baseline(dwt.shape), 8)
    rng = np.random.default_rng(6)
    b = rng.uniform(-1, 1, (dwt.shape[1], 8)).astype(np.float32)
    out = np.empty((dwt.shape[0], 8), dtype=np.float32)
    for _ in range(3):
        b[:] = rng.uniform(-1, 1, b.shape)
        assert result.kernel(b, out=out) is out
        np.testing.assert_allclose(out, dwt.csr @ b, rtol=1e-4, atol=1e-5)
    b.shape = (dwt.shape[1] * 2, 4)
    with pytest.raises(CognateError, match="dense operand 0 has shape"):
        result.kernel(b, out=out)


def test_bad_out_is_one_clear_error(dwt) -> None:
    space = get_target("cpu").space("spmm")
    result = _result(dwt, "spmm", space.baseline(dwt.shape), 8)
    b = np.ones((dwt.shape[1], 8), dtype=np.float32)
    rows = dwt.shape[0]
    cases = [
        (np.empty((rows, 9), dtype=np.float32), "shape"),
        (np.empty((rows, 8), dtype=np.float64), "dtype"),
        (np.empty((8, rows), dtype=np.float32).T, "C-contiguous"),
        (np.empty((rows, 16), dtype=np.float32)[:, ::2], "C-contiguous"),
        ([[0.0] * 8] * rows, "numpy array or torch tensor"),
    ]
    for out, needle in cases:
        with pytest.raises(CognateError, match=needle) as info:
            result.kernel(b, out=out)
        assert "\n" not in str(info.value)


def test_copies_only_when_it_must(dwt) -> None:
    """float64 or strided B is converted (the caller's array untouched) and still right."""
    space = get_target("cpu").space("spmm")
    result = _result(dwt, "spmm", space.baseline(dwt.shape), 8)
    rng = np.random.default_rng(3)
    b64 = rng.uniform(-1, 1, (dwt.shape[1], 8))
    before = b64.copy()
    np.testing.assert_allclose(result.kernel(b64), dwt.csr @ b64, rtol=1e-4, atol=1e-5)
    assert (b64 == before).all()
    wide = rng.uniform(-1, 1, (dwt.shape[1], 16)).astype(np.float32)
    np.testing.assert_allclose(
        result.kernel(wide[:, ::2]), dwt.csr @ wide[:, ::2], rtol=1e-4, atol=1e-5
    )


def test_torch_tensors_in_and_out_without_copies(dwt) -> None:
    import torch

    space = get_target("cpu").space("spmm")
    result = _result(dwt, "spmm", space.baseline(dwt.shape), 16)
    b = torch.rand(dwt.shape[1], 16, requires_grad=True)
    want = dwt.csr @ b.detach().numpy()
    got = result.kernel(b)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
    out = torch.empty(dwt.shape[0], 16)
    assert result.kernel(b, out=out) is out
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
    # A transposed (non-contiguous) tensor is made contiguous, not misread.
    bt = torch.rand(16, dwt.shape[1]).T
    np.testing.assert_allclose(
        result.kernel(bt).numpy(), dwt.csr @ bt.numpy(), rtol=1e-4, atol=1e-5
    )


def test_sddmm_out_holds_the_values_in_csr_order(dwt) -> None:
    space = get_target("cpu").space("sddmm")
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (dwt.shape[0], 16)).astype(np.float32)
    y = rng.uniform(-1, 1, (dwt.shape[1], 16)).astype(np.float32)
    want = dwt.csr.multiply(x.astype(np.float64) @ y.astype(np.float64).T).tocsr()
    for name, config in _family_configs(space, dwt).items():
        out = np.full(dwt.nnz, np.nan, dtype=np.float32)
        got = _result(dwt, "sddmm", config, 16).kernel(x, y, out=out)
        assert np.shares_memory(got.data, out), name
        assert (got.indptr == want.indptr).all() and (got.indices == want.indices).all()
        np.testing.assert_allclose(out, want.data, rtol=1e-4, atol=1e-5, err_msg=name)
    with pytest.raises(CognateError, match="shape"):
        _result(dwt, "sddmm", space.baseline(dwt.shape), 16).kernel(x, y, out=np.empty(3))


def test_tuned_kernel_refuses_another_width(dwt) -> None:
    space = get_target("cpu").space("spmm")
    b = np.ones((dwt.shape[1], 8), dtype=np.float32)
    kernel = TunedKernel(dwt, "spmm", space.baseline(dwt.shape), (b,))
    with pytest.raises(CognateError, match="width 8"):
        kernel(np.ones((dwt.shape[1], 4), dtype=np.float32))


# --- the library references -----------------------------------------------------------------


def test_mkl_inspector_executor_equals_scipy_on_real_matrices(shared: Path) -> None:
    for name in ("dwt_878", "west0479", "bp_1200"):
        csr = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz").csr
        b = np.random.default_rng(5).uniform(-1, 1, (csr.shape[1], 32)).astype(np.float32)
        call = library.mkl_spmm_call(csr, b, threads=2)
        assert call.inspect_s > 0
        call.run()
        np.testing.assert_allclose(call.result(), csr @ b, rtol=1e-4, atol=1e-4, err_msg=name)
        b[:] = 1.0  # B is read in place by the next call
        call.run()
        np.testing.assert_allclose(call.result(), csr @ b, rtol=1e-4, atol=1e-4, err_msg=name)


def test_library_calls_report_what_is_missing(monkeypatch, tmp_path) -> None:
    csr = sp.random(50, 40, density=0.1, format="csr", random_state=0, dtype=np.float32)
    b = np.ones((40, 4), dtype=np.float32)
    monkeypatch.setenv(library.MKL_ENV, str(tmp_path / "absent.so"))
    monkeypatch.setattr(library, "_MKL", None)
    calls, missing = library.library_calls(csr, "spmm", (b,))
    assert [c.name for c in calls] == ["torch.sparse.mm"]
    assert missing["mkl-ie"].startswith("MKL not found")
    calls[0].run()
    np.testing.assert_allclose(calls[0].result(), csr @ b, rtol=1e-5)
    x, y = np.ones((50, 4), np.float32), np.ones((40, 4), np.float32)
    (sddmm,), missing = library.library_calls(csr, "sddmm", (x, y))
    sddmm.run()
    np.testing.assert_allclose(sddmm.result(), csr.data * 4, rtol=1e-5)


# --- interleaved timing ---------------------------------------------------------------------


def test_interleaved_rounds_rank_a_bigger_job_slower() -> None:
    small, big = np.ones(1_000), np.ones(2_000_000)
    order: list[str] = []

    def call(name: str, array: np.ndarray):
        def run() -> float:
            order.append(name)
            return float(array.sum())

        return run

    timed = interleaved({"small": call("small", small), "big": call("big", big)}, rounds=5)
    assert [len(t.samples) for t in timed.values()] == [5, 5]
    assert timed["small"].median < timed["big"].median
    assert timed["big"].spread >= 0
    # Visits alternate: neither call's samples are all taken before the other's.
    firsts = [order.index("big"), order.index("small")]
    assert max(firsts) < len(order) - 1 and "small" in order[order.index("big") :]


def test_tied_compares_medians_with_spreads() -> None:
    a, b = Timed("a", [1.0, 1.1, 1.2, 1.3]), Timed("b", [1.15, 1.2, 1.25, 1.3])
    assert tied(a, b)
    c = Timed("c", [2.0, 2.0, 2.0, 2.0])
    assert not tied(a, c) and c.spread == 0.0


def test_a_lead_within_the_spreads_is_timed_again_against_the_baseline() -> None:
    """The verdict keeps the baseline unless a pick clears it: a pick whose lead is inside
    the spreads is re-timed head to head with the baseline, not with the runner-up."""
    timed = {
        "pick": Timed("pick", [0.70, 0.80, 0.95, 1.10]),  # fastest, spread overlaps base's
        "other": Timed("other", [0.85, 0.90, 0.95, 1.00]),
        "base": Timed("base", [0.90, 1.00, 1.10, 1.30]),
    }
    assert contenders(timed, list(timed), "base") == ["pick", "base"]
    # a lead beyond both spreads is decided: the two fastest only when they tie
    timed["pick"] = Timed("pick", [0.40, 0.40, 0.41, 0.41])
    assert contenders(timed, list(timed), "base") == []
    timed["other"] = Timed("other", [0.40, 0.40, 0.41, 0.42])
    assert contenders(timed, list(timed), "base") == ["pick", "other"]
    # the baseline fastest, or no baseline named: the two fastest when tied
    assert contenders(timed, list(timed), None) == ["pick", "other"]
    assert contenders({"base": timed["base"]}, ["base"], "base") == []


# --- CLI start-up -----------------------------------------------------------------------------


def test_cli_start_up_imports_neither_torch_nor_pandas() -> None:
    """`cognate --help` must stay fast: torch alone took 6 s to import at start-up."""
    code = (
        "import sys, json, cognate.cli; "
        "print(json.dumps([m for m in ('torch', 'pandas', 'ray') if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_verify_job_checks_then_times_under_the_timing_lock(
    dwt, tmp_path, monkeypatch, capsys
) -> None:
    """The timed rounds wait for the machine-wide timing lock (held by another process
    here); a config whose layout is over the size limit gets its status, never a time."""
    from cognate import timing
    from cognate.targets.cpu.measure.interleave import run_job, save_job_matrix

    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    monkeypatch.setenv(timing.JOBS_ENV, str(tmp_path / "jobs"))
    space = get_target("cpu").space("spmm")
    too_large = next(c for c in space.sample(300, seed=2, shape=dwt.shape) if _too_large(dwt, c))
    save_job_matrix(dwt, tmp_path / "a.npz")
    job = {
        "npz": str(tmp_path / "a.npz"),
        "op": "spmm",
        "width": 8,
        "threads": 1,
        "library": False,
        "rounds": 3,
        "configs": [
            {"key": "base", "knobs": dict(space.baseline(dwt.shape).knobs)},
            {"key": "big", "knobs": dict(too_large.knobs)},
        ],
    }
    # The holder keeps the lock until the job says it waits (an event, not a sleep: under
    # load packing and checking can outlast any fixed hold).
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from cognate import timing\n"
            "with timing.timing_lock():\n    print('held', flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(outcome=run_job(job)))
    err = ""
    try:
        assert holder.stdout.readline().strip() == "held"
        worker.start()
        deadline = time.monotonic() + 300
        while "waiting for the timing lock" not in err and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
        if worker.is_alive():
            worker.join()
    assert "waiting for the timing lock" in err
    outcome = result["outcome"]
    base = outcome["configs"]["base"]
    assert base["status"] == "ok" and base["runtime_s"] > 0 and base["rounds"] == 3
    assert outcome["configs"]["big"]["status"] == "too_large"
    assert "runtime_s" not in outcome["configs"]["big"]
    assert outcome["load"]["threads"] == 1 and "unreliable" in outcome["load"]


def _too_large(matrix, config) -> bool:
    from cognate.targets.cpu.families import TooLarge, pack

    try:
        pack(matrix, "spmm", config.knobs, width=8)
    except TooLarge:
        return True
    return False


def test_verify_job_refuses_to_time_a_config_over_the_time_limit(
    dwt, tmp_path, monkeypatch
) -> None:
    from cognate import timing
    from cognate.targets.cpu.measure.interleave import run_job, save_job_matrix

    monkeypatch.setenv(timing.LOCK_ENV, str(tmp_path / "timing.lock"))
    space = get_target("cpu").space("spmm")
    save_job_matrix(dwt, tmp_path / "a.npz")
    job = {
        "npz": str(tmp_path / "a.npz"),
        "op": "spmm",
        "width": 8,
        "threads": 1,
        "library": False,
        "timeout_s": 1e-9,
        "configs": [{"key": "base", "knobs": dict(space.baseline(dwt.shape).knobs)}],
    }
    got = run_job(job)["configs"]["base"]
    assert got["status"] == "timeout" and "over the" in got["error"] and "runtime_s" not in got
