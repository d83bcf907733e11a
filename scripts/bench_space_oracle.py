"""Does the cpu space's plain CSR SpMM kernel give a per-matrix choice? Its oracle vs fixed configs.

For each matrix and dense width, a sample of the space is packed, compiled, checked against
scipy and block-timed in this process (the kernels called through their argument vectors, as
``result.kernel(B, out=C)`` calls them):

- ``csr:...``: the plain CSR SpMM kernel (kernels/cpu/spmm_csr.c) at every register tile
  ``tune --verify`` times (vector.tiles_for: 256- and 512-bit vectors on an AVX-512 host, the
  tile that holds the row and half of it, unroll 2 and 4) crossed with every schedule
  (threads 1 or all, B-row prefetch 0 / 4 / 16 nonzeros ahead, weight-balanced tasks, rows
  claimed 16 / 64 / 256 at a time, or the merge-path nonzero split);
- the other families' best few (``panel:...``, ``reordered:...``): the configs
  that won most often in the locality benchmark and the collected records;
- ``baseline``: WACO's FixedCSR (the plain kernel, 256-bit, its default schedule), and
  ``noise:baseline``, the same timed again: the noise floor.

Timing: per round each config in turn (the order rotating) runs a block of consecutive calls
after one untimed block (cognate.timing.blocks; every config is a libgomp kernel, so no
other runtime's threads spin between them); medians of the rounds. Printed per width: the
oracle (fastest config per matrix) over the baseline; the best single fixed config chosen
leave-one-out (best geomean over the other matrices) and in-sample (over all of them,
labelled); the oracle over each; the share of matrices whose oracle beats the fixed config by
1.15x; and the share of matrices whose fastest config uses each vector width, family, thread
count and row schedule. The oracle picks from the timings it is scored on (an upper bound
with the noise of every draw in it), and a fixed config chosen on the other matrices' timings
carries their noise too (it regresses on the matrix left out); compare both with the noise
floor printed beside them. ``--confirm`` removes that selection effect: it times each row's
fastest config, the fixed candidates (the leave-one-out picks and the 5 best by geomean) and
the baseline again, in fresh blocks, and scores the first timings' choices on the new ones.

OpenMP settings are the caller's (nothing set: default waits). Run on a quiet machine, one
width per run; compile first (``--build-only``) so the timed run finds every kernel built:

    python scripts/bench_space_oracle.py --build-only --widths 128
    python scripts/bench_space_oracle.py --threads 2 --widths 128 --rounds 3 --json o128.json \\
        --matrices bp_1200 dwt_878 dwt_992 reorientation_1 watt_2 bcsstk38 Alemdar bcsstk11 \\
        bcsstm10 can_1054 cegb3024 lp_cre_a lpi_ceria3d lshp1561 saylr4 --ngraph \\
        --graphs 100000 1000000
    python scripts/bench_space_oracle.py --threads 2 --widths 128 --rounds 5 \
        --confirm o128.json --json c128.json --matrices ... --ngraph --graphs 100000 1000000
    python scripts/bench_space_oracle.py --summarize o32.json o128.json o512.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from cognate.timing import early_threads

early_threads(sys.argv)  # --threads N before any OpenMP runtime loads; waits left default

from cognate.bench.buffers import shared_buffers  # noqa: E402
from cognate.bench.corpus import generated_graphs, shared_matrices  # noqa: E402
from cognate.bench.oracle import AGAIN, BASELINE, FIXED_BAR, oracle_and_fixed  # noqa: E402
from cognate.errors import CognateError  # noqa: E402
from cognate.stats import geomean  # noqa: E402
from cognate.targets.cpu import families, pipeline  # noqa: E402
from cognate.targets.cpu.codegen import SCHEDULE_KNOBS, Schedule  # noqa: E402
from cognate.targets.cpu.isa import host_isa  # noqa: E402
from cognate.targets.cpu.measure.check import dense_operands, mismatch, reference  # noqa: E402
from cognate.targets.cpu.space import make_space  # noqa: E402
from cognate.targets.cpu.vector import tiles_for  # noqa: E402
from cognate.timing import time_blocks  # noqa: E402

# The families' few: the panel configs wider than most matrices (the most frequent winners in
# the locality benchmark and the records) and two row orders (bcsr and dia won 1-2 of 49
# matrices in the records and their packing costs most of a run on the large graphs).
FAMILY_FEW: dict[str, dict] = {
    "panel:p65536:r128": {"family": "panel", "pcols": 65536, "rblock": 128, "chunk": 1},
    "panel:p65536:r512": {"family": "panel", "pcols": 65536, "rblock": 512, "chunk": 1},
    "panel:p4096:r128": {"family": "panel", "pcols": 4096, "rblock": 128, "chunk": 1},
    "reordered:rcm:s0:j1024": {
        "family": "reordered", "by": "rcm", "symmetric": 0, "strip": 1024, "chunk": 32,
    },
    "reordered:degree:s0:j1024": {
        "family": "reordered", "by": "degree", "symmetric": 0, "strip": 1024, "chunk": 32,
    },
}  # fmt: skip


def schedules() -> list[Schedule]:
    """Every legal combination of the schedule knobs."""
    found = [Schedule(*values) for values in itertools.product(*SCHEDULE_KNOBS.values())]
    return [s for s in found if s.problem() is None]


def schedule_name(s: Schedule) -> str:
    rows = "nz" if s.nzsplit else f"b{s.batch}" if s.batch else "tasks"
    return f"t{'1' if s.threads == 1 else 'all'}:p{s.prefetch}:{rows}"


def csr_grid(width: int) -> dict[str, dict]:
    """Name -> knobs of every plain CSR config of the sample at dense ``width``."""
    plain = dict(make_space("spmm").baseline((1, 1)).knobs)
    bits = host_isa().variant_widths
    configs = {}
    for tile, schedule in itertools.product(tiles_for(width, bits), schedules()):
        name = f"csr:v{tile.vbits}x{tile.vregs}u{tile.unroll}:{schedule_name(schedule)}"
        configs[name] = {**plain, **tile.knobs, **schedule.knobs}
    return configs


def grid(width: int) -> dict[str, dict]:
    baseline = dict(make_space("spmm").baseline((1, 1)).knobs)
    return {BASELINE: baseline, AGAIN: dict(baseline), **csr_grid(width), **FAMILY_FEW}


def traits(name: str) -> dict[str, str]:
    """What a config's name says about it: family, vector width, threads, rows, prefetch."""
    if name in (BASELINE, AGAIN):
        return {"family": "csr", "vector": "256", "threads": "default", "rows": "tasks",
                "prefetch": "0"}  # fmt: skip
    if not name.startswith("csr:"):
        family = name.split(":")[0]
        return {"family": family, "vector": family, "threads": "default", "rows": family,
                "prefetch": "0"}  # fmt: skip
    _, tile, threads, prefetch, rows = name.split(":")
    return {
        "family": "csr",
        "vector": tile[1:].split("x")[0],
        "threads": threads[1:],
        "rows": rows,
        "prefetch": prefetch[1:],
    }


