"""Which target matrices to simulate for fine-tuning: random, or chosen actively.

Target samples are the expensive part of transfer (every one is a full simulation of the
space), so which K matrices are measured matters as much as how many. ``active`` picks them
by diversity in the pretrained featurizer's embedding space (greedy k-center: each pick is
the training matrix farthest from those already picked), so K matrices cover the kinds of
structure the target split holds instead of repeating one. It needs no target runtimes:
only the matrices and the pretrained model, which is what a user has before simulating.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from cognate.errors import CognateError

SELECTIONS: tuple[str, ...] = ("random", "active")


def pick_random(train_keys: Sequence[str], k: int, seed: int) -> list[str]:
    """``k`` of the training matrices, drawn with ``seed`` (sorted)."""
    _check(train_keys, k)
    chosen = np.random.default_rng(seed).choice(len(train_keys), k, replace=False)
    return sorted(train_keys[int(i)] for i in chosen)


def pick_k_center(
    train_keys: Sequence[str], k: int, seed: int, embeddings: Mapping[str, torch.Tensor]
) -> list[str]:
    """Greedy k-center over standardised embeddings, from a seeded first pick (sorted).

    Standardised per dimension so that no embedding channel's scale decides the distances;
    the first pick is drawn with ``seed`` so seeds give different (equally diverse) sets.
    """
    _check(train_keys, k)
    points = np.stack([embeddings[key].detach().double().numpy().ravel() for key in train_keys])
    points = (points - points.mean(axis=0)) / (points.std(axis=0) + 1e-12)
    first = int(np.random.default_rng(seed).integers(len(train_keys)))
    chosen = [first]
    distance = np.linalg.norm(points - points[first], axis=1)
    while len(chosen) < k:
        distance[chosen] = -1.0  # ties among duplicates never re-pick a chosen matrix
        pick = int(np.argmax(distance))
        chosen.append(pick)
        distance = np.minimum(distance, np.linalg.norm(points - points[pick], axis=1))
    return sorted(train_keys[i] for i in chosen)


def _check(train_keys: Sequence[str], k: int) -> None:
    if k > len(train_keys):
        raise CognateError(
            f"--matrices {k}: the target training split has only {len(train_keys)} matrices"
        )
