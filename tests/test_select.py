"""Choosing the K target matrices: seeded random, and k-center in the embedding space."""

from __future__ import annotations

import pytest
import torch

from cognate.errors import CognateError
from cognate.transfer.select import pick_k_center, pick_random


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
