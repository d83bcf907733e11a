"""The cpu target's size-only runnable check (size_check.py) against packing, on real matrices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cognate.formats.read import load_matrix
from cognate.matrix import Matrix
from cognate.search import tune_matrix
from cognate.targets import get_target
from cognate.targets.cpu import families, pipeline, size_check

# Matrices whose sampled configs mix fitting and too-large layouts of every family.
MATRICES = ("bcspwr06.mtx.gz", "adder_dcop_05.mtx.gz", "Franz6_id1959_aug.mtx.gz")


def _packs(source: families.PackSource, op: str, knobs: dict, width: int) -> bool:
    try:
        pipeline.pack(source, op, knobs, width)
    except families.TooLarge:
        return False
    return True


def _forbid_packing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the size check packed a config")

    monkeypatch.setattr(families, "pack", refuse)
    for family in families.FAMILIES:
        monkeypatch.setattr(families.module_of(family), "pack", refuse)


@pytest.mark.parametrize("op", ["spmm", "sddmm"])
@pytest.mark.parametrize("name", MATRICES)
def test_size_check_agrees_with_packing_without_packing(
    shared: Path, name: str, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix = load_matrix(shared / "matrices" / "suitesparse" / name)
    rng = np.random.default_rng(0)
    permuted = Matrix(
        "permuted",
        matrix.csr,
        row_perm=rng.permutation(matrix.shape[0]),
        col_perm=rng.permutation(matrix.shape[1]),
    )
    configs = get_target("cpu").space(op).sample(200, 1, matrix.shape)
    for m in (matrix, permuted):
        source = families.pack_source(m)
        want = [_packs(source, op, dict(c.knobs), 32) for c in configs]
        assert 0 < sum(want) < len(want)  # both outcomes are exercised
        with monkeypatch.context() as patched:
            _forbid_packing(patched)
            patched.setattr(size_check, "EXACT_PACK_NNZ", 0)  # bcsr: bounds or refusal only
            check = size_check.SizeCheck(m, op, 32)
            got = [check(c.knobs) for c in configs]
        # Exact everywhere, except that an undecided bcsr layout of a large matrix is
        # refused (conservative): never a config admitted that packing refuses.
        for config, fits_by_pack, fits_by_size in zip(configs, want, got, strict=True):
            if fits_by_size != fits_by_pack:
                assert not fits_by_size and families.family_of(config.knobs) == "bcsr"


def test_tune_ranks_a_matrix_without_packing_its_picks(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank-only tune decides its picks' sizes without packing; each pick then packs."""
    matrix = load_matrix(shared / "matrices" / "suitesparse" / "Groebner_id2003_aug.mtx.gz")
    with monkeypatch.context() as patched:
        _forbid_packing(patched)
        result = tune_matrix(matrix, "cpu", "spmm", width=32, top_k=5, candidates=2000)
    assert len(result.candidates) == 5
    source = families.pack_source(matrix)
    for candidate in result.candidates:
        assert _packs(source, "spmm", dict(candidate.config.knobs), 32)
