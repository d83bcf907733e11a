"""Ranking: a target's candidate schedules for one matrix scored by a cost model.

The matrix is embedded once; the candidates (a small space: all of it; a large one: a
seeded sample of tens of thousands of legal configs) are encoded and scored in batches
and ranked by score (lower = faster). ``runnable_top`` then takes the best that can run.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from cognate.config import Config
from cognate.matrix import Matrix
from cognate.model.cost_model import CostModel
from cognate.model.portfolio import portfolio_order, portfolio_positions
from cognate.space import Space
from cognate.targets import Target, get_target

DEFAULT_CANDIDATES = 20_000
DEFAULT_SEED = 0
SCORE_BATCH = 8192
FAMILY_PROBES = 3  # configs too large tried per uncovered family before giving up on it


@dataclass
class Timings:
    """Seconds spent per search phase (what scripts/bench_tune.py reports)."""

    candidates_s: float = 0.0  # drawing the candidate set
    featurize_s: float = 0.0  # the matrix embedding (once per matrix)
    encode_s: float = 0.0  # config encodings
    score_s: float = 0.0  # the predictor over all candidates
    rank_s: float = 0.0  # sorting the scores
    filter_s: float = 0.0  # checking that the top configs can run (e.g. a size limit)
    # Wall time of candidates + featurize + encode + score + rank: featurize overlaps the
    # candidates and their encoding (``rank``), so this is less than the phases' sum.
    search_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class Candidate:
    """One ranked config; ``runtime_s`` / ``status`` are set when it was measured."""

    rank: int
    config: Config
    score: float
    description: str
    status: str | None = None
    runtime_s: float | None = None  # verified: the median over interleaved rounds (cpu)
    error: str | None = None
    family_pick: bool = False  # below the top-k, measured as its kernel family's best-ranked
    spread_s: float | None = None  # verified: interquartile range of the timed samples
    # position in the model's ranking of every scored config (``rank`` numbers the top-k
    # 1..k among themselves once configs that cannot run are skipped); 0: not known
    scored_rank: int = 0
    portfolio: bool = False  # one of the model's portfolio configs, ranked ahead of the rest
    # a target's variant of a ranked config (cpu: vector width, register tile, schedule),
    # added for verify: it carries that config's rank and score, measurement decides
    variant: bool = False
    range_s: float | None = None  # verified: max - min of the timed samples
    variant_of: str | None = None  # a variant: the hash of the ranked config it varies

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rank": self.rank,
            "config": dict(self.config.knobs),
            "description": self.description,
            "hash": self.config.hash,
            "score": self.score,
            "family_pick": self.family_pick,
            "scored_rank": self.scored_rank,
            "portfolio": self.portfolio,
            "variant": self.variant,
            "variant_of": self.variant_of,
        }
        if self.status is not None:
            out.update(status=self.status, runtime_s=self.runtime_s, spread_s=self.spread_s)
            if self.error:
                out["error"] = self.error
        return out


@dataclass
class ScoredCount:
    """Where the scored configs came from: what ``top K of N scored configs`` counts."""

    requested: int  # --candidates: the sample a large space draws
    from_space: int  # the space's candidates (a small space: all of it)
    whole_families: tuple[str, ...] = ()  # kernel families scored in full beside the sample
    baseline_added: int = 0  # the baseline config, when the sample missed it
    portfolio_added: int = 0  # the model's portfolio configs the sample missed
    portfolio: int = 0  # portfolio configs among the scored (ranked ahead of the rest)

    @property
    def total(self) -> int:
        return self.from_space + self.baseline_added + self.portfolio_added

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "whole_families": list(self.whole_families)}


class Ranked(list):
    """``rank``'s candidates, best first, with where they came from (``count``)."""

    count: ScoredCount | None = None


def candidate_set(
    space: Space,
    shape: tuple[int, int],
    n: int,
    seed: int,
    drawn: list[Config] | None = None,
) -> list[Config]:
    """The space's search candidates (``drawn``: already drawn) plus its baseline,
    distinct, in a deterministic order."""
    configs = space.candidates(n, seed, shape) if drawn is None else drawn
    baseline = space.baseline(shape)
    if not any(same_config(c, baseline) for c in configs):
        configs = [*configs, baseline]
    return configs


def with_portfolio(
    configs: list[Config], portfolio: Sequence[Config]
) -> tuple[list[Config], np.ndarray]:
    """``configs`` plus the portfolio configs a sample missed (a large space's candidates are
    a sample; a model ranks its portfolio ahead of them), and each one's position in the
    portfolio (-1 outside it)."""
    positions = portfolio_positions(configs, portfolio)
    found = set(positions[positions >= 0].tolist())
    missing = [i for i in range(len(portfolio)) if i not in found]
    if missing:
        configs = [*configs, *(portfolio[i] for i in missing)]
        positions = np.concatenate([positions, np.array(missing, dtype=np.int64)])
    return configs, positions


def same_config(a: Config, b: Config) -> bool:
    """``a == b``, cheaply: Config equality hashes its canonical JSON (sha256), a cost
    that adds up over a scan of tens of thousands of candidates; equal configs have equal
    knob dicts, so comparing those first skips the hashing for all but the matches."""
    return a.knobs == b.knobs and a == b


