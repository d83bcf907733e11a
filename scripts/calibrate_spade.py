"""Calibrate the spade simulator against HotTiles' SST simulation of SPADE PEs.

Builds the three HotTiles matrices a generator can make (cognate.synth.published:
mycielskian17 exactly, delaunay_n22 and kron_g500-logn19 in distribution), simulates SpMM
at K = 32 on the calibration machine (configs/spade-hottiles.yaml) with HotTiles' schedule
(untiled row-ordered traversal in 64-row chunks handed to the PEs, A and Dout through the
bypass buffer, Din through L1), and prints simulated ms, DRAM lines per nonzero, GFLOP/s
and GB/s beside HotTiles' ColdOnly numbers (Table VI; Table VII geomeans at system scale 4).

    python scripts/calibrate_spade.py [--cache DIR] [--only mycielskian17] [--manifest PATH]

Built matrices are kept in DIR (default COGNATE_HOME/published) as .npz; their sha256 must
match scripts/calibrate_spade.manifest.json (written with --manifest).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.paths import REPO_ROOT, cognate_home
from cognate.stats import geomean
from cognate.synth.published import DELAUNAY_NUMBERINGS, PUBLISHED_MATRICES, published_matrix
from cognate.targets.spade.simulator import Schedule, load_machine, simulate

MACHINE = "spade-hottiles"
WIDTH = 32  # HotTiles' K
SCHEDULE = Schedule(rp=64, cp=None, barrier=False, bypass=True, split=1, dynamic=True)
SEED = 0
MANIFEST = REPO_ROOT / "scripts" / "calibrate_spade.manifest.json"
# HotTiles Table VI, ColdOnly at system scale 4 (ms); Table VII geomeans over its 10 matrices.
PUBLISHED_MS = {"mycielskian17": 108.6, "delaunay_n22": 20.8, "kron_g500-logn19": 37.9}
PUBLISHED_LINES_PER_NNZ = 1.60
PUBLISHED_GBS = 132.28
PUBLISHED_GFLOPS = 129.58
LINE = 64


def build(name: str, cache: Path, numbering: str = "drawn") -> Matrix:
    """The published matrix ``name``, from the cache when its .npz is there."""
    variant = f"_{numbering}" if name == "delaunay_n22" and numbering != "drawn" else ""
    path = cache / f"{name}_seed{SEED}{variant}.npz"
    if path.is_file():
        return Matrix(name, sp.load_npz(path).tocsr(), source=str(path))
    started = time.perf_counter()
    matrix = published_matrix(name, seed=SEED, numbering=numbering)
    print(f"built {name} in {time.perf_counter() - started:.1f} s", flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    sp.save_npz(path, matrix.csr, compressed=False)
    return Matrix(name, matrix.csr, source=str(path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=cognate_home() / "published")
    parser.add_argument("--only", choices=sorted(PUBLISHED_MATRICES), action="append")
    parser.add_argument("--manifest", action="store_true", help=f"write {MANIFEST.name}")
    parser.add_argument("--machine", default=MACHINE, help="machine YAML under configs/")
    parser.add_argument(
        "--delaunay-numbering",
        choices=DELAUNAY_NUMBERINGS,
        default="drawn",
        help="vertex numbering of delaunay_n22 (a sensitivity check; the manifest is drawn's)",
    )
    args = parser.parse_args(argv)
    machine = load_machine(args.machine)
    expected = json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}
    names = args.only or list(PUBLISHED_MS)
    print(f"machine configs/{args.machine}.yaml, schedule {SCHEDULE}, K={WIDTH}")
    header = (
        f"{'matrix':18s} {'nnz':>11s} {'sim ms':>8s} {'HotTiles':>8s} {'ratio':>6s} "
        f"{'lines/nnz':>9s} {'GFLOP/s':>8s} {'GB/s':>6s} {'L1 hit':>6s} {'wall s':>6s}"
    )
    print(header)
    rows, manifest, mismatched = [], {}, []
    for name in names:
        matrix = build(name, args.cache, args.delaunay_numbering)
        digest = matrix.sha256
        if name == "delaunay_n22" and args.delaunay_numbering != "drawn":
            name = f"{name} ({args.delaunay_numbering})"  # a variant: not in the manifest
        else:
            entry = {"seed": SEED, "shape": list(matrix.shape), "nnz": matrix.nnz}
            manifest[name] = {**entry, "sha256": digest}
            if name in expected and expected[name]["sha256"] != digest:
                mismatched.append(name)
        started = time.perf_counter()
        sim = simulate(matrix.csr, "spmm", WIDTH, SCHEDULE, machine)
        wall = time.perf_counter() - started
        c = sim.counters
        dram = c["dram_read_bytes"] + c["dram_write_bytes"]
        lines = dram / LINE / matrix.nnz
        gflops = 2 * WIDTH * matrix.nnz / sim.seconds / 1e9
        hit = c["l1_hits"] / max(1.0, c["l1_hits"] + c["l1_misses"])
        ms, ref = sim.seconds * 1e3, PUBLISHED_MS[name.split()[0]]
        rows.append((ms / ref, lines, gflops, dram / sim.seconds / 1e9))
        print(
            f"{name:18s} {matrix.nnz:11d} {ms:8.1f} {ref:8.1f} {ms / ref:6.2f} {lines:9.2f} "
            f"{gflops:8.1f} {dram / sim.seconds / 1e9:6.1f} {hit:6.3f} {wall:6.1f}",
            flush=True,
        )
    ratios, lines, gflops, gbs = zip(*rows, strict=True)
    print(
        f"{'geomean':18s} {'':11s} {'':8s} {'':8s} {geomean(ratios):6.2f} {geomean(lines):9.2f} "
        f"{geomean(gflops):8.1f} {geomean(gbs):6.1f}"
    )
    print(
        f"HotTiles ColdOnly geomean over its 10 matrices: {PUBLISHED_LINES_PER_NNZ} lines/nnz, "
        f"{PUBLISHED_GFLOPS} GFLOP/s, {PUBLISHED_GBS} GB/s"
    )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak memory {rss:.1f} GiB")
    if args.manifest:
        MANIFEST.write_text(json.dumps({**expected, **manifest}, indent=2) + "\n")
        print(f"wrote {MANIFEST}")
    if mismatched:
        print(f"sha256 differs from {MANIFEST.name}: {', '.join(mismatched)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CognateError as exc:  # bad input: one line, no traceback
        sys.exit(f"error: {exc}")
