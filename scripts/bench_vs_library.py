"""Benchmark the tuned cpu SpMM (or SDDMM) as a user runs it, against the strongest library paths.

For each matrix and dense width: ``cognate.tune(matrix, top_k=5, verify=True)``, then in one
process each call timed in blocks: per round, each in turn (the order rotating each round)
runs alone, untimed, for 0.25 s (longer than Intel OpenMP's 200 ms spin after a call, so no
other runtime's threads still hold a core), then a timed block of consecutive calls; medians
of the rounds with their interquartile spread. The same calls timed in interleaved rounds
(single samples back to back, tuned, mkl, torch, ...) are printed in their own labelled
column (``mkl/tuned il``). The host's ISA heads the output and each pick's vector width
(``vec``: bits, or its kernel family) is printed beside it:

- tuned: the user-facing ``result.kernel(B, out=C)`` (B read in place, C the array its first
  call ``result.kernel(B)`` returned);
- mkl: MKL's inspector-executor SpMM (``mkl_sparse_s_create_csr`` + ``mkl_sparse_set_mm_hint``
  + ``mkl_sparse_optimize`` once, outside the timed region; then ``mkl_sparse_s_mm`` into a
  preallocated C per call; cognate/targets/cpu/measure/library.py); its inspection time is printed
  apart;
- torch: ``torch.sparse.mm`` on a CSR tensor (int32 indices), as a PyTorch user calls it;
- scipy: ``A @ B`` (single-threaded).

``--op sddmm``: ``result.kernel(X, Y, out=values)`` (A's values times X @ Y^T at A's pattern,
a scipy CSR around the preallocated values, as a user calls it) against
``torch.sparse.sampled_addmm`` scaled by A's values (torch_sddmm_call in library.py; MKL has
no SDDMM, scipy none that does not form X @ Y^T), no passive column (it is MKL's).

OpenMP settings are the caller's (nothing set: libgomp's default waits, as a plain Python
caller has them). A second process then times the same picks against MKL with passive waits
(``OMP_WAIT_POLICY=passive``: every 2-thread call pays a thread wake) and its ratio is
printed in its own labelled column; ``--no-passive-column`` skips it.

MKL's code path (the ISA library it loaded: ``def`` is its generic code, what it runs on a
CPU not made by Intel) heads the output. Where that differs from its Intel path, a child
process with ``COGNATE_MKL_INTEL_PATH=1`` times the same picks block-wise against MKL on its
Intel path (library.py says how), printed as its own labelled column ``mkl-ie, Intel path``;
``--no-intel-path-column`` skips it.

Every result is checked against a float64 scipy reference before its time counts. Prints
ratios (library time / tuned time: > 1 means the tuned kernel is faster), GFLOP/s and the
effective bandwidth (A + B + C bytes once per call) next to a STREAM triad measured in the
same run, and the geomeans per width. The machine's load is read before each timing and a
busy machine is flagged (timings taken under load rank by what ran beside them).

    python scripts/bench_vs_library.py --quick              # one small shared matrix
    python scripts/bench_vs_library.py --threads 2          # shared matrices + 1M-nnz ones
    python scripts/bench_vs_library.py --threads 2 --widths 32 128 512 --ngraph --min-nnz 10000 \
        --graphs 100000 1000000 5000000                      # + real and generated graphs
    python scripts/bench_vs_library.py --threads 2 --op sddmm --widths 32 128
    python scripts/bench_vs_library.py --threads 2 --widths 128 --bf16   # + the opt-in bf16 pick

With ``--bf16`` the tune runs with ``bf16=True`` (B read as bfloat16, opt-in): the tuned
column stays the float32 pick (the same rule over that run's float32 configs), and the pick
with bf16 allowed is timed in a column of its own (Intel-path column too), checked against
scipy on the rounded B, its error against the float32 result printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from cognate.timing import early_threads, time_blocks, time_interleaved

# --threads N reaches OpenMP before any runtime loads; --passive (the child run of the
# passive column) sets passive waits the same way. Nothing else is set: default waits.
early_threads(sys.argv, passive="--passive" in sys.argv)

import numpy as np  # noqa: E402

import cognate  # noqa: E402
from cognate.bench.corpus import (  # noqa: E402
    QUICK_MATRIX,
    generated_graphs,
    quick_matrix,
    shared_matrices,
)
from cognate.bench.provenance import OUT_OF_SAMPLE, model_data  # noqa: E402
from cognate.bench.stream import stream_triad_gbs  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.matrix import Matrix  # noqa: E402
from cognate.stats import geomean  # noqa: E402
from cognate.targets.cpu.measure import library  # noqa: E402
from cognate.targets.cpu.measure.check import mismatch, reference  # noqa: E402


def matrices(args: argparse.Namespace) -> list[Matrix]:
    """The shared real matrices (or --quick's one), then the generated 1M-nnz ones."""
    if args.quick:
        return [quick_matrix()]
    found = shared_matrices(args.min_nnz, args.ngraph, args.matrices, args.limit)
    if args.synthetic_nnz:
        from cognate.synth import synthetic_pair

        for matrix in synthetic_pair(args.synthetic_nnz):
            matrix.name = f"{matrix.name}-{matrix.nnz}"
            found.append(matrix)
    return found + generated_graphs(args.graphs)


def calls(
    matrix: Matrix, kernel, b: np.ndarray, threads: int, libraries=("mkl", "torch", "scipy")
) -> tuple[dict, dict, float]:
    """The checked calls of one (matrix, width): name -> callable, name -> why missing,
    and MKL's inspection seconds. ``kernel(b, out=c)`` is the tuned kernel as users call it,
    into the C its first call ``kernel(b)`` allocated (vector-aligned, as a streamed pick
    needs: docs/benchmarks.md)."""
    csr = matrix.csr
    c_tuned = kernel(b)
    prepared = {"tuned": lambda: kernel(b, out=c_tuned)}
    results = {"tuned": lambda: c_tuned}
    missing: dict[str, str] = {}
    inspect_s = float("nan")
    if "mkl" in libraries:
        try:
            mkl = library.mkl_spmm_call(csr, b, threads)
            prepared["mkl"], results["mkl"], inspect_s = mkl.run, mkl.result, mkl.inspect_s
        except CognateError as exc:
            missing["mkl"] = str(exc)
    if "torch" in libraries:
        torch_call = library.torch_spmm_call(csr, b)
        prepared["torch"], results["torch"] = torch_call.run, torch_call.result
    if "scipy" in libraries:
        prepared["scipy"] = lambda: csr @ b
        results["scipy"] = lambda: np.asarray(csr @ b)
    drop_wrong(prepared, results, reference(csr, "spmm", (b,)), missing)
    return prepared, missing, inspect_s


def drop_wrong(prepared: dict, results: dict, checked: tuple, missing: dict) -> None:
    """Run each call once and drop it (saying why in ``missing``) when its result differs
    from the float64 reference ``checked`` (ref, tol): a wrong result never gets a timing."""
    ref, tol = checked
    for name in list(prepared):
        prepared[name]()
        problem = mismatch(np.asarray(results[name]()), ref, 4 * tol)
        if problem:
            missing[name] = f"result wrong: {problem}"
            del prepared[name]


def sddmm_calls(matrix: Matrix, kernel, x: np.ndarray, y: np.ndarray) -> tuple[dict, dict]:
    """The checked SDDMM calls: the tuned ``kernel(X, Y, out=values)`` and torch's."""
    csr = matrix.csr
    values = np.empty(csr.nnz, dtype=np.float32)
    prepared = {"tuned": lambda: kernel(x, y, out=values)}
    results = {"tuned": lambda: values}
    torch_call = library.torch_sddmm_call(csr, x, y)
    prepared["torch"], results["torch"] = torch_call.run, torch_call.result
    missing: dict[str, str] = {}
    drop_wrong(prepared, results, reference(csr, "sddmm", (x, y)), missing)
    return prepared, missing


def bytes_moved(matrix: Matrix, width: int, op: str = "spmm") -> int:
    """A (values, column indices, row pointers), B and C (SDDMM: X, Y and the output
    values), each once: the least a call moves."""
    rows, cols = matrix.shape
    dense = (cols + rows) * width * 4
    return matrix.nnz * (12 if op == "sddmm" else 8) + (rows + 1) * 4 + dense


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"one small matrix ({QUICK_MATRIX})")
    parser.add_argument("--matrices", nargs="*", help="only matrices whose file name has these")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument(
        "--ngraph", action="store_true", help="also the 277 ngraph matrices (mostly < 10k nnz)"
    )
    parser.add_argument("--synthetic-nnz", type=int, default=1_000_000, help="0: none")
    parser.add_argument("--min-nnz", type=int, default=0, help="leave smaller files out")
    parser.add_argument(
        "--graphs", type=int, nargs="*", default=[], help="generated graphs of these nnz"
    )
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--no-passive-column", action="store_true")
    parser.add_argument("--no-intel-path-column", action="store_true")
    parser.add_argument("--passive", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--intel-path", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--picks", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=0, help="0: every core")
    parser.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="also tune with bf16=True (opt-in: B read as bfloat16) and time that pick in a "
        "column of its own (checked on the rounded B, its error against float32 printed); "
        "the tuned column stays the float32 pick",
    )
    args = parser.parse_args()
    threads = args.threads or len(os.sched_getaffinity(0))
    if args.quick:
        args.synthetic_nnz, args.rounds = 0, min(args.rounds, 7)

    import torch

    torch.set_num_threads(threads)
    if args.passive or args.intel_path:  # a child run: the given picks against MKL only
        child_rows(args, threads, blocks=args.intel_path)
        return
    stream = stream_triad_gbs()
    from cognate.targets.cpu.isa import host_isa

    print(
        f"{host_isa().line()}; threads {threads}; OpenMP waits {wait_words()};"
        f" STREAM triad {stream:.1f} GB/s"
    )
    header = (
        f"{'matrix':<28}{'nnz':>9}{'N':>5}{'tuned ms':>10}{'mkl ms':>9}{'torch ms':>10}"
        f"{'scipy ms':>10}{'mkl/tuned':>10}{'torch/tuned':>12}{'GFLOP/s':>9}{'GB/s':>7}"
        f"{'%triad':>7}{'tun±%':>6}{'mkl±%':>6}{'mkl/t il':>8}{'mkl/bef':>9}{'mkl insp ms':>12}  "
        f"{'model data':<11}{'vec':>9} tuned pick"
    )
    if args.op == "sddmm":
        header = header.replace("   mkl ms", " " * 9).replace("mkl/tuned", " " * 9)
        header = header.replace("mkl insp ms", " " * 11).replace("scipy ms", " " * 8)
    print(header)
    rows = []
    bench = bench_one if args.op == "spmm" else bench_sddmm
    for matrix in matrices(args):
        for width in args.widths:
            try:
                row = bench(matrix, width, threads, args, stream)
            except CognateError as exc:  # e.g. over the memory budget: the others still run
                print(f"  {matrix.name} N={width}: skipped: {exc}", file=sys.stderr)
                continue
            if row is not None:
                rows.append(row)
    print(f"MKL code path: {library.mkl_code_path()} ({library.cpu_vendor() or 'unknown vendor'})")
    passive, intel = {}, {}
    if args.op == "spmm" and not args.no_passive_column:
        passive = child_column(rows, threads, "--passive", {"OMP_WAIT_POLICY": "passive"})
    if args.op == "spmm" and not args.no_intel_path_column and library.intel_path_differs():
        intel = child_column(rows, threads, "--intel-path", {library.INTEL_PATH_ENV: "1"})
    summary(rows, passive, args.widths, args.op)
    intel_summary(rows, intel, args.widths)
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "passive": passive, "intel_path": intel}, indent=1)
        )