def build_all(widths: list[int]) -> None:
    """Compile every kernel of the sample (cached on disk for the timed runs)."""
    for width in widths:
        start = time.perf_counter()
        for knobs in grid(width).values():
            pipeline.build("spmm", knobs, width)
        print(f"N={width}: {len(grid(width))} kernels built in {time.perf_counter() - start:.0f} s")


def prepared_calls(matrix, width: int, names: set[str] | None = None) -> tuple[dict, dict]:
    """Checked calls (name -> argument-vector call, one shared output) and errors by name;
    ``names``: only these configs of the sample."""
    operands = dense_operands("spmm", matrix.shape, width, seed=0)
    ref, tol = reference(matrix.csr, "spmm", operands)
    calls, errors, shared = {}, {}, {}
    plain_packed = None
    for name, knobs in grid(width).items():
        if names is not None and name not in names:
            continue
        try:
            lib = pipeline.build("spmm", knobs, width)
            if families.family_of(knobs) == families.CSR:  # one CSR packing serves every tile
                plain_packed = plain_packed or pipeline.pack(matrix, "spmm", knobs, width)
                packed = plain_packed
            else:
                packed = pipeline.pack(matrix, "spmm", knobs, width)
            call = pipeline.bind(packed, knobs, operands, lib)
            call()
            problem = mismatch(call.result(), ref, tol)
        except CognateError as exc:  # TooLarge included
            errors[name] = str(exc)[:200]
            continue
        if problem:
            errors[name] = f"result wrong: {problem}"
            continue
        calls[name] = shared_buffers(call, shared)
    return calls, errors


