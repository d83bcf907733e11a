"""Benchmark structured-sparse NN layers: tuned schedule vs MKL-IE vs dense matmul.

Workloads (cognate.synth, docs/architecture.md, Structured sparsity): k-diagonal, block and N:M masks of the layer
shapes 768x768, 768x3072, 3072x768, 4096x4096, and the k-diagonal ones with random row and
column permutations (carried as index maps). For each matrix and B width, in ONE process:
MKL's inspector-executor SpMM (``library.mkl_spmm_call``: handle created, hinted and
optimized once, then ``mkl_sparse_s_mm`` into a preallocated C), the cpu space's baseline
config (plain CSR), the fastest of the ``--dia`` configs (the DIA family, rtile x jtile), the
tuned schedule, and dense ``torch.mm`` on the dense weight as an extra column, all on
``--threads`` threads (torch, MKL and OpenMP set alike before they load). Each result is
checked against a float64 scipy reference before it is timed; timings are medians of
interleaved rounds (the machine is shared and noisy). The table names MKL's code path
(``library.mkl_code_path``: on AMD MKL runs its generic ``def`` path unless
``COGNATE_MKL_INTEL_PATH=1`` is set in the environment, which makes it take its Intel one).

The tuned schedule comes from ``cognate.tune(matrix, target="cpu", op="spmm", width=W,
top_k=5, verify=True)``. If no model fits the current cpu space (a space change needs a
retrained model), ``--search auto`` falls back to the fastest of ``--sample`` seeded configs
measured by the cpu runner, and the table says so ("sampled" instead of "model"). The timed
call is the prepared kernel ``result.kernel`` wraps, without its per-call operand copy (MKL
and torch write into preallocated outputs too).

    python scripts/bench_structured.py                       # 4 shapes x {kdiag, block, nm} at 90%
                                                             # + permuted kdiag at 90%
    python scripts/bench_structured.py --shapes 768x768 --kinds kdiag --widths 128
    python scripts/bench_structured.py --full                # every sparsity 60..99%
    COGNATE_MKL_INTEL_PATH=1 python scripts/bench_structured.py ...  # MKL's Intel code path
    python scripts/bench_structured.py --bf16 ...            # + the opt-in bf16 pick (B as bfloat16)
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from cognate.timing import early_threads, time_interleaved

# --threads N (default 2) reaches OpenMP, MKL and torch before they load.
THREADS = early_threads(sys.argv, default=2) or 2

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from cognate.config import Config  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.matrix import Matrix  # noqa: E402
from cognate.synth import LAYER_SHAPES, LAYER_SPARSITIES, STRUCTURED_KINDS, generate  # noqa: E402
from cognate.targets.cpu.measure import library  # noqa: E402
from cognate.targets.cpu.measure.check import (  # noqa: E402
    dense_operands,
    mismatch,
    reference,
    round_bf16,
)
from cognate.targets.cpu.measure.runner import CpuRunner  # noqa: E402
from cognate.targets.cpu.pipeline import prepare_kernel  # noqa: E402
from cognate.targets.cpu.space import make_space  # noqa: E402

console = Console(width=220)
warnings.filterwarnings("ignore", message="Sparse (invariant checks|CSR tensor support)")
ROUND_BUDGET_S = 8.0  # per (matrix, width): fewer rounds for the slow ones, at least 3


@dataclass(frozen=True)
class Workload:
    kind: str
    rows: int
    cols: int
    sparsity: float
    permuted: bool = False

    @property
    def label(self) -> str:
        perm = " perm" if self.permuted else ""
        return f"{self.kind} {self.rows}x{self.cols} {self.sparsity:.0%}{perm}"

    def unpermuted(self) -> Workload:
        return Workload(self.kind, self.rows, self.cols, self.sparsity)


@dataclass
class Row:
    workload: Workload
    nnz: int
    width: int
    times: dict[str, float]  # dense, mkl, base, dia (the fastest --dia config), tuned
    config: dict
    dia: str  # the fastest DIA config, rtile x jtile
    search: str
    rounds: int
    notes: list[str] = field(default_factory=list)


def make_matrix(workload: Workload, block: int) -> Matrix:
    options = {"block": block} if workload.kind == "block" else {}
    return generate(
        workload.kind,
        workload.rows,
        workload.cols,
        sparsity=workload.sparsity,
        seed=0,
        permute="both" if workload.permuted else None,
        **options,
    )


class Searcher:
    """The tuned config for (matrix, width): the cost model, or sampling when it cannot load."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model_problem: str | None = None if args.search != "sample" else "--search sample"

    def best(self, matrix: Matrix, width: int, b: np.ndarray) -> tuple[Config, str, Config | None]:
        """The tuned config, how it was found, and with ``--bf16`` the pick of
        ``tune(..., bf16=True)`` (the float32 pick is the same rule over the float32 configs
        of that run)."""
        if self.model_problem is None:
            import cognate

            try:
                result = cognate.tune(
                    matrix,
                    target="cpu",
                    op="spmm",
                    width=width,
                    top_k=self.args.top_k,
                    verify=True,
                    model=self.args.model,
                    bf16=self.args.bf16,
                )
                if not self.args.bf16:
                    return result.config, "model", None
                float32 = [c for c in result.candidates if not c.config.knobs.get("bf16")]
                return replace(result, candidates=float32).config, "model", result.config
            except CognateError as exc:
                if self.args.search == "model":
                    raise
                self.model_problem = str(exc)
                console.print(f"[yellow]no usable model ({exc}); sampling configs instead")
        return self._sampled(matrix, width, b), f"sampled {self.args.sample}", None

    def _sampled(self, matrix: Matrix, width: int, b: np.ndarray) -> Config:
        """The fastest of ``--sample`` seeded configs: the runner's top 3 re-timed here."""
        space = make_space("spmm")
        configs = space.sample(self.args.sample, seed=self.args.seed, shape=matrix.shape)
        runner = CpuRunner(repeats=3, warmup=1, timeout_s=5.0, min_sample_s=2e-4)
        try:
            measured = runner.measure(matrix, "spmm", width, configs)
        finally:
            runner.close()
        ok = sorted((m for m in measured if m.status == "ok"), key=lambda m: m.runtime_s)
        if not ok:
            return space.baseline(matrix.shape)
        calls = {str(i): prepare_kernel(matrix, "spmm", m.config, b) for i, m in enumerate(ok[:3])}
        times = time_interleaved(calls, 5, budget_s=ROUND_BUDGET_S, threads=THREADS).seconds
        return ok[int(min(times, key=times.get))].config


