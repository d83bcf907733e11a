"""Does register tiling across rows pay? Row blocks (BCSR, BR x 1) vs the plain CSR kernel vs MKL-IE.

A BR x 1 block holds BR rows' values at one column: each B row loaded is multiplied into BR
output rows held in registers (issue 58's "rows sharing columns load each B row once"). The
rows are grouped by the space's row clustering (bcsr ``blend`` 0: Jaccard similarity of the
column sets), and a column present in only some of the block's rows is stored with zeros:
the block *fill* (stored values / nonzeros) is the multiply-adds it adds. So it pays where
rows repeat exactly (fill 1.0) and B traffic, not multiply-adds, bounds the plain kernel.

For each matrix and width, in this process: the space's baseline config (plain CSR, 256-bit),
the plain kernel on the host's whole-row tile (``row tile``: 512-bit x8 at N = 128 on
AVX-512), BCSR BR x 1 at each ``--brows`` and ``--jtiles`` (reordered-BCSR family), and MKL's
inspector-executor (handle built, hinted and optimized once; the output names its code path:
``COGNATE_MKL_INTEL_PATH=1`` puts MKL on its Intel path on AMD). Each result is checked
against scipy first; each call is block-timed alone after a pause (cognate.timing.blocks);
medians. Printed per matrix: each call's ms, its fill, and MKL-IE / call.

    COGNATE_MKL_INTEL_PATH=1 python scripts/bench_row_blocks.py --threads 2 \\
        --matrices nemspmm1 Trec6 bcsstk38 cavity24 bcsstk13 stokes64s
"""

from __future__ import annotations

import argparse
import sys

from cognate.timing import early_threads, time_blocks

THREADS = early_threads(sys.argv, default=2) or 2  # before OpenMP, MKL and torch load

import numpy as np  # noqa: E402

from cognate.bench.corpus import shared_matrices  # noqa: E402
from cognate.matrix import Matrix  # noqa: E402
from cognate.targets.cpu.isa import host_isa  # noqa: E402
from cognate.targets.cpu.measure import library  # noqa: E402
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference  # noqa: E402
from cognate.targets.cpu.pipeline import PreparedKernel, prepare_kernel  # noqa: E402
from cognate.targets.cpu.space import make_space  # noqa: E402
from cognate.targets.cpu.vector import row_tile  # noqa: E402


def calls_for(matrix: Matrix, width: int, b: np.ndarray, args) -> dict[str, PreparedKernel]:
    space = make_space("spmm")
    base = dict(space.baseline(matrix.shape).knobs)
    tile = row_tile(width, host_isa().variant_widths or (256,))
    calls = {
        "baseline": prepare_kernel(matrix, "spmm", base, b),
        "row tile": prepare_kernel(matrix, "spmm", {**base, **tile.knobs}, b),
    }
    for brows in args.brows:
        for jtile in args.jtiles:
            knobs = {"family": "bcsr", "brows": brows, "bcols": 1, "blend": 0.0}
            knobs.update(jtile=jtile, chunk=4)
            calls[f"bcsr {brows}x1 j{jtile}"] = prepare_kernel(matrix, "spmm", knobs, b)
    return calls


def bench(matrix: Matrix, width: int, args) -> None:
    (b,) = dense_operands("spmm", matrix.shape, width, seed=0)
    ref, tol = reference(matrix.csr, "spmm", (b,))
    calls = calls_for(matrix, width, b, args)
    for name, call in calls.items():  # every result checked before a timing counts
        call()
        problem = mismatch(call.result(), ref, tol)
        if problem is not None:
            raise SystemExit(f"{matrix.name} N={width}: {name}: {problem}")
    fill = {n: c.packed.out_slots / matrix.nnz for n, c in calls.items() if n.startswith("bcsr")}
    mkl = library.mkl_spmm_call(matrix.csr, b, threads=THREADS)
    mkl.run()
    problem = mismatch(mkl.result(), ref, tol)
    if problem is not None:
        raise SystemExit(f"{matrix.name} N={width}: mkl-ie: {problem}")
    timed, load = time_blocks({**calls, "mkl-ie": mkl.run}, args.rounds, threads=THREADS)
    ms = {name: float(np.median(t.samples)) * 1e3 for name, t in timed.items()}
    busy = f"  {load.line()}" if load.busy else ""
    path = library.mkl_code_path()
    print(f"{matrix.name}  nnz {matrix.nnz}  rows {matrix.shape[0]}  N={width}  MKL {path}{busy}")
    for name in sorted(ms, key=ms.get):
        filled = f"fill {fill[name]:.2f}" if name in fill else ""
        print(
            f"  {name:16s} {ms[name]:9.3f} ms  {filled:9s}  mkl-ie / this {ms['mkl-ie'] / ms[name]:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrices", nargs="+", required=True, help="file names containing")
    parser.add_argument("--widths", type=int, nargs="+", default=[128])
    parser.add_argument("--brows", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--jtiles", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"{host_isa().line()}; threads {THREADS}; medians of {args.rounds} block-timed rounds")
    for matrix in shared_matrices(names=args.matrices):
        for width in args.widths:
            bench(matrix, width, args)


if __name__ == "__main__":
    main()
