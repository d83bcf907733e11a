"""``tune``: rank a target's schedules for one matrix with a cost model, verify the top."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cognate.budget import check_work
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.model.cost_model import CostModel
from cognate.model.encoding import never_trained_here, new_host_picks_baseline
from cognate.model.portfolio import ranking_used
from cognate.progress import Ticker
from cognate.runner import Measurement, ProgressFn
from cognate.search.rank import DEFAULT_CANDIDATES, DEFAULT_SEED, rank, runnable_top, same_config
from cognate.search.result import TuneResult
from cognate.search.verify import add_variants
from cognate.search.verify import verify as verify_result
from cognate.space import Space
from cognate.targets import Target, get_target
from cognate.util import positive_int


def load_model(path: str | Path, space: Space) -> CostModel:
    """The cost model in ``path`` for ``space`` (``CostModel.load``; fine-tuned ones too)."""
    from cognate import transfer

    transfer.register()
    return CostModel.load(path, space)


# Ranking takes seconds from about this size on (the embedding grows with nnz): announced.
ANNOUNCE_RANKING_NNZ = 1_000_000


def tune_matrix(
    matrix: Matrix,
    target: str = "cpu",
    op: str = "spmm",
    width: int = 64,
    top_k: int = 5,
    model: str | Path | CostModel | None = None,
    verify: bool = False,
    candidates: int = DEFAULT_CANDIDATES,
    seed: int = DEFAULT_SEED,
    progress: ProgressFn | None = None,
    runner_options: dict[str, Any] | None = None,
    cover_families: bool = True,
    threads: int | None = None,
    announce: Callable[[str], None] | None = None,
    bf16: bool = False,
) -> TuneResult:
    """Rank the candidates of (target, op) for ``matrix`` with ``model`` (a CostModel, a
    model file, or None: the shipped one); with ``verify``, measure the top-k and the
    baseline (and the target's library references, all in interleaved rounds with
    ``threads`` threads on cpu, default all cores). ``cover_families``: the top-k holds
    each kernel family's best-ranked config (``runnable_top``). ``announce``: called with one
    line as each long step starts (ranking, verifying), once the inputs are checked.
    ``bf16`` (cpu SpMM, with ``verify``): also time the pick's plain CSR kernel with B
    read as bfloat16 (float32 sums; another result, so only when asked), and pick it if it
    is the fastest."""
    if threads is not None:
        positive_int(threads, "threads")
    the_target = get_target(target)
    if bf16 and not (verify and the_target.has_bf16_variants(op)):
        raise CognateError(
            "bf16 (B read as bfloat16) is a cpu SpMM kernel variant chosen by timing:"
            " it needs --target cpu --op spmm --verify"
        )
    the_target.check_width(width)
    positive_int(top_k, "top-k")
    check_work(matrix, f"tune --target {target}", the_target.tune_cost(width, verify))
    space = the_target.space(op)
    say = announce or (lambda line: None)
    cost_model = _cost_model(model, space, say)
    if matrix.nnz >= ANNOUNCE_RANKING_NNZ:
        say(f"ranking up to {candidates:,} {target} {op} configs for {matrix.name} with the model")
    ranked, timings = rank(cost_model, space, matrix, width, candidates, seed)
    baseline_config = space.baseline(matrix.shape)
    baseline = next(c for c in ranked if same_config(c.config, baseline_config))
    start = time.perf_counter()
    family = space.family if cover_families else None
    top, skipped = runnable_top(ranked, matrix, op, width, top_k, the_target, family)
    timings.filter_s = time.perf_counter() - start
    for candidate in [*top, baseline]:
        candidate.description = space.describe(candidate.config)
    path = cost_model.path or Path(f"<{type(cost_model).__name__}>")
    result = TuneResult(matrix, target, op, width, top, baseline, len(ranked), path, timings)
    result.skipped_too_large = skipped
    result.space_version = space.version
    result.ranking = ranking_used(cost_model.metadata)
    result.scored_count = getattr(ranked, "count", None)
    encoder = getattr(cost_model, "encoder", None)  # a random or fixed model has none
    result.new_host = encoder is not None and never_trained_here(encoder, cost_model.metadata)
    result.new_host_baseline = result.new_host and new_host_picks_baseline(cost_model.metadata)
    if verify:  # the target's variants (cpu: vector width) are measured with the picks
        add_variants(result, the_target, bf16)
        say(_verify_line(result, the_target))
        if progress is None and announce is not None:
            progress = _progress_lines(result, announce)
        verify_result(result, the_target, progress, runner_options, threads)
    return result


def _progress_lines(result: TuneResult, announce: Callable[[str], None]) -> ProgressFn:
    """A line to ``announce`` as configs are measured (count, elapsed, ETA), at most every
    ``EVERY_S`` seconds and at the end: a pipe sees it move (cpu's interleaved verify also
    prints a line on stderr per config checked and per round timed)."""
    measured = len({c.config for c in [*result.candidates, result.baseline]})
    ticker = Ticker("verify: measured", measured, unit="configs", emit=announce)
    done = itertools.count(1)

    def report(measurement: Measurement) -> None:
        count = next(done)
        if count == 1:  # lines from the first result on: a verify that hands over all its
            ticker.last = time.monotonic()  # results at the end gets no partial line
        ticker.update(count)

    return report


def _verify_line(result: TuneResult, target: Target) -> str:
    measured = len({c.config for c in [*result.candidates, result.baseline]})
    what = "timing" if target.exclusive else "simulating"
    variants = sum(c.variant for c in result.candidates)
    top = len(result.candidates) - variants
    line = f"{what} {measured} configs (the top {top}, "
    line += f"{variants} variants of them, " if variants else ""
    line += "and the baseline)"
    return line + (
        " and the library references, side by side in rounds" if target.has_library else ""
    )


def _cost_model(
    model: str | Path | CostModel | None, space: Space, say: Callable[[str], None]
) -> CostModel:
    """The model ``choose_model`` resolves (the CLI's, too); its note said once."""
    from cognate.search.learn import choose_model

    chosen = choose_model(model, space.target, space.op)
    if chosen.note and not isinstance(model, CostModel):
        say(chosen.note)
    return chosen.model
