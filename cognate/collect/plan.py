"""What a collection measures per matrix: the configs still to do (resume), the baseline
first, the sampled and model-picked configs, the repeat picks."""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.runner import STATUSES, Measurement
from cognate.space import Space

DEFAULT_CONFIGS = 100


DEFAULT_WIDTH = 64


DEFAULT_RETRIES = 2


ConfigPicker = Callable[[Matrix], list[Config]]


@dataclass(frozen=True)
class RetryPolicy:
    """Which stored records a resume measures again: ``timeout`` and ``error`` ones, up to
    ``retries`` times after the first attempt (``force``: whatever their attempt count);
    ``ok``, ``too_large`` and ``mismatch`` are done."""

    retries: int = DEFAULT_RETRIES
    force: bool = False

    def wants(self, stored: tuple[str, int] | None) -> bool:
        if stored is None:
            return True
        status, attempts = stored
        if status not in ("timeout", "error"):
            return False
        return self.force or attempts <= self.retries


@dataclass
class Plan:
    """One matrix's work: the configs still to measure, the baseline first."""

    path: Path
    matrix: Matrix
    baseline: Config
    todo: list[Config]
    repeat: set[str] = field(default_factory=set)  # config hashes to time again at the end
    # repeat picks stored by an earlier, killed run before their repeat was taken
    stored_repeats: list[Measurement] = field(default_factory=list)
    pending: int = 0  # chunks handed to workers and not yet written
    submitted: bool = False  # every chunk handed out
    failed: bool = False


def matrix_seed(seed: int, matrix: Matrix) -> int:
    """The sampling seed of one matrix: each matrix gets its own configs (as in WACO's
    data), the same ones on every run, so a rerun resumes the same set."""
    digest = hashlib.sha256(f"{seed}:{matrix.sha256}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def choose_configs(
    space: Space,
    matrix: Matrix,
    n_configs: int,
    all_configs: bool,
    seed: int,
    picker: ConfigPicker | None = None,
    all_variants: bool = False,
) -> tuple[Config, list[Config]]:
    """(baseline, configs to have measured): the baseline first, no duplicates. A
    ``picker`` (a cost model's choice) replaces the seeded sample. The kernel variants of
    the baseline (cpu SpMM) are one family of the sample's spread, or with ``all_variants``
    every one of them comes on top of the ``n_configs``."""
    shape = matrix.shape
    per_matrix = matrix_seed(seed, matrix)
    if picker is not None:
        configs = picker(matrix)
    elif all_configs:
        configs = space.candidates(n_configs, per_matrix, shape)
    else:
        configs = space.sample(n_configs, per_matrix, shape)
    baseline = space.baseline(shape)
    unique = {baseline.hash: baseline}
    for config in configs:
        unique.setdefault(config.hash, config)
    if picker is None and not all_configs:
        # A sample may hold more than asked (cpu: the family grids come on top of n csr
        # configs): measure n, spread over the families (knob ``family``), plus the baseline
        # (and, asked for, every kernel variant: records that say what each is worth on
        # every matrix, for a model that ranks them).
        others = [c for c in unique.values() if c != baseline]
        variants = set(space.kernel_variants())
        extra = [c for c in others if c in variants] if all_variants else []
        rest = spread_over_families([c for c in others if c not in extra], n_configs, variants)
        return baseline, [baseline, *rest, *extra]
    return baseline, list(unique.values())


def spread_over_families(
    configs: Sequence[Config], n: int, variants: Collection[Config] = ()
) -> list[Config]:
    """``n`` of ``configs`` taken round-robin over their families (knob ``family``; the
    space's kernel ``variants`` one family of their own), each in its given order."""
    families: dict[str, deque[Config]] = {}
    for config in configs:
        group = "variant" if config in variants else str(config.knobs.get("family", ""))
        families.setdefault(group, deque()).append(config)
    chosen: list[Config] = []
    while len(chosen) < n and families:
        for name in list(families):
            if len(chosen) == n:
                break
            chosen.append(families[name].popleft())
            if not families[name]:
                del families[name]
    return chosen


REPEAT_FRACTION = 0.05


def repeat_picks(seed: int, matrix: Matrix, configs: Sequence[Config]) -> set[str]:
    """The fixed 5% (at least one) of a matrix's configs timed twice: the same ones for a
    given seed, whichever order they were measured in."""
    if not configs:
        return set()
    key = lambda c: hashlib.sha256(f"{seed}:{matrix.sha256}:{c.hash}".encode()).digest()  # noqa: E731
    count = math.ceil(REPEAT_FRACTION * len(configs))
    return {c.hash for c in sorted(configs, key=key)[:count]}


def model_picker(
    model_path: str | Path, target_name: str, space: Space, op: str, width: int, n: int
) -> ConfigPicker:
    """The ``n`` runnable candidates a cost model ranks best, from the same candidate set
    ``cognate tune`` searches: measuring them refines the model exactly where it searches
    (its top picks among 20k candidates lie where random samples are sparse)."""
    from cognate import transfer
    from cognate.model.cost_model import CostModel
    from cognate.model.shipped import resolve_model_path
    from cognate.search.rank import rank, runnable_top  # torch: only when a model is asked for

    transfer.register()  # a fine-tuned model's loader
    model = CostModel.load(resolve_model_path(model_path, target_name, op), space)

    def pick(matrix: Matrix) -> list[Config]:
        ranked, _ = rank(model, space, matrix, width)
        top, _ = runnable_top(ranked, matrix, op, width, n, target_name, space.family)
        return [candidate.config for candidate in top]

    return pick


def check_batch(configs: Sequence[Config], measurements: Sequence[Measurement]) -> None:
    """A runner must answer every config asked, in order, with a known status."""
    asked = [c.hash for c in configs]
    got = [m.config.hash for m in measurements]
    if asked != got:
        raise CognateError(
            f"runner answered {len(got)} measurement(s) for {len(asked)} config(s) asked, "
            "or in another order"
        )
    for m in measurements:
        if m.status not in STATUSES:
            raise CognateError(f"runner returned unknown status {m.status!r}")


def chunks(items: Sequence[Config], size: int) -> Iterator[list[Config]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
