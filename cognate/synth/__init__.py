"""Synthetic sparse matrices: generic kinds, realistic classes at scale, pruned-layer masks.

``generate(kind, rows, cols, density=|sparsity=|nnz=, seed=, **options)`` returns a
canonical ``Matrix`` with float32 standard-normal values. Every generator is vectorised
numpy/scipy and deterministic per seed. The generic kinds (``classic``) and the layer masks
(``masks``) take rows and cols and exactly one of density / sparsity / nnz:

- ``uniform``: positions uniformly at random, exactly the requested nnz.
- ``rmat``: power-law R-MAT (Chakrabarti et al. 2004); ``a, b, c, d`` quadrant
  probabilities (Graph500 defaults 0.57/0.19/0.19/0.05); exactly the requested nnz of
  distinct positions.
- ``banded``: positions uniformly inside ``|i - j| <= bandwidth`` (default: the narrowest
  band that holds the requested nnz).
- ``block-diagonal``: positions uniformly inside ``block`` x ``block`` diagonal blocks
  (default: the smallest block size that holds the requested nnz).
- ``kdiag``: DynaDiag's K wrapped diagonals (docs/architecture.md, Structured sparsity / Facts measured here): with D = min(M, N),
  P = max(M, N), K = ceil((1 - S) * M * N / D) of the P diagonals are kept (chosen at
  random); diagonal p covers rows (t + p) % M, cols t for t < D when M >= N (transposed
  otherwise). nnz = K * D exactly, so the density is rounded up to whole diagonals.
- ``block``: a ``block`` x ``block`` tiling (default 4), round(nnz / block**2) tiles kept
  whole (chosen at random; edge tiles are clipped to the matrix).
- ``nm``: N:M along rows: in each row, every group of ``m`` consecutive columns keeps ``n``
  entries (default 2:4; a last partial group keeps min(n, its width)). The density is
  n / m; a density given too must agree.
  Without ``n``/``m``, a density other than 1/2 picks n:m = the density in lowest terms
  (m <= 100): sparsity 0.6 -> 2:5, 0.9 -> 1:10, 0.99 -> 1:100.

The realistic kinds imitate the classes SpMM users run at 10^5-10^7 nnz; they are sized by
``nnz`` (within a few percent, most exactly) or by rows (cols), and their shape follows:

- ``mesh2d``, ``mesh3d`` (``mesh``): FEM stiffness patterns of Delaunay meshes; ``p2``,
  ``rcm``.
- ``powerlaw`` (``graphs``): social/web graphs, degree-corrected stochastic block model with
  power-law degrees; ``directed``, ``degree``, ``gamma``, ``communities``, ``mixing``.
- ``road`` (``graphs``): road networks, a random geometric planar graph of degree 1-4 with a
  long diameter; ``rcm``.
- ``circuit`` (``engineering``): circuit simulation, near-diagonal plus a few very dense
  rows/columns; ``degree``, ``dense``.
- ``lp`` (``engineering``): LP constraint matrices, rectangular block-angular with linking
  rows and columns; ``blocks``, ``ratio``.
- ``kron`` (``upscale``): a real matrix file ``base`` upscaled by a Kronecker product with a
  small random pattern; ``layout`` = blocks | tiles.
The published kinds (``published``) rebuild SuiteSparse graphs of HotTiles' SPADE calibration
by ``order`` alone (the number in the SuiteSparse name; ``seed`` where random):

- ``mycielskian``: the Mycielski graph M_order exactly (``mycielskian17``).
- ``delaunay``: Delaunay graph of 2^order uniform points (``delaunay_n22`` in distribution).
- ``kron-g500``: Graph500 Kronecker graph on 2^order vertices (``kron_g500-logn19`` in
  distribution).

Every other kind takes ``permute`` = rows | cols | both: a random row and/or column permutation
of the same matrix S (drawn from a separate stream, so S is identical). The result's
``csr`` is the permuted matrix A and it carries the index maps (``row_perm`` / ``col_perm``,
``A[row_perm[i], col_perm[j]] = S[i, j]``; ``Matrix.structured()`` gives S back).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.matrix import Matrix, canonicalize
from cognate.synth.classic import RMAT_DEFAULTS, banded, block_diagonal, rmat, uniform
from cognate.synth.engineering import circuit, lp
from cognate.synth.graphs import powerlaw, road
from cognate.synth.masks import block, kdiag, kdiag_count, nm, nm_options_for
from cognate.synth.mesh import mesh
from cognate.synth.published import PUBLISHED_KINDS, published
from cognate.synth.sampling import INT32_MAX, Pattern, Positions, check_size
from cognate.synth.upscale import kron

__all__ = [
    "ALL_KINDS",
    "KINDS",
    "LAYER_SHAPES",
    "LAYER_SPARSITIES",
    "PERMUTE_CHOICES",
    "PUBLISHED_KINDS",
    "RMAT_DEFAULTS",
    "SCALE_KINDS",
    "STRUCTURED_KINDS",
    "generate",
    "kdiag_count",
    "synthetic_pair",
]

GENERIC_KINDS: tuple[str, ...] = ("uniform", "rmat", "banded", "block-diagonal")
STRUCTURED_KINDS: tuple[str, ...] = ("kdiag", "block", "nm")
KINDS: tuple[str, ...] = GENERIC_KINDS + STRUCTURED_KINDS  # sized by rows, cols and density
SCALE_KINDS: tuple[str, ...] = ("mesh2d", "mesh3d", "powerlaw", "road", "circuit", "lp", "kron")
ALL_KINDS: tuple[str, ...] = KINDS + SCALE_KINDS
PERMUTE_CHOICES: tuple[str, ...] = ("rows", "cols", "both")
# The layer workloads of docs/architecture.md, Structured sparsity: pruned NN weights (M x N) and the
# sparsities the structured-sparsity papers report.
LAYER_SHAPES: tuple[tuple[int, int], ...] = ((768, 768), (768, 3072), (3072, 768), (4096, 4096))
LAYER_SPARSITIES: tuple[float, ...] = (0.6, 0.8, 0.9, 0.95, 0.99)
_OPTIONS: dict[str, tuple[str, ...]] = {
    "uniform": (),
    "rmat": ("a", "b", "c", "d"),
    "banded": ("bandwidth",),
    "block-diagonal": ("block",),
    "kdiag": (),
    "block": ("block",),
    "nm": ("n", "m"),
    "mesh2d": ("p2", "rcm"),
    "mesh3d": ("p2", "rcm"),
    "powerlaw": ("directed", "degree", "gamma", "communities", "mixing"),
    "road": ("rcm",),
    "circuit": ("degree", "dense"),
    "lp": ("blocks", "ratio"),
    "kron": ("base", "layout"),
}
_GENERATORS: dict[str, Callable[..., Positions]] = {
    "uniform": uniform,
    "rmat": rmat,
    "banded": banded,
    "block-diagonal": block_diagonal,
    "kdiag": kdiag,
    "block": block,
    "nm": nm,
}
_SCALE_GENERATORS: dict[str, Callable[..., Pattern]] = {
    "mesh2d": partial(mesh, 2),
    "mesh3d": partial(mesh, 3),
    "powerlaw": powerlaw,
    "road": road,
    "circuit": circuit,
    "lp": lp,
    "kron": kron,
}


def generate(
    kind: str,
    rows: int | None = None,
    cols: int | None = None,
    *,
    density: float | None = None,
    sparsity: float | None = None,
    nnz: int | None = None,
    seed: int = 0,
    permute: str | None = None,
    **kind_options: Any,
) -> Matrix:
    """A synthetic matrix of the given kind; bad arguments raise ``CognateError``."""
    if kind in PUBLISHED_KINDS:
        return _published(kind, rows, cols, density, sparsity, nnz, seed, permute, kind_options)
    _check_args(kind, rows, cols, seed, permute, kind_options)
    rng = np.random.default_rng(seed)
    if kind in SCALE_KINDS:
        pattern = _scale_pattern(kind, rows, cols, density, sparsity, nnz, rng, kind_options)
        row, col, (rows, cols) = pattern.row, pattern.col, pattern.shape
    else:
        row, col, kind_options = _generic_positions(
            kind, rows, cols, density, sparsity, nnz, rng, kind_options
        )
    values = rng.standard_normal(row.size, dtype=np.float32)
    maps: dict[str, np.ndarray] = {}
    if permute:
        maps = _permutation_maps(rows, cols, seed, permute)
        row = maps["row_perm"][row] if "row_perm" in maps else row
        col = maps["col_perm"][col] if "col_perm" in maps else col
    csr = canonicalize(sp.coo_matrix((values, (row, col)), shape=(rows, cols)))
    options = "".join(f" {k}={v}" for k, v in sorted(kind_options.items()))
    source = f"synth:{kind} {rows}x{cols} nnz={csr.nnz} seed={seed}{options}"
    if permute:
        source += f" permute={permute}"
    name = f"{kind}_{rows}x{cols}_seed{seed}" + (f"_perm-{permute}" if permute else "")
    return Matrix(name, csr, source=source, field="real", symmetry="general", **maps)


def _published(
    kind: str,
    rows: int | None,
    cols: int | None,
    density: float | None,
    sparsity: float | None,
    nnz: int | None,
    seed: int,
    permute: str | None,
    options: dict[str, Any],
) -> Matrix:
    """A published kind: sized by ``order`` alone."""
    given = {"rows": rows, "cols": cols, "density": density, "sparsity": sparsity, "nnz": nnz}
    extra = sorted(k for k, v in {**given, "permute": permute}.items() if v is not None)
    extra += sorted(set(options) - {"order"})
    if extra:
        raise CognateError(f"{kind} is sized by order alone; it does not take {', '.join(extra)}")
    if "order" not in options:
        raise CognateError(f"{kind} needs an order (e.g. 17 for mycielskian17)")
    return published(kind, options["order"], seed)


def synthetic_pair(nnz: int, seed: int = 1) -> list[Matrix]:
    """The generated matrices the cpu benchmarks add to the shared ones: a uniform and an
    R-MAT square matrix of ``nnz`` nonzeros, about 10 per row (at least 1000 rows), named
    ``synth-uniform`` / ``synth-rmat``."""
    rows = max(1000, nnz // 10)
    pair = []
    for kind in ("uniform", "rmat"):
        matrix = generate(kind, rows, rows, nnz=nnz, seed=seed)
        matrix.name = f"synth-{kind}"
        pair.append(matrix)
    return pair


def _generic_positions(
    kind: str,
    rows: int,
    cols: int,
    density: float | None,
    sparsity: float | None,
    nnz: int | None,
    rng: np.random.Generator,
    kind_options: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Positions of a generic kind or layer mask, and the options it ran with."""
    target = _target_nnz(kind, rows, cols, density, sparsity, nnz)
    if kind == "kdiag" and nnz is None:  # K from the fraction itself, not a rounded count
        fraction = sparsity if sparsity is not None else 1 - density
        target = kdiag_count(rows, cols, fraction) * min(rows, cols)
    if kind == "nm" and target is not None and not kind_options:
        kind_options = nm_options_for(target / (rows * cols))
    row, col = _GENERATORS[kind](rows, cols, target, rng, **kind_options)
    return row, col, kind_options


