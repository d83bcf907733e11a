"""The pure-PyTorch sparse convolution against a dense conv2d, and against MinkowskiEngine."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cognate.formats.read import load_matrix
from cognate.model import sparseconv
from cognate.model.featurizer import Featurizer, matrix_points, matrix_scalars
from cognate.model.preset import FeaturizerSpec
from cognate.model.sparseconv import PointSet, conv_torch
from cognate.synth import generate


def random_points(n: int, grid: tuple[int, int], seed: int) -> PointSet:
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, grid[0], (n,), generator=gen)
    cols = torch.randint(0, grid[1], (n,), generator=gen)
    return PointSet.from_coords(rows, cols, grid)


def dense_reference(
    points: PointSet, feats: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, stride: int
) -> torch.Tensor:
    """conv2d over the densified input, read back at the sparse output points."""
    k = round(weight.shape[0] ** 0.5)
    c_in, c_out = weight.shape[1], weight.shape[2]
    dense = torch.zeros((1, c_in, *points.grid), dtype=torch.float64)
    dense[0, :, points.rows, points.cols] = feats.T.double()
    # Kernel index di + k*dj (di along rows) -> conv2d's [out, in, row tap, col tap].
    w = weight.double().reshape(k, k, c_in, c_out).permute(3, 2, 1, 0)
    out = F.conv2d(dense, w, bias.double(), stride=stride, padding=k // 2)
    out_points = points if stride == 1 else points.downsample()[0]
    return out[0, :, out_points.rows, out_points.cols].T


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize(("k", "c_in", "c_out"), [(3, 1, 4), (5, 3, 2), (3, 4, 8)])
def test_conv_equals_dense_conv2d(stride: int, k: int, c_in: int, c_out: int) -> None:
    for seed, grid in enumerate([(17, 23), (32, 9), (5, 41)]):
        points = random_points(120, grid, seed)
        gen = torch.Generator().manual_seed(100 + seed)
        feats = torch.randn(len(points), c_in, generator=gen)
        weight = torch.randn(k * k, c_in, c_out, generator=gen)
        bias = torch.randn(c_out, generator=gen)
        out_points, out = conv_torch(points, feats, weight, bias, stride)
        expected = dense_reference(points, feats, weight, bias, stride)
        assert out.shape == (len(out_points), c_out)
        torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_stride_two_points_are_distinct_halves() -> None:
    points = random_points(300, (40, 40), 7)
    down, inverse = points.downsample()
    assert down.grid == (20, 20)
    assert torch.equal(down.rows[inverse], points.rows // 2)
    assert torch.equal(down.cols[inverse], points.cols // 2)
    assert bool((down.keys[1:] > down.keys[:-1]).all())


def test_conv_is_differentiable() -> None:
    points = random_points(50, (10, 10), 3)
    weight = torch.randn(9, 1, 4, requires_grad=True)
    _, out = conv_torch(points, torch.ones(len(points), 1), weight, None, 2)
    out.sum().backward()
    assert weight.grad is not None and weight.grad.abs().sum() > 0


def brute_force_pairs(points: PointSet, k: int, stride: int) -> list[tuple[list[int], list[int]]]:
    """Per kernel index, (dst, src) by scanning every (output, input) pair."""
    out_points = points if stride == 1 else points.downsample()[0]
    pairs: list[tuple[list[int], list[int]]] = [([], []) for _ in range(k * k)]
    outs = list(zip(out_points.rows.tolist(), out_points.cols.tolist(), strict=True))
    ins = list(zip(points.rows.tolist(), points.cols.tolist(), strict=True))
    for u, (ur, uc) in enumerate(outs):
        for v, (vr, vc) in enumerate(ins):
            di, dj = vr - stride * ur, vc - stride * uc
            if abs(di) <= k // 2 and abs(dj) <= k // 2:
                index = (di + k // 2) + k * (dj + k // 2)
                pairs[index][0].append(u)
                pairs[index][1].append(v)
    return pairs


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("k", [1, 3, 5, 7])
def test_kernel_map_equals_brute_force(k: int, stride: int) -> None:
    # The one-search-per-kernel-row window must find exactly the per-offset neighbours,
    # at grid edges too (tiny and thin grids, dense and sparse fills).
    for seed, (n, grid) in enumerate([(60, (9, 11)), (40, (1, 50)), (30, (30, 2)), (6, (3, 3))]):
        points = random_points(n, grid, seed)
        kmap = sparseconv.KernelMap.build(points, k, stride)
        expected = brute_force_pairs(points, k, stride)
        assert [(d.tolist(), s.tolist()) for d, s in kmap.pairs] == expected


def test_embed_records_no_graph_and_matches_forward() -> None:
    # embed() is inference only: no autograd graph, same numbers as forward with a plan.
    spec = FeaturizerSpec(channels=[4, 4, 4], first_kernel=5, kernel=3, embedding_dim=8)
    featurizer = Featurizer(spec)
    matrix = generate("uniform", 300, 200, nnz=2000, seed=3)
    emb = featurizer.embed(matrix, "torch")
    assert not emb.requires_grad
    points = matrix_points(matrix)
    scalars = matrix_scalars(matrix.shape, matrix.nnz)
    expected = featurizer(points, scalars, "torch", featurizer.plan(points))
    torch.testing.assert_close(emb, expected.detach(), rtol=1e-5, atol=1e-6)


def test_real_matrix_points_keep_every_nonzero(suitesparse_files) -> None:
    path = next(p for p in suitesparse_files if p.name.startswith("west0479"))
    matrix = load_matrix(path)
    points = matrix_points(matrix)
    assert len(points) == matrix.nnz
    assert bool((points.keys[1:] > points.keys[:-1]).all())


ME_REASON = (
    "MinkowskiEngine NOT importable, backend equality UNTESTED "
    f"(run scripts/install_minkowski.sh): {sparseconv.minkowski_error()}"
)
needs_minkowski = pytest.mark.skipif(sparseconv.minkowski() is None, reason=ME_REASON)


def _sorted_minkowski(tensor: object, stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    coords = tensor.C[:, 1:].long() // stride
    order = torch.argsort(coords[:, 0] * (1 << 32) + coords[:, 1])
    return coords[order], tensor.F[order]


@pytest.mark.minkowski
@needs_minkowski
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize(("k", "c_in", "c_out"), [(3, 1, 4), (5, 2, 3), (3, 4, 8)])
def test_conv_equals_minkowski(stride: int, k: int, c_in: int, c_out: int) -> None:
    points = random_points(400, (60, 45), 11)
    gen = torch.Generator().manual_seed(5)
    feats = torch.randn(len(points), c_in, generator=gen)
    weight = torch.randn(k * k, c_in, c_out, generator=gen)
    bias = torch.randn(c_out, generator=gen)
    out_points, out = conv_torch(points, feats, weight, bias, stride)
    me_out = sparseconv.conv_minkowski(
        sparseconv.minkowski_input(points, feats), weight, bias, stride
    )
    coords, me_feats = _sorted_minkowski(me_out, stride)
    assert torch.equal(coords, torch.stack([out_points.rows, out_points.cols], 1))
    torch.testing.assert_close(me_feats, out, rtol=1e-5, atol=1e-5)


@pytest.mark.minkowski
@needs_minkowski
def test_featurizer_backends_agree_on_real_matrix(suitesparse_files) -> None:
    torch.manual_seed(0)
    spec = FeaturizerSpec(channels=[8, 8, 16, 16, 16, 16], embed_hidden=[16], embedding_dim=8)
    featurizer = Featurizer(spec)
    path = next(p for p in suitesparse_files if p.name.startswith("bcsstk13"))
    matrix = load_matrix(path)
    with torch.no_grad():
        a = featurizer.pooled(matrix_points(matrix), "torch")
        b = featurizer.pooled(matrix_points(matrix), "minkowski")
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.minkowski
@needs_minkowski
def test_gradients_equal_minkowski() -> None:
    points = random_points(300, (50, 50), 4)
    feats = torch.randn(len(points), 3, generator=torch.Generator().manual_seed(1))
    grads = []
    for backend in ("torch", "minkowski"):
        weight = torch.randn(9, 3, 5, generator=torch.Generator().manual_seed(2))
        weight.requires_grad_(True)
        if backend == "torch":
            out = conv_torch(points, feats, weight, None, 2)[1]
        else:
            tensor = sparseconv.minkowski_input(points, feats)
            out = sparseconv.conv_minkowski(tensor, weight, None, 2).F
        (out**2).sum().backward()
        grads.append(weight.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-4)