def wait_words() -> str:
    policy = os.environ.get("OMP_WAIT_POLICY", "")
    return f"OMP_WAIT_POLICY={policy}" if policy else "default (OMP_WAIT_POLICY unset)"


def summary(rows: list[dict], passive: dict, widths: list[int], op: str = "spmm") -> None:
    """Geomeans per width; the passive column's beside them."""
    if op == "sddmm":
        sddmm_summary(rows, widths)
        return
    if passive:
        print("mkl/tuned with passive waits (a separate process, the same picks):")
        for row in rows:
            key = f"{row['matrix']}:{row['width']}"
            if key in passive:
                print(f"  {row['matrix'][:27]:<28}N={row['width']:<5}{passive[key]:.3f}")
    for width in widths:
        out = [
            r["mkl/tuned"]
            for r in rows
            if r["width"] == width and r.get("mkl/tuned") and r["model_data"] in OUT_OF_SAMPLE
        ]
        if out:
            print(
                f"N={width}: out-of-sample for the model (held-out or unseen): tuned vs MKL-IE"
                f" geomean {geomean(out):.3f}x over {len(out)} (min {min(out):.3f}x)"
            )
        found = [
            (r["nnz"], r["mkl/tuned"]) for r in rows if r["width"] == width and r.get("mkl/tuned")
        ]
        big = [x for nnz, x in found if nnz > 100_000]
        low = min((x for _, x in found), default=float("nan"))
        line = (
            f"N={width}: tuned vs MKL inspector-executor geomean"
            f" {geomean([x for _, x in found]) if found else float('nan'):.3f}x over"
            f" {len(found)} matrices (min {low:.3f}x); over 100k nnz: min"
            f" {min(big) if big else float('nan'):.3f}x over {len(big)}"
        )
        torch_found = [
            r["torch/tuned"] for r in rows if r["width"] == width and r.get("torch/tuned")
        ]
        if torch_found:
            line += f"; vs torch.sparse.mm {geomean(torch_found):.3f}x"
        bef = [r["mkl/before"] for r in rows if r["width"] == width and r.get("mkl/before")]
        if bef:
            line += f"; before the vector knobs (256-bit picks) {geomean(bef):.3f}x"
        il = [r["mkl/tuned interleaved"] for r in rows if r["width"] == width]
        il = [x for x in il if x]
        if il:
            line += f"; interleaved (separate column) {geomean(il):.3f}x"
        picks = [r["vector"] for r in rows if r["width"] == width]
        shares = {v: picks.count(v) for v in sorted(set(picks))}
        line += "; picks: " + ", ".join(f"{v} {n}/{len(picks)}" for v, n in shares.items())
        opted = [r["mkl/bf16"] for r in rows if r["width"] == width and r.get("mkl/bf16")]
        if opted:
            errors = [
                r["bf16_error"]
                for r in rows
                if r["width"] == width and (r.get("bf16_knobs") or {}).get("bf16")
            ]
            line += (
                f"; --bf16 pick (B as bfloat16, opt-in) {geomean(opted):.3f}x"
                f" (largest error / max |C| {max(errors, default=0.0):.1e})"
            )
        pas = [passive[k] for k in passive if k.endswith(f":{width}")]
        if pas:
            line += f"; passive waits (separate column) {geomean(pas):.3f}x over {len(pas)}"
        print(line)


