"""How much row panels below the space's smallest (rp = 16) would buy: a probe, not a change.

    python scripts/spade_rp_probe.py FILE_LIST [--rp 4 8 16] [--width 64] [--limit 40]

FILE_LIST names matrix files, one a line (e.g. the all-config spade matrices whose files are
on this machine). For each matrix and op, every config of the spade space with rp replaced by
each ``--rp`` value is simulated on the shipped machine (configs/spade.yaml); the table says
how often the best config with rp < 16 beats the best with rp = 16 and by how much (geomean).
Nothing is stored: the space (configs/spade-*.yaml) and its records stay as they are.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from cognate.formats.read import load_matrix
from cognate.targets.spade.simulator import Schedule, load_machine, simulate, tile
from cognate.targets.spade.space import SpadeSpace


def best_per_rp(path: Path, op: str, width: int, rps: list[int]) -> dict[int, float]:
    """rp -> the fastest simulated seconds over the space's other knobs at that rp."""
    space = SpadeSpace(op)
    machine = load_machine(space.machine_name)
    csr = load_matrix(str(path)).csr
    schedules = {
        (s.cp, s.barrier, s.bypass, s.split, s.dynamic)
        for s in (space.schedule(c) for c in space.all_configs())
    }
    out = {}
    for rp in rps:
        tilings = {}
        best = math.inf
        for cp, barrier, bypass, split, dynamic in sorted(schedules, key=str):
            if cp not in tilings:
                tilings[cp] = tile(csr, rp, cp)
            sched = Schedule(rp, cp, barrier, bypass, split, dynamic)
            best = min(best, simulate(csr, op, width, sched, machine, tilings[cp]).seconds)
        out[rp] = best
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path)
    parser.add_argument("--rp", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--limit", type=int, default=40, help="matrices, evenly spaced")
    args = parser.parse_args()
    files = [Path(line) for line in args.files.read_text().split() if line]
    step = max(1, len(files) // args.limit)
    files = files[::step][: args.limit]
    print(f"{len(files)} matrices, width {args.width}, rp {args.rp}")
    print("| op | rp | beats rp=16 (share) | best / best at rp=16, geomean | max |")
    print("|---|---|---|---|---|")
    for op in ("spmm", "sddmm"):
        results = [best_per_rp(f, op, args.width, sorted(set(args.rp) | {16})) for f in files]
        for rp in args.rp:
            if rp == 16:
                continue
            gains = [r[16] / r[rp] for r in results]
            wins = sum(g > 1.001 for g in gains)
            geo = math.exp(sum(math.log(g) for g in gains) / len(gains))
            print(f"| {op} | {rp} | {wins / len(gains):.0%} | {geo:.3f}x | {max(gains):.3f}x |")


if __name__ == "__main__":
    main()
