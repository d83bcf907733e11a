"""The featurizer's fast inference path against the straightforward reference, on real matrices.

Fast path: kernel maps from the stride-1 symmetric search and the stride-2 parity rule,
convolution through blocked gathers, matmuls and a compiled scatter-add. Reference: one
binary search per kernel offset (``reference_pairs``) and ``index_add_`` per offset
(``conv_reference``, the differentiable path training uses). The shipped models' weights
must give the same embeddings either way (float32 rounding).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from cognate.config import Config
from cognate.formats.read import load_matrix
from cognate.model import kernel_maps, sparseconv
from cognate.model.checkpoint import read_metadata
from cognate.model.encoding import LoopNestEncoder, permutation_matrix
from cognate.model.featurizer import Featurizer, matrix_points, matrix_scalars
from cognate.model.predictor import RankingNetwork
from cognate.model.preset import preset_from_dict
from cognate.paths import data_dir
from cognate.synth import generate
from cognate.targets import get_target

REAL = ("suitesparse/west0479.mtx.gz", "suitesparse/bcsstk13.mtx.gz", "waco/cavity24.csr")
SHIPPED = ("cpu-spmm", "spade-spmm")


def shipped_featurizer(name: str) -> Featurizer:
    """The featurizer of a shipped model, read without the space-version check (the
    featurizer does not depend on the schedule space)."""
    path = data_dir() / "models" / f"{name}.safetensors"
    if not path.is_file():
        pytest.skip(f"no shipped model {path}")
    meta = read_metadata(path)
    preset = meta["preset"]
    model = RankingNetwork(
        preset_from_dict(preset["name"], {k: v for k, v in preset.items() if k != "name"}),
        meta["encoder"]["dim"],
    )
    with safe_open(str(path), framework="pt") as f:
        model.load_state_dict({k: f.get_tensor(k) for k in f.keys()})  # noqa: SIM118
    return model.eval().featurizer


@pytest.fixture(scope="module")
def real_matrices(shared: Path) -> list:
    return [load_matrix(shared / "matrices" / rel) for rel in REAL]


def as_lists(pairs) -> list[tuple[list[int], list[int]]]:
    return [(d.tolist(), s.tolist()) for d, s in pairs]


@pytest.mark.slow  # the per-offset reference on whole real matrices; test_sparseconv's
# test_kernel_map_equals_brute_force is the fast check of the same maps
def test_fast_maps_equal_reference_on_real_matrices(real_matrices) -> None:
    layers = Featurizer(shipped_featurizer("spade-spmm").spec).layers()
    for matrix in real_matrices:
        points = matrix_points(matrix)
        for k, stride in layers:
            kmap = sparseconv.KernelMap.build(points, k, stride)
            ref_points, ref_pairs = sparseconv.reference_pairs(points, k, stride)
            assert torch.equal(kmap.out_points.keys, ref_points.keys), matrix.name
            assert as_lists(kmap.pairs) == as_lists(ref_pairs), (matrix.name, k, stride)
            points = kmap.out_points


# One shipped featurizer in the default suite; the second (same code, other weights) is slow.
@pytest.mark.parametrize("model", [SHIPPED[0], pytest.param(SHIPPED[1], marks=pytest.mark.slow)])
def test_shipped_embeddings_fast_equal_reference(real_matrices, model, monkeypatch) -> None:
    # Small blocks, so that the real matrices span many of them (the block edges matter).
    monkeypatch.setattr(kernel_maps, "PAIRS_PER_BLOCK", 300)
    featurizer = shipped_featurizer(model)
    for matrix in real_matrices:
        points = matrix_points(matrix)
        scalars = matrix_scalars(matrix.shape, matrix.nnz)
        plan = featurizer.plan(points)
        assert len(plan[1].blocks.starts) > 3, "the test must cover several blocks"
        with torch.no_grad():
            fast = featurizer.embed(matrix, "torch")
        with torch.enable_grad():  # the autograd path: index_add_ per offset
            reference = featurizer(points, scalars, "torch", plan).detach()
        torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-6)
        with torch.no_grad():
            pooled = featurizer.pooled(points, "torch")
            again = featurizer.pooled(points, "torch")
        assert torch.equal(pooled, again), "the inference path must be deterministic"


@pytest.mark.parametrize(("k", "stride", "c_in"), [(5, 1, 1), (3, 2, 1), (3, 2, 8), (5, 1, 4)])
def test_inference_conv_equals_reference(real_matrices, k, stride, c_in, monkeypatch) -> None:
    monkeypatch.setattr(kernel_maps, "PAIRS_PER_BLOCK", 1000)
    matrix = real_matrices[0]
    points = matrix_points(matrix)
    gen = torch.Generator().manual_seed(k * 10 + c_in)
    feats = torch.randn(len(points), c_in, generator=gen)
    weight = torch.randn(k * k, c_in, 6, generator=gen)
    bias = torch.randn(6, generator=gen)
    kmap = sparseconv.KernelMap.build(points, k, stride)
    expected = torch.relu(sparseconv.conv_reference(feats, weight, bias, kmap))
    with torch.no_grad():
        _, got = sparseconv.conv_torch(points, feats, weight, bias, stride, kmap, relu=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_workspace_outputs_alternate() -> None:
    workspace = sparseconv.Workspace()
    a = workspace.output((4, 2))
    b = workspace.output((4, 2))
    c = workspace.output((3, 2))
    assert a.data_ptr() != b.data_ptr() and a.data_ptr() == c.data_ptr()


def test_loop_nest_rows_equal_per_config_features() -> None:
    space = get_target("spade").space("spmm")
    configs: list[Config] = space.candidates(256, 0, (5000, 7000))
    encoder = LoopNestEncoder(space)
    rows = encoder.encode(configs, (5000, 7000), 64).numpy()
    for config, row in zip(configs, rows, strict=True):
        nest = space.loop_nest(config, (5000, 7000), 64)
        splits = [nest.i_split, nest.j_split, nest.k_split]
        np.testing.assert_allclose(row[:3], np.log2(splits), rtol=1e-6)
        np.testing.assert_array_equal(row[3:].reshape(6, 6), permutation_matrix(nest.order))


def test_shared_rows_path_on_a_sparse_matrix(monkeypatch) -> None:
    # Mostly isolated points: the first layers run on shared rows, the later ones switch to
    # the blocked path; both must give the reference's embedding.
    monkeypatch.setattr(kernel_maps, "PAIRS_PER_BLOCK", 500)
    featurizer = shipped_featurizer("spade-spmm")
    matrix = generate("uniform", 30_000, 30_000, nnz=30_000, seed=1)
    points = matrix_points(matrix)
    plan = featurizer.plan(points)
    rows = sparseconv.SharedRows(np.zeros(len(points), np.int64), torch.ones((1, 1)))
    shared_layers = 0
    with torch.no_grad():
        for kmap, w, b in zip(plan, featurizer.weights, featurizer.biases, strict=True):
            rows = sparseconv.conv_shared(rows, w, b, kmap)
            if rows is None:
                break
            assert rows.table.shape[0] <= len(kmap.out_points) // 2
            shared_layers += 1
        fast = featurizer.embed(matrix, "torch")
    assert 2 <= shared_layers < len(plan), "the test must cover both paths"
    scalars = matrix_scalars(matrix.shape, matrix.nnz)
    with torch.enable_grad():
        reference = featurizer(points, scalars, "torch", plan).detach()
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-6)