def sddmm_summary(rows: list[dict], widths: list[int]) -> None:
    """Geomeans of torch.sparse.sampled_addmm time / tuned time per width."""
    for width in widths:
        found = [r for r in rows if r["width"] == width and r.get("torch/tuned")]
        for label, picked in (
            ("out-of-sample for the model (held-out or unseen)",
             [r for r in found if r["model_data"] in OUT_OF_SAMPLE]),
            (f"all {len(found)} matrices", found),
        ):  # fmt: skip
            ratios = [r["torch/tuned"] for r in picked]
            if ratios:
                print(
                    f"N={width}: {label}: tuned SDDMM vs torch.sparse.sampled_addmm geomean"
                    f" {geomean(ratios):.3f}x over {len(ratios)} (min {min(ratios):.3f}x)"
                )


INTEL_PATH_LABEL = "mkl-ie, Intel path"


def intel_summary(rows: list[dict], intel: dict[str, dict], widths: list[int]) -> None:
    """The Intel-path column: per row and per width, block-timed in the child process."""
    if not intel:
        return
    print(f"{INTEL_PATH_LABEL} (a separate process, the same picks, block-timed):")
    for row in rows:
        found = intel.get(f"{row['matrix']}:{row['width']}")
        if found:
            print(
                f"  {row['matrix'][:27]:<28}N={row['width']:<5}mkl {found['mkl_ms']:.3f} ms"
                f"  tuned {found['tuned_ms']:.3f} ms  mkl/tuned {found['ratio']:.3f}"
                f"  path {found['path']}"
                + (
                    f"  --bf16 {found['bf16_ms']:.3f} ms  mkl/bf16 {found['bf16_ratio']:.3f}"
                    if "bf16_ratio" in found
                    else ""
                )
            )
    for width in widths:
        found = [v for k, v in intel.items() if k.endswith(f":{width}")]
        if not found:
            continue
        ratios = [v["ratio"] for v in found]
        out = [
            intel[f"{r['matrix']}:{width}"]["ratio"]
            for r in rows
            if r["width"] == width
            and f"{r['matrix']}:{width}" in intel
            and r["model_data"] in OUT_OF_SAMPLE
        ]
        line = (
            f"N={width}: tuned vs {INTEL_PATH_LABEL} ({found[0]['path']}) geomean"
            f" {geomean(ratios):.3f}x over {len(ratios)} (min {min(ratios):.3f}x)"
        )
        if out:
            line += f"; out-of-sample {geomean(out):.3f}x over {len(out)} (min {min(out):.3f}x)"
        print(line)
        opted = [v["bf16_ratio"] for v in found if "bf16_ratio" in v]
        if opted:
            print(
                f"N={width}: --bf16 pick (B as bfloat16, opt-in) vs {INTEL_PATH_LABEL}"
                f" geomean {geomean(opted):.3f}x over {len(opted)} (min {min(opted):.3f}x)"
            )


