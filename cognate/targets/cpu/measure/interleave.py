"""The tune --verify job: candidates, baseline and library references checked against scipy,
then timed in interleaved rounds (cognate.timing.interleaved).

``python -m cognate.targets.cpu.measure.interleave JOB.json`` runs one tune --verify job in its own
process (crash isolation, thread settings fixed before any runtime starts) and writes its
outcome as JSON to the job's ``out`` path; ``cognate.search`` drives it.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cognate.targets.cpu.isa import host_isa
from cognate.timing import (
    LEAD_IN_S,
    MIN_SAMPLE_S,
    blocks,
    interleaved,
    leaders,
    machine_load,
    tied,
    timing_lock,
    wait_policy,
)

ROUNDS = 7
REMEASURE_ROUNDS = 15
TIMEOUT_S = 10.0  # a config whose checked run takes longer is not timed (status timeout)


# --- the tune --verify job (run in its own process) -------------------------------------------


def _ticker(job: dict[str, Any], what: str, total: int) -> Callable[[int], None]:
    """``done -> None``: with the job's ``progress`` set, one line on stderr per step (count,
    elapsed, ETA: ``cognate.progress.Ticker``), readable on a pipe; else nothing."""
    if not job.get("progress"):
        return lambda done: None
    from cognate.progress import Ticker

    return Ticker(what, total, every=0.0).update


def _prepare(job: dict[str, Any]) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    """Pack, compile and check every config and library reference: the calls that may be
    timed, and the outcome so far (statuses, errors, the library inspection times)."""
    from cognate.runner import ERROR_CHARS
    from cognate.targets.cpu import families
    from cognate.targets.cpu.measure.check import OPERAND_SEED, dense_operands, mismatch, reference
    from cognate.targets.cpu.measure.library import library_calls
    from cognate.util import one_line

    matrix = load_job_matrix(job["npz"])
    source = families.pack_source(matrix)  # the structured view built once, if a family asks
    op, width = job["op"], int(job["width"])
    operands = dense_operands(op, matrix.shape, width, OPERAND_SEED)
    ref, tol = reference(matrix.csr, op, operands)
    calls: dict[str, Callable[[], Any]] = {}
    outcome: dict[str, Any] = {"configs": {}, "library": {}, "library_missing": {}}
    tick = _ticker(job, "verify: compiled and checked", len(job["configs"]))
    for done, entry in enumerate(job["configs"]):
        tick(done)  # the count so far, as the next config starts
        key, knobs = entry["key"], entry["knobs"]
        try:
            call = families.prepare(source, op, knobs, operands)
            start = time.perf_counter()
            call()
            first_s = time.perf_counter() - start
            problem = mismatch(call.result(), ref, tol)
        except families.TooLarge as exc:
            outcome["configs"][key] = {"status": "too_large", "error": one_line(exc, ERROR_CHARS)}
            continue
        except Exception as exc:  # noqa: BLE001 - one bad config is a record, not a crash
            outcome["configs"][key] = {"status": "error", "error": one_line(exc, ERROR_CHARS)}
            continue
        if problem:  # a wrong kernel never produces a timing
            outcome["configs"][key] = {"status": "error", "error": problem}
            continue
        if first_s > job.get("timeout_s", TIMEOUT_S):  # the cpu runner's per-run limit
            why = f"one run took {first_s:.3g} s, over the {job.get('timeout_s', TIMEOUT_S):g} s limit"
            outcome["configs"][key] = {"status": "timeout", "error": why}
            continue
        outcome["configs"][key] = {"status": "ok"}
        calls[key] = call.argv_call()  # as TunedKernel calls it for the user
    tick(len(job["configs"]))
    if job.get("library", True):
        found, missing = library_calls(matrix.csr, op, operands, job.get("threads"))
        outcome["library_missing"] = missing
        for lib in found:
            lib.run()
            problem = mismatch(np.asarray(lib.result()), ref, 4 * tol)
            if problem:
                outcome["library_missing"][lib.name] = f"result wrong: {problem}"
                continue
            outcome["library"][lib.name] = {"inspect_s": lib.inspect_s}
            calls[f"lib:{lib.name}"] = lib.run
    return calls, outcome


def _runtime(name: str) -> str:
    """The threading runtime behind a timed call: each library its own (MKL's Intel OpenMP,
    torch's bundled one), every cognate kernel libgomp."""
    return name if name.startswith("lib:") else "cognate"


def save_job_matrix(matrix: Any, path: Path) -> None:
    """Write A's CSR and its optional row/col permutations for the job process."""
    csr = matrix.csr
    arrays = {"data": csr.data, "indices": csr.indices, "indptr": csr.indptr}
    for name in ("row_perm", "col_perm"):
        if getattr(matrix, name, None) is not None:
            arrays[name] = getattr(matrix, name)
    np.savez(path, shape=np.array(csr.shape, dtype=np.int64), **arrays)


def load_job_matrix(path: str) -> Any:
    """The Matrix ``save_job_matrix`` wrote."""
    import scipy.sparse as sp

    from cognate.matrix import Matrix

    with np.load(path) as z:
        shape = tuple(int(n) for n in z["shape"])
        csr = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=shape)
        perms = {name: z[name] for name in ("row_perm", "col_perm") if name in z.files}
    return Matrix("A", csr, source="tune --verify", **perms)


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Prepare and check everything, then under the machine-wide timing lock read the load
    and time all calls in interleaved rounds; re-measure the two leading configs (baseline
    included) head to head when their medians are within their spreads."""
    calls, outcome = _prepare(job)
    configs = [key for key in outcome["configs"] if key in calls]

    def waiting(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    policy = wait_policy()
    lead_in = policy != "passive"
    with timing_lock(on_wait=waiting):
        load = machine_load(job.get("threads"))
        outcome["load"] = {**load.as_dict(), "line": load.line(), "omp_wait_policy": policy}
        outcome["load"]["isa"] = host_isa().line()
        rounds, sample_s = job.get("rounds", ROUNDS), job.get("min_sample_s", MIN_SAMPLE_S)
        on_round = _ticker(job, f"verify: timing {len(calls)} calls, rounds", rounds)
        if lead_in:  # spinning waits: blocks, 0.25 s alone after another runtime's calls
            timed = blocks(calls, rounds, sample_s, LEAD_IN_S, _runtime, on_round)
        else:
            timed = interleaved(calls, rounds, sample_s, lead_in, on_round)
        remeasured: list[str] = []
        if len(configs) >= 2:
            first, second = leaders(timed, configs)
            if tied(timed[first], timed[second]):
                again = interleaved(
                    {k: calls[k] for k in (first, second)},
                    job.get("remeasure_rounds", REMEASURE_ROUNDS),
                    job.get("min_sample_s", MIN_SAMPLE_S),
                    lead_in,
                )
                timed.update(again)
                remeasured = [first, second]
    outcome["remeasured"] = remeasured
    for name, t in timed.items():
        entry = {"runtime_s": t.median, "spread_s": t.spread, "range_s": t.range}
        entry["rounds"] = len(t.samples)
        if name.startswith("lib:"):
            outcome["library"][name[4:]].update(entry)
        else:
            outcome["configs"][name].update(entry)
    return outcome


def main(argv: list[str]) -> None:
    job = json.loads(Path(argv[1]).read_text())
    threads = job.get("threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    warnings.filterwarnings("ignore", category=UserWarning)  # torch's sparse-CSR beta notices
    try:
        outcome = run_job(job)
    except Exception as exc:  # noqa: BLE001 - one line for the parent, never a traceback
        outcome = {"failed": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}
    Path(job["out"]).write_text(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv)
