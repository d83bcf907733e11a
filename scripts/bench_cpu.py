"""Benchmark the cpu target's generated kernels against MKL, torch.sparse and scipy.

For each matrix (the shared SuiteSparse and WACO matrices, plus a synthetic 1M-nnz uniform
and power-law one) and each dense width: the baseline config (WACO's FixedCSR), the best
of N sampled configs (found with the isolated CpuRunner, then re-timed here), MKL
(sparse_dot_mkl), torch.sparse.mm and scipy, all timed in this process in interleaved
rounds (medians: the machine is shared and noisy). Prints GFLOP/s, ratios to MKL, and the
achieved bandwidth next to a STREAM triad measured in the same run. SDDMM: baseline and
best sampled config against torch.sparse.sampled_addmm.

    python scripts/bench_cpu.py                          # everything (long)
    python scripts/bench_cpu.py --limit 6 --configs 30   # a short run
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable

from cognate.timing import early_threads, time_interleaved

early_threads(sys.argv)  # --threads N reaches OpenMP, MKL and torch before they load

from cognate.targets.cpu.measure.library import export_mkl_rt_env  # noqa: E402

export_mkl_rt_env()  # sparse_dot_mkl finds MKL through $MKL_RT

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from cognate.bench.corpus import shared_matrices  # noqa: E402
from cognate.bench.stream import stream_triad_gbs  # noqa: E402
from cognate.matrix import Matrix  # noqa: E402
from cognate.stats import geomean  # noqa: E402
from cognate.targets.cpu.families import TooLarge  # noqa: E402
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference  # noqa: E402
from cognate.targets.cpu.measure.runner import CpuRunner  # noqa: E402
from cognate.targets.cpu.pipeline import PreparedKernel, prepare_kernel  # noqa: E402
from cognate.targets.cpu.space import make_space  # noqa: E402

console = Console(width=200)
warnings.filterwarnings("ignore", message="Sparse (invariant checks|CSR tensor support)")
THREADS = int(os.environ.get("OMP_NUM_THREADS", 0)) or len(os.sched_getaffinity(0))


def load_matrices(args: argparse.Namespace) -> list[Matrix]:
    matrices = shared_matrices(names=args.matrices or (), limit=args.limit)
    if args.synthetic_nnz:
        from cognate.synth import synthetic_pair

        matrices += synthetic_pair(args.synthetic_nnz)
    return matrices


def kernel_call(
    matrix: Matrix, op: str, knobs: dict, operands: tuple[np.ndarray, ...]
) -> PreparedKernel:
    """A packed, compiled kernel reading ``operands`` in place (the package's own call)."""
    return prepare_kernel(matrix, op, knobs, *operands)


def top_sampled(
    matrix: Matrix, op: str, width: int, n_configs: int, base_s: float, seed: int, keep: int = 3
) -> tuple[list[dict], int, int]:
    """(the ``keep`` fastest configs' knobs, configs ok, configs tried) by the isolated runner;
    configs more than 20x slower than the baseline are cut off by its time limit."""
    space = make_space(op)
    configs = space.sample(n_configs, seed=seed, shape=matrix.shape)
    runner = CpuRunner(repeats=5, warmup=1, timeout_s=max(0.2, 20 * base_s), min_sample_s=2e-4)
    try:
        results = runner.measure(matrix, op, width, configs)
    finally:
        runner.close()
    ok = sorted((m for m in results if m.status == "ok"), key=lambda m: m.runtime_s)
    return [dict(m.config.knobs) for m in ok[:keep]], len(ok), len(configs)


def best_sampled(
    matrix: Matrix,
    op: str,
    operands: tuple[np.ndarray, ...],
    base_s: float,
    args: argparse.Namespace,
) -> tuple[PreparedKernel | None, int, int]:
    """The best sampled config: the runner's top 3 re-timed here (one noisy median from the
    runner would otherwise favour a lucky config)."""
    width = operands[0].shape[1]
    top, n_ok, n_tried = top_sampled(matrix, op, width, args.configs, base_s, args.seed)
    if not top:
        return None, n_ok, n_tried
    calls = {str(n): kernel_call(matrix, op, knobs, operands) for n, knobs in enumerate(top)}
    times = time_interleaved(calls, max(5, args.rounds // 2), threads=THREADS).seconds
    return calls[min(times, key=times.get)], n_ok, n_tried


def torch_csr(matrix: Matrix) -> torch.Tensor:
    csr = matrix.csr
    return torch.sparse_csr_tensor(
        torch.from_numpy(csr.indptr.astype(np.int32)),
        torch.from_numpy(csr.indices.astype(np.int32)),
        torch.from_numpy(csr.data),
        size=csr.shape,
    )


def spmm_bytes(matrix: Matrix, width: int) -> int:
    """Compulsory traffic of CSR SpMM: A once (values, indices, row pointer), B once, C once."""
    rows, cols = matrix.shape
    return 8 * matrix.nnz + 4 * (rows + 1) + 4 * width * (rows + cols)


def bench_spmm(matrix: Matrix, width: int, args: argparse.Namespace) -> dict:
    from sparse_dot_mkl import dot_product_mkl

    (b,) = dense_operands("spmm", matrix.shape, width, seed=0)
    space = make_space("spmm")
    base = kernel_call(matrix, "spmm", dict(space.baseline(matrix.shape).knobs), (b,))
    base_s = time_interleaved({"base": base}, 3, threads=THREADS).seconds["base"]
    best, n_ok, n_tried = best_sampled(matrix, "spmm", (b,), base_s, args)
    a, ta, tb = matrix.csr, torch_csr(matrix), torch.from_numpy(b)
    impls: dict[str, Callable[[], object]] = {"base": base}
    if best is not None:
        impls["best"] = best
    mkl_out = np.zeros((a.shape[0], width), dtype=np.float32)  # preallocated, as ours is
    impls |= {
        "mkl": lambda: dot_product_mkl(a, b, out=mkl_out),
        "torch": lambda: torch.sparse.mm(ta, tb),
        "scipy": lambda: a @ b,
    }
    ref, tol = reference(a, "spmm", (b,))
    base()
    mkl_out[:] = 0  # with out=, MKL accumulates (C += A @ B): timed calls do the same work
    for name, result in (("baseline", base.result()), ("MKL", dot_product_mkl(a, b, out=mkl_out))):
        problem = mismatch(result, ref, tol)
        assert problem is None, f"{matrix.name}: {name}: {problem}"
    timed = time_interleaved(impls, args.rounds, threads=THREADS)
    times = timed.seconds | {"best": timed.seconds.get("best", timed.seconds["base"])}
    return {"times": times, "ok": n_ok, "tried": n_tried, "load": timed.load}


def bench_sddmm(matrix: Matrix, width: int, args: argparse.Namespace) -> dict:
    x, y = dense_operands("sddmm", matrix.shape, width, seed=0)
    space = make_space("sddmm")
    base = kernel_call(matrix, "sddmm", dict(space.baseline(matrix.shape).knobs), (x, y))
    base_s = time_interleaved({"base": base}, 3, threads=THREADS).seconds["base"]
    best, n_ok, n_tried = best_sampled(matrix, "sddmm", (x, y), base_s, args)
    ta, tx, tyt = torch_csr(matrix), torch.from_numpy(x), torch.from_numpy(y.T.copy())
    values = torch.from_numpy(matrix.csr.data)
    impls: dict[str, Callable[[], object]] = {"base": base}
    if best is not None:
        impls["best"] = best

    def torch_sddmm() -> torch.Tensor:
        # sampled_addmm gives (X Y^T) at A's pattern; A's values then scale it.
        out = torch.sparse.sampled_addmm(ta, tx, tyt, beta=0.0)
        return out.values() * values

    impls["torch"] = torch_sddmm
    timed = time_interleaved(impls, args.rounds, threads=THREADS)
    times = timed.seconds | {"best": timed.seconds.get("best", timed.seconds["base"])}
    return {"times": times, "ok": n_ok, "tried": n_tried, "load": timed.load}


def spmm_table(rows: list[tuple[Matrix, int, dict]], stream: float) -> Table:
    table = Table(title=f"SpMM, {THREADS} threads, medians; STREAM triad {stream:.1f} GB/s")
    for col in ("matrix", "nnz", "N", "base ms", "best ms", "mkl ms", "torch ms", "scipy ms"):
        table.add_column(col, justify="right" if col != "matrix" else "left")
    for col in ("base GF/s", "best GF/s", "mkl/base", "mkl/best", "best GB/s", "ok/tried"):
        table.add_column(col, justify="right")
    for matrix, width, res in rows:
        t = res["times"]
        flops = 2 * matrix.nnz * width
        gbs = spmm_bytes(matrix, width) / t["best"] / 1e9
        table.add_row(
            matrix.name,
            str(matrix.nnz),
            str(width),
            *(f"{t[k] * 1e3:.3f}" for k in ("base", "best", "mkl", "torch", "scipy")),
            f"{flops / t['base'] / 1e9:.2f}",
            f"{flops / t['best'] / 1e9:.2f}",
            f"{t['mkl'] / t['base']:.2f}",
            f"{t['mkl'] / t['best']:.2f}",
            f"{gbs:.1f}",
            f"{res['ok']}/{res['tried']}",
        )
    return table


def sddmm_table(rows: list[tuple[Matrix, int, dict]]) -> Table:
    table = Table(title=f"SDDMM, {THREADS} threads, medians")
    for col in ("matrix", "nnz", "K", "base ms", "best ms", "torch ms", "torch/base", "torch/best"):
        table.add_column(col, justify="right" if col != "matrix" else "left")
    for matrix, width, res in rows:
        t = res["times"]
        table.add_row(
            matrix.name,
            str(matrix.nnz),
            str(width),
            *(f"{t[k] * 1e3:.3f}" for k in ("base", "best", "torch")),
            f"{t['torch'] / t['base']:.2f}",
            f"{t['torch'] / t['best']:.2f}",
        )
    return table


def summarize(spmm_rows: list, sddmm_rows: list) -> None:
    for width in sorted({w for _, w, _ in spmm_rows}):
        for group, keep in (
            ("shared", lambda m: not m.name.startswith("synth-")),
            ("synthetic", lambda m: m.name.startswith("synth-")),
        ):
            sel = [r["times"] for m, w, r in spmm_rows if w == width and keep(m)]
            if not sel:
                continue
            console.print(
                f"SpMM N={width} {group} ({len(sel)} matrices), geomean:"
                f" MKL time / baseline time {geomean([t['mkl'] / t['base'] for t in sel]):.3f}"
                f" (baseline within 1.25x of MKL means >= 0.8);"
                f" best-sampled speedup over MKL {geomean([t['mkl'] / t['best'] for t in sel]):.3f};"
                f" over torch {geomean([t['torch'] / t['best'] for t in sel]):.3f};"
                f" over scipy {geomean([t['scipy'] / t['best'] for t in sel]):.3f}"
            )
    for width in sorted({w for _, w, _ in sddmm_rows}):
        sel = [r["times"] for _, w, r in sddmm_rows if w == width]
        console.print(
            f"SDDMM K={width} ({len(sel)} matrices), geomean speedup over torch.sampled_addmm:"
            f" baseline {geomean([t['torch'] / t['base'] for t in sel]):.3f},"
            f" best sampled {geomean([t['torch'] / t['best'] for t in sel]):.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--matrices", nargs="*", help="only matrices whose file name contains one of these"
    )
    parser.add_argument("--limit", type=int, default=0, help="at most this many shared matrices")
    parser.add_argument(
        "--widths", type=int, nargs="+", default=[32, 128], help="SpMM dense widths"
    )
    parser.add_argument("--sddmm-widths", type=int, nargs="*", default=[32], help="SDDMM widths")
    parser.add_argument("--configs", type=int, default=100, help="sampled configs per matrix")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, help="threads for every library (default: all cores)"
    )
    parser.add_argument("--synthetic-nnz", type=int, default=1_000_000, help="0: no synthetic")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    stream = stream_triad_gbs()
    console.print(f"STREAM triad: {stream:.1f} GB/s ({THREADS} threads)")
    spmm_rows, sddmm_rows = [], []
    for matrix in load_matrices(args):
        for width in args.widths:
            try:
                spmm_rows.append((matrix, width, bench_spmm(matrix, width, args)))
            except TooLarge as exc:
                console.print(f"{matrix.name}: {exc}")
                continue
            t, load = spmm_rows[-1][2]["times"], spmm_rows[-1][2]["load"]
            console.print(
                f"{matrix.name} N={width}: base {t['base'] * 1e3:.3f} ms best {t['best'] * 1e3:.3f}"
                f" mkl {t['mkl'] * 1e3:.3f} torch {t['torch'] * 1e3:.3f} scipy {t['scipy'] * 1e3:.3f}"
                + (f" [{load.line()}]" if load.busy else ""),
                markup=False,
            )
        for width in args.sddmm_widths:
            sddmm_rows.append((matrix, width, bench_sddmm(matrix, width, args)))
    console.print(spmm_table(spmm_rows, stream))
    if sddmm_rows:
        console.print(sddmm_table(sddmm_rows))
    console.print(f"STREAM triad after the run: {stream_triad_gbs():.1f} GB/s")
    summarize(spmm_rows, sddmm_rows)


if __name__ == "__main__":
    main()
