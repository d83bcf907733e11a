"""Benchmark the tuned cpu SpMM as a user runs it, against the strongest library paths.

For each matrix and dense width: ``cognate.tune(matrix, top_k=5, verify=True)``, then in one
process, interleaved rounds (tuned, mkl, torch, scipy, tuned, ...), medians:

- tuned: the user-facing ``result.kernel(B, out=C)`` (B read in place, C preallocated);
- mkl: MKL's inspector-executor SpMM (``mkl_sparse_s_create_csr`` + ``mkl_sparse_set_mm_hint``
  + ``mkl_sparse_optimize`` once, outside the timed region; then ``mkl_sparse_s_mm`` into a
  preallocated C per call; cognate/targets/cpu/library.py); its inspection time is printed
  apart;
- torch: ``torch.sparse.mm`` on a CSR tensor (int32 indices), as a PyTorch user calls it;
- scipy: ``A @ B`` (single-threaded).

Every result is checked against a float64 scipy reference before its time counts. Prints
ratios (library time / tuned time: > 1 means the tuned kernel is faster), GFLOP/s and the
effective bandwidth (A + B + C bytes once per call) next to a STREAM triad measured in the
same run, and the geomeans per width. The machine's load is read before each timing and a
busy machine is flagged (timings taken under load rank by what ran beside them).

    python scripts/bench_vs_library.py --quick              # one small shared matrix
    python scripts/bench_vs_library.py --threads 2          # shared matrices + 1M-nnz ones
"""

from __future__ import annotations

import argparse
import os
import sys

from cognate.timing import early_threads, time_interleaved

# --threads N reaches OpenMP before any runtime loads. Passive OpenMP waits (unless set
# otherwise), as tune --verify uses: this process holds two OpenMP runtimes (torch bundles its
# own libgomp; MKL and the generated kernels share the system's), and a runtime's threads
# spinning after its call steal the cores of whichever call runs next in the round.
early_threads(sys.argv, passive=True)

import numpy as np  # noqa: E402

import cognate  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.evaluate.stats import geomean  # noqa: E402
from cognate.io import load_matrix  # noqa: E402
from cognate.matrix import Matrix  # noqa: E402
from cognate.paths import shared_dir  # noqa: E402
from cognate.targets.cpu import library  # noqa: E402
from cognate.targets.cpu.kernel import mismatch, reference  # noqa: E402
from cognate.targets.cpu.stream import stream_triad_gbs  # noqa: E402

QUICK_MATRIX = "dwt_878"


def matrices(args: argparse.Namespace) -> list[Matrix]:
    """The shared real matrices (or --quick's one), then the generated 1M-nnz ones."""
    root = shared_dir() / "matrices"
    if args.quick:
        return [load_matrix(root / "suitesparse" / f"{QUICK_MATRIX}.mtx.gz")]
    paths = sorted((root / "suitesparse").glob("*.mtx.gz")) + sorted((root / "waco").glob("*.csr"))
    if args.ngraph:  # 277 more real matrices, mostly under 10k nnz: opt in
        paths += sorted((root / "ngraph").glob("*.mtx.gz"))
    if args.matrices:
        paths = [p for p in paths if any(name in p.name for name in args.matrices)]
    found = []
    for path in paths[: args.limit or None]:
        try:
            found.append(load_matrix(path))
        except CognateError as exc:
            print(f"skipped {path.name}: {exc}", file=sys.stderr)
    if args.synthetic_nnz:
        from cognate.synth import synthetic_pair

        for matrix in synthetic_pair(args.synthetic_nnz):
            matrix.name = f"{matrix.name}-{matrix.nnz}"
            found.append(matrix)
    return found


def calls(matrix: Matrix, result, b: np.ndarray, threads: int) -> tuple[dict, dict, float]:
    """The checked calls of one (matrix, width): name -> callable, name -> why missing,
    and MKL's inspection seconds."""
    csr = matrix.csr
    c_tuned = np.empty((csr.shape[0], b.shape[1]), dtype=np.float32)
    prepared = {"tuned": lambda: result.kernel(b, out=c_tuned)}
    results = {"tuned": lambda: c_tuned}
    missing: dict[str, str] = {}
    inspect_s = float("nan")
    try:
        mkl = library.mkl_spmm_call(csr, b, threads)
        prepared["mkl"], results["mkl"], inspect_s = mkl.run, mkl.result, mkl.inspect_s
    except CognateError as exc:
        missing["mkl"] = str(exc)
    torch_call = library.torch_spmm_call(csr, b)
    prepared["torch"], results["torch"] = torch_call.run, torch_call.result
    prepared["scipy"] = lambda: csr @ b
    results["scipy"] = lambda: np.asarray(csr @ b)
    ref, tol = reference(csr, "spmm", (b,))
    for name in list(prepared):
        prepared[name]()
        problem = mismatch(np.asarray(results[name]()), ref, 4 * tol)
        if problem:  # a wrong result never produces a timing
            missing[name] = f"result wrong: {problem}"
            del prepared[name]
    return prepared, missing, inspect_s


