"""Speed check of the cpu target's DIA / reordered-BCSR families on a DynaDiag layer.

A 4096 x 4096 k-diagonal mask at 90% sparsity (K = 410 wrapped diagonals, cognate.synth),
plain and with random row and column permutations (carried as index maps), dense width 128:
every DIA config of the space and the sampled BCSR grid (each checked against scipy once),
the CSR baseline config (WACO's FixedCSR), MKL CSR (sparse_dot_mkl) and dense torch.matmul,
all timed in this process in interleaved rounds; medians, GFLOP/s and ratios.

    OMP_NUM_THREADS=2 python scripts/bench_cpu_families.py [--width 128] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from cognate.targets.cpu.measure.library import export_mkl_rt_env

export_mkl_rt_env()  # sparse_dot_mkl finds MKL through $MKL_RT

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cognate.matrix import Matrix  # noqa: E402
from cognate.synth import generate  # noqa: E402
from cognate.targets.cpu.families import TooLarge  # noqa: E402
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference  # noqa: E402
from cognate.targets.cpu.pipeline import prepare_kernel  # noqa: E402
from cognate.targets.cpu.space import make_space  # noqa: E402
from cognate.timing import time_interleaved  # noqa: E402

MIN_SAMPLE_S = 2e-3  # a sample: as many back-to-back calls as fill this


def _kernels(matrix: Matrix, width: int, b: np.ndarray) -> dict[str, Callable[[], object]]:
    space = make_space("spmm")
    configs = [space.baseline(matrix.shape)] + [
        c for c in space.sample(0, 0, matrix.shape) if c["family"] in ("dia", "bcsr")
    ]
    ref, tol = reference(matrix.csr, "spmm", (b,))
    out: dict[str, Callable[[], object]] = {}
    for config in configs:
        try:
            call = prepare_kernel(matrix, "spmm", config, b)
        except TooLarge:
            continue
        call()
        problem = mismatch(call.result(), ref, tol)
        if problem:
            raise SystemExit(f"{space.describe(config)}: {problem}")
        label = "csr baseline" if "family" not in config.knobs else space.describe(config)
        out[label] = call
    return out


def _medians(runs: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Interleaved (a noisy phase hits every contender alike), under the timing lock."""
    timed = time_interleaved(runs, rounds, MIN_SAMPLE_S, threads=torch.get_num_threads())
    if timed.load.busy:
        print(timed.load.line())
    return timed.seconds


def bench(matrix: Matrix, width: int, rounds: int) -> dict[str, float]:
    from sparse_dot_mkl import dot_product_mkl

    (b,) = dense_operands("spmm", matrix.shape, width, 0)
    runs = _kernels(matrix, width, b)
    a_dense, b_torch = torch.from_numpy(matrix.csr.toarray()), torch.from_numpy(b)
    csr = matrix.csr
    runs["mkl csr"] = lambda: dot_product_mkl(csr, b)
    runs["torch.matmul dense"] = lambda: torch.matmul(a_dense, b_torch)
    # The 36 sampled family configs first, briefly: only the best DIA and BCSR go on.
    quick = _medians({k: v for k, v in runs.items() if k.startswith("spmm ")}, 2)
    keep = {min((k for k in quick if fam in k), key=quick.get) for fam in ("DIA", "BCSR")}
    finals = {k: v for k, v in runs.items() if k in keep or not k.startswith("spmm ")}
    return _medians(finals, rounds)


def report(title: str, times: dict[str, float], flops: float) -> None:
    mkl, dense = times["mkl csr"], times["torch.matmul dense"]
    print(f"\n{title}")
    print(f"{'kernel':72s} {'ms':>8s} {'GFLOP/s':>8s} {'vs MKL':>7s} {'vs dense':>8s}")
    for name, s in sorted(times.items(), key=lambda kv: kv[1]):
        print(
            f"{name[:72]:72s} {s * 1e3:8.2f} {flops / s / 1e9:8.1f} {mkl / s:7.2f} {dense / s:8.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    print(f"threads {torch.get_num_threads()}, width {args.width}, rounds {args.rounds}")
    best = {}
    for permute in (None, "both"):
        matrix = generate("kdiag", args.size, args.size, sparsity=0.9, seed=0, permute=permute)
        times = bench(matrix, args.width, args.rounds)
        report(f"{matrix.name}: nnz {matrix.nnz}", times, 2.0 * matrix.nnz * args.width)
        best[permute] = min(t for k, t in times.items() if k.startswith("spmm "))
    print(f"\npermuted / plain speed of the best family kernel: {best[None] / best['both']:.2f}")


if __name__ == "__main__":
    main()
