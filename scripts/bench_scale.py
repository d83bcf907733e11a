"""The user path on large generated graphs: wall time and peak RSS per step, and the tuned
SpMM against MKL's inspector-executor, at 10^6..10^8 nonzeros.

Each step runs in its own child process (``--step``), which reports its own wall time and
peak RSS (``resource.getrusage``) and the RSS once the matrix is loaded, so "beyond the
CSR" is the difference. Steps:

- read: ``load_matrix`` (.npz; the .mtx reader is fast_matrix_market's threaded one)
- info: ``data info``'s statistics (``matrix_stats``)
- rank: the cost model's ranking alone (featurize + draw + encode + score)
- tune: ``cognate.tune`` without ``--verify`` (the ranking plus the target's runnable
  checks, on cpu a size check from row and column statistics, no packing)
- verify: ``cognate.tune(..., verify=True)``
- spmm: the rank-only pick's ``result.kernel(B, out=C)`` against MKL-IE (handle created
  and optimized once, default OpenMP waits), both checked on a sample of rows against a
  float64 scipy reference, then each timed in its own block of calls after a >= 0.25 s
  lead-in; medians with their spread.

Graphs are generated once (``cognate data synth``) into ``--cache`` (default
$COGNATE_HOME/scale or /tmp/cognate-scale), never into the repository. Time on a quiet
machine (nothing else running: on 2 busy cores 2-thread kernels slow 10-40x):

    python scripts/bench_scale.py --graphs powerlaw:1000000 \\
        powerlaw:10000000 --steps read info rank tune spmm --widths 32 128

The last lines print each step's log-log slope of wall time against nnz. Host: AMD Zen 4,
AVX-512 (the only host measured).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

STEPS = ("read", "info", "rank", "tune", "verify", "spmm")
CHECK_ROWS = 4096  # rows of the result checked against the float64 reference


def cache_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    home = os.environ.get("COGNATE_HOME")
    return Path(home) / "scale" if home else Path("/tmp/cognate-scale")


PUBLISHED = ("mycielskian", "delaunay", "kron-g500")  # sized by --order alone


def graph_path(cache: Path, spec: str) -> tuple[Path, list[str]]:
    """``kind:nnz[:degree or base]`` or ``published:order`` -> its cached file and the
    ``data synth`` arguments (e.g. powerlaw:10000000, kron:10000000:rajat19.mtx.gz,
    mycielskian:17 = the exact mycielskian17)."""
    kind, size, *rest = spec.split(":")
    if kind in PUBLISHED:
        return cache / f"{kind}{size}.npz", [kind, "--order", size]
    args = [kind, "--nnz", size, "--seed", "1"]
    name = f"{kind}-{size}"
    if rest:
        args += ["--degree", rest[0]] if kind == "powerlaw" else ["--base", rest[0]]
        name = f"{kind}{Path(rest[0]).name.split('.')[0]}-{size}"
    return cache / f"{name}.npz", args


def rss_mb() -> float:
    """Peak RSS of this process or of any child it waited for (tune --verify's job)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# --- child: one step ---------------------------------------------------------------------


def run_step(step: str, path: Path, width: int, rounds: int) -> dict:
    from cognate.formats.read import load_matrix

    start = time.perf_counter()
    matrix = load_matrix(path)
    out: dict = {"load_s": time.perf_counter() - start, "loaded_mb": current_rss_mb()}
    out["nnz"] = int(matrix.nnz)
    start = time.perf_counter()
    if step == "info":
        from cognate.matrix_stats import matrix_stats

        matrix_stats(matrix)
    elif step == "rank":
        from cognate.search.rank import rank
        from cognate.search.tune import _cost_model
        from cognate.targets import get_target

        space = get_target("cpu").space("spmm")
        model = _cost_model(None, space)
        start = time.perf_counter()
        _, timings = rank(model, space, matrix, width)
        out["featurize_s"] = timings.featurize_s
    elif step in ("tune", "verify"):
        import cognate

        result = cognate.tune(matrix, width=width, verify=step == "verify")
        out["pick"] = result.config.hash[:12]
        if step == "verify":
            out["checked"], out["timing"] = result.checked, result.timing
        out["filter_s"] = result.timings.filter_s
        out["featurize_s"] = result.timings.featurize_s
    elif step == "spmm":
        out.update(spmm_vs_mkl(matrix, width, rounds))
    out["step_s"] = time.perf_counter() - start if step != "read" else out["load_s"]
    out["peak_mb"] = rss_mb()
    return out


def spmm_vs_mkl(matrix, width: int, rounds: int) -> dict:
    """The rank-only pick's ``result.kernel(B, out=C)`` against MKL-IE (handle created, hinted
    and optimized once, default OpenMP waits), both checked against float64 scipy on a fixed
    sample of rows, then timed in rounds where each library runs its own block of calls
    after at least 0.25 s of its own untimed calls (another runtime's threads stop spinning)."""
    import cognate
    from cognate.targets.cpu.measure import library
    from cognate.targets.cpu.measure.check import Reference, sample_rows
    from cognate.timing import LEAD_IN_S, blocks, timing_lock

    start = time.perf_counter()
    result = cognate.tune(matrix, width=width)
    tune_s = time.perf_counter() - start
    csr = matrix.csr
    b = np.random.default_rng(0).uniform(-1, 1, (csr.shape[1], width)).astype(np.float32)
    c = np.empty((csr.shape[0], width), dtype=np.float32)
    start = time.perf_counter()
    kernel = result.kernel
    kernel(b, out=c)
    first_s = time.perf_counter() - start
    ref = Reference(csr, "spmm", (b,), sample_rows(csr))
    problem = ref.check(c)
    if problem:
        raise SystemExit(f"tuned result wrong: {problem}")
    mkl = library.mkl_spmm_call(csr, b)
    mkl.run()
    problem = ref.check(mkl.result(), slack=4.0)
    if problem:
        raise SystemExit(f"mkl result wrong: {problem}")
    calls = {"tuned": lambda: kernel(b, out=c), "mkl": mkl.run}
    with timing_lock():
        timed = blocks(calls, rounds, lead_in_s=LEAD_IN_S, runtime=lambda name: name)
    med = {name: t.median for name, t in timed.items()}
    return {
        "tune_s": tune_s,
        "build_and_first_call_s": first_s,
        "mkl_inspect_s": mkl.inspect_s,
        "tuned_ms": med["tuned"] * 1e3,
        "mkl_ms": med["mkl"] * 1e3,
        "mkl/tuned": med["mkl"] / med["tuned"],
        "tuned_iqr_ms": timed["tuned"].spread * 1e3,
        "mkl_iqr_ms": timed["mkl"].spread * 1e3,
        "rounds": rounds,
        "pick": result.config.hash[:12],
        "pick_family": result.config.knobs.get("family", "csr"),
    }


# --- parent ------------------------------------------------------------------------------


def ensure_graph(cache: Path, spec: str) -> Path:
    path, args = graph_path(cache, spec)
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "cognate", "data", "synth", *args, "-o", str(path)]
        subprocess.run(cmd, check=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"generate {spec}: {time.perf_counter() - start:.1f} s, peak {peak:.0f} MB")
    return path


