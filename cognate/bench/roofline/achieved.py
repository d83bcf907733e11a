"""Achieved / limit: the tuned pick, the baseline and MKL-IE, checked and block-timed, against
the bound."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from cognate.bench.roofline.bound import Pattern, spmm_bound, spmm_traffic
from cognate.bench.roofline.peaks import TERMS, Peaks
from cognate.errors import CognateError

# --- achieved / limit: the tuned pick, the baseline and MKL-IE, block-timed -------------------

KERNELS = ("tuned", "baseline", "mkl-ie")


def host_line(threads: int, mkl_path: str) -> str:
    """The header: CPU model, vector ISA, threads, OpenMP waits, MKL's code path."""
    from cognate.hostid import cpu_model
    from cognate.targets.cpu.isa import host_isa

    policy = os.environ.get("OMP_WAIT_POLICY", "")
    waits = f"OMP_WAIT_POLICY={policy}" if policy else "default (OMP_WAIT_POLICY unset)"
    return (
        f"host: {cpu_model()}; {host_isa().line()}; threads {threads}; OpenMP waits {waits};"
        f" MKL code path {mkl_path}"
    )


def mkl_path_now(threads: int) -> str:
    """MKL's code path in this process, after one tiny SpMM (the path is chosen at MKL's
    first call), or why MKL is not available."""
    from cognate.targets.cpu.measure import library

    try:
        call = library.mkl_spmm_call(sp.identity(4, dtype=np.float32, format="csr"),
                                     np.ones((4, 8), dtype=np.float32), threads)  # fmt: skip
        call.run()
    except CognateError as exc:
        return f"unavailable ({exc})"
    path = library.mkl_code_path()
    intel = os.environ.get(library.INTEL_PATH_ENV) == "1"
    vendor = library.cpu_vendor() or "unknown vendor"
    return f"{path} ({vendor}{', Intel path forced' if intel else ''})"


def _checked(prepared: dict, results: dict, csr: Any, b: np.ndarray, missing: dict) -> None:
    """Run each call once; drop (saying why) any whose result differs from scipy's float64."""
    from cognate.targets.cpu.measure.check import mismatch, reference

    ref, tol = reference(csr, "spmm", (b,))
    for name in list(prepared):
        try:
            prepared[name]()
            problem = mismatch(np.asarray(results[name]()), ref, 4 * tol)
        except CognateError as exc:
            problem = str(exc)
        if problem:
            missing[name] = f"result wrong: {problem}"
            del prepared[name]


def kernel_calls(
    matrix: Any, b: np.ndarray, threads: int, tune: bool = True, top_k: int = 5
) -> tuple[dict, dict, str]:
    """The checked calls of one (matrix, width): ``tuned`` (``cognate.tune(top_k, verify)``,
    then ``result.kernel(B, out=C)``), ``baseline`` (the cpu space's baseline config as a
    ``ScheduleKernel``) and ``mkl-ie`` (MKL's inspector-executor, handle built once); name ->
    why missing; the tuned pick in words."""
    import cognate
    from cognate.targets.cpu.measure import library
    from cognate.targets.cpu.space import make_space
    from cognate.targets.cpu.tuned import ScheduleKernel

    csr, width = matrix.csr, b.shape[1]
    outs = {name: np.empty((csr.shape[0], width), dtype=np.float32) for name in KERNELS}
    prepared: dict[str, Callable[[], object]] = {}
    missing: dict[str, str] = {}
    pick = "-"
    if tune:
        result = cognate.tune(matrix, width=width, top_k=top_k, verify=True, threads=threads)
        tuned = result.kernel
        prepared["tuned"] = lambda: tuned(b, out=outs["tuned"])
        pick = "baseline (kept)" if result.kept_baseline else result.best.description.split("|")[0]
    base = ScheduleKernel(matrix, "spmm", make_space("spmm").baseline(matrix.shape))
    prepared["baseline"] = lambda: base(b, out=outs["baseline"])
    try:
        mkl = library.mkl_spmm_call(csr, b, threads)
        prepared["mkl-ie"] = mkl.run
        outs["mkl-ie"] = mkl.result()
    except CognateError as exc:
        missing["mkl-ie"] = str(exc)
    results = {name: (lambda name=name: outs[name]) for name in KERNELS}
    _checked(prepared, results, csr, b, missing)
    return prepared, missing, pick.strip()


