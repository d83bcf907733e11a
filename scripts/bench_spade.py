"""Benchmark of the spade simulator: speed, and how much its schedule space matters.

1. Speed: simulated nonzeros per second for SpMM at N=32 and N=128 on 1M-nnz uniform and
   power-law (R-MAT) matrices, base config (median of a few runs, one core).
2. Sensitivity over the shared real matrices (every config of the 256-config space): per
   matrix the best / base / worst config, the geomean of base/best (the oracle speedup
   over base) and how many distinct configs are best somewhere.

    python scripts/bench_spade.py [--op spmm|sddmm] [--width 32] [--skip-speed]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import Counter
from pathlib import Path

from cognate.io import load_matrix
from cognate.matrix import Matrix
from cognate.paths import shared_dir
from cognate.synth import generate
from cognate.targets.spade.runner import SpadeRunner
from cognate.targets.spade.simulator import load_machine, simulate, tile
from cognate.targets.spade.space import SpadeSpace


def speed(repeats: int = 3) -> None:
    machine = load_machine()
    space = SpadeSpace("spmm")
    sched = space.schedule(space.baseline())
    side = 1 << 17  # 131072 x 131072, 1M nonzeros: ~7.6 per row
    matrices = [
        generate("uniform", side, side, nnz=1_000_000, seed=1),
        generate("rmat", side, side, nnz=1_000_000, seed=1),
    ]
    print("speed: base config (rp=256 cp=all), one core")
    print(f"{'matrix':28s} {'N':>4s} {'tile s':>7s} {'sim s':>7s} {'Mnnz/s':>7s} {'sim ms':>8s}")
    for m in matrices:
        for width in (32, 128):
            tile_s, sim_s = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                tiling = tile(m.csr, sched.rp, sched.cp)
                t1 = time.perf_counter()
                res = simulate(m.csr, "spmm", width, sched, machine, tiling)
                t2 = time.perf_counter()
                tile_s.append(t1 - t0)
                sim_s.append(t2 - t1)
            total = statistics.median(tile_s) + statistics.median(sim_s)
            print(
                f"{m.name[:28]:28s} {width:4d} {statistics.median(tile_s):7.3f} "
                f"{statistics.median(sim_s):7.3f} {m.nnz / total / 1e6:7.2f} "
                f"{res.seconds * 1e3:8.3f}"
            )


def shared_matrices() -> list[Matrix]:
    root = shared_dir() / "matrices"
    paths = sorted((root / "suitesparse").glob("*.mtx.gz")) + sorted((root / "waco").glob("*.csr"))
    return [load_matrix(p) for p in paths]


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
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(
        f"oracle speedup over base (geomean of base/best): {geo:.3f}x over {len(ratios)} matrices"
    )
    print(f"distinct best configs: {len(bests)}")
    print(f"sensitivity wall time: {time.perf_counter() - t0:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-sensitivity", action="store_true")
    args = parser.parse_args()
    if not args.skip_speed:
        speed()
    if not args.skip_sensitivity:
        sensitivity(args.op, args.width)


if __name__ == "__main__":
    main()
