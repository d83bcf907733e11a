"""Roofline for the cpu SpMM: host peaks, a time limit per matrix and width, achieved / limit.

The host's measured peaks, a lower bound per (matrix, width) on a call's time, and how close
the tuned pick, the baseline config and MKL-IE come to it.

The model and the probes: cognate/bench/roofline.py (its docstring says what is counted and
what is ignored). Per matrix and width N:

- limit ms: the largest of the FMA time (2 nnz N at the widest vector's measured rate), the
  L1 loads (a B row per nonzero) at L1's bandwidth, and each cache level's misses (A, C and
  each distinct B row once per window of rows whose B rows fit the level) at the bandwidth of
  the level below; ``binds`` names that term (fma / L1 / L2 / LLC / DRAM);
- tuned: ``cognate.tune(matrix, width=N, top_k=5, verify=True)``, then
  ``result.kernel(B, out=C)``; base: the cpu space's baseline config (CSR, rows parallel,
  dynamic chunk 32); mkl: MKL's inspector-executor (handle built, hinted, optimized once);
  each checked against scipy first, then block-timed (``cognate.timing.time_blocks``: per
  round each call alone for 0.25 s untimed, then a timed block; medians of the rounds);
- ``%``: achieved / limit = limit time / achieved time (100%: at the limit; over 100%: the
  model is wrong for that schedule, e.g. one that reorders rows).

OpenMP settings are the caller's (default waits unless OMP_WAIT_POLICY is set). The machine's
load is read before the peaks and each row; a busy machine is flagged on the line.

    python scripts/roofline.py --peaks-only                     # the host's peaks
    python scripts/roofline.py --quick                          # one small matrix, N=32
    python scripts/roofline.py --widths 32 128 512 --min-nnz 10000 --graphs 100000 1000000 \\
        --json roofline.json                                    # the table (quiet machine)
    python scripts/roofline.py --widths 128 --layers kdiag:3072x768:0.9   # an NN layer
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from cognate.timing import early_threads

early_threads(sys.argv)  # --threads N reaches OpenMP and MKL before any runtime loads

from cognate.bench import roofline  # noqa: E402
from cognate.bench.corpus import (  # noqa: E402
    QUICK_MATRIX,
    generated_graphs,
    quick_matrix,
    shared_matrices,
)
from cognate.errors import CognateError  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"one small shared matrix ({QUICK_MATRIX}), N=32"
    )
    parser.add_argument("--matrices", nargs="*", default=[], help="shared files naming these")
    parser.add_argument("--ngraph", action="store_true", help="also the ngraph matrices")
    parser.add_argument("--min-nnz", type=int, default=0, help="leave smaller files out")
    parser.add_argument(
        "--graphs", type=int, nargs="*", default=[], help="generated graphs of these nnz"
    )
    parser.add_argument(
        "--layers", type=parse_layer, nargs="*", default=[], metavar="KIND:ROWSxCOLS[:SPARSITY]",
        help="structured NN layers (cognate.synth, seed 0, as bench_structured.py), e.g."
        " kdiag:3072x768:0.9",
    )  # fmt: skip
    parser.add_argument("--widths", type=int, nargs="+", help="dense widths N (32 128 512)")
    parser.add_argument("--rounds", type=int, default=7, help="block-timing rounds per row")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="0: OMP_NUM_THREADS, else cores")
    parser.add_argument("--json", type=Path, help="write the peaks and every row here")
    parser.add_argument("--peaks-only", action="store_true", help="print the host's peaks only")
    parser.add_argument(
        "--no-tune", action="store_true", help="time the baseline and MKL-IE only (no tuning)"
    )
    parser.add_argument(
        "--mkl-intel-path", action="store_true",
        help="MKL on its Intel code path on a CPU of another vendor (COGNATE_MKL_INTEL_PATH=1)",
    )  # fmt: skip
    parser.add_argument(
        "--probe-seconds", type=float, default=roofline.TARGET_S, help="length of a probe call"
    )
    parser.add_argument(
        "--probe-repeats", type=int, default=roofline.REPEATS, help="best of this many calls"
    )
    args = parser.parse_args(argv)
    if args.widths is None:
        args.widths = [32] if args.quick else [32, 128, 512]
    if min(args.widths) < 1 or args.rounds < 1:
        parser.error("--widths and --rounds must be positive")
    return args


def parse_layer(text: str) -> tuple[str, int, int, float]:
    """KIND:ROWSxCOLS[:SPARSITY] (sparsity 0.9 when left out)."""
    from cognate.synth import STRUCTURED_KINDS

    kind, _, rest = text.partition(":")
    shape, _, sparsity = rest.partition(":")
    rows, _, cols = shape.lower().partition("x")
    try:
        layer = (kind, int(rows), int(cols), float(sparsity or 0.9))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a layer looks like kdiag:3072x768:0.9, got {text!r}"
        ) from None
    if kind not in STRUCTURED_KINDS:
        raise argparse.ArgumentTypeError(f"layer kind {kind!r}: one of {STRUCTURED_KINDS}")
    return layer


def matrices(args: argparse.Namespace) -> list:
    if args.quick:
        return [quick_matrix()]
    from cognate.synth import generate

    found = (
        shared_matrices(args.min_nnz, args.ngraph, args.matrices)
        if args.matrices or not args.layers
        else []
    )
    layers = [
        generate(kind, rows, cols, sparsity=sparsity, seed=0)
        for kind, rows, cols, sparsity in args.layers
    ]
    return found + generated_graphs(args.graphs) + layers


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mkl_intel_path:  # read when MKL loads: nothing has loaded it yet
        from cognate.targets.cpu.measure import library

        os.environ[library.INTEL_PATH_ENV] = "1"
    threads = args.threads or roofline.threads_default()
    mkl_path = roofline.mkl_path_now(threads)
    print(roofline.host_line(threads, mkl_path), flush=True)
    peaks = roofline.measure_peaks(threads, target_s=args.probe_seconds, repeats=args.probe_repeats)
    for line in peaks.lines():
        print(line, flush=True)
    out = {
        "host": roofline.host_line(threads, mkl_path), "mkl_code_path": mkl_path,
        "peaks": peaks.as_dict(), "rows": [],
    }  # fmt: skip
    if not args.peaks_only:
        out["rows"] = table(args, peaks, threads)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


def table(args: argparse.Namespace, peaks: roofline.Peaks, threads: int) -> list[dict]:
    """Every (matrix, width) row, printed as it is measured, then the geomeans per width."""
    print(
        "limit: the model's lower bound on a warm call; binds: its largest term;"
        " %: limit time / achieved time"
    )
    print(roofline.ROW_HEADER, flush=True)
    rows = []
    for matrix in matrices(args):
        pattern = roofline.Pattern(matrix.csr)
        for width in args.widths:
            try:
                row = roofline.measure_row(
                    matrix, width, peaks, threads, args.rounds, tune=not args.no_tune,
                    top_k=args.top_k, pattern=pattern,
                )  # fmt: skip
            except CognateError as exc:  # e.g. over the memory budget: the others still run
                print(f"  {matrix.name} N={width}: skipped: {exc}", file=sys.stderr)
                continue
            for name, why in row["missing"].items():
                print(f"  {matrix.name} N={width}: {name} not timed: {why}", file=sys.stderr)
            print(roofline.format_row(row), flush=True)
            rows.append(row)
    for line in roofline.summary_lines(rows):
        print(line)
    return rows


if __name__ == "__main__":
    try:
        main()
    except CognateError as exc:
        raise SystemExit(f"roofline: {exc}") from None
