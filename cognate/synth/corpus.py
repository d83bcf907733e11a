"""The ``scale`` corpus: realistic kinds at 10^4..5x10^6 nnz, written with a manifest.

``scale_recipes()`` is a fixed list (the same on every machine): per kind, sizes spread
log-uniformly over the range (one draw in each of equal log-width strata, so every kind
covers every size bucket), option variants cycled, seeds fixed. ``write_scale`` writes them
as scipy ``.npz`` and keeps ``manifest.csv`` (name, kind, seed, options, nnz_requested,
shape, nnz, sha256) up to date after every file, so an interrupted run resumes where it
stopped; ``verify`` re-hashes the files a manifest lists.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.io import save_matrix
from cognate.paths import shared_dir
from cognate.synth import generate
from cognate.util import atomic_path

MIN_NNZ, MAX_NNZ = 10_000, 5_000_000
SCALE_SEED = 1000  # the scale set's seeds start here, away from base (0..) and extra (100..)
MANIFEST = "manifest.csv"
MANIFEST_COLUMNS = ("name", "kind", "seed", "options", "nnz_requested", "shape", "nnz", "sha256")
# Real matrices (under shared/matrices) the kron recipes upscale: FEM, circuit, power
# network, chemical, CFD, thermal and LP structure.
KRON_BASES: tuple[str, ...] = (
    "suitesparse/bcsstk13.mtx.gz",
    "suitesparse/rajat19.mtx.gz",
    "suitesparse/bcspwr09.mtx.gz",
    "suitesparse/west0479.mtx.gz",
    "ngraph/Alemdar.mtx.gz",
    "ngraph/lp_dfl001.mtx.gz",
    "ngraph/lp_qap12.mtx.gz",
    "ngraph/saylr4.mtx.gz",
    "ngraph/lshp3466.mtx.gz",
    "ngraph/cegb3024.mtx.gz",
    "ngraph/sherman5.mtx.gz",
    "ngraph/bcsstk26.mtx.gz",
)
_MESH_VARIANTS = ({}, {"rcm": True}, {"p2": True}, {"p2": True, "rcm": True})
# (kind, count, option variants cycled over the kind's recipes)
_PLAN: tuple[tuple[str, int, tuple[dict[str, Any], ...]], ...] = (
    ("mesh2d", 44, _MESH_VARIANTS),
    ("mesh3d", 44, _MESH_VARIANTS),
    (
        "powerlaw",
        48,
        tuple(
            {"directed": d, "degree": k, "gamma": g}
            for d in (False, True)
            for k, g in ((8.0, 2.5), (16.0, 2.2), (32.0, 2.8))
        ),
    ),
    ("road", 40, ({}, {"rcm": True})),
    ("circuit", 40, ({"degree": 3.0}, {"degree": 5.0}, {"degree": 8.0})),
    ("lp", 40, ({"ratio": 1.5}, {"ratio": 2.5}, {"ratio": 4.0})),
    (
        "kron",
        48,
        tuple({"base": b, "layout": lay} for lay in ("blocks", "tiles") for b in KRON_BASES),
    ),
)


@dataclass(frozen=True)
class Recipe:
    name: str
    kind: str
    seed: int
    nnz: int
    options: dict[str, Any]

    def options_text(self) -> str:
        return json.dumps(self.options, sort_keys=True)


def scale_recipes() -> list[Recipe]:
    """The scale set's recipes, in a fixed order."""
    rng = np.random.default_rng(SCALE_SEED)
    low, high = math.log10(MIN_NNZ), math.log10(MAX_NNZ)
    recipes: list[Recipe] = []
    for kind, count, variants in _PLAN:
        strata = (np.arange(count) + rng.random(count)) / count
        sizes = np.round(10 ** (low + strata * (high - low))).astype(int)
        for i, nnz in enumerate(rng.permutation(sizes)):  # variants get every size range
            index = len(recipes)
            options = dict(variants[i % len(variants)])
            suffix = "".join(f"-{k}" for k, v in sorted(options.items()) if v is True)
            if kind == "kron":
                suffix = f"-{_base_name(options['base'])}-{options['layout']}"
            name = f"sc{index:03d}_{kind}{suffix}_{nnz}"
            recipes.append(Recipe(name, kind, SCALE_SEED + index, int(nnz), options))
    return recipes