def bytes_moved(matrix: Matrix, width: int) -> int:
    """A (values, column indices, row pointers), B and C, each once: the least a call moves."""
    rows, cols = matrix.shape
    return matrix.nnz * 8 + (rows + 1) * 4 + (cols + rows) * width * 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"one small matrix ({QUICK_MATRIX})")
    parser.add_argument("--matrices", nargs="*", help="only matrices whose file name has these")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument(
        "--ngraph", action="store_true", help="also the 277 ngraph matrices (mostly < 10k nnz)"
    )
    parser.add_argument("--synthetic-nnz", type=int, default=1_000_000, help="0: none")
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=0, help="0: every core")
    args = parser.parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    if args.quick:
        args.synthetic_nnz, args.rounds = 0, min(args.rounds, 7)

    import torch

    torch.set_num_threads(threads)
    stream = stream_triad_gbs()
    print(f"threads {threads}; STREAM triad {stream:.1f} GB/s (this run)")
    header = (
        f"{'matrix':<28}{'nnz':>9}{'N':>5}{'tuned ms':>10}{'mkl ms':>9}{'torch ms':>10}"
        f"{'scipy ms':>10}{'mkl/tuned':>10}{'torch/tuned':>12}{'GFLOP/s':>9}{'GB/s':>7}"
        f"{'%triad':>7}{'mkl insp ms':>12}  tuned pick"
    )
    print(header)
    ratios: dict[int, list[tuple[int, float]]] = {w: [] for w in args.widths}
    for matrix in matrices(args):
        for width in args.widths:
            row = bench_one(matrix, width, threads, args, stream)
            if row is not None:
                ratios[width].append((matrix.nnz, row))
    for width, found in ratios.items():
        big = [r for nnz, r in found if nnz > 100_000]
        print(
            f"N={width}: tuned vs MKL inspector-executor geomean {geomean([r for _, r in found]):.3f}x"
            f" over {len(found)} matrices; over 100k nnz: min "
            f"{min(big) if big else float('nan'):.3f}x over {len(big)}"
        )


def bench_one(matrix: Matrix, width: int, threads: int, args, stream: float) -> float | None:
    """Tune, check and time one (matrix, width); print its row; return mkl / tuned."""
    result = cognate.tune(
        matrix, width=width, top_k=args.top_k, verify=True, candidates=args.candidates,
        threads=threads,
    )  # fmt: skip
    b = np.random.default_rng(0).uniform(-1, 1, (matrix.shape[1], width)).astype(np.float32)
    prepared, missing, inspect_s = calls(matrix, result, b, threads)
    for name, why in missing.items():
        print(f"  {matrix.name} N={width}: {name} not timed: {why}", file=sys.stderr)
    if "tuned" not in prepared:
        return None
    timed = time_interleaved(prepared, args.rounds, threads=threads)
    med, load = timed.seconds, timed.load
    tuned = med["tuned"]

    def ms(name: str) -> str:
        return f"{med[name] * 1e3:.3f}" if name in med else "-"

    def ratio(name: str) -> str:
        return f"{med[name] / tuned:.3f}" if name in med else "-"

    pick = "baseline (kept)" if result.kept_baseline else result.best.description.split("|")[0]
    print(
        f"{matrix.name[:27]:<28}{matrix.nnz:>9}{width:>5}{ms('tuned'):>10}{ms('mkl'):>9}"
        f"{ms('torch'):>10}{ms('scipy'):>10}{ratio('mkl'):>10}{ratio('torch'):>12}"
        f"{2 * matrix.nnz * width / tuned / 1e9:>9.2f}"
        f"{bytes_moved(matrix, width) / tuned / 1e9:>7.1f}"
        f"{100 * bytes_moved(matrix, width) / tuned / 1e9 / stream:>7.1f}"
        f"{inspect_s * 1e3:>12.2f}  {pick.strip()}" + (f"  [{load.line()}]" if load.busy else "")
    )
    return med["mkl"] / tuned if "mkl" in med else None


if __name__ == "__main__":
    try:
        main()
    except CognateError as exc:
        raise SystemExit(f"bench_vs_library: {exc}") from None
