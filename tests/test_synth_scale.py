"""The realistic kinds at scale: determinism, requested sizes, the structure of each class,
the ``data synth`` / ``data info`` commands on them, and the scale corpus with its manifest."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from scipy.sparse.csgraph import connected_components, shortest_path

from cognate.cli import main
from cognate.errors import CognateError
from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.matrix_stats import matrix_stats
from cognate.synth import SCALE_KINDS, engineering, generate
from cognate.synth import corpus as scale_corpus

BASE = "matrices/suitesparse/bcsstk13.mtx.gz"  # 2003 x 2003, 83883 nnz, structural FEM
VARIANTS = [
    ("mesh2d", {}),
    ("mesh2d", {"p2": True, "rcm": True}),
    ("mesh3d", {}),
    ("mesh3d", {"p2": True}),
    ("powerlaw", {}),
    ("powerlaw", {"directed": True}),
    ("road", {}),
    ("road", {"rcm": True}),
    ("circuit", {}),
    ("lp", {}),
    ("kron", {"layout": "blocks"}),
    ("kron", {"layout": "tiles"}),
]


def _options(kind: str, options: dict, shared: Path) -> dict:
    return {**options, "base": shared / BASE} if kind == "kron" else dict(options)


def _pattern(matrix) -> sp.csr_matrix:
    pattern = matrix.csr.copy()
    pattern.data[:] = 1
    return pattern


def _is_symmetric(pattern: sp.csr_matrix) -> bool:
    return (pattern != pattern.T).nnz == 0


@pytest.mark.parametrize(("kind", "options"), VARIANTS)
def test_deterministic_per_seed_and_sized_by_nnz(kind, options, shared):
    options = _options(kind, options, shared)
    first = generate(kind, nnz=30_000, seed=5, **options)
    again = generate(kind, nnz=30_000, seed=5, **options)
    other = generate(kind, nnz=30_000, seed=6, **options)
    assert first.sha256 == again.sha256 and first.sha256 != other.sha256
    assert abs(first.nnz - 30_000) <= 0.1 * 30_000
    assert first.csr.has_canonical_format and first.csr.data.dtype == np.float32


@pytest.mark.parametrize("kind", ["mesh2d", "mesh3d", "powerlaw", "road", "circuit", "lp"])
def test_sized_by_rows(kind):
    matrix = generate(kind, rows=3000, seed=1)
    assert matrix.shape[0] == 3000
    if kind == "lp":
        assert matrix.shape[1] == 7500  # ratio 2.5
        assert generate("lp", rows=300, cols=500, seed=1).shape == (300, 500)
    else:
        assert matrix.shape == (3000, 3000)
    p2 = generate("mesh2d", rows=3000, seed=1, p2=True)
    assert abs(p2.shape[0] - 3000) <= 300  # P2 nodes follow the mesh: within 10%


@pytest.mark.parametrize("kind", ["mesh2d", "mesh3d"])
def test_small_p2_meshes_still_hit_the_size(kind):
    # 10^4 nnz of P2 tetrahedra is a mesh of ~60 vertices: one rebuild was not always enough.
    for seed in range(12):
        matrix = generate(kind, nnz=10_000, seed=seed, p2=True)
        assert abs(matrix.nnz - 10_000) <= 500, seed


def test_exact_sizes_where_the_class_allows():
    for kind in ("powerlaw", "road"):
        assert generate(kind, nnz=40_000, seed=2).nnz == 40_000
    assert generate("powerlaw", nnz=40_001, seed=2, directed=True).nnz == 40_001


def test_mesh_is_a_symmetric_fem_pattern_and_rcm_narrows_it():
    plain = generate("mesh2d", nnz=50_000, seed=3)
    ordered = generate("mesh2d", nnz=50_000, seed=3, rcm=True)
    pattern = _pattern(plain)
    assert _is_symmetric(pattern) and (pattern.diagonal() == 1).all()
    assert 6.5 <= plain.nnz / plain.shape[0] <= 7.0  # P1 triangles: 6 neighbours + diagonal
    assert matrix_stats(ordered)["bandwidth"] < matrix_stats(plain)["bandwidth"] / 10
    assert ordered.nnz == plain.nnz  # the same mesh, renumbered
    p1 = generate("mesh3d", nnz=50_000, seed=3)
    p2 = generate("mesh3d", nnz=50_000, seed=3, p2=True)
    assert p2.nnz / p2.shape[0] > 1.5 * p1.nnz / p1.shape[0]  # 10-node tetrahedra couple more


def test_powerlaw_has_heavy_rows_and_undirected_is_symmetric():
    undirected = _pattern(generate("powerlaw", nnz=100_000, seed=4))
    directed = _pattern(generate("powerlaw", nnz=100_000, seed=4, directed=True))
    assert _is_symmetric(undirected) and not _is_symmetric(directed)
    assert undirected.diagonal().sum() == 0 and directed.diagonal().sum() == 0
    lengths = np.diff(undirected.indptr)
    assert lengths.max() > 10 * lengths.mean()  # hubs
    mesh = generate("mesh2d", nnz=100_000, seed=4)
    assert matrix_stats(Matrix("p", undirected))["row_cv"] > 3 * matrix_stats(mesh)["row_cv"]


def test_road_has_low_degree_and_a_long_diameter():
    road = _pattern(generate("road", rows=4000, seed=5))
    degree = np.diff(road.indptr)
    assert _is_symmetric(road) and road.diagonal().sum() == 0
    assert 2.5 <= degree.mean() <= 2.9 and degree.max() <= 6 and np.mean(degree <= 4) > 0.99
    assert connected_components(road, directed=False)[0] == 1  # the spanning tree
    road_hops = shortest_path(road, unweighted=True, indices=0).max()
    social = _pattern(generate("powerlaw", rows=4000, seed=5, degree=3.0))
    hub = int(np.argmax(np.diff(social.indptr)))
    social_hops = shortest_path(social, unweighted=True, indices=hub)
    assert road_hops > 40  # ~sqrt(n) hops across the plane
    assert social_hops[np.isfinite(social_hops)].max() < 15  # a small world


def test_circuit_is_near_diagonal_with_dense_rows():
    circuit = generate("circuit", nnz=100_000, seed=6)
    pattern = _pattern(circuit)
    stats = matrix_stats(circuit)
    assert _is_symmetric(pattern) and (pattern.diagonal() == 1).all()
    assert stats["near_diag"] > 0.6  # mostly local couplings
    lengths = np.diff(pattern.indptr)
    dense = np.sort(lengths)[-3:]
    assert (dense > 100 * np.median(lengths)).all()  # supply / ground nets


def test_lp_is_bordered_block_angular():
    matrix = generate("lp", rows=2000, cols=5000, seed=7, blocks=8)
    link_rows = round(engineering._LP_LINK_ROWS * 2000)
    link_cols = round(engineering._LP_LINK_COLS * 5000)
    inner = _pattern(matrix)[: 2000 - link_rows, : 5000 - link_cols]
    bipartite = sp.bmat([[None, inner], [inner.T, None]])
    label = connected_components(bipartite, directed=False)[1]
    col_labels = label[inner.shape[0] :]  # rows without inner entries are components alone
    columns = np.arange(col_labels.size)
    first = {c: columns[col_labels == c].min() for c in np.unique(col_labels)}
    last = {c: columns[col_labels == c].max() for c in first}
    # A block may fall apart into components; merging overlapping column spans gives it back.
    groups, reach = 0, -1
    for c in sorted(first, key=first.get):
        groups += first[c] > reach
        reach = max(reach, last[c])
    assert groups == 8  # the blocks, coupled only through the border
    border = _pattern(matrix)[2000 - link_rows :]
    assert border.nnz > 0.05 * matrix.nnz and np.diff(inner.tocsc().indptr).min() >= 1


@pytest.mark.parametrize("layout", ["blocks", "tiles"])
def test_kron_inherits_the_base_pattern(layout, shared):
    base = load_matrix(shared / BASE)
    matrix = generate("kron", nnz=300_000, seed=8, base=shared / BASE, layout=layout)
    rows, cols = base.shape
    scale = matrix.shape[0] // rows
    assert matrix.nnz == 300_000 and matrix.shape == (rows * scale, cols * scale) and scale > 1
    coo = matrix.csr.tocoo()
    if layout == "blocks":
        r, c = coo.row // scale, coo.col // scale
    else:
        r, c = coo.row % rows, coo.col % cols
    assert (np.asarray(_pattern(base)[r, c]).ravel() == 1).all()
    smaller = generate("kron", nnz=20_000, seed=8, base=shared / BASE)
    assert smaller.shape == base.shape and smaller.nnz == 20_000  # a subsample


@pytest.mark.parametrize(
    ("kind", "kwargs", "message"),
    [
        ("mesh2d", {"density": 0.1, "rows": 100}, "not by density"),
        ("mesh2d", {}, "needs nnz or rows"),
        ("mesh2d", {"nnz": 1000, "p2": "yes"}, "p2 must be true or false"),
        ("mesh3d", {"rows": 100, "cols": 50}, "square"),
        ("powerlaw", {"nnz": 1000, "rcm": True}, "does not take"),
        ("powerlaw", {"nnz": 1000, "gamma": 1.5}, "gamma must be"),
        ("kron", {"nnz": 1000}, "needs base"),
        ("kron", {"nnz": 1000, "rows": 5, "base": "x.mtx"}, "sized by nnz only"),
        ("kron", {"nnz": 1000, "base": "missing.mtx"}, "no such file"),
        ("lp", {"nnz": 10**6, "rows": 10, "cols": 10}, "do not fit"),
    ],
)
def test_bad_arguments_are_clear_errors(kind, kwargs, message):
    with pytest.raises(CognateError, match=message):
        generate(kind, seed=0, **kwargs)


def test_cli_synth_every_kind_at_200k_and_info_tells_them_apart(tmp_path, shared):
    runner = CliRunner()
    for kind in SCALE_KINDS:
        extra = ["--base", str(shared / BASE)] if kind == "kron" else []
        out = tmp_path / f"{kind}.npz"
        args = ["data", "synth", kind, "--nnz", "200000", "--seed", "1", *extra, "-o", str(out)]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
    rcm = ["data", "synth", "mesh2d", "--nnz", "200000", "--seed", "1", "--rcm"]
    assert runner.invoke(main, [*rcm, "-o", str(tmp_path / "mesh2d_rcm.npz")]).exit_code == 0
    result = runner.invoke(main, ["data", "info", "--json", str(tmp_path)])
    assert result.exit_code == 0, result.output
    info = {record["name"]: record for record in json.loads(result.output)}
    assert all(abs(r["nnz"] - 200_000) <= 20_000 for r in info.values())
    assert info["circuit"]["row_cv"] > 3 and info["circuit"]["near_diag"] > 0.6
    assert 1 < info["powerlaw"]["row_cv"] < info["circuit"]["row_cv"]
    assert info["road"]["row_max"] <= 6 and info["mesh2d"]["row_cv"] < 0.5
    assert info["lp"]["cols"] > info["lp"]["rows"]
    assert info["mesh2d_rcm"]["bandwidth"] < info["mesh2d"]["bandwidth"] / 10
    assert info["mesh2d_rcm"]["near_diag"] > 2 * info["mesh2d"]["near_diag"]
    spreads = {(round(r["row_cv"], 2), round(r["near_diag"], 2)) for r in info.values()}
    assert len(spreads) == len(info)  # no two kinds look alike


def test_cli_synth_refuses_a_flag_the_kind_does_not_take(tmp_path):
    args = ["data", "synth", "road", "--nnz", "1000", "--p2", "-o", str(tmp_path / "r.npz")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "does not take" in str(result.exception)
    assert not (tmp_path / "r.npz").exists()


# --- the scale corpus and its manifest ---------------------------------------------------


def test_scale_recipes_cover_every_kind_and_size_bucket():
    recipes = scale_corpus.scale_recipes()
    assert len(recipes) >= 300
    assert len({r.name for r in recipes}) == len({r.seed for r in recipes}) == len(recipes)
    assert recipes == scale_corpus.scale_recipes()  # fixed list
    buckets = Counter((r.kind, int(math.log10(r.nnz))) for r in recipes)
    for kind in SCALE_KINDS:
        assert {d for k, d in buckets if k == kind} == {4, 5, 6}, kind
    assert min(r.nnz for r in recipes) >= 10_000 and max(r.nnz for r in recipes) <= 5_000_000


@pytest.mark.usefixtures("shared")  # reads the real matrices a corpus recipe rebuilds from
def test_scale_corpus_writes_a_manifest_resumes_and_verifies(tmp_path, capsys):
    paths = scale_corpus.write_scale(tmp_path, max_nnz=12_000)
    assert paths and all(p.exists() for p in paths)
    with open(tmp_path / "manifest.csv", newline="") as stream:
        rows = {row["name"]: row for row in csv.DictReader(stream)}
    assert set(rows) == {p.name[:-4] for p in paths}
    recipes = {r.name: r for r in scale_corpus.scale_recipes()}
    for name, row in rows.items():
        matrix = load_matrix(tmp_path / f"{name}.npz")
        assert row["shape"] == f"{matrix.shape[0]}x{matrix.shape[1]}"
        assert int(row["nnz"]) == matrix.nnz
        assert json.loads(row["options"]) == recipes[name].options
    capsys.readouterr()
    scale_corpus.write_scale(tmp_path, max_nnz=12_000)
    assert capsys.readouterr().out.count(": kept") == len(paths)
    victim = paths[0]
    victim.write_bytes(victim.read_bytes() + b"x")
    assert scale_corpus.verify(tmp_path) == [victim.name[:-4]]
    scale_corpus.write_scale(tmp_path, max_nnz=12_000)  # the damaged file is rewritten
    assert scale_corpus.verify(tmp_path) == []
    assert scale_corpus.file_sha256(victim) == rows[victim.name[:-4]]["sha256"]


def test_make_corpus_verify_exit_codes(tmp_path):
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_corpus.py"
    command = [sys.executable, str(script), str(tmp_path), "--verify"]
    missing = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "no manifest" in missing.stderr
    assert "Traceback" not in missing.stderr
    (tmp_path / "manifest.csv").write_text("name,kind\nx,y\n")
    bad = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "lacks column" in bad.stderr
