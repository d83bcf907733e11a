"""cognate.torch: tuned SpMM / SDDMM as differentiable PyTorch operators, against torch.sparse
in float64 on real matrices; errors, no_grad, torch.compile, the choice cache, SparseLinear
and a GCN that trains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

import cognate.torch as ct  # noqa: E402
from cognate import synth  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402
from cognate.torch import choices  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Real matrices of a few thousand entries: non-symmetric, symmetric pattern, rectangular.
MATRICES = ("west0479", "dwt_878", "lp_share1b")
TOL = 1e-4  # relative error (Frobenius) against float64, float32 kernels


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.to_dense() if want.layout != torch.strided else want
    got, want = got.detach().double(), want.detach()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


@pytest.fixture(scope="module")
def operands(shared: Path) -> dict:
    """Each matrix once, tuned at width 16 with trainable values (module scope: tuning costs
    a ranking per kernel)."""
    found = {}
    for name in MATRICES:
        m = load_matrix(shared / "matrices" / "suitesparse" / f"{name}.mtx.gz")
        found[name] = ct.TunedSparse(m, widths=(16,), requires_grad=True)
    return found


def reference(ts: ct.TunedSparse) -> torch.Tensor:
    """A as a float64 torch sparse COO tensor whose values require grad (A's CSR order)."""
    csr = ts.matrix.csr
    rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
    index = torch.from_numpy(np.vstack([rows, csr.indices]).astype(np.int64))
    values = torch.from_numpy(csr.data.astype(np.float64)).requires_grad_(True)
    return torch.sparse_coo_tensor(index, values, csr.shape, is_coalesced=True), values


@pytest.mark.parametrize("name", MATRICES)
def test_spmm_and_its_gradients_match_torch_sparse(operands, name) -> None:
    """Y = A @ X, dX = A^T @ dY and dvalues = SDDMM(A, dY, X) within 1e-4 of torch.sparse.mm
    in float64; A^T @ X (spmm_t) too."""
    ts = operands[name]
    rows, cols = ts.shape
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(cols, 16, generator=gen, requires_grad=True)
    grad = torch.randn(rows, 16, generator=gen)
    ts.values.grad = None
    y = ct.spmm(ts, x)
    y.backward(grad)
    a, vals = reference(ts)
    x64 = x.detach().double().requires_grad_(True)
    want = torch.sparse.mm(a, x64)
    want.backward(grad.double())
    assert rel(y.detach(), want.detach()) <= TOL
    assert rel(x.grad, x64.grad) <= TOL
    assert rel(ts.values.grad, vals.grad) <= TOL
    z = torch.randn(rows, 16, generator=gen)
    back = ct.spmm_t(ts, z)
    assert back.shape == (cols, 16)
    assert rel(back, torch.sparse.mm(a.detach().t(), z.double())) <= TOL


@pytest.mark.parametrize("name", MATRICES)
def test_sddmm_and_its_gradients_match_torch_sparse(operands, name) -> None:
    """A * (X @ Y^T) at A's pattern and its gradients in X, Y and A's values within 1e-4 of
    torch.sparse.sampled_addmm in float64."""
    ts = operands[name]
    rows, cols = ts.shape
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(rows, 16, generator=gen, requires_grad=True)
    y = torch.randn(cols, 16, generator=gen, requires_grad=True)
    grad = torch.randn(ts.nnz, generator=gen)
    ts.values.grad = None
    got = ct.sddmm(ts, x, y)
    got.backward(grad)
    pattern = ts.to_torch(torch.ones(ts.nnz, dtype=torch.float64))
    x64 = x.detach().double().requires_grad_(True)
    y64 = y.detach().double().requires_grad_(True)
    vals = torch.from_numpy(ts.matrix.csr.data.astype(np.float64)).requires_grad_(True)
    sampled = torch.sparse.sampled_addmm(pattern, x64, y64.t(), beta=0.0).values()
    want = vals * sampled
    want.backward(grad.double())
    assert got.shape == (ts.nnz,)
    assert rel(got.detach(), want.detach()) <= TOL
    assert rel(x.grad, x64.grad) <= TOL
    assert rel(y.grad, y64.grad) <= TOL
    assert rel(ts.values.grad, vals.grad) <= TOL
    as_csr = ts.to_torch(got.detach())
    assert as_csr.layout == torch.sparse_csr and as_csr.shape == ts.shape


def test_gradcheck_in_float32_with_a_wide_step(shared: Path) -> None:
    """torch.autograd.gradcheck (fast mode) on both ops. The kernels are float32 only, so the
    check runs in float32: both ops are linear in each input, so central differences are
    exact up to rounding, and a step of 1e-2 keeps that rounding near 1e-4."""
    m = load_matrix(shared / "matrices" / "suitesparse" / "lp_share1b.mtx.gz")
    ts = ct.TunedSparse(m, candidates=2000)  # a smaller candidate set: a faster ranking
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(m.shape[1], 3, generator=gen, requires_grad=True)
    vals = ts.values.detach().clone().requires_grad_(True)
    xs = torch.randn(m.shape[0], 3, generator=gen, requires_grad=True)
    options = {"eps": 1e-2, "atol": 5e-3, "rtol": 5e-3, "fast_mode": True}
    with pytest.warns(UserWarning):  # gradcheck warns that the inputs are not float64
        assert torch.autograd.gradcheck(lambda a, v: ct.spmm(ts, a, v), (x, vals), **options)
        assert torch.autograd.gradcheck(
            lambda a, b, v: ct.sddmm(ts, a, b, v), (xs, x, vals), **options
        )


@pytest.mark.parametrize("name", ["dwt_878", "west0479"])
def test_trainable_values_changed_in_place_are_used_by_the_next_call(operands, name) -> None:
    """Values changed in place (as an optimizer step does; here no longer symmetric) are used
    by the next call of A and of A^T (dwt_878: one kernel shared by A and A^T)."""
    ts = ct.TunedSparse(operands[name].matrix, requires_grad=True)
    x = torch.randn(ts.shape[1], 8)
    assert rel(ts @ x, torch.sparse.mm(reference(ts)[0].detach(), x.double())) <= TOL
    with torch.no_grad():
        ts.values.copy_(torch.randn(ts.nnz, generator=torch.Generator().manual_seed(6)))
    a, _ = reference(ts)
    a = torch.sparse_coo_tensor(a.indices(), ts.values.detach().double(), ts.shape)
    assert rel(ts @ x, torch.sparse.mm(a, x.double())) <= TOL
    assert rel(ct.spmm_t(ts, x), torch.sparse.mm(a.t(), x.double())) <= TOL
    assert rel(ts @ x, torch.sparse.mm(a, x.double())) <= TOL  # reloaded after A^T's values


def test_no_grad_and_non_contiguous_inputs(operands) -> None:
    ts = operands["west0479"]
    x = torch.randn(16, ts.shape[1]).t()  # a transposed view: copied once, same result
    assert not x.is_contiguous()
    with torch.no_grad():
        y = ts @ x
    assert not y.requires_grad
    assert rel(y, torch.sparse.mm(reference(ts)[0].detach(), x.double())) <= TOL


def test_clear_errors_for_bad_inputs(operands) -> None:
    ts = operands["west0479"]
    cols = ts.shape[1]
    with pytest.raises(TypeError, match="float32 only"):
        ct.spmm(ts, torch.randn(cols, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"shape \(5, 4\), expected \(479, width\)"):
        ct.spmm(ts, torch.randn(5, 4))
    with pytest.raises(ValueError, match="meta"):
        ct.spmm(ts, torch.empty(cols, 4, device="meta"))
    with pytest.raises(ValueError, match="values has shape"):
        ct.spmm(ts, torch.randn(cols, 4), torch.randn(3))
    with pytest.raises(ValueError, match="must agree"):
        ct.sddmm(ts, torch.randn(479, 4), torch.randn(479, 5))
    with pytest.raises(TypeError, match="TunedSparse"):
        ct.spmm(sp.eye(3), torch.randn(3, 2))
    with pytest.raises(CognateError, match="cpu kernels only"):
        ct.TunedSparse(ts.matrix, target="gpu")
    with pytest.raises(CognateError, match="dense width"):
        ts.prepare(0)
    with pytest.raises(CognateError, match=r"1\.\.4096"):  # cannot be tuned: no fallback
        ts @ torch.zeros(cols, 5000)
    with pytest.raises(CognateError, match="sparse COO or CSR"):
        ct.TunedSparse(torch.randn(3, 3))


def test_torch_compile_composes_and_at_falls_back(operands) -> None:
    """ct.spmm / ts.matmul compile into one graph (fullgraph) as custom ops; ``ts @ x`` is not
    traceable by dynamo: fullgraph raises, a plain torch.compile falls back to eager."""
    ts = operands["west0479"]
    x = torch.randn(ts.shape[1], 16, requires_grad=True)
    want = torch.relu(ts @ x).sum()
    compiled = torch.compile(lambda a: torch.relu(ts.matmul(a)).sum(), fullgraph=True,
                             backend="aot_eager")  # fmt: skip
    got = compiled(x)
    got.backward()
    assert torch.allclose(got, want, rtol=1e-5)
    assert x.grad is not None and x.grad.abs().sum() > 0
    with pytest.raises(Exception, match="proxy"):
        torch.compile(lambda a: (ts @ a).sum(), fullgraph=True, backend="aot_eager")(x)
    fallback = torch.compile(lambda a: torch.relu(ts @ a).sum(), backend="aot_eager")
    assert torch.allclose(fallback(x), want, rtol=1e-5)


def test_building_again_reuses_the_choices(shared: Path) -> None:
    """A second TunedSparse of the same matrix ranks nothing: the choices come from this
    process's memo, and, with the memo cleared, from the file under the cognate home."""
    m = load_matrix(shared / "matrices" / "suitesparse" / "rajat19.mtx.gz")
    first = ct.TunedSparse(m, widths=(8,))
    assert {c.source for c in first.choices.values()} <= {"ranked", "reused from A", "memo"}
    again = ct.TunedSparse(m, widths=(8,))
    assert {c.source for c in again.choices.values()} <= {"memo", "reused from A"}
    choices._MEMO.clear()
    third = ct.TunedSparse(m, widths=(8,))
    assert third.choices[("spmm", "A", 8)].source == "cache"
    assert third.choices[("spmm", "A", 8)].config == first.choices[("spmm", "A", 8)].config


def test_torch_sparse_inputs_and_transpose_modes(shared: Path) -> None:
    """A torch sparse CSR or COO tensor is an operand; ``transpose="tune"`` ranks A^T itself
    and gives the same gradients."""
    m = load_matrix(shared / "matrices" / "suitesparse" / "west0479.mtx.gz")
    a = torch.sparse_csr_tensor(
        torch.from_numpy(m.csr.indptr.astype(np.int64)),
        torch.from_numpy(m.csr.indices.astype(np.int64)),
        torch.from_numpy(m.csr.data),
        size=m.shape,
    )
    ts = ct.TunedSparse(a, transpose="tune")
    coo = ct.TunedSparse(a.to_sparse_coo())
    assert ts.matrix.sha256 == coo.matrix.sha256 == m.sha256
    assert ts.choices == {} and ts.widths == ()
    x = torch.randn(479, 8, requires_grad=True)
    (ts @ x).square().sum().backward()
    assert ts.choices[("spmm", "T", 8)].source != "reused from A"
    want = x.grad.clone()
    x.grad = None
    (coo @ x).square().sum().backward()
    assert coo.choices[("spmm", "T", 8)].source == "reused from A"
    assert rel(x.grad, want.double()) <= TOL


def _normalised_adjacency(matrix) -> sp.csr_matrix:
    """GCN's D^-1/2 (A + I) D^-1/2 of the symmetrised pattern."""
    pattern = (abs(matrix.csr) + abs(matrix.csr.T) + sp.eye(matrix.shape[0])).tocsr()
    pattern.data[:] = 1.0
    scale = 1.0 / np.sqrt(np.asarray(pattern.sum(axis=1)).ravel())
    return sp.diags(scale) @ pattern @ sp.diags(scale)


def test_two_layer_gcn_trains(shared: Path) -> None:
    """A 2-layer GCN (hidden 16) on dwt_878's graph: five Adam steps lower the loss, and the
    first step's weight gradients equal the torch.sparse model's."""
    m = load_matrix(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")
    adj = _normalised_adjacency(m)
    ts = ct.TunedSparse(adj, widths=(16, 4))
    assert ts.symmetric  # A^T runs on A's own kernel: tuned and packed once per width
    reference = ts.to_torch()
    gen = torch.Generator().manual_seed(3)
    features = torch.randn(m.shape[0], 12, generator=gen)
    labels = torch.randint(0, 4, (m.shape[0],), generator=gen)
    w1 = torch.nn.Parameter(torch.randn(12, 16, generator=gen) * 0.3)
    w2 = torch.nn.Parameter(torch.randn(16, 4, generator=gen) * 0.3)

    def loss_of(spmm) -> torch.Tensor:
        hidden = torch.relu(spmm(features @ w1))
        return torch.nn.functional.cross_entropy(spmm(hidden @ w2), labels)

    base = loss_of(lambda h: torch.sparse.mm(reference, h))
    want = torch.autograd.grad(base, (w1, w2))
    optimizer = torch.optim.Adam([w1, w2], lr=0.05)
    losses = []
    for step in range(5):
        optimizer.zero_grad()
        loss = loss_of(ts.matmul)
        loss.backward()
        if step == 0:
            assert abs(loss.item() - base.item()) <= TOL * base.item()
            assert rel(w1.grad, want[0].double()) <= TOL
            assert rel(w2.grad, want[1].double()) <= TOL
        losses.append(loss.item())
        optimizer.step()
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("kind", ["kdiag", "nm", "block"])
def test_sparse_linear_on_permuted_masks_trains(kind) -> None:
    """SparseLinear on a permuted DynaDiag / N:M / block mask: the forward equals x @ W^T + b
    with W dense (the permutations in W's index maps), the weight gradient is W's dense
    gradient at the mask, and a few SGD steps fit a target better."""
    mask = synth.generate(kind, 48, 40, sparsity=0.75, seed=4).structured()
    rng = np.random.default_rng(5)
    row_perm, col_perm = rng.permutation(48), rng.permutation(40)
    layer = ct.SparseLinear(mask, row_perm=row_perm, col_perm=col_perm, candidates=2000)
    assert layer.operand.matrix.permuted
    dense = torch.zeros(48, 40)
    coo = sp.coo_matrix(mask)
    dense[row_perm[coo.row], col_perm[coo.col]] = 1.0
    w = layer.dense_weight()
    assert not ((w != 0) & (dense == 0)).any()  # the values live on the permuted mask
    x = torch.randn(2, 8, 40, requires_grad=True)  # leading dims are kept
    y = layer(x)
    assert y.shape == (2, 8, 48)
    assert torch.allclose(y, x @ w.t() + layer.bias, atol=1e-5)
    y.square().sum().backward()
    w_ref = w.clone().requires_grad_(True)
    x_ref = x.detach().clone().requires_grad_(True)
    (x_ref @ w_ref.t() + layer.bias.detach()).square().sum().backward()
    got = layer.operand.to_torch(layer.weight.grad).to_dense()
    assert rel(got, (w_ref.grad * dense).double()) <= TOL
    assert rel(x.grad, x_ref.grad.double()) <= TOL  # through W^T, permuted maps swapped
    target = torch.randn(16, 48)
    inputs = torch.randn(16, 40)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.05)
    losses = []
    for _ in range(6):
        optimizer.zero_grad()
        loss = (layer(inputs) - target).square().mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_sparse_linear_rejects_bad_masks_and_inputs() -> None:
    with pytest.raises(CognateError, match="keeps no entry"):
        ct.SparseLinear(np.zeros((4, 4)))
    with pytest.raises(CognateError, match="already carries index maps"):
        ct.SparseLinear(synth.generate("kdiag", 8, 8, sparsity=0.5, permute="rows"),
                        row_perm=np.arange(8))  # fmt: skip
    layer = ct.SparseLinear(np.eye(6, 5), bias=False)
    with pytest.raises(ValueError, match=r"expected \(\.\.\., 5\)"):
        layer(torch.randn(3, 6))


def test_import_cognate_does_not_load_torch_or_this_package() -> None:
    code = "import sys, cognate; print('torch' in sys.modules, 'cognate.torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_gcn_example_trains_the_same_with_both_backends(shared: Path, capsys) -> None:
    """examples/gcn.py: the cognate and the torch.sparse backends print the same losses."""
    import runpy

    example = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "gcn.py"))
    graph = str(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")
    losses = {}
    for backend in ("cognate", "torch"):
        argv = [graph, "--backend", backend, "--epochs", "10", "--hidden", "16", "--features", "8"]
        assert example["main"](argv) == 0
        lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("epoch")]
        losses[backend] = [float(ln.split()[3]) for ln in lines]
    assert losses["cognate"] == pytest.approx(losses["torch"], rel=1e-3)
    assert losses["cognate"][-1] < losses["cognate"][0]


