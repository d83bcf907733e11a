"""The generated corpus: the ``scale`` set (realistic kinds at 10^4..5x10^6 nnz, written
with a manifest), the ``base`` and ``extra`` sets, and regenerating any of their files from
its name (``regenerate``: what lets the published records train on a fresh clone).

``scale_recipes()`` is a fixed list (the same on every machine): per kind, sizes spread
log-uniformly over the range (one draw in each of equal log-width strata, so every kind
covers every size bucket), option variants cycled, seeds fixed. ``write_scale`` writes them
as scipy ``.npz`` and keeps ``manifest.csv`` (name, kind, seed, options, nnz_requested,
shape, nnz, sha256) up to date after every file, so an interrupted run resumes where it
stopped; ``verify`` re-hashes the files a manifest lists.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cognate.errors import CognateError
from cognate.formats.write import save_matrix
from cognate.matrix import Matrix
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


# --- the base and extra sets, and regenerating any corpus file from its name ------------------

# ``base``: (kind, rows, cols, density, options), a fixed, reviewed list rather than random
# draws, so the corpus is the same on every machine; the first stored records were measured
# on it.
BASE_RECIPES: list[tuple[str, int, int, float, dict]] = [
    ("uniform", 4096, 4096, 0.002, {}),
    ("uniform", 16384, 16384, 0.0004, {}),
    ("uniform", 8192, 2048, 0.004, {}),
    ("uniform", 2048, 8192, 0.004, {}),
    ("uniform", 30000, 30000, 0.0002, {}),
    ("rmat", 8192, 8192, 0.002, {}),
    ("rmat", 16384, 16384, 0.0005, {}),
    ("rmat", 32768, 32768, 0.0002, {}),
    ("rmat", 4096, 4096, 0.01, {"a": 0.45, "b": 0.15, "c": 0.15, "d": 0.25}),
    ("rmat", 16384, 16384, 0.001, {"a": 0.7, "b": 0.1, "c": 0.1, "d": 0.1}),
    ("banded", 20000, 20000, 0.0005, {"bandwidth": 16}),
    ("banded", 8192, 8192, 0.004, {"bandwidth": 64}),
    ("banded", 50000, 50000, 0.0001, {"bandwidth": 4}),
    ("banded", 4096, 4096, 0.02, {"bandwidth": 200}),
    ("block-diagonal", 8192, 8192, 0.003, {"block": 32}),
    ("block-diagonal", 16384, 16384, 0.0008, {"block": 16}),
    ("block-diagonal", 4096, 4096, 0.02, {"block": 128}),
    ("kdiag", 768, 768, 0.1, {}),
    ("kdiag", 768, 3072, 0.05, {}),
    ("kdiag", 3072, 768, 0.05, {}),
    ("kdiag", 768, 768, 0.1, {"permute": "both"}),
    ("block", 768, 768, 0.1, {"block": 16}),
    ("block", 3072, 768, 0.05, {"block": 32}),
    ("block", 768, 768, 0.1, {"block": 16, "permute": "rows"}),
    ("nm", 768, 768, 0.5, {"n": 2, "m": 4}),
    ("nm", 768, 3072, 0.125, {"n": 1, "m": 8}),
    ("nm", 3072, 768, 0.25, {"n": 2, "m": 8, "permute": "cols"}),
    ("uniform", 1024, 1024, 0.02, {"permute": "both"}),
    ("rmat", 2048, 2048, 0.01, {"permute": "rows"}),
    ("banded", 12000, 12000, 0.001, {"bandwidth": 8, "permute": "both"}),
]

# ``extra``: more of every kind (nnz 20k..400k, mostly <= 200k so 100 cpu configs collect in ~20 s
# each) and the structured layer masks at 768/3072 shapes, 80-95% sparsity.
EXTRA_RECIPES: list[tuple[str, int, int, float, dict]] = [
    ("uniform", 2048, 2048, 0.01, {}),
    ("uniform", 8192, 8192, 0.002, {}),
    ("uniform", 20000, 20000, 0.0005, {}),
    ("uniform", 4096, 16384, 0.002, {}),
    ("uniform", 16384, 4096, 0.003, {}),
    ("uniform", 60000, 60000, 0.0001, {}),
    ("rmat", 4096, 4096, 0.003, {}),
    ("rmat", 8192, 8192, 0.003, {"a": 0.5, "b": 0.2, "c": 0.2, "d": 0.1}),
    ("rmat", 65536, 65536, 0.00003, {}),
    ("rmat", 16384, 16384, 0.0007, {"a": 0.6, "b": 0.15, "c": 0.15, "d": 0.1}),
    ("banded", 30000, 30000, 0.0002, {"bandwidth": 3}),
    ("banded", 10000, 10000, 0.001, {"bandwidth": 32}),
    ("banded", 4096, 4096, 0.005, {"bandwidth": 20}),
    ("banded", 100000, 100000, 0.00002, {"bandwidth": 1}),
    ("banded", 2048, 2048, 0.05, {"bandwidth": 100}),
    ("block-diagonal", 12000, 12000, 0.001, {"block": 24}),
    ("block-diagonal", 6000, 6000, 0.005, {"block": 64}),
    ("block-diagonal", 32768, 32768, 0.0001, {"block": 8}),
    ("block-diagonal", 2048, 2048, 0.03, {"block": 256}),
    ("kdiag", 768, 768, 0.2, {}),
    ("kdiag", 768, 768, 0.05, {}),
    ("kdiag", 768, 3072, 0.1, {}),
    ("kdiag", 3072, 768, 0.05, {}),
    ("kdiag", 3072, 768, 0.1, {"permute": "both"}),
    ("kdiag", 768, 3072, 0.05, {"permute": "both"}),
    ("kdiag", 768, 768, 0.1, {"permute": "rows"}),
    ("kdiag", 768, 768, 0.2, {"permute": "cols"}),
    ("block", 768, 768, 0.2, {"block": 8}),
    ("block", 768, 3072, 0.1, {"block": 16}),
    ("block", 3072, 768, 0.05, {"block": 4}),
    ("block", 768, 768, 0.1, {"block": 32, "permute": "both"}),
    ("block", 3072, 768, 0.1, {"block": 16, "permute": "both"}),
    ("nm", 768, 768, 0.2, {}),
    ("nm", 768, 3072, 0.1, {}),
    ("nm", 3072, 768, 0.05, {}),
    ("nm", 768, 768, 0.1, {"permute": "both"}),
    ("nm", 768, 3072, 0.05, {"permute": "cols"}),
    ("uniform", 768, 3072, 0.1, {}),
    ("uniform", 768, 768, 0.1, {}),
    ("uniform", 3072, 768, 0.05, {}),
]
EXTRA_SEED = 100  # the extra set's seeds start here, away from the base list's 0..29
# set -> (file prefix, recipes, first seed, keep index maps)
SMALL_SETS: dict[str, tuple[str, list[tuple[str, int, int, float, dict]], int, bool]] = {
    "base": ("syn", BASE_RECIPES, 0, False),
    "extra": ("ext", EXTRA_RECIPES, EXTRA_SEED, True),
}


def set_file_name(name: str, index: int) -> str:
    """The file name recipe ``index`` of small set ``name`` is written as."""
    prefix, recipes, _, _ = SMALL_SETS[name]
    kind, rows, cols, _, options = recipes[index]
    permute = options.get("permute")
    return (
        f"{prefix}{index:02d}_{kind}_{rows}x{cols}" + (f"_p{permute}" if permute else "") + ".npz"
    )


def build_set_matrix(name: str, index: int) -> Matrix:
    """Recipe ``index`` of small set ``name`` (``base`` or ``extra``), generated."""
    _, recipes, first_seed, keep_maps = SMALL_SETS[name]
    kind, rows, cols, density, options = recipes[index]
    options = dict(options)
    permute = options.pop("permute", None)
    matrix = generate(
        kind, rows, cols, density=density, seed=first_seed + index, permute=permute, **options
    )
    if not keep_maps:  # the base corpus predates index maps: keep its files identical
        matrix = dataclasses.replace(matrix, row_perm=None, col_perm=None, _sha256=None)
    return matrix


def corpus_recipe(relative: str) -> tuple[str, Callable[[], Matrix]] | None:
    """(what, build) for a corpus file named ``SET/FILE.npz`` (as a record's ``corpus:``
    source names it) when a recipe of that set writes exactly that file; else None.

    Why by name: a record names its matrix by the path the corpus script wrote, and the
    set and index in that name pick the recipe; the full name must match, so a file of
    another corpus that happens to share a prefix is never rebuilt as something else."""
    parts = relative.split("/")
    if len(parts) != 2 or not parts[1].endswith(".npz"):
        return None
    folder, file = parts
    if folder in SMALL_SETS:
        prefix, recipes, first_seed, _ = SMALL_SETS[folder]
        index = _index_after(file, prefix, 2)
        if index is None or index >= len(recipes) or set_file_name(folder, index) != file:
            return None
        kind = recipes[index][0]
        return f"{kind}, seed {first_seed + index}", lambda: build_set_matrix(folder, index)
    if folder == "scale":
        index = _index_after(file, "sc", 3)
        recipes = scale_recipes()
        if index is None or index >= len(recipes) or f"{recipes[index].name}.npz" != file:
            return None
        recipe = recipes[index]
        return f"{recipe.kind}, seed {recipe.seed}", lambda: build(recipe)
    return None


def _index_after(file: str, prefix: str, digits: int) -> int | None:
    number = file[len(prefix) : len(prefix) + digits]
    return int(number) if file.startswith(prefix) and number.isdigit() else None


def regenerate(relative: str, root: Path, sha256: str) -> Path | None:
    """Write the corpus file ``root / relative`` again from its recipe, after checking the
    generated matrix is the one measured (``sha256``, the records' ``matrix_sha256``);
    None when no recipe writes that name. A mismatch (a generator that changed) raises
    ``CognateError`` and writes nothing. Generators are deterministic per seed, so the
    file is the one the records were measured on; kron recipes read their real base
    matrix from the shared folder."""
    found = corpus_recipe(relative)
    if found is None:
        return None
    what, make = found
    started = time.perf_counter()
    print(
        f"regenerating corpus:{relative} from its recipe ({what})...", file=sys.stderr, flush=True
    )
    try:
        matrix = make()
    except (CognateError, OSError, ValueError) as exc:
        raise CognateError(
            f"corpus:{relative}: cannot regenerate it from its recipe: {exc}"
        ) from None
    if matrix.sha256 != sha256:
        raise CognateError(
            f"corpus:{relative}: the recipe now generates another matrix (sha256 "
            f"{matrix.sha256[:12]}, measured {sha256[:12]}): the generator changed"
        )
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    path = save_matrix(matrix, root / relative)  # written to a temp file, then renamed
    seconds = time.perf_counter() - started
    print(f"  nnz {matrix.nnz}, {seconds:.1f} s, cached at {path}", file=sys.stderr, flush=True)
    return path
