"""The (max, x) / (min, x) SpMM and its backward are kernels of the cpu pipeline (the minmax
family): packed, built and bound by cognate.targets.cpu.pipeline, C source only from
whitelisted integers, and the PyG front end calls them through it, once bound per width."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.targets.cpu import families, pipeline
from cognate.targets.cpu.families import minmax

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def csr(west0479_empty_row: sp.csr_matrix) -> sp.csr_matrix:
    return west0479_empty_row


def reference(csr: sp.csr_matrix, x: np.ndarray, reduce: str) -> tuple[np.ndarray, np.ndarray]:
    out = np.zeros((csr.shape[0], x.shape[1]), np.float32)
    arg = np.full((csr.shape[0], x.shape[1]), minmax.ARG_EMPTY, np.int32)
    for i in range(csr.shape[0]):
        lo, hi = csr.indptr[i], csr.indptr[i + 1]
        if hi > lo:
            products = csr.data[lo:hi, None].astype(np.float32) * x[csr.indices[lo:hi]]
            pick = np.argmax if reduce == "max" else np.argmin  # the first on ties
            arg[i] = lo + pick(products, axis=0)
            out[i] = np.take_along_axis(products, (arg[i] - lo)[None], 0)[0]
    return out, arg


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize(
    "width, tile", [(1, 4), (7, 4), (16, 1), (40, 4), (40, 2), (130, 1), (130, 8), (128, 4)]
)
def test_pipeline_runs_the_minmax_family(
    csr: sp.csr_matrix, reduce: str, width: int, tile: int
) -> None:
    """Every register tile: full passes, the rest in vectors, the scalar tail columns;
    ties (a repeated value) keep the first entry."""
    x = np.random.default_rng(width).standard_normal((csr.shape[1], width)).astype(np.float32)
    x[::3] = np.round(x[::3])  # ties between entries of a row
    knobs = {"family": "minmax", "reduce": reduce, "chunk": 8, "tile": tile}
    call = pipeline.prepare(csr, "spmm", knobs, (x,))
    call()
    want, want_arg = reference(csr, x, reduce)
    np.testing.assert_array_equal(call.result(), want)
    np.testing.assert_array_equal(call.bound.arg, want_arg)
    grad = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    back = pipeline.prepare(csr, "route", knobs, (grad, call.bound.arg.copy()))
    back()
    back()  # the kernel zeroes dX itself: a second call gives the same
    dx = np.zeros((csr.shape[1], width), np.float64)
    rows, cols = np.nonzero(want_arg >= 0)
    k = want_arg[rows, cols]
    np.add.at(dx, (csr.indices[k], cols), csr.data[k] * grad[rows, cols])
    np.testing.assert_allclose(back.result(), dx, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("width, tile", [(7, 4), (40, 2), (130, 8)])
def test_without_args_the_output_is_the_same(csr: sp.csr_matrix, width: int, tile: int) -> None:
    """``args: 0`` (an input needing no gradient) gives the same output and never writes
    the args; the front end takes it for an input that does not require grad."""
    from cognate.torch.pyg.minmax import MinMaxCSR, spmm_minmax

    x = np.random.default_rng(width).standard_normal((csr.shape[1], width)).astype(np.float32)
    x[7, :3] = np.nan
    knobs = {"family": "minmax", "reduce": "max", "chunk": 8, "tile": tile, "args": 0}
    call = pipeline.prepare(csr, "spmm", knobs, (x,))
    call()
    want, _ = reference(csr, np.nan_to_num(x, nan=0.0), "max")
    got = call.result()
    nan_rows = np.unique(np.nonzero(csr[:, 7].toarray())[0])
    assert np.isnan(got[nan_rows, :3]).all()
    keep = np.ones(got.shape, bool)
    keep[nan_rows, :3] = False
    np.testing.assert_array_equal(got[keep], want[keep])
    assert not call.bound.arg.any()  # untouched zero pages
    operand = MinMaxCSR(csr, measure=False)
    out = spmm_minmax(operand, torch.from_numpy(x), "max")
    np.testing.assert_array_equal(out.numpy(), got)
    assert ("max", width, 0) in operand.choices and ("max", width, 1) not in operand.choices


@pytest.mark.parametrize(
    "op, knobs, width, words",
    [
        ("spmm", {"reduce": "avg", "chunk": 8}, 8, "reduce must be one of max, min"),
        ("spmm", {"reduce": "max; system()", "chunk": 8}, 8, "reduce must be one of"),
        ("spmm", {"reduce": "max", "chunk": 8}, 5000, "outside 1..4096"),
        ("spmm", {"reduce": "max", "chunk": "8"}, 8, "chunk must be an integer"),
        ("spmm", {"reduce": "max", "chunk": 8, "tile": 3}, 8, "tile must be one of 1, 2, 4, 8"),
        ("spmm", {"reduce": "max", "chunk": 8, "tile": "4)"}, 8, "tile must be one of"),
        ("spmm", {"reduce": "max", "chunk": 8, "args": 2}, 8, "args must be 0 or 1"),
        ("sddmm", {"reduce": "max", "chunk": 8}, 8, "op must be one of spmm, route"),
    ],
)
def test_minmax_knobs_are_whitelisted(op: str, knobs: dict, width: int, words: str) -> None:
    with pytest.raises(CognateError, match=words):
        families.kernel_source(op, {"family": "minmax", **knobs}, width)


def test_source_holds_only_the_checked_integers() -> None:
    text, function, args = families.kernel_source(
        "spmm", {"family": "minmax", "reduce": "min", "chunk": 8}, 24
    )
    assert function == "cognate_minmax_spmm" and args == {"chunk": 8}
    assert "#define WIDTH 24" in text and "#define IS_MIN 1" in text and "$" not in text
    route_max = families.kernel_source(
        "route", {"family": "minmax", "reduce": "max", "chunk": 8}, 24
    )
    route_min = families.kernel_source(
        "route", {"family": "minmax", "reduce": "min", "chunk": 8}, 24
    )
    assert route_max[0] == route_min[0]  # one backward library for both reduces


def test_wrong_operands_are_one_line(csr: sp.csr_matrix) -> None:
    knobs = {"family": "minmax", "reduce": "max", "chunk": 8}
    with pytest.raises(CognateError, match="X must be a C-contiguous float32"):
        pipeline.prepare(csr, "spmm", knobs, (np.zeros((csr.shape[1], 4), np.float64),))
    grad = np.zeros((csr.shape[0], 4), np.float32)
    with pytest.raises(CognateError, match="the args must be a C-contiguous int32"):
        pipeline.prepare(csr, "route", knobs, (grad, grad))


@pytest.mark.parametrize("measure", [False, True])
def test_front_end_binds_once_per_width(csr: sp.csr_matrix, monkeypatch, measure: bool) -> None:
    """Bound once per width and reduce; measuring first binds each schedule of the space once
    (timed on this graph) and keeps the fastest, which every later call reuses."""
    from cognate.torch.pyg.minmax import MinMaxCSR, space, spmm_minmax

    bound: list[str] = []
    bind = pipeline.bind

    def counting(packed, config, operands, lib_path=None):
        bound.append(packed.structure.op)
        return bind(packed, config, operands, lib_path)

    monkeypatch.setattr(pipeline, "bind", counting)
    operand = MinMaxCSR(csr, measure=measure)
    for seed in range(3):
        x = torch.randn(csr.shape[1], 12, generator=torch.Generator().manual_seed(seed))
        out = spmm_minmax(operand, x.requires_grad_(), "max")
        out.sum().backward()
        want, _ = reference(csr, x.detach().numpy(), "max")
        np.testing.assert_array_equal(out.detach().numpy(), want)
    configs, baseline = space()
    timed = len(configs) if measure else 0
    assert bound == ["spmm"] * (timed + 1) + ["route"]
    choice = operand.choices[("max", 12, 1)]
    assert (choice in configs) if measure else (choice == baseline)
    assert (operand.tuning_s > 0) == measure
