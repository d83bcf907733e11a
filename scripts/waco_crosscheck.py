"""Time WACO's own SuperSchedules on this machine and rank-correlate them with WACO's runtimes.

For every matrix that has both a .csr in shared/matrices/waco and peer runtimes in
shared/peers/waco/<op>/, each peer line's config is measured here with the isolated
CpuRunner and the Spearman rank correlation (scipy.stats) with the peer's runtimes is
printed. Different machines (WACO: 48-thread Xeon), so this is a report, not a pass mark:
a negative value is worth a look. Configs that time out here rank as slowest.

    python scripts/waco_crosscheck.py                  # all matrices and lines, width 256
    python scripts/waco_crosscheck.py --configs 30 --width 64 --timeout 2
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy.stats import spearmanr

from cognate.formats.read import load_matrix
from cognate.paths import shared_dir
from cognate.targets.cpu.measure.runner import CpuRunner
from cognate.targets.cpu.waco import WACO_WIDTH, peer_files, read_peer_file

console = Console(width=160)


def crosscheck(args: argparse.Namespace) -> list[tuple]:
    """One row per (op, matrix): counts and Spearman correlations."""
    matrices = shared_dir() / "matrices" / "waco"
    rows = []
    for peer in peer_files(shared_dir() / "peers" / "waco"):
        csr_path = matrices / f"{peer.matrix}.csr"
        if not csr_path.is_file() or (args.ops and peer.op not in args.ops):
            continue
        lines = read_peer_file(peer.path, peer.op)[: args.configs or None]
        matrix = load_matrix(csr_path)
        runner = CpuRunner(repeats=args.repeats, warmup=1, timeout_s=args.timeout)
        try:
            results = runner.measure(matrix, peer.op, args.width, [line.config for line in lines])
        finally:
            runner.close()
        peer_s = np.asarray([line.runtime_s for line in lines])
        ours = np.asarray([m.runtime_s if m.status == "ok" else math.inf for m in results])
        statuses = [m.status for m in results]
        both = np.isfinite(ours)
        rho_ok = spearmanr(peer_s[both], ours[both]).statistic if both.sum() > 2 else math.nan
        # Timeouts rank last (spearmanr ranks inf above every finite value; ties share ranks).
        timed = np.asarray([s in ("ok", "timeout") for s in statuses])
        rho_all = spearmanr(peer_s[timed], ours[timed]).statistic if timed.sum() > 2 else math.nan
        counts = {s: statuses.count(s) for s in ("ok", "timeout", "too_large", "error")}
        errors = {m.error for m in results if m.status == "error"}
        for error in sorted(errors)[:3]:
            console.print(f"{peer.op} {peer.matrix}: error: {error}")
        rows.append((peer.op, peer.matrix, len(lines), counts, rho_ok, rho_all))
        console.print(
            f"{peer.op} {peer.matrix}: {len(lines)} configs {counts}"
            f" spearman(ok) {rho_ok:.3f} spearman(ok+timeouts last) {rho_all:.3f}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--width", type=int, default=WACO_WIDTH, help="dense width (WACO: 256)")
    parser.add_argument("--configs", type=int, default=0, help="first N lines per file (0: all)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per kernel run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ops", nargs="*", choices=["spmm", "sddmm"])
    args = parser.parse_args()
    rows = crosscheck(args)
    table = Table(title=f"WACO configs timed here (width {args.width}) vs WACO's Xeon runtimes")
    for col in ("op", "matrix", "configs", "ok", "timeout", "too_large", "error"):
        table.add_column(col)
    table.add_column("Spearman (ok)", justify="right")
    table.add_column("Spearman (timeouts last)", justify="right")
    for op, name, n, counts, rho_ok, rho_all in rows:
        table.add_row(
            op,
            name,
            str(n),
            *(str(counts[s]) for s in ("ok", "timeout", "too_large", "error")),
            f"{rho_ok:.3f}",
            f"{rho_all:.3f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