def child_column(rows: list[dict], threads: int, flag: str, env: dict[str, str]) -> dict:
    """Per (matrix, width), the same picks against MKL in a child process run with ``env``
    (an OpenMP wait policy or MKL's code path is fixed when the runtime loads): this script
    again with ``flag``, without tuning."""
    picks = [{k: r.get(k) for k in ("matrix", "width", "knobs", "bf16_knobs")} for r in rows]
    with tempfile.TemporaryDirectory(prefix="cognate-bench-") as tmp:
        picks_path, out = Path(tmp) / "picks.json", Path(tmp) / "passive.json"
        picks_path.write_text(json.dumps(picks))
        argv = [a for a in sys.argv[1:] if a not in ("--json",)]
        if "--json" in sys.argv[1:]:
            i = sys.argv[1:].index("--json")
            argv = sys.argv[1 : i + 1] + sys.argv[i + 3 :]
        cmd = [sys.executable, *sys.argv[:1], *argv, flag, "--picks", str(picks_path)]
        cmd += ["--json", str(out), "--threads", str(threads)]
        done = subprocess.run(cmd, env={**os.environ, **env}, check=False)
        if done.returncode != 0 or not out.is_file():
            print(f"{flag} column: child run failed (exit {done.returncode})", file=sys.stderr)
            return {}
        return json.loads(out.read_text())


