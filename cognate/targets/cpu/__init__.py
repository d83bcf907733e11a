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
from typing import TYPE_CHECKING, Any

from cognate.budget import Cost
from cognate.config import Config
from cognate.matrix import Matrix
from cognate.runner import ProgressFn, Runner
from cognate.space import Space
from cognate.targets import Target, Verification
from cognate.targets.cpu.codegen import MAX_SPECIALISED_WIDTH as MAX_WIDTH

if TYPE_CHECKING:  # hostid reads the target registry: imported where it is used
    from cognate.hostid import HostFacts


def _make_space(op: str) -> Space:
    from cognate.targets.cpu.space import make_space

    return make_space(op)


def _make_runner(**options: Any) -> Runner:
    from cognate.targets.cpu.measure.runner import CpuRunner

    return CpuRunner(**options)


def measure_cost(width: int) -> Cost:
    """Memory of measuring configs (``tune --verify``, ``collect``): the caller's CSR and the
    measuring process's copy (12 bytes per nonzero each), one config packed at a time (the
    csr family's pack peaks at 78 bytes per nonzero, measured on a 10^7-nnz powerlaw graph;
    panel 90, reordered 23), B and one output at ``width`` floats per column / row, and
    the reference of a sample of rows where the whole one does not fit (measure/check.py)."""
    return Cost(24 + 4 * width, 16 + 4 * width, 12 + 12 + 78)


@dataclass(frozen=True)
class CpuTarget(Target):
    def runnable(self, matrix: Matrix, op: str, width: int) -> Callable[[Config], bool]:
        """A layout may exceed the size limit (20 x nnz, as WACO refuses): it depends on
        where the nonzeros fall, so it is decided from the matrix's row and column
        statistics without packing (size_check.py); the pack happens once, when a config runs."""
        from cognate.targets.cpu.size_check import size_check

        return size_check(matrix, op, width)

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
        baseline: Config | None = None,
    ) -> Verification:
        from cognate.targets.cpu.measure import verify

        return verify.verify(
            self, matrix, op, width, configs, progress, runner_options, threads, baseline
        )

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

    def host_facts(self) -> HostFacts | None:
        """The ISA the kernels are compiled for here (isa.py), e.g. avx512 / 512, and this
        machine's CPU, caches and cores (hostid.py)."""
        from cognate.hostid import HostFacts  # here: hostid reads the target registry
        from cognate.targets.cpu.isa import host_isa

        isa = host_isa()
        return HostFacts.of(isa.name, isa.vector_bits)

    def variants(
        self,
        op: str,
        width: int,
        configs: Sequence[Config],
        shape: tuple[int, int] | None = None,
        bf16: bool = False,
    ) -> list[tuple[Config, Config]]:
        """Vector-width / register-tile, schedule and C-store variants of the best-ranked
        plain CSR SpMM config among ``configs`` (with ``bf16``: also B read as bfloat16), for
        ``tune --verify`` to time beside them (vector.py)."""
        from cognate.targets.cpu.vector import vector_variants

        return vector_variants(op, width, configs, shape, bf16)

    def has_bf16_variants(self, op: str) -> bool:
        """SpMM: the plain CSR kernel's ``bf16`` knob (codegen.PRECISION_KNOBS)."""
        return op == "spmm"

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
    # tune decides whether its top picks fit from row / column statistics (size_check.py: 8 bytes
    # per column and bounded chunks, no pack), so ranking costs what any target's does
    rank_cost=Cost(48, 24, 64),
    measure_cost=measure_cost,
)
