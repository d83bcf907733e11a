"""Choosing the K target matrices: seeded random, and k-center in the embedding space."""

from __future__ import annotations

import pytest
import torch

from cognate.errors import CognateError
from cognate.transfer.select import pick_k_center, pick_random, pick_representative


def _clusters() -> tuple[list[str], dict[str, torch.Tensor]]:
    # three tight clusters of unequal size: 10 "a", 4 "b", 1 "c"
    gen = torch.Generator().manual_seed(0)
    centres = {"a": [0.0, 0.0], "b": [10.0, 0.0], "c": [0.0, 10.0]}
    sizes = {"a": 10, "b": 4, "c": 1}
    embeddings = {}
    for name, size in sizes.items():
        for i in range(size):
            noise = 0.1 * torch.randn(2, generator=gen)
            embeddings[f"{name}{i}"] = torch.tensor(centres[name]) + noise
    return sorted(embeddings), embeddings


def test_k_center_covers_every_cluster_random_often_does_not():
    keys, embeddings = _clusters()
    for seed in range(10):
        picked = pick_k_center(keys, 3, seed, embeddings)
        assert sorted(p[0] for p in picked) == ["a", "b", "c"], picked
    random_cover = [len({p[0] for p in pick_random(keys, 3, seed)}) for seed in range(10)]
    assert min(random_cover) < 3  # the point of choosing actively


def test_k_center_is_deterministic_per_seed_and_sorted():
    keys, embeddings = _clusters()
    first = pick_k_center(keys, 5, 7, embeddings)
    assert first == pick_k_center(keys, 5, 7, embeddings) == sorted(first)
    assert len(set(first)) == 5


def test_k_center_with_duplicate_embeddings_never_repeats_a_pick():
    keys = [f"m{i}" for i in range(6)]
    embeddings = {k: torch.zeros(4) for k in keys}
    assert len(set(pick_k_center(keys, 6, 0, embeddings))) == 6


def test_asking_for_more_than_the_split_is_one_clear_error():
    keys, embeddings = _clusters()
    with pytest.raises(CognateError, match="--matrices 99"):
        pick_k_center(keys, 99, 0, embeddings)


def _with_outlier() -> tuple[list[str], dict[str, torch.Tensor]]:
    # a dense cluster "a" (10), a smaller one "b" (4) and one far outlier "c"
    gen = torch.Generator().manual_seed(1)
    centres = {"a": [0.0, 0.0], "b": [10.0, 0.0], "c": [0.0, 30.0]}
    sizes = {"a": 10, "b": 4, "c": 1}
    embeddings = {
        f"{name}{i}": torch.tensor(centres[name]) + 0.1 * torch.randn(2, generator=gen)
        for name, size in sizes.items()
        for i in range(size)
    }
    return sorted(embeddings), embeddings


def test_representative_skips_the_outlier_k_center_takes():
    keys, embeddings = _with_outlier()
    for seed in range(10):
        first = pick_k_center(keys, 1, seed, embeddings)[0]
        if first.startswith("c"):
            continue  # both start from the seeded first pick
        representative = pick_representative(keys, 2, seed, embeddings)
        assert sorted(p[0] for p in representative) == ["a", "b"], representative
        assert "c" in {p[0] for p in pick_k_center(keys, 2, seed, embeddings)}


def test_representative_shares_the_first_pick_and_never_repeats():
    keys, embeddings = _with_outlier()
    for seed in range(5):
        assert pick_representative(keys, 1, seed, embeddings) == pick_random(keys, 1, seed)
        picked = pick_representative(keys, 6, seed, embeddings)
        assert picked == sorted(set(picked)) and len(picked) == 6
    duplicates = {f"m{i}": torch.zeros(3) for i in range(4)}
    assert len(set(pick_representative(sorted(duplicates), 4, 0, duplicates))) == 4
    with pytest.raises(CognateError, match="--matrices 99"):
        pick_representative(keys, 99, 0, embeddings)
