"""Target registry: a target is a runner plus its schedule spaces, and the few behaviours
generic code asks of it (docs/architecture.md, "Targets").

Generic modules (search, collect, transfer, evaluate) never branch on a target's name:
whatever differs between targets is a field or a method of its ``Target``. The built-in
targets are packages ``cognate.targets.<name>`` defining ``TARGET``, imported on first use;
``register_target`` adds another (a plugin, a test's toy target) without editing this file.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cognate.budget import Cost
from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.runner import Measurement, ProgressFn, Runner
from cognate.space import Space

if TYPE_CHECKING:  # hostid asks the registry whether a target is simulated
    from cognate.hostid import HostFacts

OPS: tuple[str, ...] = ("spmm", "sddmm")
# The targets that ship with cognate (a package each under cognate/targets/).
# Built-in target -> the package defining it (a package's ``TARGETS`` holds its variants).
BUILT_IN: dict[str, str] = {
    "cpu": "cpu",
    "spade": "spade",
    "gpu": "gpu",
    "spade-inverted": "spade",
    "spade-calibrated": "spade",
}
KNOWN_TARGETS: tuple[str, ...] = tuple(BUILT_IN)


@dataclass
class Verification:
    """What a target's ``verify`` measured: one measurement per config, and how it timed.

    ``libraries`` (name -> runtime_s / spread_s / inspect_s) are the library references a
    target timed beside the configs; ``load`` the machine's load while timing; ``timing``
    how the configs were timed ("interleaved", "one at a time", "sequential"; None: the
    runner's own way)."""

    measurements: list[Measurement]
    timing: str | None = None
    load: dict[str, Any] | None = None
    remeasured: list[str] = field(default_factory=list)
    libraries: dict[str, dict[str, Any]] = field(default_factory=dict)
    library_error: str | None = None
    checked: str | None = None  # which rows each result was checked on (None: every row)


# What a command costs in memory per row, column and nonzero (docs/reliability.md, matrix
# inputs: the whole command's peak RSS slope on files declaring 1e6..2e7 rows / columns and
# 5e5..2e6 entries, with a margin). Ranking: the model's scoring (the featurizer checks
# itself). Measuring at dense width w: B / C / X / Y, their float64 reference and
# tolerance, the checked result; the packed formats (up to 20 x nnz entries per array).
RANK_COST = Cost(48, 16, 64)


def dense_measure_cost(width: int) -> Cost:
    """``Target.measure_cost`` of a target that times kernels on dense operands."""
    return Cost(32 * width + 64, 24 * width + 16, 400)


def runs_anywhere() -> str | None:
    """``Target.missing`` of a target that needs no device: nothing is missing."""
    return None


@dataclass(frozen=True)
class Target:
    """A piece of hardware cognate tunes for: its spaces, its runner, and its behaviour.

    The defaults describe a target without a library reference, a callable kernel or a
    size limit (a simulator). A target that has them subclasses and overrides the methods.
    """

    name: str
    make_space: Callable[[str], Space]  # op -> Space
    make_runner: Callable[..., Runner]  # keyword options -> Runner
    description: str = ""
    # True when a measurement needs the whole machine (wall-clock timing on real cores);
    # False for deterministic simulators, whose runs may share the machine freely.
    exclusive: bool = True
    # The widest dense operand (SpMM's B columns, SDDMM's K) its kernels run; None: any.
    max_width: int | None = None
    # Whether ``verify`` times library references (the JSON of tune then reports them).
    has_library: bool = False
    # Memory per row, column and nonzero of ranking, and of measuring at a dense width.
    rank_cost: Cost = RANK_COST
    measure_cost: Callable[[int], Cost] = dense_measure_cost
    # () -> why this machine cannot run the target's kernels (no device), or None when it can.
    # A module-level function, not a lambda: a Target is pickled to pool workers.
    missing: Callable[[], str | None] = runs_anywhere

    def space(self, op: str) -> Space:
        if op not in OPS:
            raise CognateError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        return self.make_space(op)

    def runner(self, **options: Any) -> Runner:
        return self.make_runner(**options)

    def check_width(self, width: int) -> None:
        """A CognateError when ``width`` is not a dense width this target runs."""
        limit = self.max_width
        ok = isinstance(width, int) and not isinstance(width, bool) and width >= 1
        if not ok or (limit is not None and width > limit):
            bounds = f"1..{limit}" if limit is not None else ">= 1"
            raise CognateError(f"width must be an integer in {bounds}, got {width!r}")

    def runnable(self, matrix: Matrix, op: str, width: int) -> Callable[[Config], bool]:
        """config -> whether it can run on ``matrix`` (e.g. a storage size limit)."""
        return lambda config: True

    def timing_threads(self) -> int:
        """The cores one measurement occupies (what the machine-load check compares with)."""
        return os.cpu_count() or 1

    def host_facts(self) -> HostFacts | None:
        """What the store records of this machine beside each measurement: the vector ISA
        this target's kernels are built for, the CPU, its caches and cores; None where it
        does not apply (a simulator, a GPU)."""
        return None

    def verify(
        self,
        matrix: Matrix,
        op: str,
        width: int,
        configs: Sequence[Config],
        progress: ProgressFn | None = None,
        runner_options: dict[str, Any] | None = None,
        threads: int | None = None,
        baseline: Config | None = None,
    ) -> Verification:
        """Measure ``configs`` to decide between them (``tune --verify``): by default with
        the target's runner, as collect does. ``baseline`` (one of ``configs``) is the config
        a pick must beat, for a target that times the close calls again."""
        return Verification(self.measure(matrix, op, width, configs, progress, runner_options))

    def measure(
        self,
        matrix: Matrix,
        op: str,
        width: int,
        configs: Sequence[Config],
        progress: ProgressFn | None = None,
        runner_options: dict[str, Any] | None = None,
    ) -> list[Measurement]:
        """Measure ``configs`` with a fresh runner (closed afterwards if it can be)."""
        runner = self.runner(**(runner_options or {}))
        try:
            return runner.measure(matrix, op, width, configs, progress)
        finally:
            close = getattr(runner, "close", None)
            if callable(close):
                close()

    def artifacts(
        self, op: str, width: int, config: Config, info: dict[str, Any]
    ) -> list[tuple[str, str]]:
        """What ``tune --emit`` writes for a chosen ``config``: (file suffix, text) pairs.
        ``info`` describes the choice (matrix, op, width, knobs, runtime)."""
        return [(".json", json.dumps(info, indent=2) + "\n")]

    def tune_cost(self, width: int, verify: bool) -> Cost:
        """Memory of ``tune``: ranking, and with ``verify`` measuring the picks."""
        if not verify:
            return self.rank_cost
        measure = self.measure_cost(width)
        return Cost(*(max(a, b) for a, b in zip(self.rank_cost, measure, strict=True)))

    def variants(
        self,
        op: str,
        width: int,
        configs: Sequence[Config],
        shape: tuple[int, int] | None = None,
        bf16: bool = False,
    ) -> list[tuple[Config, Config]]:
        """(config, variant) pairs ``tune --verify`` times beside ``configs`` (of a matrix of
        ``shape``): variants in knobs the cost model does not encode or cannot rank (cpu:
        vector width, register tile, C's stores; with ``bf16``, B read as bfloat16), so
        measurement decides. By default none."""
        return []

    def has_bf16_variants(self, op: str) -> bool:
        """Whether ``variants(..., bf16=True)`` adds kernels that read B as bfloat16 for
        ``op`` (opt-in: ``tune(..., bf16=True)``). By default no."""
        return False

    @property
    def has_kernel(self) -> bool:
        """Whether ``kernel`` hands out a callable (the target runs on this kind of machine)."""
        return type(self).kernel is not Target.kernel

    def kernel(self, matrix: Matrix, op: str, config: Config) -> Callable[..., Any]:
        """A callable running ``config`` on ``matrix``: ``kernel(*operands, out=None)``;
        only targets whose kernels run on this machine have one."""
        raise CognateError(
            f"{self.name} has no callable kernel: only targets whose kernels run on "
            "this machine have one"
        )


_REGISTRY: dict[str, Target] = {}


def register_target(target: Target) -> Target:
    """Make ``target`` known by its name (a plugin's or a test's; replaces one of the same
    name). Returns it, so a module can write ``TARGET = register_target(Target(...))``."""
    if not isinstance(target, Target):
        raise TypeError(f"register_target needs a Target, got {type(target).__name__}")
    _REGISTRY[target.name] = target
    return target


def unregister_target(name: str) -> None:
    """Forget a registered target (a test's clean-up); built-ins load again on next use."""
    _REGISTRY.pop(name, None)


def target_names() -> tuple[str, ...]:
    """Every target name: the built-ins, then the registered ones."""
    return (*KNOWN_TARGETS, *(n for n in _REGISTRY if n not in KNOWN_TARGETS))


def is_target(name: str) -> bool:
    return name in _REGISTRY or name in KNOWN_TARGETS


def get_target(name: str) -> Target:
    """The registered target ``name``; a built-in one is imported (allow-listed) on first use."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name not in KNOWN_TARGETS:
        raise CognateError(f"unknown target {name!r}; expected one of {', '.join(target_names())}")
    module = importlib.import_module(f"cognate.targets.{BUILT_IN[name]}")
    return _REGISTRY.setdefault(name, getattr(module, "TARGETS", {}).get(name, module.TARGET))