def dia_knobs(text: str) -> dict:
    rtile, jtile = (int(v) for v in text.lower().split("x"))
    return {"family": "dia", "rtile": rtile, "jtile": jtile, "chunk": 4}


def bench(matrix: Matrix, workload: Workload, width: int, searcher: Searcher, args) -> Row:
    csr = matrix.csr
    (b,) = dense_operands("spmm", matrix.shape, width, seed=0)
    ref, tol = reference(csr, "spmm", (b,))
    space = make_space("spmm")
    baseline = prepare_kernel(matrix, "spmm", space.baseline(matrix.shape), b)
    config, search, opted = searcher.best(matrix, width, b)
    tuned = prepare_kernel(matrix, "spmm", config, b)
    dense_w, dense_b = torch.from_numpy(csr.toarray()), torch.from_numpy(b)
    dense_out = torch.empty((csr.shape[0], width), dtype=torch.float32)
    mkl = library.mkl_spmm_call(csr, b, threads=THREADS)  # the handle built once, here
    impls: dict[str, Callable[[], object]] = {
        "dense": lambda: torch.mm(dense_w, dense_b, out=dense_out),
        "mkl": mkl.run,
        "base": baseline,
        "tuned": tuned,
    }
    if opted is not None:
        impls["bf16"] = prepare_kernel(matrix, "spmm", opted, b)
    for text in args.dia:
        try:
            impls[f"dia {text}"] = prepare_kernel(matrix, "spmm", dia_knobs(text), b)
        except CognateError as exc:  # e.g. too_large on a matrix without diagonals
            console.print(f"{workload.label}: DIA {text}: {exc}", markup=False)
    results = {"dense": lambda: dense_out.numpy(), "mkl": mkl.result}
    notes = []
    for name, fn in impls.items():  # every result checked before a timing counts
        fn()
        result = results[name]() if name in results else fn.result()
        if name == "bf16" and opted.knobs.get("bf16"):  # on the rounded B, its error stated
            problem = mismatch(result, *reference(csr, "spmm", (round_bf16(b),)))
            error = np.abs(result - ref).max() / np.abs(ref).max()
            notes.append(f"bf16 max error / max |C| {error:.1e}")
        else:
            problem = mismatch(result, ref, tol)
        if problem is not None:
            raise SystemExit(f"{workload.label} N={width}: {name}: {problem}")
    timed = time_interleaved(impls, args.rounds, budget_s=ROUND_BUDGET_S, threads=THREADS)
    notes += [timed.load.line()] if timed.load.busy else []
    times = {k: v for k, v in timed.seconds.items() if not k.startswith("dia ")}
    if opted is not None:
        notes.append(f"--bf16 pick: {config_text(dict(opted.knobs))}")
    dias = {k[4:]: v for k, v in timed.seconds.items() if k.startswith("dia ")}
    best = min(dias, key=dias.get) if dias else "-"
    times["dia"] = dias[best] if dias else float("nan")
    return Row(
        workload, matrix.nnz, width, times, dict(config.knobs), best, search, timed.rounds,
        notes,
    )  # fmt: skip


