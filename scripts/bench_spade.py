"""Benchmark of the spade simulator: speed, and how much its schedule space matters.

1. Speed: simulated nonzeros per second for SpMM at N=32 and N=128 on 1M-nnz uniform and
   power-law (R-MAT) matrices, base config (median of a few runs, one core).
2. Sensitivity over the shared real matrices (every config of the 256-config space): per
   matrix the best / base / worst config, the geomean of base/best (the oracle speedup
   over base) and how many distinct configs are best somewhere.
3. ``--against REV``: the shipped core against the core of git revision REV, interleaved on
   the same tilings and configs (8 per op, spread over the space), both ops, N=64. Every
   counter must match (an optimisation may not change a record); prints the median seconds
   of each and their ratio.

    python scripts/bench_spade.py [--op spmm|sddmm] [--width 32] [--skip-speed]
    python scripts/bench_spade.py --against 9624c55 --skip-speed --skip-sensitivity
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import scipy.sparse as sp

from cognate.bench.corpus import shared_matrices
from cognate.matrix import Matrix
from cognate.paths import REPO_ROOT
from cognate.stats import geomean
from cognate.synth import generate
from cognate.targets.spade.runner import SpadeRunner
from cognate.targets.spade.simulator import (
    Machine,
    Schedule,
    SimResult,
    Tiling,
    load_core,
    load_machine,
    simulate,
    tile,
)
from cognate.targets.spade.space import SpadeSpace
from cognate.timing import time_interleaved


def speed(repeats: int = 3) -> None:
    machine = load_machine()
    space = SpadeSpace("spmm")
    sched = space.schedule(space.baseline())
    matrices = speed_matrices()
    print("speed: base config (rp=256 cp=all), one core")
    print(f"{'matrix':28s} {'N':>4s} {'tile s':>7s} {'sim s':>7s} {'Mnnz/s':>7s} {'sim ms':>8s}")
    for m in matrices:
        tiling = tile(m.csr, sched.rp, sched.cp)
        for width in (32, 128):
            sims: list[SimResult] = []
            calls = {
                "tile": partial(tile, m.csr, sched.rp, sched.cp),
                "sim": simulate_call(m.csr, "spmm", width, sched, machine, tiling, sims),
            }
            med = time_interleaved(calls, repeats, 0.0, threads=1).seconds
            total = med["tile"] + med["sim"]
            print(
                f"{m.name[:28]:28s} {width:4d} {med['tile']:7.3f} {med['sim']:7.3f} "
                f"{m.nnz / total / 1e6:7.2f} {sims[-1].seconds * 1e3:8.3f}"
            )


def simulate_call(
    csr: sp.csr_matrix,
    op: str,
    width: int,
    sched: Schedule,
    machine: Machine,
    tiling: Tiling,
    out: list[SimResult],
    core: ctypes.CDLL | None = None,
) -> Callable[[], None]:
    """One simulation per call, its result appended to ``out``."""

    def call() -> None:
        out.append(simulate(csr, op, width, sched, machine, tiling, core=core))

    return call


def speed_matrices() -> list[Matrix]:
    side = 1 << 17  # 131072 x 131072, 1M nonzeros: ~7.6 per row
    return [generate(kind, side, side, nnz=1_000_000, seed=1) for kind in ("uniform", "rmat")]


def core_source(rev: str) -> str:
    proc = subprocess.run(
        ["git", "show", f"{rev}:kernels/spade/spade_sim.c"],
        capture_output=True, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"--against {rev}: no simulator core there ({proc.stderr.strip()})")
    return proc.stdout


def against(rev: str, repeats: int = 3, width: int = 64) -> None:
    other, machine = load_core(core_source(rev)), load_machine()
    print(f"\ncore speed: shipped vs {rev}, N={width}, {repeats} interleaved runs per config")
    print(f"{'matrix':28s} {'op':6s} {'configs':>7s} {rev[:10]:>10s} {'shipped':>8s} {'ratio':>6s}")
    ratios = []
    for m in speed_matrices():
        for op in ("spmm", "sddmm"):
            space = SpadeSpace(op)
            configs = space.all_configs()[::32]
            old_s = new_s = 0.0
            for config in configs:
                sched = space.schedule(config)
                tiling = tile(m.csr, sched.rp, sched.cp)
                runs: dict[str, list[SimResult]] = {"old": [], "new": []}
                calls = {  # interleaved rounds alternate which core runs first
                    who: simulate_call(m.csr, op, width, sched, machine, tiling, runs[who], core)
                    for who, core in (("old", other), ("new", None))
                }
                med = time_interleaved(calls, repeats, 0.0, threads=1).seconds
                if runs["old"][-1].counters != runs["new"][-1].counters:
                    sys.exit(f"{m.name} {op} {config.json}: the cores disagree")
                old_s += med["old"]
                new_s += med["new"]
            ratios.append(old_s / new_s)
            print(
                f"{m.name[:28]:28s} {op:6s} {len(configs):7d} {old_s:10.2f} {new_s:8.2f} "
                f"{old_s / new_s:5.2f}x"
            )
    print(f"shipped core speed-up over {rev}: {geomean(ratios):.2f}x (geomean), identical counters")


def describe(knobs: dict) -> str:
    return (
        f"rp={knobs['rp']} cp={knobs['cp']} {'B' if knobs['barrier'] else '-'}"
        f"{'Y' if knobs['bypass'] else '-'} s{knobs['split']} {knobs['sched'][:3]}"
    )


def sensitivity(op: str, width: int) -> None:
    space = SpadeSpace(op)
    configs = space.candidates()
    base = space.baseline()
    runner = SpadeRunner()
    print(f"\nsensitivity: {op} N={width}, {len(configs)} configs per matrix")
    print(f"{'matrix':26s} {'nnz':>7s} {'base us':>9s} {'best/base':>9s} {'worst/base':>10s}  best")
    ratios, bests, t0 = [], Counter(), time.perf_counter()
    for m in shared_matrices():
        results = runner.measure(m, op, width, configs)
        ok = [r for r in results if r.status == "ok"]
        if len(ok) != len(results):
            print(f"{m.name}: {len(results) - len(ok)} configs failed: {results[0].error}")
        by_hash = {r.config.hash: r.runtime_s for r in ok}
        base_s = by_hash[base.hash]
        best = min(ok, key=lambda r: r.runtime_s)
        worst = max(r.runtime_s for r in ok)
        ratios.append(base_s / best.runtime_s)
        bests[best.config.json] += 1
        print(
            f"{Path(m.name).name[:26]:26s} {m.nnz:7d} {base_s * 1e6:9.2f} "
            f"{best.runtime_s / base_s:9.3f} {worst / base_s:10.3f}  {describe(best.config.knobs)}"
        )
    print(
        f"oracle speedup over base (geomean of base/best): {geomean(ratios):.3f}x"
        f" over {len(ratios)} matrices"
    )
    print(f"distinct best configs: {len(bests)}")
    print(f"sensitivity wall time: {time.perf_counter() - t0:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-sensitivity", action="store_true")
    parser.add_argument("--against", metavar="REV", help="compare the core with this revision's")
    args = parser.parse_args()
    if not args.skip_speed:
        speed()
    if args.against:
        against(args.against)
    if not args.skip_sensitivity:
        sensitivity(args.op, args.width)


if __name__ == "__main__":
    main()
