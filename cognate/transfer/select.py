"""Which target matrices to simulate for fine-tuning: random, or chosen actively.

Target samples are the expensive part of transfer (every one is a full simulation of the
space), so which K matrices are measured matters as much as how many. ``active`` picks them
by diversity in the pretrained featurizer's embedding space (greedy k-center: each pick is
the training matrix farthest from those already picked), so K matrices cover the kinds of
structure the target split holds instead of repeating one. It needs no target runtimes:
only the matrices and the pretrained model, which is what a user has before simulating.

``representative`` answers k-center's known weakness: the farthest matrix is often an
outlier that teaches a ranking little about the rest. It adds, from the same seeded first
pick, the matrix that most lowers the summed distance of every training matrix to its
nearest pick (greedy facility location, the BUILD step of k-medoids), so picks sit where
the training matrices are dense.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from cognate.errors import CognateError

if TYPE_CHECKING:  # the CLI reads SELECTIONS; importing torch for it would slow every command
    import torch

SELECTIONS: tuple[str, ...] = ("random", "active", "representative")


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
    points = _standardised(train_keys, embeddings)
    first = _first_pick(len(train_keys), seed)
    chosen = [first]
    distance = np.linalg.norm(points - points[first], axis=1)
    while len(chosen) < k:
        distance[chosen] = -1.0  # ties among duplicates never re-pick a chosen matrix
        pick = int(np.argmax(distance))
        chosen.append(pick)
        distance = np.minimum(distance, np.linalg.norm(points - points[pick], axis=1))
    return sorted(train_keys[i] for i in chosen)


def pick_representative(
    train_keys: Sequence[str], k: int, seed: int, embeddings: Mapping[str, torch.Tensor]
) -> list[str]:
    """Greedy facility location over standardised embeddings, from the seeded first pick
    k-center uses (sorted): each pick most lowers the sum over the training matrices of the
    distance to their nearest pick."""
    _check(train_keys, k)
    points = _standardised(train_keys, embeddings)
    # n x n distances: a target training split holds hundreds of matrices, not millions
    pairwise = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=2)
    first = _first_pick(len(train_keys), seed)
    chosen = [first]
    nearest = pairwise[first].copy()
    while len(chosen) < k:
        cost = np.minimum(nearest[None, :], pairwise).sum(axis=1)
        cost[chosen] = np.inf  # duplicates cost nothing more: never re-pick a chosen matrix
        pick = int(np.argmin(cost))
        chosen.append(pick)
        nearest = np.minimum(nearest, pairwise[pick])
    return sorted(train_keys[i] for i in chosen)


PICKERS = {"active": pick_k_center, "representative": pick_representative}


def _first_pick(n: int, seed: int) -> int:
    """The seeded first pick both greedy pickers start from (so seeds give different sets)."""
    return int(np.random.default_rng(seed).integers(n))


def _standardised(train_keys: Sequence[str], embeddings: Mapping[str, torch.Tensor]) -> np.ndarray:
    """Per dimension to zero mean and unit spread, so no channel's scale decides distances."""
    points = np.stack([embeddings[key].detach().double().numpy().ravel() for key in train_keys])
    return (points - points.mean(axis=0)) / (points.std(axis=0) + 1e-12)


def _check(train_keys: Sequence[str], k: int) -> None:
    if k > len(train_keys):
        raise CognateError(
            f"--matrices {k}: the target training split has only {len(train_keys)} matrices"
        )
