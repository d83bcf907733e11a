"""The cost model: featurizer + MLP predictor, and the pairwise ranking loss.

Scores are unitless ranks: a LOWER score means a FASTER schedule. Only the order of the
scores of one matrix's configs means anything (the loss never sees absolute runtimes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from cognate.config import Config
from cognate.matrix import Matrix
from cognate.model.encoding import ConfigEncoder
from cognate.model.featurizer import LOG_SCALE, Featurizer, mlp
from cognate.model.preset import ModelPreset


class RankingNetwork(nn.Module):
    """score(matrix, width, config) = MLP([embedding || log2 width || normalised encoding]).

    ``config_mean`` / ``config_std`` are the encoding's normalisation statistics, computed
    on the training split and saved with the weights.
    """

    def __init__(self, preset: ModelPreset, config_dim: int) -> None:
        super().__init__()
        self.preset = preset
        self.config_dim = config_dim
        self.featurizer = Featurizer(preset.featurizer)
        sizes = [self.featurizer.dim + 1 + config_dim, *preset.predictor.hidden, 1]
        self.predictor = mlp(sizes)
        self.register_buffer("config_mean", torch.zeros(config_dim))
        self.register_buffer("config_std", torch.ones(config_dim))

    def set_normalisation(self, features: torch.Tensor) -> None:
        """Per-column mean and std of raw encodings; constant columns get std 1."""
        std = features.std(0, unbiased=False)
        self.config_mean.copy_(features.mean(0))
        self.config_std.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)))

    def score(self, embedding: torch.Tensor, width: int, features: torch.Tensor) -> torch.Tensor:
        """Scores [n] of ``features`` (raw encodings [n, config_dim]) for one matrix."""
        n = features.shape[0]
        context = torch.cat(
            [embedding, torch.tensor([math.log2(max(width, 1)) / LOG_SCALE])]
        ).expand(n, -1)
        normalised = (features - self.config_mean) / self.config_std
        return self.predictor(torch.cat([context, normalised], dim=1)).squeeze(1)

    @torch.no_grad()
    def predict(
        self,
        matrix: Matrix,
        configs: Sequence[Config],
        width: int,
        encoder: ConfigEncoder,
        backend: str = "auto",
        batch: int = 65536,
    ) -> np.ndarray:
        """Scores of ``configs`` for ``matrix`` (lower = faster); embeds the matrix once."""
        embedding = self.featurizer.embed(matrix, backend)
        out = []
        for start in range(0, len(configs), batch):
            chunk = configs[start : start + batch]
            out.append(self.score(embedding, width, encoder.encode(chunk, matrix.shape, width)))
        return torch.cat(out).numpy() if out else np.zeros(0, dtype=np.float32)


def ordered_pairs(runtimes: torch.Tensor, tie_rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Index pairs (fast, slow) of every non-tied pair; a tie is |a - b| <= tie_rtol max(a, b)."""
    a, b = runtimes[:, None], runtimes[None, :]
    strictly_faster = (a < b) & ((b - a) > tie_rtol * torch.maximum(a, b))
    fast, slow = torch.nonzero(strictly_faster, as_tuple=True)
    return fast, slow


def ranking_loss(
    scores: torch.Tensor,
    runtimes: torch.Tensor,
    margin: float,
    tie_rtol: float = 0.0,
    pair_weight: str = "uniform",
) -> torch.Tensor:
    """Mean of max(0, margin - (score_slow - score_fast)) over all non-tied pairs.

    Pushes each faster config's score at least ``margin`` below each slower one's; tied
    pairs are left out entirely, so they carry no gradient. Zero (with a graph) when no
    pair is ordered. ``pair_weight="log_gap"`` weights each pair by log(slow / fast) (a
    weighted mean): a swap that costs 2x counts more than one that costs 5%, which is what
    a top-1 pick pays for.
    """
    fast, slow = ordered_pairs(runtimes, tie_rtol)
    if fast.numel() == 0:
        return scores.sum() * 0.0
    hinge = torch.relu(margin - (scores[slow] - scores[fast]))
    if pair_weight == "uniform":
        return hinge.mean()
    if pair_weight != "log_gap":
        raise ValueError(f"unknown pair weight {pair_weight!r}")
    gap = torch.log(runtimes[slow] / runtimes[fast]).to(hinge.dtype)
    return (hinge * gap).sum() / gap.sum()


def pairwise_accuracy(scores: torch.Tensor, runtimes: torch.Tensor, tie_rtol: float = 0.0) -> float:
    """Share of non-tied pairs the scores order correctly (equal scores count one half)."""
    fast, slow = ordered_pairs(runtimes, tie_rtol)
    if fast.numel() == 0:
        return float("nan")
    diff = scores[slow] - scores[fast]
    return float(((diff > 0).float() + 0.5 * (diff == 0).float()).mean())