def _base_name(relative: str) -> str:
    return Path(relative).name.split(".")[0]


def build(recipe: Recipe):
    """The recipe's matrix (kron bases resolved under the shared matrices folder)."""
    options = dict(recipe.options)
    if "base" in options:
        options["base"] = shared_dir() / "matrices" / options["base"]
    return generate(recipe.kind, nnz=recipe.nnz, seed=recipe.seed, **options)


def write_scale(out: Path, max_nnz: int | None = None, count: int | None = None) -> list[Path]:
    """Write (or keep) the scale set's files in ``out`` and its manifest; their paths."""
    recipes = [r for r in scale_recipes() if max_nnz is None or r.nnz <= max_nnz]
    recipes = recipes[:count] if count is not None else recipes
    manifest = read_manifest(out) if (out / MANIFEST).exists() else {}
    paths, started = [], time.perf_counter()
    for number, recipe in enumerate(recipes, 1):
        path = out / f"{recipe.name}.npz"
        tick = time.perf_counter()
        if _is_current(recipe, manifest.get(recipe.name), path):
            status = "kept"
        else:
            manifest[recipe.name] = _write_one(recipe, path)
            write_manifest(out, manifest)
            status = f"nnz {manifest[recipe.name]['nnz']}, {time.perf_counter() - tick:.1f} s"
        elapsed = time.perf_counter() - started
        print(f"[{number}/{len(recipes)} {elapsed:.0f} s] {path.name}: {status}", flush=True)
        paths.append(path)
    return paths


def _write_one(recipe: Recipe, path: Path) -> dict[str, str]:
    matrix = build(recipe)
    save_matrix(matrix, path)
    rows, cols = matrix.shape
    return {
        "name": recipe.name,
        "kind": recipe.kind,
        "seed": str(recipe.seed),
        "options": recipe.options_text(),
        "nnz_requested": str(recipe.nnz),
        "shape": f"{rows}x{cols}",
        "nnz": str(matrix.nnz),
        "sha256": file_sha256(path),
    }


def _is_current(recipe: Recipe, row: dict[str, str] | None, path: Path) -> bool:
    """True when the manifest row describes this recipe and the file still has its bytes."""
    if row is None or not path.is_file():
        return False
    same = (row["kind"], row["seed"], row["options"], row["nnz_requested"]) == (
        recipe.kind,
        str(recipe.seed),
        recipe.options_text(),
        str(recipe.nnz),
    )
    return same and file_sha256(path) == row["sha256"]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(out: Path) -> dict[str, dict[str, str]]:
    """The manifest's rows by name; a malformed manifest raises ``CognateError``."""
    path = out / MANIFEST
    try:
        with open(path, newline="") as stream:
            reader = csv.DictReader(stream)
            missing = set(MANIFEST_COLUMNS) - set(reader.fieldnames or ())
            if missing:
                raise CognateError(f"{path}: manifest lacks column(s) {', '.join(sorted(missing))}")
            return {row["name"]: row for row in reader}
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise CognateError(f"{path}: cannot read the manifest ({exc})") from exc


def write_manifest(out: Path, rows: dict[str, dict[str, str]]) -> None:
    """Rewrite the manifest atomically (a crash never leaves half a manifest)."""
    path = out / MANIFEST
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=MANIFEST_COLUMNS)
        writer.writeheader()
        writer.writerows(rows[name] for name in sorted(rows))


def verify(out: Path) -> list[str]:
    """Names whose file is missing or differs from the manifest (printed one a line)."""
    if not (out / MANIFEST).exists():
        raise CognateError(f"{out / MANIFEST}: no manifest")
    rows = read_manifest(out)
    bad = []
    for name, row in sorted(rows.items()):
        path = out / f"{name}.npz"
        if not path.is_file():
            problem = "missing"
        elif file_sha256(path) != row["sha256"]:
            problem = "sha256 differs from the manifest"
        else:
            continue
        bad.append(name)
        print(f"{path}: {problem}", file=sys.stderr)
    print(f"verified {len(rows) - len(bad)} of {len(rows)} files against {out / MANIFEST}")
    return bad
