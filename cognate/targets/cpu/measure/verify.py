"""``tune --verify`` on cpu: the candidates, the baseline and the library references timed
in interleaved rounds in one fresh process (measure/interleave.py), with the
isolated runner as the fallback when that process fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.runner import Measurement, ProgressFn
from cognate.targets import Target, Verification


def interleaved_verify(
    matrix: Matrix,
    op: str,
    width: int,
    configs: Sequence[Config],
    threads: int | None = None,
    library: bool = True,
    timeout_s: float = 1800.0,
    progress: bool = False,
    libraries: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    baseline: Config | None = None,
) -> dict[str, Any]:
    """Check and time ``configs`` (and the library references) in interleaved rounds in
    one fresh process; its outcome as a dict.

    Its own process: a crashing kernel cannot take the caller down, and the OpenMP / MKL / torch
    thread counts are set before any runtime starts. Raises CognateError when it fails.
    ``progress``: the process writes a line on stderr per config checked and per round timed.
    ``libraries``: only these references (None: all); ``env``: set in the process's
    environment (e.g. MKL's code path, which is fixed when MKL loads). ``baseline``: the
    config a pick must beat (one of ``configs``), re-timed head to head with the fastest when
    the fastest's lead is within their spreads (interleave.contenders).
    """
    from cognate.targets.cpu.measure.interleave import save_job_matrix

    with tempfile.TemporaryDirectory(prefix="cognate-verify-") as tmp:
        job = {
            "npz": str(Path(tmp) / "a.npz"),
            "out": str(Path(tmp) / "outcome.json"),
            "op": op,
            "width": int(width),
            "threads": threads,
            "library": library,
            "progress": progress,
            "libraries": None if libraries is None else list(libraries),
            "configs": [{"key": c.hash, "knobs": dict(c.knobs)} for c in configs],
            "baseline": None if baseline is None else baseline.hash,
        }
        save_job_matrix(matrix, Path(job["npz"]))
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        main_thread = threading.current_thread() is threading.main_thread()
        cmd = [
            sys.executable,
            "-m",
            "cognate.targets.cpu.measure.interleave",
            str(Path(tmp) / "job.json"),
            str(os.getpid()),
            str(int(main_thread)),  # the parent-death signal fires when this thread ends
        ]
        # stderr passes through: the job's lines there are "waiting for the timing lock" and,
        # with ``progress``, its progress (its failures come back in the outcome file).
        # Its own process group: a terminal's Ctrl-C reaches only this process, whose
        # KeyboardInterrupt kills the job (subprocess.run does) and prints one line; the job
        # dies with this process too (cognate.lifetime), so it is never left running.
        try:
            done = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                timeout=timeout_s,
                env={**_thread_env(threads), **(env or {})},
                process_group=0,
            )
        except subprocess.TimeoutExpired:
            raise CognateError(f"interleaved verify took over {timeout_s:g} s") from None
        out = Path(job["out"])
        if not out.is_file():
            code = done.returncode
            why = f"signal {-code}" if code < 0 else f"exit code {code}"
            raise CognateError(f"interleaved verify process died ({why})")
        outcome = json.loads(out.read_text())
        if "failed" in outcome:
            raise CognateError(f"interleaved verify failed: {outcome['failed']}")
        return outcome


def _thread_env(threads: int | None) -> dict[str, str]:
    """The verify process's environment: the caller's, with its thread count. The OpenMP
    wait policy stays the caller's (by default libgomp spins briefly, then sleeps): the
    candidates are timed as the user's own loop will run them, not under a policy that makes
    every 2-thread call pay a thread wake (docs/architecture.md, Facts measured here)."""
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(int(threads))
    return env


def verify(
    target: Target,
    matrix: Matrix,
    op: str,
    width: int,
    configs: Sequence[Config],
    progress: ProgressFn | None,
    runner_options: dict[str, Any] | None,
    threads: int | None,
    baseline: Config | None = None,
) -> Verification:
    """Interleaved rounds of the configs and the library references in one process; if that
    process fails, the configs one by one with the isolated cpu runner (no library)."""
    try:
        outcome = interleaved_verify(
            matrix, op, width, configs, threads, progress=progress is not None,
            baseline=baseline,
        )  # fmt: skip
    except CognateError as exc:
        return _sequential(
            target, matrix, op, width, configs, progress, runner_options, threads, exc
        )
    load = outcome["load"]
    timing = outcome.get("timing", "interleaved")
    found = Verification([], timing, load, list(outcome["remeasured"]))
    found.checked = outcome.get("checked")
    _take_library(found, outcome)
    if op == "spmm" and "mkl-ie" in found.libraries:
        _intel_path_reference(found, matrix, width, threads)
    for config in configs:
        got = outcome["configs"][config.hash]
        counters = {"verify": timing, "rounds": got.get("rounds"), "load": load}
        counters["remeasured"] = config.hash in found.remeasured
        m = Measurement(
            config, got["status"], got.get("runtime_s"), got.get("spread_s"), counters,
            got.get("error"), range_s=got.get("range_s"),
        )  # fmt: skip
        found.measurements.append(m)
        if progress is not None:
            progress(m)
    return found


def _sequential(
    target: Target,
    matrix: Matrix,
    op: str,
    width: int,
    configs: Sequence[Config],
    progress: ProgressFn | None,
    runner_options: dict[str, Any] | None,
    threads: int | None,
    why: CognateError,
) -> Verification:
    from cognate.timing import machine_load

    load = machine_load(threads)
    load_info = {**load.as_dict(), "line": load.line()}
    found = target.measure(matrix, op, width, configs, progress, runner_options)
    for m in found:
        m.counters.update(verify="sequential", load=load_info)
    return Verification(found, "sequential", load_info, library_error=f"{why}; library not timed")


INTEL_PATH = "mkl-ie, Intel path"


def _intel_path_reference(
    found: Verification, matrix: Matrix, width: int, threads: int | None
) -> None:
    """On a CPU not made by Intel, MKL runs its generic code unless made to take its Intel
    path (library.py, ``INTEL_PATH_ENV``): that, the strongest MKL here, is timed in a
    second process (a process runs one MKL path) as its own labelled reference."""
    from cognate.targets.cpu.measure.library import INTEL_PATH_ENV, intel_path_differs

    if not intel_path_differs():
        return
    try:
        outcome = interleaved_verify(
            matrix, "spmm", width, [], threads, libraries=["mkl-ie"], env={INTEL_PATH_ENV: "1"}
        )
    except CognateError as exc:
        found.library_error = "; ".join(filter(None, [found.library_error, f"{INTEL_PATH}: {exc}"]))
        return
    entry = outcome["library"].get("mkl-ie") or {}
    if entry.get("runtime_s"):
        found.libraries[INTEL_PATH] = {
            k: entry.get(k) for k in ("runtime_s", "spread_s", "inspect_s", "code_path")
        }


def _take_library(found: Verification, outcome: dict[str, Any]) -> None:
    """The library times of a verify outcome: all of them kept (the caller reports the
    fastest as `library`)."""
    found.libraries = {
        name: {k: v.get(k) for k in ("runtime_s", "spread_s", "inspect_s", "code_path")}
        for name, v in outcome["library"].items()
        if v.get("runtime_s")
    }
    missing = outcome.get("library_missing") or {}
    if missing:
        found.library_error = "; ".join(f"{name}: {why}" for name, why in missing.items())