def child_rows(args: argparse.Namespace, threads: int, blocks: bool) -> None:
    """A child run: each pick's kernel against MKL-IE; to --json. Passive waits: the ratio
    from interleaved rounds; the Intel path (``blocks``): block-timed, with times and the
    code path MKL ran."""
    from cognate.config import Config
    from cognate.targets.cpu.tuned import ScheduleKernel

    picks = {(p["matrix"], p["width"]): p for p in json.loads(args.picks.read_text())}
    found: dict[str, Any] = {}
    for matrix in matrices(args):
        for width in args.widths:
            pick = picks.get((matrix.name, width))
            if pick is None:
                continue
            kernel = ScheduleKernel(matrix, "spmm", Config("cpu", "spmm", pick["knobs"]))
            b = np.random.default_rng(0).uniform(-1, 1, (matrix.shape[1], width))
            b = b.astype(np.float32)
            prepared, missing, _ = calls(matrix, kernel, b, threads, libraries=("mkl",))
            if pick.get("bf16_knobs") and blocks:
                add_bf16(matrix, Config("cpu", "spmm", pick["bf16_knobs"]), b, prepared, missing)
            if "tuned" not in prepared or "mkl" not in prepared:
                continue
            key = f"{matrix.name}:{width}"
            if not blocks:
                med = time_interleaved(prepared, args.rounds, threads=threads).seconds
                found[key] = med["mkl"] / med["tuned"]
                continue
            timed, _ = time_blocks(prepared, args.rounds, threads=threads)
            mkl, tuned = timed["mkl"].median, timed["tuned"].median
            found[key] = {
                "ratio": mkl / tuned, "mkl_ms": mkl * 1e3, "tuned_ms": tuned * 1e3,
                "path": library.mkl_code_path(),
            }  # fmt: skip
            if "bf16" in timed:
                found[key]["bf16_ms"] = timed["bf16"].median * 1e3
                found[key]["bf16_ratio"] = mkl / timed["bf16"].median
    args.json.write_text(json.dumps(found))


