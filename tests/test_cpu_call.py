"""The one-vector kernel call (cognate/targets/cpu/call.py) and the user path on it:
results checked against scipy after the operands and output change between calls."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.targets.cpu.call import ArgvCall, trampoline_source
from cognate.targets.cpu.measure.check import mismatch, reference
from cognate.targets.cpu.measure.verify import _thread_env
from cognate.targets.cpu.pipeline import prepare_kernel
from cognate.targets.cpu.space import make_space
from cognate.targets.cpu.tuned import ScheduleKernel
from cognate.timing import interleaved, wait_policy


@pytest.mark.parametrize("counts", [(0, 0), (30, 11), (-1, 3), (True, 2), (2.0, 1)])
def test_trampoline_source_refuses_bad_counts(counts: tuple) -> None:
    with pytest.raises(CognateError, match="fast call"):
        trampoline_source(*counts)


def test_trampoline_source_is_only_the_counts() -> None:
    text = trampoline_source(3, 2)
    assert "void cognate_argv_3_2(void *fn, const int64_t *a)" in text
    assert "(void *)(intptr_t)a[2], a[3], a[4]" in text


@pytest.fixture(scope="module")
def dwt(shared) -> Matrix:
    return load_matrix(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")


def _b(matrix: Matrix, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (matrix.shape[1], width)).astype(np.float32)


def test_argv_call_runs_the_bound_kernel(dwt: Matrix) -> None:
    b = _b(dwt, 32, 0)
    call = prepare_kernel(dwt, "spmm", make_space("spmm").baseline(dwt.shape), b)
    bound = call.bound
    fast = ArgvCall(bound._fn, bound._args, bound._pointers)
    call.out[:] = np.nan
    fast()
    ref, tol = reference(dwt.csr, "spmm", (b,))
    assert mismatch(call.out, ref, tol) is None
    other = _b(dwt, 32, 1)
    fast.set_pointer(call.pointers - 2, other.ctypes.data)  # B is the last operand
    fast()
    ref, tol = reference(dwt.csr, "spmm", (other,))
    assert mismatch(call.out, ref, tol) is None
    with pytest.raises(CognateError, match="not a pointer"):
        fast.set_pointer(call.pointers, 0)


def test_user_path_follows_new_arrays_numpy_and_torch(dwt: Matrix) -> None:
    kernel = ScheduleKernel(dwt, "spmm", make_space("spmm").baseline(dwt.shape))
    outputs = [np.empty((dwt.shape[0], 16), np.float32) for _ in range(2)]
    for seed in range(3):
        b = _b(dwt, 16, seed)
        ref, tol = reference(dwt.csr, "spmm", (b,))
        out = outputs[seed % 2]
        for _ in range(2):  # the second call is the repeat path
            out[:] = np.nan
            assert kernel(b, out=out) is out
            assert mismatch(out, ref, tol) is None
        b[:] = _b(dwt, 16, seed + 10)  # new values in the same array
        kernel(b, out=out)
        assert mismatch(out, *reference(dwt.csr, "spmm", (b,))) is None
        bt = torch.from_numpy(b.copy())
        ct = torch.full((dwt.shape[0], 16), float("nan"))
        assert kernel(bt, out=ct) is ct
        assert mismatch(ct.numpy(), *reference(dwt.csr, "spmm", (b,))) is None
        fresh = kernel(bt)
        assert isinstance(fresh, torch.Tensor)
        assert mismatch(fresh.numpy(), *reference(dwt.csr, "spmm", (b,))) is None
    strided = torch.from_numpy(_b(dwt, 32, 5)).t().contiguous().t()[:, :16]  # not contiguous
    assert (
        mismatch(kernel(strided).numpy(), *reference(dwt.csr, "spmm", (strided.numpy(),))) is None
    )


def test_torch_out_with_grad_is_not_written_behind_autograd(dwt: Matrix) -> None:
    kernel = ScheduleKernel(dwt, "spmm", make_space("spmm").baseline(dwt.shape))
    b = torch.from_numpy(_b(dwt, 8, 0))
    out = torch.zeros((dwt.shape[0], 8), requires_grad=True)
    with pytest.raises((CognateError, RuntimeError)):
        kernel(b, out=out)


def test_verify_keeps_the_callers_wait_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert "OMP_WAIT_POLICY" not in _thread_env(2)
    assert _thread_env(2)["OMP_NUM_THREADS"] == "2"
    assert wait_policy() == "default"
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert _thread_env(None)["OMP_WAIT_POLICY"] == "PASSIVE"
    assert wait_policy() == "passive"


def test_lead_in_runs_untimed_calls_before_each_sample() -> None:
    counts = {"a": 0}

    def call() -> None:
        counts["a"] += 1

    interleaved({"a": call}, rounds=3, min_sample_s=0.0)
    plain = counts["a"]
    counts["a"] = 0
    interleaved({"a": call}, rounds=3, min_sample_s=0.0, lead_in=True)
    assert counts["a"] == plain + 3  # one untimed call (a sample's worth) per round


def test_sparse_random_matrix_through_both_paths() -> None:
    a = sp.random(300, 200, density=0.02, format="csr", dtype=np.float32, random_state=3)
    matrix = Matrix("r", a)
    kernel = ScheduleKernel(matrix, "spmm", make_space("spmm").baseline(matrix.shape))
    b = _b(matrix, 13, 0)
    assert mismatch(kernel(b), *reference(matrix.csr, "spmm", (b,))) is None


def test_torch_repeat_follows_a_tensor_moved_to_new_storage(dwt: Matrix) -> None:
    kernel = ScheduleKernel(dwt, "spmm", make_space("spmm").baseline(dwt.shape))
    bt = torch.from_numpy(_b(dwt, 16, 0))
    ct = torch.empty((dwt.shape[0], 16))
    kernel(bt, out=ct)
    kernel(bt, out=ct)  # the repeat path
    fresh = torch.from_numpy(_b(dwt, 16, 7))
    bt.set_(fresh)  # same tensor object, other storage
    ct.set_(torch.full((dwt.shape[0], 16), float("nan")))
    assert kernel(bt, out=ct) is ct
    assert mismatch(ct.numpy(), *reference(dwt.csr, "spmm", (fresh.numpy(),))) is None
    b = _b(dwt, 16, 3)  # then numpy arrays, then the tensors again
    assert mismatch(kernel(b), *reference(dwt.csr, "spmm", (b,))) is None
    ct.fill_(float("nan"))
    kernel(bt, out=ct)
    assert mismatch(ct.numpy(), *reference(dwt.csr, "spmm", (fresh.numpy(),))) is None


@pytest.mark.parametrize("shape", [(3, 5), (4096, 64), (1 << 20,)])
def test_zero_pages_are_zero_writable_contiguous(shape: tuple[int, ...]) -> None:
    """Placeholders and outputs on fresh pages: zeros, C-contiguous, writable, of the dtype
    asked, alive as long as the array (below 64 KiB: plain np.zeros)."""
    from cognate.targets.cpu.operands import zero_pages

    for dtype in (np.float32, np.int32):
        a = zero_pages(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous
        assert a.flags.writeable and not a.any()
        a.flat[-1] = 7
        assert a.sum() == 7
