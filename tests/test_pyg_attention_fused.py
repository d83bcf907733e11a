"""GATConv's and TransformerConv's aggregation fused (the attention family of the cpu
pipeline, kernels/pyg/edge_attention.c): each op against a float64 reference written from
the formulas, every knob checked before C sees it, the PyG front end on the fused kernels
(not kron(A, I)) where there is no dropout, and its second-order gradients and NaN handling
equal to PyG's."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.targets.cpu import families, pipeline

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric", reason="torch_geometric not installed (cognate[pyg])")

from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv  # noqa: E402

import cognate.torch.pyg as cp  # noqa: E402
from cognate.torch.pyg import attention  # noqa: E402

SLOPE = 0.2


@pytest.fixture(scope="module")
def csr(west0479_empty_row: sp.csr_matrix) -> sp.csr_matrix:
    return west0479_empty_row


def reference(
    csr: sp.csr_matrix, score: str, heads: int, src, dst, x, dout
) -> dict[str, np.ndarray]:
    """Every op's outputs in float64, a row at a time from the formulas (``score``:
    "additive", src / dst nodes x heads, or "dot", nodes x heads * C)."""
    n, cols, c = csr.shape[0], csr.shape[1], x.shape[1] // heads
    x3, g3 = x.reshape(-1, heads, c).astype(np.float64), dout.reshape(n, heads, c)
    src, dst = src.astype(np.float64), dst.astype(np.float64)
    want = {
        "out": np.zeros((n, heads, c)),
        "alpha": np.zeros((csr.nnz, heads)),
        "dpre": np.zeros((csr.nnz, heads)),
        "ddst": np.zeros(dst.shape),
        "dx": np.zeros((cols, heads, c)),
        "dsrc": np.zeros(src.shape),
    }
    for i in range(n):
        lo, hi = csr.indptr[i], csr.indptr[i + 1]
        if hi == lo:
            continue
        j = csr.indices[lo:hi]
        if score == "additive":
            pre = src[j] + dst[i]
            s = np.where(pre > 0, pre, SLOPE * pre)
        else:
            k3, q3 = src[j].reshape(-1, heads, c), dst[i].reshape(heads, c)
            s = np.einsum("hc,khc->kh", q3, k3) / np.sqrt(c)
        e = np.exp(s - s.max(0))
        alpha = e / (e.sum(0) + 1e-16)
        want["alpha"][lo:hi] = alpha
        want["out"][i] = np.einsum("kh,khc->hc", alpha, x3[j])
        d = np.einsum("hc,khc->kh", g3[i], x3[j])
        ds = alpha * (d - (alpha * d).sum(0))
        np.add.at(want["dx"], j, alpha[:, :, None] * g3[i][None])
        if score == "additive":
            dpre = ds * np.where(pre > 0, 1.0, SLOPE)
            want["ddst"][i] = dpre.sum(0)
            np.add.at(want["dsrc"], j, dpre)
        else:
            dpre = ds / np.sqrt(c)
            want["ddst"][i] = np.einsum("kh,khc->hc", dpre, k3).reshape(-1)
            np.add.at(want["dsrc"], j, (dpre[:, :, None] * q3[None]).reshape(len(j), -1))
        want["dpre"][lo:hi] = dpre
    return want


@pytest.mark.parametrize("score", ["additive", "dot"])
@pytest.mark.parametrize("heads, channels", [(1, 16), (3, 5), (4, 16), (2, 20)])
def test_pipeline_runs_the_attention_family(
    csr: sp.csr_matrix, score: str, heads: int, channels: int
) -> None:
    """forward, backward and transpose on a real pattern with an empty row: whole vectors,
    scalar channels, head counts that do not divide a vector."""
    rng = np.random.default_rng(heads * channels)
    n, wide = csr.shape[0], heads * channels
    score_width = heads if score == "additive" else wide
    src, dst = (rng.standard_normal((n, score_width), dtype=np.float32) for _ in range(2))
    x, dout = (rng.standard_normal((n, wide), dtype=np.float32) for _ in range(2))
    param = SLOPE if score == "additive" else np.sqrt(channels)
    params = np.array([[param]], np.float32)
    knobs = {"family": "attention", "score": score, "heads": heads, "chunk": 8}
    want = reference(csr, score, heads, src, dst, x, dout)

    def close(got: np.ndarray, name: str) -> None:
        np.testing.assert_allclose(got.reshape(want[name].shape), want[name], rtol=2e-5, atol=2e-6)

    forward = pipeline.prepare(csr, "forward", knobs, (src, dst, x, params))
    forward()
    out, alpha = forward.bound.outputs
    close(out, "out")
    close(alpha, "alpha")
    alpha = alpha.copy()
    backward = pipeline.prepare(csr, "backward", knobs, (src, dst, x, alpha, dout, params))
    backward()
    dpre, ddst = backward.bound.outputs
    close(dpre, "dpre")
    close(ddst, "ddst")
    transpose = pipeline.prepare(csr, "transpose", knobs, (alpha, dpre.copy(), dout, dst))
    transpose()
    dx, dsrc = transpose.bound.outputs
    close(dx, "dx")
    close(dsrc, "dsrc")


@pytest.mark.parametrize(
    "op, knobs, width, words",
    [
        ("forward", {"heads": 2, "score": "cosine"}, 8, "score must be one of additive, dot"),
        ("forward", {"heads": 2, "score": 1}, 8, "score must be one of additive, dot"),
        ("forward", {"heads": 0}, 8, "heads must be an integer in 1..64"),
        ("forward", {"heads": 65}, 8, "heads must be an integer in 1..64"),
        ("forward", {"heads": True}, 8, "heads must be an integer"),
        ("forward", {"heads": "4; system()"}, 8, "heads must be an integer"),
        ("forward", {"heads": 64}, 65, "heads x channels = 4160, over 4096"),
        ("forward", {"heads": 2}, 0, "channels per head must be a positive integer"),
        ("forward", {"heads": 2, "chunk": "8"}, 8, "chunk must be an integer"),
        ("scores", {"heads": 2}, 8, "op must be one of forward, backward, transpose"),
    ],
)
def test_attention_knobs_are_whitelisted(op: str, knobs: dict, width: int, words: str) -> None:
    with pytest.raises(CognateError, match=words.replace("(", r"\(")):
        knobs = {"family": "attention", "chunk": 8, "score": "additive", **knobs}
        families.kernel_source(op, knobs, width)


def test_attention_operands_are_checked(csr: sp.csr_matrix) -> None:
    n = csr.shape[0]
    ok = np.zeros((n, 2), np.float32)
    x = np.zeros((n, 16), np.float32)
    params = np.zeros((1, 1), np.float32)
    knobs = {"family": "attention", "score": "additive", "heads": 2, "chunk": 8}
    with pytest.raises(CognateError, match=r"dst has shape \(10, 2\), expected \(479, 2\)"):
        pipeline.prepare(csr, "forward", knobs, (ok, ok[:10], x, params))
    with pytest.raises(CognateError, match="not a multiple of 2 heads"):
        pipeline.prepare(csr, "forward", knobs, (ok, ok, x[:, :15].copy(), params))
    with pytest.raises(CognateError, match="C-contiguous 2-D float32"):
        pipeline.prepare(csr, "forward", knobs, (ok, ok, x.astype(np.float64), params))
    with pytest.raises(CognateError, match="expected 4 operands"):
        pipeline.prepare(csr, "transpose", knobs, (ok, ok))
    dot = {**knobs, "score": "dot"}  # the scores' operands are as wide as x
    with pytest.raises(CognateError, match=r"src has shape \(479, 2\), expected \(479, 16\)"):
        pipeline.prepare(csr, "forward", dot, (ok, x, x, params))


@pytest.fixture(scope="module")
def graph(shared: Path) -> dict:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "dwt_878.mtx.gz")
    coo = matrix.csr.tocoo()
    edge_index = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    n = matrix.shape[0]
    return {
        "edge_index": edge_index,
        "adj_t": cp.adjacency(edge_index, n),
        "x": torch.randn(n, 16, generator=torch.Generator().manual_seed(0)),
    }


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize(
    "make, key, score",
    [
        (lambda **kw: GATConv(16, 8, heads=2, **kw), "loops", "additive"),
        (lambda **kw: TransformerConv(16, 8, heads=2, **kw), "plain", "dot"),
    ],
)
def test_attention_runs_the_fused_kernels(graph: dict, make, key: str, score: str) -> None:
    """Without dropout the aggregation is the three fused kernels, no kron(A, I_heads)
    product; with dropout in training it is the torch ops and the tuned kron(A, I) products;
    in eval mode with dropout set, the fused kernels again."""
    entry = cp._entry(graph["adj_t"])
    x = graph["x"].clone().requires_grad_()
    make()(x, graph["adj_t"]).sum().backward()
    p = entry.attention[key]
    built = sorted(k for k in p.fused._kernels if k[1] == score)
    assert built == [(op, score, 2, 8) for op in ("backward", "forward", "transpose")]
    assert 2 not in p.heads
    layer = make(dropout=0.5)
    layer(x, graph["adj_t"]).sum().backward()
    assert 2 in p.heads  # training with dropout: the kron product's tuned kernels
    layer.eval()
    eval_out = layer(graph["x"], graph["adj_t"])
    assert rel(eval_out, layer(graph["x"], graph["edge_index"])) < 1e-6


@pytest.mark.parametrize(
    "make",
    [lambda: GATConv(16, 8, heads=3), lambda: TransformerConv(16, 8, heads=3, beta=True)],
    ids=["gat", "transformer"],
)
def test_second_order_and_nan_equal_pyg(graph: dict, make) -> None:
    """A gradient penalty (create_graph=True) through the fused aggregation: every
    parameter's gradient equals PyG's; a NaN or infinite feature spoils the same outputs."""
    torch.manual_seed(0)
    reference = make()
    ours = copy.deepcopy(reference)
    grads = []
    for layer, adj in ((reference, graph["edge_index"]), (ours, graph["adj_t"])):
        x = graph["x"].clone().requires_grad_()
        (g,) = torch.autograd.grad((layer(x, adj) ** 2).sum(), x, create_graph=True)
        (g**2).sum().backward()
        grads.append([x.grad, *(p.grad for p in layer.parameters())])
    scale = max(float(g.norm()) for g in grads[0])
    for got, want in zip(grads[1], grads[0], strict=True):
        # a gradient zero in real arithmetic (a key bias under a softmax): 1e-6 of the largest
        assert float((got - want).norm()) <= 1e-5 * max(float(want.norm()), 0.1 * scale)
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = graph["x"].clone()
        x[3, 2] = bad
        with torch.no_grad():
            want, got = reference(x, graph["edge_index"]), ours(x, graph["adj_t"])
        assert torch.equal(got.isnan(), want.isnan()) and want.isnan().any()
        assert rel(got.nan_to_num(), want.nan_to_num()) < 1e-5


def test_fused_refuses_wrong_shapes(graph: dict) -> None:
    p = attention.pattern(cp._entry(graph["adj_t"]), True)
    layer = GATConv(16, 8, heads=2)
    n = graph["x"].shape[0]
    a = torch.zeros(n, 2)
    with pytest.raises(ValueError, match=r"dst is torch.float32 \(5, 2\)"):
        attention.gat_attention(p, layer, a, a[:5], torch.zeros(n, 2, 8))
    with pytest.raises(ValueError, match="x is torch.float64"):
        attention.gat_attention(p, layer, a, a, torch.zeros(n, 2, 8, dtype=torch.float64))
    q = torch.zeros(n, 2, 8)
    with pytest.raises(
        ValueError, match=r"src is torch.float32 \(878, 2\) on cpu, expected float32 \(878, 2, 8\)"
    ):
        attention.dot_attention(p, TransformerConv(16, 8, heads=2), q, a, q)


def test_gatv2_keeps_the_kron_product(graph: dict) -> None:
    """GATv2's scores are per-edge vectors, not fused: its heads stay one kron(A, I) SpMM."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        GATv2Conv(16, 4, heads=2)(graph["x"], graph["adj_t"])
    assert 2 in cp._entry(graph["adj_t"]).attention["loops"].heads


def test_shapes_without_a_kernel_take_the_torch_ops(graph: dict) -> None:
    """More heads than the kernels take (64), or heads x channels over 4096: the unfused
    path, equal to PyG's, no fused kernel built."""
    torch.manual_seed(0)
    layer = GATConv(16, 1, heads=65)
    entry = cp._entry(graph["adj_t"])
    got = layer(graph["x"], graph["adj_t"])
    assert rel(got, layer(graph["x"], graph["edge_index"])) < 1e-5
    fused = entry.attention["loops"].fused
    assert fused is None or not any(k[2] == 65 for k in fused._kernels)