def bench(matrix, width: int, rounds: int, threads: int, max_dense_gb: float) -> dict | None:
    dense_gb = max(matrix.shape) * width * 4 / 1e9
    if dense_gb > max_dense_gb:  # B, C and a float64 reference: a few times this in memory
        print(
            f"  {matrix.name} N={width}: skipped, dense operand {dense_gb:.2f} GB", file=sys.stderr
        )
        return None
    calls, errors = prepared_calls(matrix, width)
    if BASELINE not in calls:
        print(
            f"  {matrix.name} N={width}: baseline failed: {errors.get(BASELINE)}", file=sys.stderr
        )
        return None
    timed, load = time_blocks(calls, rounds, threads=threads, runtime=lambda _: "libgomp")
    seconds = {name: t.median for name, t in timed.items()}
    spread = {name: t.spread / t.median for name, t in timed.items()}
    configs = {k: v for k, v in seconds.items() if k != AGAIN}
    best = min(configs, key=configs.get)
    base = seconds[BASELINE]
    print(
        f"{matrix.name[:27]:<28}{matrix.nnz:>9}{width:>5}{base * 1e3:>10.3f}"
        f"{configs[best] * 1e3:>10.3f}{base / configs[best]:>8.3f}"
        f"{max(base, seconds[AGAIN]) / min(base, seconds[AGAIN]):>7.3f}  {best}"
        + (f"  [{load.line()}]" if load.busy else ""),
        flush=True,
    )
    return {
        "matrix": matrix.name, "nnz": matrix.nnz, "shape": list(matrix.shape), "width": width,
        "seconds": seconds, "spread": spread, "errors": errors, "best": best,
        "busy": load.busy, "load": load.line(), "rounds": rounds,
    }  # fmt: skip


def fixed_in_sample(rows: list[dict]) -> tuple[list[float], str]:
    """Per row, the speedup of the one config with the best geomean over all rows."""
    speedups = [{k: r["seconds"][BASELINE] / v for k, v in _configs(r).items()} for r in rows]
    names = sorted(set.intersection(*(set(s) for s in speedups)))
    pick = max(names, key=lambda n: geomean([s[n] for s in speedups]))
    return [s[pick] for s in speedups], pick


def _configs(row: dict) -> dict[str, float]:
    return {k: v for k, v in row["seconds"].items() if not k.startswith("noise:")}


def shares(rows: list[dict], trait: str) -> str:
    counts = Counter(traits(r["best"])[trait] for r in rows)
    return ", ".join(f"{value} {n}" for value, n in counts.most_common())