def bench_one(matrix: Matrix, width: int, threads: int, args, stream: float) -> dict | None:
    """Tune, check and time one (matrix, width); print its row and return it."""
    result = cognate.tune(
        matrix, width=width, top_k=args.top_k, verify=True, candidates=args.candidates,
        threads=threads, bf16=args.bf16,
    )  # fmt: skip
    opted = result if args.bf16 else None
    if opted is not None:  # the float32 pick: the same rule over the float32 configs
        result = float32_result(result)
    b = np.random.default_rng(0).uniform(-1, 1, (matrix.shape[1], width)).astype(np.float32)
    prepared, missing, inspect_s = calls(matrix, result.kernel, b, threads)
    bf16_error = add_bf16(matrix, opted.config, b, prepared, missing) if opted else None
    before = before_pick(result)
    if before is not None:  # what the tuner picked before the vector knobs: timed alike
        add_before(matrix, before, b, prepared, missing)
    timed = time_checked(matrix, width, prepared, missing, args.rounds, threads)
    if timed is None:
        return None
    med, spread, load = timed
    tuned = med["tuned"]
    il = time_interleaved(prepared, args.rounds, threads=threads).seconds
    il_ratio = il["mkl"] / il["tuned"] if "mkl" in il else None

    def ms(name: str) -> str:
        return f"{med[name] * 1e3:.3f}" if name in med else "-"

    def ratio(name: str) -> str:
        return f"{med[name] / tuned:.3f}" if name in med else "-"

    before_s = med.get("before", tuned)  # the same kernel when the pick did not change
    mkl_before = med["mkl"] / before_s if "mkl" in med else float("nan")

    pick = pick_words(result)
    vec = pick_vector(result)
    gflops = 2 * matrix.nnz * width / tuned / 1e9
    gbs = bytes_moved(matrix, width) / tuned / 1e9
    print(
        f"{matrix.name[:27]:<28}{matrix.nnz:>9}{width:>5}{ms('tuned'):>10}{ms('mkl'):>9}"
        f"{ms('torch'):>10}{ms('scipy'):>10}{ratio('mkl'):>10}{ratio('torch'):>12}"
        f"{gflops:>9.2f}{gbs:>7.1f}{100 * gbs / stream:>7.1f}"
        f"{100 * spread['tuned']:>6.1f}{100 * spread.get('mkl', float('nan')):>6.1f}"
        f"{il_ratio or float('nan'):>8.3f}{mkl_before:>9.3f}"
        f"{inspect_s * 1e3:>12.2f}  {model_data(matrix.name):<11}{vec:>9} {pick.strip()}"
        + (f"  [{load.line()}]" if load.busy else "")
        + (
            f"  [--bf16 {ms('bf16')} ms, mkl/bf16 {med['mkl'] / med['bf16']:.3f},"
            f" error {bf16_error:.1e}{'' if opted.config.knobs.get('bf16') else ', a float32 pick'}]"
            if opted is not None and "bf16" in med and "mkl" in med
            else ""
        )
    )
    return {
        "matrix": matrix.name, "nnz": matrix.nnz, "width": width, "seconds": med,
        "mkl/tuned": med["mkl"] / tuned if "mkl" in med else None,
        "torch/tuned": med["torch"] / tuned if "torch" in med else None,
        "gflops": gflops, "pct_triad": 100 * gbs / stream, "mkl_inspect_s": inspect_s,
        "knobs": dict(result.config.knobs), "kept_baseline": result.kept_baseline,
        "vector": vec, "spread": spread, "mkl/tuned interleaved": il_ratio,
        "mkl/before": mkl_before if "mkl" in med else None,
        "model_data": model_data(matrix.name),
        "busy": load.busy,
        "bf16_knobs": dict(opted.config.knobs) if opted is not None else None,
        "mkl/bf16": med["mkl"] / med["bf16"] if "mkl" in med and "bf16" in med else None,
        "bf16_error": bf16_error,
    }  # fmt: skip


