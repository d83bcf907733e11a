"""Do locality schedules give the cpu space a real choice? The oracle vs fixed configs vs MKL.

For each matrix and dense width, every config of a locality grid is packed, compiled,
checked against scipy and timed in interleaved rounds in this process (the kernels called
through their argument vectors, as ``result.kernel(B, out=C)`` calls them), beside the CSR
baseline (WACO's FixedCSR) and MKL's inspector-executor SpMM (handle built and optimized
once; SDDMM: torch.sparse.sampled_addmm). The grid:

- ``reordered``: rows run in a reverse Cuthill-McKee / degree-sorted / clustered order
  (``by``), rows only or rows and columns with B gathered in the call (``symmetric``), dense
  strips of ``strip`` columns (cognate/targets/cpu/families/reordered.py);
- ``panel``: ASpT-style column panels of ``pcols`` columns over blocks of ``rblock`` rows
  (cognate/targets/cpu/families/panel.py).

Printed per width, over the matrices: the oracle (the fastest config, per matrix) over the
baseline; the best single fixed config chosen leave-one-out (on the other matrices, by
geomean speedup) over the baseline and the oracle over it; the share of matrices whose
oracle beats that fixed config by 1.15x; MKL-IE's time over the oracle's and over the
baseline's. Apart (``kept``): the baseline kernel on P A P^T with B and C kept in an order's
numbering by the caller, the lever a GNN that keeps its features permuted can use. The oracle is what a perfect tuner would pick (an upper bound, in-sample by
construction); the leave-one-out fixed config is the non-learned choice a tuner must beat.
Inspection (ordering, packing) is timed apart.

OpenMP settings are the caller's (nothing set: default waits). Run on a quiet machine; the
load is read before each matrix and a busy machine is flagged.

    python scripts/bench_locality.py --threads 2 --widths 32 128 512 --json loc.json
    python scripts/bench_locality.py --quick
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

from cognate.timing import early_threads, time_interleaved

early_threads(sys.argv)  # --threads N before any OpenMP runtime loads; waits left default

import numpy as np  # noqa: E402

from cognate.bench.buffers import shared_buffers  # noqa: E402
from cognate.bench.corpus import generated_graphs, shared_matrices  # noqa: E402
from cognate.bench.oracle import AGAIN, BASELINE, FIXED_BAR, oracle_and_fixed  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.formats.read import load_matrix  # noqa: E402
from cognate.matrix import Matrix  # noqa: E402
from cognate.paths import shared_dir  # noqa: E402
from cognate.stats import geomean  # noqa: E402
from cognate.targets.cpu import pipeline  # noqa: E402
from cognate.targets.cpu.measure import library  # noqa: E402
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference  # noqa: E402
from cognate.targets.cpu.space import make_space  # noqa: E402


def grid(op: str, square: bool) -> dict[str, dict]:
    """Name -> knobs of every locality config (symmetric orders only on square matrices)."""
    configs: dict[str, dict] = {}
    strips = (32, 128, 1024) if op == "spmm" else (1024,)
    for by, symmetric, strip in itertools.product(("rcm", "degree", "cluster"), (0, 1), strips):
        if symmetric and not square:
            continue
        knobs = {"family": "reordered", "by": by, "symmetric": symmetric, "strip": strip}
        configs[f"reordered:{by}:s{symmetric}:j{strip}"] = {**knobs, "chunk": 32}
    for pcols, rblock in itertools.product((1024, 4096, 16384, 65536), (32, 128, 512)):
        knobs = {"family": "panel", "pcols": pcols, "rblock": rblock, "chunk": 1}
        configs[f"panel:p{pcols}:r{rblock}"] = knobs
    return configs


def matrices(args: argparse.Namespace) -> list[Matrix]:
    if args.quick:
        return [load_matrix(shared_dir() / "matrices" / "suitesparse" / "bcsstk13.mtx.gz")]
    return shared_matrices(args.min_nnz, args.ngraph) + generated_graphs(args.graphs)


def prepared_calls(matrix: Matrix, op: str, width: int, threads: int) -> tuple[dict, dict]:
    """Checked calls (name -> callable) and per-name facts (inspection seconds, errors)."""
    operands = dense_operands(op, matrix.shape, width, seed=0)
    ref, tol = reference(matrix.csr, op, operands)
    configs = {BASELINE: dict(make_space(op).baseline(matrix.shape).knobs)}
    configs[AGAIN] = dict(configs[BASELINE])
    configs.update(grid(op, matrix.shape[0] == matrix.shape[1]))
    calls, facts = {}, {}
    shared: dict[str, np.ndarray] = {}
    for name, knobs in configs.items():
        try:
            lib = pipeline.build(op, knobs, width)
            start = time.perf_counter()
            packed = pipeline.pack(matrix, op, knobs, width)
            inspect_s = time.perf_counter() - start
            call = pipeline.bind(packed, knobs, operands, lib)
            call()
            problem = mismatch(call.result(), ref, tol)
        except pipeline.TooLarge as exc:
            facts[name] = {"error": f"too large: {exc}"}
            continue
        except CognateError as exc:
            facts[name] = {"error": str(exc)}
            continue
        if problem:
            facts[name] = {"error": f"result wrong: {problem}"}
            continue
        calls[name], facts[name] = shared_buffers(call, shared), {"inspect_s": inspect_s}
    if op == "spmm" and matrix.shape[0] == matrix.shape[1]:
        kept_calls(matrix, width, operands, (ref, tol), calls, facts, shared)
    found, missing = library.library_calls(matrix.csr, op, operands, threads)
    for lib in found:
        lib.run()
        problem = mismatch(np.asarray(lib.result()), ref, 4 * tol)
        if problem:
            facts[lib.name] = {"error": f"result wrong: {problem}"}
            continue
        calls[f"lib:{lib.name}"], facts[f"lib:{lib.name}"] = lib.run, {"inspect_s": lib.inspect_s}
    for name, why in missing.items():
        facts[f"lib:{name}"] = {"error": why}
    return calls, facts


def kept_calls(
    matrix: Matrix,
    width: int,
    operands: tuple,
    checked: tuple,
    calls: dict,
    facts: dict,
    shared: dict,
) -> None:
    """``kept:<by>``: the baseline kernel on P A P^T with B already in the order's
    numbering (B[order]) and C left in it: what a caller pays per call when it keeps its
    operands in the schedule's order across calls (a GNN's features through every layer).
    Not a schedule of the space (the caller's data layout changes): reported apart."""
    from cognate.targets.cpu.row_orders import ORDERS
    from cognate.torch.order import node_order

    ref, tol = checked
    knobs = dict(make_space("spmm").baseline(matrix.shape).knobs)
    lib = pipeline.build("spmm", knobs, width)
    for by in ORDERS:
        start = time.perf_counter()
        nodes = node_order(matrix.csr, by)  # what TunedSparse(order=by) runs
        order = nodes.perm.numpy()
        permuted = Matrix(f"{matrix.name}-{by}", nodes.apply(matrix.csr))
        b = np.ascontiguousarray(nodes.to_order(operands[0]))
        packed = pipeline.pack(permuted, "spmm", knobs, width)
        inspect_s = time.perf_counter() - start
        call = pipeline.bind(packed, knobs, (b,), lib)
        call()
        problem = mismatch(call.result(), ref[order], tol[order])
        name = f"kept:{by}"
        if problem:
            facts[name] = {"error": f"result wrong: {problem}"}
            continue
        calls[name], facts[name] = shared_buffers(call, shared), {"inspect_s": inspect_s}


def bench(matrix: Matrix, op: str, width: int, args: argparse.Namespace) -> dict | None:
    dense_gb = max(matrix.shape) * width * 4 / 1e9
    if dense_gb > args.max_dense_gb:  # B, C, the gather scratch and 3 kept copies of B
        print(
            f"  {matrix.name} N={width}: skipped, dense operand {dense_gb:.1f} GB", file=sys.stderr
        )
        return None
    calls, facts = prepared_calls(matrix, op, width, args.threads)
    if BASELINE not in calls:
        print(f"  {matrix.name} N={width}: baseline failed: {facts[BASELINE]}", file=sys.stderr)
        return None
    timed = time_interleaved(calls, args.rounds, threads=args.threads)
    seconds = timed.seconds
    configs = {k: v for k, v in seconds.items() if not k.startswith(("lib:", "kept:", "noise:"))}
    best = min(configs, key=configs.get)
    kept = {k: v for k, v in seconds.items() if k.startswith("kept:")}
    best_kept = min(kept, key=kept.get) if kept else None
    row = {
        "matrix": matrix.name, "nnz": matrix.nnz, "shape": list(matrix.shape), "width": width,
        "seconds": seconds, "facts": facts, "best": best, "best_kept": best_kept,
        "busy": timed.load.busy,
        "load": timed.load.line(),
    }  # fmt: skip
    base = seconds[BASELINE]
    lib = seconds.get("lib:mkl-ie") or seconds.get("lib:torch.sparse.sampled_addmm")
    print(
        f"{matrix.name[:27]:<28}{matrix.nnz:>9}{width:>5}{base * 1e3:>10.3f}"
        f"{configs[best] * 1e3:>10.3f}{base / configs[best]:>8.3f}"
        f"{(lib / configs[best]) if lib else float('nan'):>9.3f}"
        f"{(lib / base) if lib else float('nan'):>9.3f}"
        f"{(base / kept[best_kept]) if best_kept else float('nan'):>8.3f}  {best}"
        + (f"  [{timed.load.line()}]" if timed.load.busy else "")
    )
    return row


def summary(rows: list[dict], widths: list[int], lib_name: str) -> None:
    """Per width: oracle, leave-one-out fixed config, the 1.15x share, the library ratios."""
    for width in widths:
        found = [r for r in rows if r["width"] == width and not r.get("busy")]
        busy = sum(1 for r in rows if r["width"] == width and r.get("busy"))
        if busy:
            print(f"N={width}: {busy} rows timed on a busy machine left out")
        if len(found) < 2:
            continue
        oracle, fixed, picks = oracle_and_fixed(found)
        over = sum(o / f >= FIXED_BAR for o, f in zip(oracle, fixed, strict=True))
        print(
            f"N={width} ({len(found)} matrices): oracle/baseline {geomean(oracle):.3f}x;"
            f" leave-one-out fixed config/baseline {geomean(fixed):.3f}x"
            f" (most often {max(set(picks), key=picks.count)}); oracle/fixed"
            f" {geomean([o / f for o, f in zip(oracle, fixed, strict=True)]):.3f}x;"
            f" oracle >= {FIXED_BAR}x fixed on {over} of {len(found)}"
        )
        lib = [r["seconds"].get(f"lib:{lib_name}") for r in found]
        if all(lib):
            best = [r["seconds"][r["best"]] for r in found]
            base = [r["seconds"][BASELINE] for r in found]
            vs = [x / y for x, y in zip(lib, best, strict=True)]
            print(
                f"    {lib_name} time / oracle time: geomean {geomean(vs):.3f}x (min"
                f" {min(vs):.3f}x); / baseline time {geomean([x / y for x, y in zip(lib, base, strict=True)]):.3f}x;"
                f" / leave-one-out fixed {geomean([x / (b / f) for x, b, f in zip(lib, base, fixed, strict=True)]):.3f}x"
            )
        noise = [
            max(
                r["seconds"][AGAIN] / r["seconds"][BASELINE],
                r["seconds"][BASELINE] / r["seconds"][AGAIN],
            )
            for r in found
            if AGAIN in r["seconds"]
        ]
        if noise:
            print(
                f"    noise floor: the baseline timed twice differs by {geomean(noise):.3f}x"
                f" (geomean of the larger ratio; max {max(noise):.3f}x)"
            )
        kept = [r for r in found if r.get("best_kept")]
        if kept:
            gains = [r["seconds"][BASELINE] / r["seconds"][r["best_kept"]] for r in kept]
            print(
                f"    operands kept in the best order (not in the space; square matrices):"
                f" baseline/kept {geomean(gains):.3f}x over {len(kept)} (max {max(gains):.2f}x)"
            )
        wins: dict[str, int] = {}
        for r in found:
            family = r["best"].split(":")[0]
            wins[family] = wins.get(family, 0) + 1
        print(f"    fastest family: {', '.join(f'{k} {v}' for k, v in sorted(wins.items()))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="0: every core")
    parser.add_argument("--ngraph", action="store_true", help="also the ngraph matrices")
    parser.add_argument("--min-nnz", type=int, default=10_000)
    parser.add_argument("--graphs", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--max-dense-gb", type=float, default=1.0, help="skip wider dense operands (memory)"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--summarize", type=Path, help="only print the summary of a --json file")
    args = parser.parse_args()
    if args.summarize:  # e.g. of a run that stopped early: rows are written as they come
        rows = json.loads(args.summarize.read_text())
        lib_name = "mkl-ie" if args.op == "spmm" else "torch.sparse.sampled_addmm"
        summary(rows, sorted({r["width"] for r in rows}), lib_name)
        return
    args.threads = args.threads or len(os.sched_getaffinity(0))
    if args.quick:
        args.widths, args.rounds, args.graphs = [32], 3, []
    import torch

    torch.set_num_threads(args.threads)
    lib_name = "mkl-ie" if args.op == "spmm" else "torch.sparse.sampled_addmm"
    policy = os.environ.get("OMP_WAIT_POLICY") or "default"
    print(f"{args.op}, threads {args.threads}, OpenMP waits {policy}; times in ms")
    print(
        f"{'matrix':<28}{'nnz':>9}{'N':>5}{'baseline':>10}{'oracle':>10}{'speedup':>8}"
        f"{'lib/or':>9}{'lib/bl':>9}{'kept':>8}  fastest config (lib: {lib_name})"
    )
    rows = []
    for matrix in matrices(args):
        for width in args.widths:
            row = bench(matrix, args.op, width, args)
            if row is not None:
                rows.append(row)
                if args.json:  # after every row: a killed run keeps what it measured
                    args.json.write_text(json.dumps(rows, indent=1))
    summary(rows, args.widths, lib_name)


if __name__ == "__main__":
    try:
        main()
    except CognateError as exc:
        raise SystemExit(f"bench_locality: {exc}") from None