def child(step: str, path: Path, width: int, rounds: int, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--step", step, "--matrix", str(path)]
    cmd += ["--width", str(width), "--rounds", str(rounds)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    wall = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {proc.returncode}: {tail[:160]}", "wall_s": wall}
    out = json.loads(lines[-1])
    out["wall_s"] = wall
    return out


def slope(points: list[tuple[int, float]]) -> float | None:
    points = [(n, t) for n, t in points if t and t > 0]
    if len({n for n, _ in points}) < 2:
        return None
    x, y = np.log10([p[0] for p in points]), np.log10([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", nargs="+", default=["powerlaw:1000000", "powerlaw:10000000"])
    parser.add_argument("--steps", nargs="+", default=["read", "info", "rank", "tune", "spmm"])
    parser.add_argument("--widths", nargs="+", type=int, default=[32, 128])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cache")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", help="append the rows to this JSON list (slopes over all)")
    parser.add_argument("--plot", help="write the log-log lines of time vs nnz to this png")
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)
    parser.add_argument("--matrix", help=argparse.SUPPRESS)
    parser.add_argument("--width", type=int, default=128, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(run_step(args.step, Path(args.matrix), args.width, args.rounds)))
        return
    cache = cache_dir(args.cache)
    print("host: AMD EPYC Zen 4, AVX-512, 2 cores; times are wall seconds, RSS in MB")
    rows: list[dict] = []
    for spec in args.graphs:
        path = ensure_graph(cache, spec)
        for step in args.steps:
            widths = args.widths if step in ("spmm", "verify") else [args.widths[-1]]
            if step in ("read", "info"):
                widths = [0]
            for width in widths:
                out = child(step, path, width, args.rounds, args.timeout)
                out.update(graph=spec, step=step, width=width)
                rows.append(out)
                print(line(out), flush=True)
    if args.json:
        previous = json.loads(Path(args.json).read_text()) if Path(args.json).exists() else []
        Path(args.json).write_text(json.dumps(previous + rows, indent=1))
        rows = previous + rows  # slopes over every size measured so far
    print_slopes(rows, args.plot)


def print_slopes(rows: list[dict], plot: str | None = None) -> None:
    """Each (graph kind, step, width)'s log-log slope of time against nnz (1 = linear)."""
    print("log-log slope of each step's time against nnz (1 = linear):")
    series: dict[tuple[str, str, int], list[tuple[int, float]]] = {}
    for r in rows:
        if "error" in r or "nnz" not in r:
            continue
        kind = r["graph"].split(":")[0]
        series.setdefault((kind, r["step"], r["width"]), []).append((r["nnz"], r["step_s"]))
    for (kind, step, width), pts in sorted(series.items()):
        s = slope(pts)
        sizes = ", ".join(f"{n:.0e}" for n, _ in sorted(pts))
        text = f"{s:.2f}" if s is not None else "-"
        print(f"  {kind:<12} {step:<7} N={width:<4} {text}  ({sizes})")
    if plot:
        _plot(series, plot)


def _plot(series: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for (kind, step, width), pts in sorted(series.items()):
        if len(pts) < 2:
            continue
        pts = sorted(pts)
        label = f"{kind} {step}" + (f" N={width}" if width else "")
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xlabel("nonzeros")
    ax.set_ylabel("wall seconds (AMD Zen 4, AVX-512, 2 cores)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def line(r: dict) -> str:
    head = f"{r['graph']:<22} {r['step']:<7} N={r['width']:<4}"
    head += f" nnz {r['nnz']:>11,}" if "nnz" in r else ""
    if "error" in r:
        return f"{head} FAILED: {r['error']}"
    text = (
        f"{head} step {r['step_s']:8.2f} s  child {r['wall_s']:7.1f} s  peak {r['peak_mb']:7.0f} MB"
        f"  loaded {r['loaded_mb']:6.0f} MB  beyond {r['peak_mb'] - r['loaded_mb']:6.0f} MB"
    )
    for key in ("featurize_s", "filter_s"):
        if key in r:
            text += f"  {key} {r[key]:.2f}"
    if r.get("checked"):
        text += f"  checked {r['checked']}; timed {r.get('timing')}"
    if "mkl/tuned" in r:
        text += (
            f"  tuned {r['tuned_ms']:.1f} (iqr {r['tuned_iqr_ms']:.1f}) ms"
            f"  mkl {r['mkl_ms']:.1f} (iqr {r['mkl_iqr_ms']:.1f}) ms  mkl/tuned"
            f" {r['mkl/tuned']:.2f}  (tune {r['tune_s']:.1f} s, mkl inspect {r['mkl_inspect_s']:.1f} s,"
            f" pick {r['pick_family']}, {r['rounds']} rounds)"
        )
    return text


if __name__ == "__main__":
    main()
    sys.stdout.flush()