def time_checked(
    matrix: Matrix, width: int, prepared: dict, missing: dict, rounds: int, threads: int
):
    """Say which calls are not timed and why; time the others in interleaved rounds (None
    when the tuned kernel itself is missing)."""
    for name, why in missing.items():
        print(f"  {matrix.name} N={width}: {name} not timed: {why}", file=sys.stderr)
    if "tuned" not in prepared:
        return None
    timed, load = time_blocks(prepared, rounds, threads=threads)
    return (
        {name: t.median for name, t in timed.items()},
        {name: t.spread / t.median for name, t in timed.items()},
        load,
    )


def before_pick(result):
    """The config the same verify would have kept without the vector variants (the fastest
    measured of the model's top-k and the baseline, as ``TuneResult.best`` decides), when it
    differs from the pick; None otherwise."""
    from dataclasses import replace

    plain = [c for c in result.candidates if "vbits" not in c.config.knobs]
    if len(plain) == len(result.candidates):
        return None
    config = replace(result, candidates=plain, _kernel=None).config
    return None if config.hash == result.config.hash else config


def float32_result(result):
    """``result`` without its bfloat16 candidates: its pick is what the same tune without
    ``bf16`` would have kept."""
    from dataclasses import replace

    plain = [c for c in result.candidates if not c.config.knobs.get("bf16")]
    return replace(result, candidates=plain, _kernel=None)