def workloads(args: argparse.Namespace) -> list[Workload]:
    sparsities = LAYER_SPARSITIES if args.full else args.sparsities
    out = [
        Workload(kind, rows, cols, sparsity)
        for rows, cols in args.shapes
        for sparsity in sparsities
        for kind in args.kinds
    ]
    out += [
        Workload(kind, rows, cols, sparsity, permuted=True)
        for rows, cols in args.shapes
        for sparsity in sparsities
        for kind in args.permuted_kinds
    ]
    return out


def config_text(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def table(rows: list[Row]) -> Table:
    tuned_by_key = {(r.workload, r.width): r.times["tuned"] for r in rows}
    title = (
        f"SpMM on structured layers, {THREADS} threads, medians (ms); MKL = mkl-ie, its"
        f" {library.mkl_code_path()} code path"
    )
    out = Table(title=title)
    for name in ("workload", "nnz", "N", "MKL", "base", "DIA", "tuned", "dense"):
        out.add_column(name, justify="left" if name == "workload" else "right")
    bf16 = any("bf16" in r.times for r in rows)
    if bf16:
        out.add_column("tuned --bf16", justify="right")
    for name in ("tuned vs MKL", "DIA vs MKL", "DIA vs base", "base vs MKL", "perm keeps"):
        out.add_column(name, justify="right")
    if bf16:
        out.add_column("--bf16 vs MKL", justify="right")
    out.add_column("DIA rtile x jtile")
    out.add_column("search")
    out.add_column("tuned config")
    for r in rows:
        t = r.times
        keep = ""
        if r.workload.permuted and (r.workload.unpermuted(), r.width) in tuned_by_key:
            keep = f"{tuned_by_key[(r.workload.unpermuted(), r.width)] / t['tuned']:.0%}"
        out.add_row(
            r.workload.label,
            str(r.nnz),
            str(r.width),
            *(f"{t[k] * 1e3:.3f}" for k in ("mkl", "base", "dia", "tuned", "dense")),
            *([f"{t['bf16'] * 1e3:.3f}" if "bf16" in t else "-"] if bf16 else []),
            f"{t['mkl'] / t['tuned']:.2f}x",
            f"{t['mkl'] / t['dia']:.2f}x",
            f"{t['base'] / t['dia']:.2f}x",
            f"{t['mkl'] / t['base']:.2f}x",
            keep,
            *([f"{t['mkl'] / t['bf16']:.2f}x" if "bf16" in t else "-"] if bf16 else []),
            r.dia,
            r.search,
            config_text(r.config),
        )
    return out


def parse_shape(text: str) -> tuple[int, int]:
    rows, _, cols = text.lower().partition("x")
    try:
        return int(rows), int(cols)
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must look like 768x3072, got {text!r}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", type=parse_shape, nargs="+", default=list(LAYER_SHAPES))
    parser.add_argument("--sparsities", type=float, nargs="+", default=[0.9])
    parser.add_argument(
        "--full", action="store_true", help="every sparsity of the structured-sparsity sweep"
    )
    parser.add_argument("--kinds", nargs="*", choices=STRUCTURED_KINDS, default=STRUCTURED_KINDS)
    parser.add_argument("--permuted-kinds", nargs="*", choices=STRUCTURED_KINDS, default=["kdiag"])
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--block", type=int, default=16, help="block masks: block size")
    parser.add_argument(
        "--dia",
        nargs="*",
        default=["2x64", "4x64", "8x32"],
        help="DIA configs timed beside the others (rtile x jtile; the fastest is reported)",
    )
    parser.add_argument("--threads", type=int, default=2, help="threads for every library")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds (max)")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--model", help="cost model checkpoint (default: the shipped one)")
    parser.add_argument("--search", choices=("auto", "model", "sample"), default="auto")
    parser.add_argument("--sample", type=int, default=24, help="configs sampled without a model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="also tune with bf16=True (B read as bfloat16, opt-in) and time its pick in a "
        "column of its own, checked on the rounded B, its error against float32 printed",
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(THREADS)
    searcher = Searcher(args)
    rows: list[Row] = []
    for workload in workloads(args):
        matrix = make_matrix(workload, args.block)
        for width in args.widths:
            row = bench(matrix, workload, width, searcher, args)
            rows.append(row)
            t = row.times
            console.print(
                f"{workload.label} N={width}: dense {t['dense'] * 1e3:.3f} mkl "
                f"{t['mkl'] * 1e3:.3f} base {t['base'] * 1e3:.3f} dia {t['dia'] * 1e3:.3f}"
                f" ({row.dia}) tuned {t['tuned'] * 1e3:.3f} ms"
                + (f" tuned --bf16 {t['bf16'] * 1e3:.3f} ms" if "bf16" in t else "")
                + f" ({row.rounds} rounds, mkl-ie {library.mkl_code_path()} path,"
                f" {row.search}: {config_text(row.config)})"
                + "".join(f" [{note}]" for note in row.notes),
                markup=False,
            )
    console.print(table(rows))
    if searcher.model_problem:
        console.print(f"tuned = best sampled config, not the cost model: {searcher.model_problem}")


if __name__ == "__main__":
    main()
