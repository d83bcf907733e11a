"""The cpu target: WACO's SuperSchedule and the DIA / reordered-BCSR families on generated,
compiled C kernels, timed on this machine.

What generic code asks of a target is answered here (``CpuTarget``): the widest dense
operand, the storage size limit, the interleaved verify with the library references, the
emitted C source and the callable kernel. Imports are lazy so that the runner's worker
process (which imports this package) stays light and does not depend on the space module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cognate.config import Config
from cognate.io import Cost
from cognate.matrix import Matrix
from cognate.runner import ProgressFn, Runner
from cognate.space import Space
from cognate.targets import Target, Verification
from cognate.targets.cpu.codegen import MAX_SPECIALISED_WIDTH as MAX_WIDTH


def _make_space(op: str) -> Space:
    from cognate.targets.cpu.space import make_space

    return make_space(op)


def _make_runner(**options: Any) -> Runner:
    from cognate.targets.cpu.measure.runner import CpuRunner

    return CpuRunner(**options)


@dataclass(frozen=True)
class CpuTarget(Target):
    def runnable(self, matrix: Matrix, op: str, width: int) -> Callable[[Config], bool]:
        """A layout may exceed the size limit (20 x nnz, as WACO refuses): it depends on
        where the nonzeros fall, so it is checked by packing."""
        from cognate.targets.cpu import families

        source = families.pack_source(matrix)

        def fits(config: Config) -> bool:
            try:
                families.pack(source, op, config.knobs, width)
            except families.TooLarge:
                return False
            return True

        return fits

    def timing_threads(self) -> int:
        from cognate.targets.cpu.measure.runner import omp_threads

        return omp_threads()

    def verify(
        self,
        matrix: Matrix,
        op: str,
        width: int,
        configs: Sequence[Config],
        progress: ProgressFn | None = None,
        runner_options: dict[str, Any] | None = None,
        threads: int | None = None,
    ) -> Verification:
        from cognate.targets.cpu.measure import verify

        return verify.verify(self, matrix, op, width, configs, progress, runner_options, threads)

    def artifacts(
        self, op: str, width: int, config: Config, info: dict[str, Any]
    ) -> list[tuple[str, str]]:
        """The generated C source (entry point and runtime arguments in its header) and
        the choice as JSON with those arguments."""
        import json

        from cognate.targets.cpu.families import kernel_source

        # kernel_source re-validates every knob against the whitelists before codegen.
        source, entry, args = kernel_source(op, config.knobs, width)
        header = (
            f"/* cognate tune: {info['matrix']}, {op}, width {width}\n"
            f" * schedule: {info['description']}\n"
            f" * entry point {entry}; pass the runtime arguments "
            + ", ".join(f"{k}={v}" for k, v in args.items())
            + "\n * compile: cc -O3 -march=native -fopenmp -fPIC -shared */\n"
        )
        described = json.dumps({**info, "runtime_args": args}, indent=2) + "\n"
        return [(".c", header + source), (".json", described)]

    def variants(
        self, op: str, width: int, configs: Sequence[Config]
    ) -> list[tuple[Config, Config]]:
        """Vector-width / register-tile and schedule variants of the best-ranked plain CSR
        SpMM config among ``configs``, for ``tune --verify`` to time beside them (vector.py)."""
        from cognate.targets.cpu.vector import vector_variants

        return vector_variants(op, width, configs)

    def kernel(self, matrix: Matrix, op: str, config: Config) -> Callable[..., Any]:
        from cognate.targets.cpu.tuned import ScheduleKernel

        return ScheduleKernel(matrix, op, config)


TARGET = CpuTarget(
    "cpu",
    make_space=_make_space,
    make_runner=_make_runner,
    description=(
        "WACO SuperSchedule SpMM/SDDMM, DIA and reordered BCSR as generated C + OpenMP"
        " kernels on this machine"
    ),
    exclusive=True,
    max_width=MAX_WIDTH,
    has_library=True,
    # tune checks that its top picks can run by packing each one (an array per row;
    # measured on a 10^7-nnz powerlaw graph: 32-99 bytes per nonzero per pack, the whole
    # rank-only tune 1.5 GB over the loaded CSR, the sketch featurizer's ~1.1 GB included)
    rank_cost=Cost(128, 16, 160),
)