def summary(rows: list[dict]) -> None:
    print(f"\n{host_isa().line()}; oracle = fastest config per matrix (in-sample by"
          " construction); fixed = one config for every matrix")  # fmt: skip
    for width in sorted({r["width"] for r in rows}):
        found = [r for r in rows if r["width"] == width]
        if len(found) < 2:
            continue
        oracle, loo, picks = oracle_and_fixed(found)
        inside, inside_pick = fixed_in_sample(found)
        over = sum(o / f >= FIXED_BAR for o, f in zip(oracle, loo, strict=True))
        noise = [
            max(r["seconds"][BASELINE], r["seconds"][AGAIN])
            / min(r["seconds"][BASELINE], r["seconds"][AGAIN])
            for r in found
            if AGAIN in r["seconds"]
        ]
        busy = sum(r["busy"] for r in found)
        print(
            f"N={width} ({len(found)} matrices, {found[0]['rounds']} rounds, {busy} busy):"
            f" oracle/baseline {geomean(oracle):.3f}x;"
            f" leave-one-out fixed/baseline {geomean(loo):.3f}x"
            f" (most often {max(set(picks), key=picks.count)});"
            f" oracle/leave-one-out fixed {geomean([o / f for o, f in zip(oracle, loo, strict=True)]):.3f}x;"
            f" oracle >= {FIXED_BAR}x that fixed on {over} of {len(found)}"
        )
        print(
            f"    in-sample fixed {inside_pick}: /baseline {geomean(inside):.3f}x,"
            f" oracle/it {geomean([o / f for o, f in zip(oracle, inside, strict=True)]):.3f}x;"
            f" noise floor (baseline timed twice, larger/smaller) {geomean(noise):.3f}x"
            f" (max {max(noise):.3f}x)"
        )
        for trait in ("vector", "family", "threads", "rows", "prefetch"):
            print(f"    fastest config's {trait}: {shares(found, trait)}")


def fixed_candidates(rows: list[dict], top: int = 5) -> set[str]:
    """The configs a fixed choice could be at one width: the leave-one-out picks and the
    ``top`` best by geomean over every row."""
    _, _, picks = oracle_and_fixed(rows)
    speedups = [{k: r["seconds"][BASELINE] / v for k, v in _configs(r).items()} for r in rows]
    names = sorted(set.intersection(*(set(x) for x in speedups)))
    ranked = sorted(names, key=lambda n: -geomean([x[n] for x in speedups]))
    return {*picks, *ranked[:top]}


def confirm(rows: list[dict], found: list, rounds: int, threads: int) -> list[dict]:
    """Fresh timings of each row's fastest config, the fixed candidates and the baseline
    (twice): choices made on the first timings, scored on these (no winner's curse)."""
    by_name = {m.name: m for m in found}
    confirmed = []
    for width in sorted({r["width"] for r in rows}):
        at_width = [r for r in rows if r["width"] == width and r["matrix"] in by_name]
        fixed = fixed_candidates(at_width)
        for row in at_width:
            names = {BASELINE, AGAIN, row["best"], *fixed}
            calls, _ = prepared_calls(by_name[row["matrix"]], width, names)
            timed, load = time_blocks(calls, rounds, threads=threads, runtime=lambda _: "libgomp")
            again = {name: t.median for name, t in timed.items()}
            print(
                f"{row['matrix'][:27]:<28}{width:>5}  picked {row['best']}:"
                f" {again[BASELINE] / again[row['best']]:.3f}x the baseline (first timing"
                f" {row['seconds'][BASELINE] / row['seconds'][row['best']]:.3f}x)"
                + (f"  [{load.line()}]" if load.busy else ""),
                flush=True,
            )
            confirmed.append({**row, "confirm": again, "confirm_busy": load.busy})
    return confirmed