def score_configs(
    model: CostModel,
    matrix: Matrix,
    configs: Sequence[Config],
    width: int,
    timings: Timings,
    batch: int = SCORE_BATCH,
    embedding: Future | None = None,
) -> np.ndarray:
    """Scores (lower = faster) of ``configs`` for ``matrix``: embed once, encode and score in
    batches. ``embedding``: the matrix embedding already under way (``rank`` starts it in a
    thread before drawing the candidates); else it is computed here."""
    encoded = []
    for lo in range(0, len(configs), batch):
        start = time.perf_counter()
        encoded.append(model.encode(configs[lo : lo + batch], matrix.shape, width))
        timings.encode_s += time.perf_counter() - start
    vector = embedding.result() if embedding is not None else embed(model, matrix, timings)
    start = time.perf_counter()
    out = [model.score(vector, e, width) for e in encoded]
    timings.score_s += time.perf_counter() - start
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def embed(model: CostModel, matrix: Matrix, timings: Timings) -> Any:
    """The matrix embedding, timed."""
    start = time.perf_counter()
    vector = model.embed(matrix)
    timings.featurize_s += time.perf_counter() - start
    return vector


def rank(
    model: CostModel,
    space: Space,
    matrix: Matrix,
    width: int,
    candidates: int = DEFAULT_CANDIDATES,
    seed: int = DEFAULT_SEED,
) -> tuple[list[Candidate], Timings]:
    """All candidates ranked by predicted score (rank 1 = predicted fastest).

    The featurizer (numpy / torch array work, which releases the GIL) runs in a thread while
    this one draws and encodes the candidates (Python work per config): on 2 cores the two
    overlap, and the search takes about the longer of them, not their sum.
    """
    timings = Timings()
    wall = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cognate-embed") as pool:
        embedding = pool.submit(embed, model, matrix, timings)
        start = time.perf_counter()
        drawn = space.candidates(candidates, seed, matrix.shape)
        configs = candidate_set(space, matrix.shape, candidates, seed, drawn)
        with_base = len(configs)
        configs, positions = with_portfolio(configs, model.portfolio)
        timings.candidates_s = time.perf_counter() - start
        scores = score_configs(model, matrix, configs, width, timings, embedding=embedding)
    start = time.perf_counter()
    order = portfolio_order(scores, positions, model.portfolio_anchor)
    timings.rank_s = time.perf_counter() - start
    timings.search_s = time.perf_counter() - wall
    ranked = Ranked(
        Candidate(
            r, configs[i], float(scores[i]), "", scored_rank=r, portfolio=bool(positions[i] >= 0)
        )
        for r, i in enumerate(order.tolist(), 1)
    )
    ranked.count = ScoredCount(
        requested=candidates,
        from_space=len(drawn),
        whole_families=_whole_families(space, drawn, candidates),
        baseline_added=with_base - len(drawn),
        portfolio_added=len(configs) - with_base,
        portfolio=int((positions >= 0).sum()),
    )
    return ranked, timings


def _whole_families(space: Space, drawn: Sequence[Config], requested: int) -> tuple[str, ...]:
    """The families of the configs a space adds in full beyond the ``requested`` sample
    (cpu: every legal config of its non-csr families), in their order of appearance."""
    if len(drawn) <= requested:
        return ()
    return tuple(dict.fromkeys(space.family(c) or "the rest" for c in drawn[requested:]))


def runnable_top(
    ranked: Sequence[Candidate],
    matrix: Matrix,
    op: str,
    width: int,
    k: int,
    target: str | Target,
    family: Callable[[Config], str] | None = None,
) -> tuple[list[Candidate], int]:
    """Copies of the first ``k`` ranked candidates that can run on ``matrix`` (the target's
    ``runnable`` check, e.g. cpu's storage size limit, which depends on where the nonzeros
    fall: checked top-down, a few checks, not 20k), ranked 1..k among themselves, and how
    many better-ranked ones were skipped.

    With ``family`` (config -> kernel family), each family's best-ranked runnable config is
    in the selection too, in place of the lowest-ranked picks of a family that has several
    (rank 1 always stays): a cost model compares knobs within a kernel family better than
    it compares kernels with each other, so one measurement per family keeps a family it
    underrates in the running (``Candidate.family_pick`` marks those)."""
    the_target = target if isinstance(target, Target) else get_target(target)
    fits = the_target.runnable(matrix, op, width)
    top: list[Candidate] = []
    skipped = 0
    for candidate in ranked:
        if len(top) == k:
            break
        if fits(candidate.config):
            top.append(candidate)
        else:
            skipped += 1
    if family is not None:
        top = _cover_families(top, ranked, family, fits)
    renumbered = [
        dataclasses.replace(c, rank=i, scored_rank=c.scored_rank or c.rank)
        for i, c in enumerate(top, 1)
    ]
    return renumbered, skipped


def _cover_families(
    top: list[Candidate],
    ranked: Sequence[Candidate],
    family: Callable[[Config], str],
    fits: Callable[[Config], bool],
) -> list[Candidate]:
    """``top`` with the best runnable config of each family it lacks swapped in (see
    ``runnable_top``), in rank order."""
    chosen = list(top)
    covered = {family(c.config) for c in chosen}
    probes: dict[str, int] = {}
    for candidate in ranked:
        name = family(candidate.config)
        if name in covered or probes.get(name, 0) >= FAMILY_PROBES:
            continue
        counts = Counter(family(c.config) for c in chosen)
        removable = [c for c in chosen[1:] if counts[family(c.config)] > 1]
        if not removable:
            break
        if not fits(candidate.config):
            probes[name] = probes.get(name, 0) + 1
            continue
        chosen.remove(removable[-1])
        chosen.append(dataclasses.replace(candidate, family_pick=True))
        covered.add(name)
    return sorted(chosen, key=lambda c: c.rank)  # rank order: a portfolio stays first