def test_new_values_written_at_value_slots_are_used_by_every_family() -> None:
    """TunedKernel.packed_values / value_slots (what TunedSparse loads trained values
    through) for the csr, DIA and BCSR layouts of a permuted k-diagonal layer, SpMM and
    SDDMM: the next call computes with the new values; sddmm_values equals the CSR result."""
    from cognate.matrix import Matrix as M
    from cognate.targets import get_target
    from cognate.targets.cpu.families import TooLarge, pack
    from cognate.targets.cpu.tuned import TunedKernel

    layer = synth.generate("kdiag", 96, 64, sparsity=0.9, seed=7, permute="both")
    rng = np.random.default_rng(8)
    new = rng.standard_normal(layer.nnz).astype(np.float32)
    changed = M("changed", sp.csr_matrix((new, layer.csr.indices, layer.csr.indptr), layer.shape))
    b = rng.uniform(-1, 1, (64, 8)).astype(np.float32)
    x = rng.uniform(-1, 1, (96, 8)).astype(np.float32)
    for op, operands in (("spmm", (b,)), ("sddmm", (x, b))):
        space = get_target("cpu").space(op)
        seen = set()
        for config in [space.baseline(layer.shape), *space.sample(300, 9, layer.shape)]:
            family = space.family(config)
            if family in seen:
                continue
            try:
                pack(layer, op, config.knobs, width=8)
            except TooLarge:
                continue
            seen.add(family)
            kernel = TunedKernel(layer, op, config, operands)
            kernel.packed_values[kernel.value_slots] = new
            got = kernel(*operands)
            want = TunedKernel(changed, op, config, operands)(*operands)
            if op == "sddmm":
                values = kernel.sddmm_values(operands, np.empty(layer.nnz, np.float32))
                np.testing.assert_allclose(values, got.data, rtol=0, atol=0)
                got, want = got.toarray(), want.toarray()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{op} {family}")
        assert seen == {"csr", "dia", "bcsr", "reordered", "panel"}, op
