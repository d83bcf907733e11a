"""Collect every gpu config on a few matrices and tabulate best vs baseline vs cuSPARSE.

Run by scripts/gpu_check.sh on a CUDA machine (see docs/gpu.md). For each op and matrix:
the whole space (baseline first) through GpuRunner, which checks each config against scipy
before timing it with CUDA events, and times cuSPARSE (torch.sparse) in the same batch.
Writes OUT/gpu_check.csv (one row per measurement) and OUT/gpu_check.md (the table), and
prints the table. Stops starting new batches once --budget-s is spent, and says so.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from cognate.errors import CognateError
from cognate.matrix import Matrix, canonicalize
from cognate.targets.gpu.runner import GpuRunner
from cognate.targets.gpu.space import GpuSpace

CHUNK = 36  # configs per measure() call: the budget is checked between chunks


def load(path: Path) -> Matrix:
    """cognate's reader; scipy's where fast_matrix_market is missing (a bare GPU image)."""
    try:
        from cognate.formats.read import load_matrix
    except ImportError:
        return _load_without_cognate_io(path)
    return load_matrix(path)


def _load_without_cognate_io(path: Path) -> Matrix:
    name = path.name
    if name.endswith(".csr"):  # WACO: int32 nrow, ncol, nnz, rowptr, colidx; pattern
        raw = np.fromfile(path, dtype="<i4")
        rows, cols, nnz = (int(v) for v in raw[:3])
        indptr, indices = raw[3 : 4 + rows], raw[4 + rows : 4 + rows + nnz]
        csr = sp.csr_matrix((np.ones(nnz, np.float32), indices, indptr), shape=(rows, cols))
    elif name.endswith(".npz"):
        csr = sp.load_npz(path)
    else:
        import scipy.io

        csr = sp.csr_matrix(scipy.io.mmread(path))
        csr = csr.real if np.iscomplexobj(csr.data) else csr
    return Matrix(name.split(".")[0], canonicalize(csr), source=str(path))


def synthetic(nnz: int) -> Matrix:
    """A power-law (R-MAT) square matrix with about ``nnz`` nonzeros: skewed rows."""
    side = 1 << max(10, int(np.ceil(np.log2(nnz / 8))))
    try:
        from cognate.synth import generate

        return generate("rmat", side, side, nnz=nnz, seed=0)
    except ImportError:
        a = sp.random(side, side, density=nnz / side / side, random_state=0, dtype=np.float32)
        return Matrix(f"uniform_{side}x{side}_seed0", canonicalize(a), source="scipy.sparse.random")


def warm_compile_cache(args: argparse.Namespace) -> None:
    """Compile every config in parallel processes before timing anything.

    Triton compiles a kernel per config (about 0.3-0.5 s each, 648 here) and keeps it in
    its on-disk cache, keyed by source, options and the arguments' specialization. Each
    worker runs its share of the space on a tiny matrix at the same width (so the same
    keys), which fills that cache; the timed collection then only loads kernels. Best
    effort: on any failure the collection compiles lazily instead.
    """
    n = args.compile_jobs
    jobs = [(op, i, n, args.width, args.device) for op in args.ops.split(",") for i in range(n)]
    start = time.monotonic()
    context = multiprocessing.get_context("spawn")
    try:
        with context.Pool(args.compile_jobs) as pool:
            counts = pool.starmap(_warm_share, jobs)
    except Exception as exc:  # noqa: BLE001 - best effort
        print(f"warm-up failed ({type(exc).__name__}: {exc}); compiling lazily", flush=True)
        return
    total: dict[str, int] = {}
    for count in counts:
        for status, n in count.items():
            total[status] = total.get(status, 0) + n
    print(f"warm-up: {total} in {time.monotonic() - start:.0f} s", flush=True)


def _warm_share(op: str, share: int, shares: int, width: int, device: str) -> dict[str, int]:
    space = GpuSpace(op)
    configs = space.all_configs()[share::shares]
    if device == "cpu":
        configs = configs[:1]
    rng = np.random.default_rng(share)
    a = sp.random(64, 256, density=0.05, random_state=rng, dtype=np.float32, format="lil")
    a[0, :] = 1.0  # one dense row, so the nnz split's fix-up kernel is compiled too
    tiny = Matrix("warm", canonicalize(a))
    runner = GpuRunner(device=device, repeats=1, warmups=0, timeout_s=60.0)
    counts: dict[str, int] = {}
    for m in runner.measure(tiny, op, width, configs):
        counts[m.status] = counts.get(m.status, 0) + 1
    return counts


def main() -> int:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    if args.compile_jobs > 0:
        warm_compile_cache(args)
    matrices = [load(p) for p in args.matrices] + [synthetic(args.synthetic_nnz)]
    runner = GpuRunner(device=args.device, repeats=args.repeats, timeout_s=args.timeout_s)
    rows: list[dict] = []
    skipped: list[str] = []
    for op in args.ops.split(","):
        space = GpuSpace(op)
        for matrix in matrices:
            baseline = space.baseline(matrix.shape)
            configs = [baseline] + [c for c in space.all_configs() if c != baseline]
            configs = configs[: args.max_configs]
            done = measure(runner, matrix, op, args.width, configs, deadline, rows)
            print(f"{op} {matrix.name}: {done}/{len(configs)} configs", flush=True)
            if done < len(configs):
                skipped.append(f"{op} {matrix.name}: {len(configs) - done} configs not measured")
    write_csv(args.out / "gpu_check.csv", rows)
    table = summarize(rows, args.width, skipped)
    (args.out / "gpu_check.md").write_text(table)
    print(table)
    return 0


def measure(runner, matrix, op, width, configs, deadline, rows) -> int:
    done = 0
    for start in range(0, len(configs), CHUNK):
        if time.monotonic() > deadline:
            break
        for m in runner.measure(matrix, op, width, configs[start : start + CHUNK]):
            rows.append(
                {
                    "op": op,
                    "matrix": matrix.name,
                    "shape": f"{matrix.shape[0]}x{matrix.shape[1]}",
                    "nnz": matrix.nnz,
                    "config": m.config.json,
                    "status": m.status,
                    "runtime_s": m.runtime_s,
                    "spread_s": m.spread_s,
                    "library_s": m.counters.get("library_s"),
                    "error": m.error or m.counters.get("library_error") or "",
                }
            )
            done += 1
    return done


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        path.write_text("")
        return
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def summarize(rows: list[dict], width: int, skipped: list[str]) -> str:
    lines = [
        f"dense width {width}; times are medians (ms); speedups are baseline / best and "
        "cuSPARSE / best",
        "",
        "| op | matrix | shape | nnz | ok / measured | baseline ms | best ms | cuSPARSE ms "
        "| best vs baseline | best vs cuSPARSE | best config |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["op"], r["matrix"]) for r in rows}, key=lambda k: (k[0] != "spmm", k))
    for op, name in keys:
        group = [r for r in rows if r["op"] == op and r["matrix"] == name]
        ok = [r for r in group if r["status"] == "ok"]
        base = group[0]["runtime_s"] if group[0]["status"] == "ok" else None  # baseline first
        best = min(ok, key=lambda r: r["runtime_s"]) if ok else None
        lib = group[0]["library_s"]
        cells = [
            op, name, group[0]["shape"], str(group[0]["nnz"]), f"{len(ok)} / {len(group)}",
            _ms(base), _ms(best and best["runtime_s"]), _ms(lib),
            _ratio(base, best and best["runtime_s"]), _ratio(lib, best and best["runtime_s"]),
            f"`{best['config']}`" if best else "-",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    failures = sorted({r["error"] for r in rows if r["status"] != "ok" and r["error"]})
    lines += ["", f"statuses: {_status_counts(rows)}"]
    lines += [f"- not measured (budget): {s}" for s in skipped]
    lines += [f"- failure: {e}" for e in failures[:10]]
    return "\n".join(lines) + "\n"


def _status_counts(rows: list[dict]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.4f}" if seconds else "-"


def _ratio(slow: float | None, fast: float | None) -> str:
    return f"{slow / fast:.2f}x" if slow and fast else "-"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrices", type=Path, nargs="*", help="matrix files")
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument("--ops", default="spmm,sddmm")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--timeout-s", type=float, default=1.0, help="per config run")
    parser.add_argument("--synthetic-nnz", type=int, default=1_000_000)
    parser.add_argument("--budget-s", type=float, default=330.0)
    parser.add_argument("--compile-jobs", type=int, default=8, help="0: compile lazily")
    # For smoke-testing this script without a GPU (TRITON_INTERPRET=1, tiny inputs):
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--max-configs", type=int, default=None)
    return parser.parse_args()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CognateError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        sys.exit(1)
