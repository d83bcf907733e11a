"""A/B of the plain CSR SpMM kernel (the baseline's) between a git revision and the working tree.

For each matrix and dense width, the baseline config's kernel compiled from
``kernels/cpu/spmm_csr.c`` and ``tasks.inc`` as they were at ``--before`` and as they are now,
both called through their argument vectors (as ``result.kernel(B, out=C)`` calls them) and
MKL's inspector-executor SpMM (handle optimized once), interleaved in one process, each
checked against scipy first. Default OpenMP waits (nothing set), as a plain Python caller
has them. Prints before/now per matrix, MKL-IE / each, and the geomeans per width.

    python scripts/bench_kernel_revision.py --before HEAD~1 --threads 2
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from string import Template

from cognate.timing import early_threads, time_interleaved

early_threads(sys.argv)  # --threads N reaches OpenMP before any runtime loads

from cognate.build import compile_c  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402
from cognate.matrix import Matrix  # noqa: E402
from cognate.paths import shared_dir  # noqa: E402
from cognate.stats import geomean  # noqa: E402
from cognate.targets.cpu import pipeline  # noqa: E402
from cognate.targets.cpu.measure import library  # noqa: E402
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference  # noqa: E402
from cognate.targets.cpu.space import make_space  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Small and mid-size shared matrices, where the task split of a product matters most.
DEFAULT_MATRICES = (
    "suitesparse/494_bus", "suitesparse/bp_1200", "suitesparse/dwt_878",
    "suitesparse/reorientation_1", "suitesparse/watt_2", "suitesparse/dwt_992",
    "ngraph/saylr4", "ngraph/bcsstk11", "ngraph/Alemdar", "ngraph/cegb3024",
    "suitesparse/bcsstk13", "suitesparse/adder_dcop_05", "suitesparse/young1c",
)  # fmt: skip


def at_revision(revision: str, path: str) -> str:
    """The text of ``path`` at ``revision`` (git show); one clear line when it fails."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:{path}"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise CognateError(f"git show {revision}:{path}: {done.stderr.strip()}")
    return done.stdout


def before_library(revision: str, width: int) -> str:
    """The plain CSR kernel of ``revision`` at ``width``, compiled (cached like any kernel).
    Only the whitelisted integer width is substituted, as codegen does."""
    template = Template(at_revision(revision, "kernels/cpu/spmm_csr.c"))
    tasks = at_revision(revision, "kernels/cpu/tasks.inc")
    return str(compile_c(template.substitute(dense_extent=str(int(width)), tasks=tasks)))


def bench_one(matrix: Matrix, width: int, revision: str, rounds: int, threads: int) -> float:
    """Print one row; return before time / now time."""
    knobs = dict(make_space("spmm").baseline(matrix.shape).knobs)
    operands = dense_operands("spmm", matrix.shape, width, seed=0)
    ref, tol = reference(matrix.csr, "spmm", operands)
    calls = {}
    for name, lib in (
        ("before", before_library(revision, width)),
        ("now", pipeline.build("spmm", knobs, width)),
    ):
        call = pipeline.bind(pipeline.pack(matrix, "spmm", knobs, width), knobs, operands, lib)
        call()
        problem = mismatch(call.result(), ref, tol)
        if problem:  # a wrong result never produces a timing
            raise CognateError(f"{matrix.name} N={width} {name}: {problem}")
        calls[name] = call
    calls["mkl"] = library.mkl_spmm_call(matrix.csr, operands[0], threads).run
    timed = time_interleaved(calls, rounds, threads=threads)
    sec = timed.seconds
    print(
        f"{matrix.name[:19]:<20}{matrix.nnz:>9}{width:>5}{sec['before'] * 1e6:>11.1f}"
        f"{sec['now'] * 1e6:>9.1f}{sec['before'] / sec['now']:>12.3f}"
        f"{sec['mkl'] / sec['before']:>12.3f}{sec['mkl'] / sec['now']:>9.3f}"
        + (f"  [{timed.load.line()}]" if timed.load.busy else ""),
        flush=True,
    )
    return sec["before"] / sec["now"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git revision to compare with")
    parser.add_argument(
        "--matrices",
        nargs="*",
        default=list(DEFAULT_MATRICES),
        help="shared matrices as DIR/NAME (.mtx.gz under ../shared/matrices)",
    )
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    root = shared_dir() / "matrices"
    matrices = [load_matrix(root / f"{name}.mtx.gz") for name in args.matrices]
    print(f"{'matrix':<20}{'nnz':>9}{'N':>5}{'before us':>11}{'now us':>9}{'before/now':>12}"
          f"{'mkl/before':>12}{'mkl/now':>9}")  # fmt: skip
    ratios: dict[int, list[float]] = {}
    for width in args.widths:
        for matrix in matrices:
            ratios.setdefault(width, []).append(
                bench_one(matrix, width, args.before, args.rounds, args.threads)
            )
    for width, found in ratios.items():
        print(
            f"N={width}: before/now geomean {geomean(found):.3f}x over {len(found)}"
            f" (min {min(found):.3f}x, max {max(found):.3f}x)"
        )


if __name__ == "__main__":
    try:
        main()
    except CognateError as exc:
        raise SystemExit(f"bench_kernel_revision: {exc}") from None