def confirmed_summary(rows: list[dict]) -> None:
    """Per width: the first timings' choices (each row's fastest config; the fixed config
    chosen leave-one-out and in-sample) scored on the confirmation timings."""
    print(f"\n{host_isa().line()}; choices from the first timings, scored on fresh ones:")
    for width in sorted({r["width"] for r in rows}):
        found = [r for r in rows if r["width"] == width and "confirm" in r]
        if len(found) < 2:
            continue
        _, _, picks = oracle_and_fixed(found)
        _, inside_pick = fixed_in_sample(found)
        oracle = [r["confirm"][BASELINE] / r["confirm"][r["best"]] for r in found]
        loo = [r["confirm"][BASELINE] / r["confirm"][p] for r, p in zip(found, picks, strict=True)]
        inside = [r["confirm"][BASELINE] / r["confirm"][inside_pick] for r in found]
        noise = [
            max(r["confirm"][BASELINE], r["confirm"][AGAIN])
            / min(r["confirm"][BASELINE], r["confirm"][AGAIN])
            for r in found
        ]
        ratio = [o / f for o, f in zip(oracle, loo, strict=True)]
        print(
            f"N={width} ({len(found)} matrices, {sum(r['confirm_busy'] for r in found)} busy):"
            f" picked/baseline {geomean(oracle):.3f}x; leave-one-out fixed/baseline"
            f" {geomean(loo):.3f}x; picked/leave-one-out fixed {geomean(ratio):.3f}x"
            f" (>= {FIXED_BAR}x on {sum(x >= FIXED_BAR for x in ratio)} of {len(found)});"
            f" in-sample fixed {inside_pick}: /baseline {geomean(inside):.3f}x, picked/it"
            f" {geomean([o / f for o, f in zip(oracle, inside, strict=True)]):.3f}x;"
            f" noise floor {geomean(noise):.3f}x (max {max(noise):.3f}x)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[128])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0: every core")
    parser.add_argument("--matrices", nargs="*", help="only matrices whose file name has these")
    parser.add_argument("--ngraph", action="store_true", help="also the ngraph matrices")
    parser.add_argument("--graphs", type=int, nargs="*", default=[])
    parser.add_argument("--graphs-only", action="store_true", help="no real matrices")
    parser.add_argument(
        "--max-dense-gb", type=float, default=0.5, help="skip wider dense operands (memory)"
    )
    parser.add_argument("--build-only", action="store_true", help="compile the kernels, no timing")
    parser.add_argument("--json", type=Path, help="write the rows here (after every row)")
    parser.add_argument("--summarize", type=Path, nargs="+", help="summary of --json files")
    parser.add_argument(
        "--confirm", type=Path, nargs="+", help="re-time the choices of these --json files"
    )
    args = parser.parse_args()
    if args.summarize:
        rows = [row for path in args.summarize for row in json.loads(path.read_text())]
        summary(rows)
        confirmed_summary(rows)
        return
    if args.build_only:
        build_all(args.widths)
        return
    args.threads = args.threads or len(os.sched_getaffinity(0))
    if args.graphs_only:
        found = generated_graphs(args.graphs)
    else:
        found = shared_matrices(ngraph=args.ngraph, names=args.matrices)
        found += generated_graphs(args.graphs)
    if args.confirm:
        rows = [row for path in args.confirm for row in json.loads(path.read_text())]
        rows = [r for r in rows if r["width"] in args.widths]
        rows = confirm(rows, found, args.rounds, args.threads)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        confirmed_summary(rows)
        return
    print(
        f"spmm, threads {args.threads}, {host_isa().line()}, {len(grid(args.widths[0]))} configs"
        f" per matrix, {args.rounds} rounds; times in ms"
    )
    print(
        f"{'matrix':<28}{'nnz':>9}{'N':>5}{'baseline':>10}{'oracle':>10}{'speedup':>8}"
        f"{'noise':>7}  fastest config"
    )
    rows = []
    for matrix in found:
        for width in args.widths:
            row = bench(matrix, width, args.rounds, args.threads, args.max_dense_gb)
            if row is not None:
                rows.append(row)
                if args.json:  # after every row: a stopped run keeps what it measured
                    args.json.write_text(json.dumps(rows, indent=1))
    summary(rows)


if __name__ == "__main__":
    try:
        main()
    except CognateError as exc:
        raise SystemExit(f"bench_space_oracle: {exc}") from None