def add_bf16(matrix: Matrix, config, b: np.ndarray, prepared: dict, missing: dict) -> float:
    """The ``bf16`` call: the pick of ``tune(..., bf16=True)`` as users call it, checked
    against scipy on B rounded to bfloat16 where it reads B so; its largest error against
    the float32 result, relative to the largest |C|."""
    from cognate.targets.cpu.measure.check import round_bf16
    from cognate.targets.cpu.tuned import ScheduleKernel

    kernel = ScheduleKernel(matrix, "spmm", config)
    c = kernel(b)
    rounded = round_bf16(b) if config.knobs.get("bf16") else b
    call = {"bf16": lambda: kernel(b, out=c)}
    drop_wrong(call, {"bf16": lambda: c}, reference(matrix.csr, "spmm", (rounded,)), missing)
    prepared.update(call)
    exact = reference(matrix.csr, "spmm", (b,))[0]
    return float(np.abs(c - exact).max() / max(np.abs(exact).max(), 1e-30))


def add_before(matrix: Matrix, config, b: np.ndarray, prepared: dict, missing: dict) -> None:
    """The ``before`` call: ``config``'s kernel as users call it, checked against scipy."""
    from cognate.targets.cpu.tuned import ScheduleKernel

    kernel = ScheduleKernel(matrix, "spmm", config)
    c = kernel(b)
    call = {"before": lambda: kernel(b, out=c)}
    drop_wrong(call, {"before": lambda: c}, reference(matrix.csr, "spmm", (b,)), missing)
    prepared.update(call)


def pick_vector(result) -> str:
    """The pick's vector width in bits (a plain CSR SpMM config without vector knobs runs the
    256-bit kernel), or its kernel family's name for the other kernels."""
    from cognate.targets.cpu.vector import is_plain_csr_spmm

    config = result.config
    if "vbits" in config.knobs:
        return str(config["vbits"])
    if is_plain_csr_spmm(config):
        return "256"
    return config.knobs.get("family", "csr-nest")


def pick_words(result) -> str:
    return "baseline (kept)" if result.kept_baseline else result.best.description.split("|")[0]


def bench_sddmm(matrix: Matrix, width: int, threads: int, args, stream: float) -> dict | None:
    """Tune, check and time one SDDMM (matrix, width) against torch; print its row."""
    result = cognate.tune(
        matrix, op="sddmm", width=width, top_k=args.top_k, verify=True,
        candidates=args.candidates, threads=threads,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    rows, cols = matrix.shape
    x = rng.uniform(-1, 1, (rows, width)).astype(np.float32)
    y = rng.uniform(-1, 1, (cols, width)).astype(np.float32)
    prepared, missing = sddmm_calls(matrix, result.kernel, x, y)
    timed = time_checked(matrix, width, prepared, missing, args.rounds, threads)
    if timed is None:
        return None
    med, spread, load = timed
    tuned = med["tuned"]
    gflops = 2 * matrix.nnz * width / tuned / 1e9
    gbs = bytes_moved(matrix, width, "sddmm") / tuned / 1e9
    torch_ms = f"{med['torch'] * 1e3:.3f}" if "torch" in med else "-"
    ratio = f"{med['torch'] / tuned:.3f}" if "torch" in med else "-"
    data = model_data(matrix.name, "sddmm")
    print(
        f"{matrix.name[:27]:<28}{matrix.nnz:>9}{width:>5}{tuned * 1e3:>10.3f}{'':>9}"
        f"{torch_ms:>10}{'':>10}{'':>10}{ratio:>12}{gflops:>9.2f}{gbs:>7.1f}"
        f"{100 * gbs / stream:>7.1f}{'':>12}  {data:<11} {pick_words(result).strip()}"
        + (f"  [{load.line()}]" if load.busy else "")
    )
    return {
        "matrix": matrix.name, "nnz": matrix.nnz, "width": width, "op": "sddmm",
        "seconds": med, "torch/tuned": med["torch"] / tuned if "torch" in med else None,
        "gflops": gflops, "pct_triad": 100 * gbs / stream,
        "knobs": dict(result.config.knobs), "kept_baseline": result.kept_baseline,
        "spread": spread,
        "model_data": data, "busy": load.busy,
    }  # fmt: skip


if __name__ == "__main__":
    try:
        main()
    except CognateError as exc:
        raise SystemExit(f"bench_vs_library: {exc}") from None