def measure_row(
    matrix: Any, width: int, peaks: Peaks, threads: int, rounds: int, tune: bool = True,
    top_k: int = 5, pattern: Pattern | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One row: the bound at ``peaks`` and each kernel's block-timed median with its
    achieved / limit (limit seconds / achieved seconds)."""
    from cognate.timing import time_blocks

    pattern = pattern or Pattern(matrix.csr)
    bound = spmm_bound(spmm_traffic(pattern, width, peaks.caches, threads), peaks)
    rng = np.random.default_rng(0)
    b = rng.uniform(-1, 1, (matrix.shape[1], width)).astype(np.float32)
    prepared, missing, pick = kernel_calls(matrix, b, threads, tune, top_k)
    seconds: dict[str, float] = {}
    spread: dict[str, float] = {}
    busy = False
    load_line = ""
    if prepared:
        timed, load = time_blocks(prepared, rounds, threads=threads)
        seconds = {name: t.median for name, t in timed.items()}
        spread = {name: t.spread / t.median for name, t in timed.items()}
        busy, load_line = load.busy, load.line()
    return {
        "matrix": matrix.name, "nnz": int(matrix.nnz), "shape": list(matrix.shape),
        "width": width, "limit_s": bound.limit_s, "binding": bound.binding,
        "bound": bound.as_dict(), "seconds": seconds, "spread": spread,
        "achieved_over_limit": {n: bound.limit_s / s for n, s in seconds.items()},
        "missing": missing, "pick": pick, "busy": busy, "load": load_line,
    }  # fmt: skip


ROW_HEADER = (
    f"{'matrix':<26}{'nnz':>9}{'N':>5}{'limit ms':>10} {'binds':<6}"
    f"{'tuned ms':>10}{'tuned %':>8}{'base ms':>10}{'base %':>8}{'mkl ms':>10}{'mkl %':>8}"
    "  tuned pick"
)


def format_row(row: dict[str, Any]) -> str:
    """One printed line of ``measure_row``'s row (``%``: limit time / achieved time)."""

    def cells(name: str) -> str:
        if name not in row["seconds"]:
            return f"{'-':>10}{'-':>8}"
        pct = 100 * row["achieved_over_limit"][name]
        return f"{row['seconds'][name] * 1e3:>10.3f}{pct:>7.1f}%"

    line = (
        f"{row['matrix'][:25]:<26}{row['nnz']:>9}{row['width']:>5}{row['limit_s'] * 1e3:>10.4f}"
        f" {row['binding']:<6}{cells('tuned')}{cells('baseline')}{cells('mkl-ie')}  {row['pick']}"
    )
    return line + (f"  [{row['load']}]" if row["busy"] else "")


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per width: the geomean achieved / limit of each kernel and which terms bind."""
    from cognate.stats import geomean

    out = []
    for width in sorted({r["width"] for r in rows}):
        mine = [r for r in rows if r["width"] == width]
        parts = []
        for name in KERNELS:
            found = [r["achieved_over_limit"][name] for r in mine if name in r["seconds"]]
            if found:
                parts.append(
                    f"{name} {100 * geomean(found):.1f}% (min {100 * min(found):.1f}%,"
                    f" max {100 * max(found):.1f}%)"
                )
        binds = [r["binding"] for r in mine]
        counts = ", ".join(f"{t} {binds.count(t)}" for t in TERMS if t in binds)
        out.append(
            f"N={width}: achieved / limit geomean over {len(mine)}: {'; '.join(parts) or '-'};"
            f" binding term: {counts}"
        )
    return out