def _scale_pattern(
    kind: str,
    rows: int | None,
    cols: int | None,
    density: float | None,
    sparsity: float | None,
    nnz: int | None,
    rng: np.random.Generator,
    kind_options: dict[str, Any],
) -> Pattern:
    """The pattern of a realistic kind, sized by nnz or rows/cols."""
    if density is not None or sparsity is not None:
        raise CognateError(f"{kind} is sized by nnz or rows/cols, not by density or sparsity")
    if nnz is not None:
        if not isinstance(nnz, int | np.integer) or nnz < 1:
            raise CognateError(f"nnz must be a positive integer, got {nnz!r}")
        check_size(int(nnz))
        nnz = int(nnz)
    elif rows is None and cols is None:
        raise CognateError(f"{kind} needs nnz or rows/cols")
    return _SCALE_GENERATORS[kind](rows, cols, nnz, rng, **kind_options)


def _check_args(
    kind: str,
    rows: int | None,
    cols: int | None,
    seed: int,
    permute: str | None,
    options: dict[str, Any],
) -> None:
    if kind not in ALL_KINDS:
        raise CognateError(f"unknown synthetic kind {kind!r} (choose from {', '.join(ALL_KINDS)})")
    for label, value in (("rows", rows), ("cols", cols)):
        if value is None and kind in SCALE_KINDS:  # their shape may follow from nnz
            continue
        if not isinstance(value, int | np.integer) or not 1 <= value <= INT32_MAX:
            raise CognateError(f"{label} must be an integer in [1, {INT32_MAX}], got {value!r}")
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise CognateError(f"seed must be a non-negative integer, got {seed!r}")
    if permute not in (None, *PERMUTE_CHOICES):
        raise CognateError(f"permute must be one of {', '.join(PERMUTE_CHOICES)}, got {permute!r}")
    unknown = sorted(set(options) - set(_OPTIONS[kind]))
    if unknown:
        allowed = ", ".join(_OPTIONS[kind]) or "none"
        raise CognateError(
            f"{kind} does not take option(s) {', '.join(unknown)} (allowed: {allowed})"
        )


def _target_nnz(
    kind: str, rows: int, cols: int, density: float | None, sparsity: float | None, nnz: int | None
) -> int | None:
    """The requested number of entries from exactly one of density / sparsity / nnz."""
    given = [x for x in (density, sparsity, nnz) if x is not None]
    if len(given) > 1:
        raise CognateError("give only one of density, sparsity, nnz")
    cells = rows * cols
    if not given:
        if kind == "nm":  # N:M fixes its own density
            return None
        raise CognateError(f"{kind} needs one of density, sparsity, nnz")
    if density is not None:
        if not 0 < density <= 1:
            raise CognateError(f"density must be in (0, 1], got {density}")
        target = round(density * cells)
    elif sparsity is not None:
        if not 0 <= sparsity < 1:
            raise CognateError(f"sparsity must be in [0, 1), got {sparsity}")
        target = round((1 - sparsity) * cells)
    else:
        if not isinstance(nnz, int | np.integer) or not 1 <= nnz <= cells:
            raise CognateError(f"nnz must be an integer in [1, rows*cols = {cells}], got {nnz!r}")
        target = int(nnz)
    check_size(target)
    return max(1, target)


def _permutation_maps(rows: int, cols: int, seed: int, permute: str) -> dict[str, np.ndarray]:
    """The index maps of a permuted variant: A[row_perm[i], col_perm[j]] = S[i, j].

    Drawn from a stream independent of the pattern's, so S is the unpermuted matrix. The
    draws are those the generator has always made (entry (i, j) of S lands at
    (argsort(pi_r)[i], argsort(pi_c)[j])), so permuted outputs are unchanged.
    """
    rng = np.random.default_rng([seed, 0x9E3779B9])
    maps = {}
    if permute in ("rows", "both"):
        maps["row_perm"] = np.argsort(rng.permutation(rows)).astype(np.int32)
    if permute in ("cols", "both"):
        maps["col_perm"] = np.argsort(rng.permutation(cols)).astype(np.int32)
    return maps
