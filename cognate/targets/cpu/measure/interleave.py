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

from cognate.lifetime import die_with_parent
from cognate.targets.cpu.isa import host_isa
from cognate.timing import (
    LEAD_IN_S,
    MIN_SAMPLE_S,
    Timed,
    blocks,
    calls_per_sample,
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


def _inputs(job: dict[str, Any]) -> tuple[Any, Any, tuple[np.ndarray, ...]]:
    """(matrix, its pack source, the dense operands) of a job."""
    from cognate.targets.cpu import families
    from cognate.targets.cpu.measure.check import OPERAND_SEED, dense_operands

    matrix = load_job_matrix(job["npz"])
    source = families.pack_source(matrix)  # the structured view built once, if a family asks
    operands = dense_operands(job["op"], matrix.shape, int(job["width"]), OPERAND_SEED)
    return matrix, source, operands


def _prepare_config(
    job: dict[str, Any],
    source: Any,
    operands: tuple,
    ref: Any,
    knobs: dict,
    packs: Any = None,
) -> tuple[Callable[[], Any] | None, dict[str, Any], float]:
    """Pack (or take ``packs``' packed A of the same layout), compile, run once and check one
    config: (its call or None, its outcome entry, the first run's seconds)."""
    from cognate.runner import ERROR_CHARS
    from cognate.targets.cpu import pipeline
    from cognate.util import one_line

    try:
        call = pipeline.prepare(source, job["op"], knobs, operands, packs=packs)
        start = time.perf_counter()
        call()
        first_s = time.perf_counter() - start
        problem = ref.for_knobs(knobs).check(call.result())
    except pipeline.TooLarge as exc:
        return None, {"status": "too_large", "error": one_line(exc, ERROR_CHARS)}, 0.0
    except Exception as exc:  # noqa: BLE001 - one bad config is a record, not a crash
        return None, {"status": "error", "error": one_line(exc, ERROR_CHARS)}, 0.0
    if problem:  # a wrong kernel never produces a timing
        return None, {"status": "error", "error": problem}, first_s
    limit = job.get("timeout_s", TIMEOUT_S)
    if first_s > limit:  # the cpu runner's per-run limit
        why = f"one run took {first_s:.3g} s, over the {limit:g} s limit"
        return None, {"status": "timeout", "error": why}, first_s
    return call, {"status": "ok"}, first_s  # the pipeline's call, as result.kernel's


def _prepare_library(lib: Any, ref: Any) -> tuple[Callable[[], Any] | None, str | None]:
    """Run a library reference once and check it (4 x the kernels' tolerance)."""
    lib.run()
    problem = ref.check(np.asarray(lib.result()), slack=4.0)
    return (None, f"result wrong: {problem}") if problem else (lib.run, None)


def _prepare(
    job: dict[str, Any], matrix: Any, source: Any, operands: tuple, ref: Any
) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    """Pack, compile and check every config and library reference: the calls that may be
    timed, and the outcome so far (statuses, errors, the library inspection times)."""
    from cognate.targets.cpu.measure.library import library_calls

    calls: dict[str, Callable[[], Any]] = {}
    outcome: dict[str, Any] = {"configs": {}, "library": {}, "library_missing": {}}
    tick = _ticker(job, "verify: compiled and checked", len(job["configs"]))
    for done, entry in enumerate(job["configs"]):
        tick(done)  # the count so far, as the next config starts
        call, outcome["configs"][entry["key"]], _ = _prepare_config(
            job, source, operands, ref, entry["knobs"]
        )
        if call is not None:
            calls[entry["key"]] = call
    tick(len(job["configs"]))
    if job.get("library", True):
        found, missing = library_calls(
            matrix.csr, job["op"], operands, job.get("threads"), job.get("libraries")
        )
        outcome["library_missing"] = missing
        for lib in found:
            run, problem = _prepare_library(lib, ref)
            if run is None:
                outcome["library_missing"][lib.name] = problem
                continue
            outcome["library"][lib.name] = _library_entry(lib)
            calls[f"lib:{lib.name}"] = run
    return calls, outcome


def _asked(job: dict[str, Any], name: str) -> bool:
    """Whether the job asks for library reference ``name`` (``libraries``: names; absent: all)."""
    names = job.get("libraries")
    return names is None or name in names


def _library_entry(lib: Any) -> dict[str, Any]:
    """A library reference's outcome entry: its inspection time, and for MKL the code path
    it ran (the ISA library it loaded: ``def`` is its generic code)."""
    entry: dict[str, Any] = {"inspect_s": lib.inspect_s}
    if lib.name.startswith("mkl"):
        from cognate.targets.cpu.measure.library import mkl_code_path

        entry["code_path"] = mkl_code_path()
    return entry


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


def held_bytes(csr: Any, op: str, width: int, calls: int) -> int:
    """What the job holds besides the reference with ``calls`` kernels prepared at once: A,
    the dense inputs, each call's packed A and output, and one pack's temporaries."""
    from cognate.targets.cpu.memory import measured_kernel_bytes, operand_bytes

    packed, peak = measured_kernel_bytes(csr, op, width)
    return operand_bytes(csr, op, width) + calls * packed + peak


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Prepare and check everything, then under the machine-wide timing lock read the load
    and time all calls in interleaved rounds; re-measure the two leading configs (baseline
    included) head to head when their medians are within their spreads.

    When holding every prepared call at once would pass half the memory budget (10^8
    nonzeros at width 128: an output alone is gigabytes), the calls are prepared, checked
    and timed one at a time instead (``_run_one_at_a_time``)."""
    from cognate.budget import memory_budget
    from cognate.targets.cpu.measure.check import reference_for

    matrix, source, operands = _inputs(job)
    op, width = job["op"], int(job["width"])
    calls_wanted = len(job["configs"]) + (2 if job.get("library", True) else 0)
    together = held_bytes(matrix.csr, op, width, calls_wanted)
    if job.get("one_at_a_time") or together > memory_budget() // 2:
        return _run_one_at_a_time(job, matrix, source, operands)
    ref = reference_for(matrix.csr, op, operands, held=together)
    calls, outcome = _prepare(job, matrix, source, operands, ref)
    outcome["checked"] = ref.describe()
    configs = [key for key in outcome["configs"] if key in calls]

    policy = wait_policy()
    lead_in = policy != "passive"
    with timing_lock(on_wait=_waiting):
        outcome["load"] = _load(job, policy)
        rounds, sample_s = job.get("rounds", ROUNDS), job.get("min_sample_s", MIN_SAMPLE_S)
        on_round = _ticker(job, f"verify: timing {len(calls)} calls, rounds", rounds)
        if lead_in:  # spinning waits: blocks, 0.25 s alone after another runtime's calls
            timed = blocks(calls, rounds, sample_s, LEAD_IN_S, _runtime, on_round)
        else:
            timed = interleaved(calls, rounds, sample_s, lead_in, on_round)
        remeasured = contenders(timed, configs, job.get("baseline"))
        if remeasured:
            again = interleaved(
                {k: calls[k] for k in remeasured},
                job.get("remeasure_rounds", REMEASURE_ROUNDS),
                job.get("min_sample_s", MIN_SAMPLE_S),
                lead_in,
            )
            timed.update(again)
    outcome["remeasured"] = remeasured
    _record(outcome, timed)
    return outcome


def contenders(timed: dict[str, Timed], configs: list[str], baseline: str | None) -> list[str]:
    """The two configs to time again head to head, or none: the fastest and the baseline
    when the fastest leads the baseline by less than their spreads (the verdict, which keeps
    the baseline unless a pick clears it, is then undecided: small kernels timed among a dozen
    others spread 10-25%, and real 1.2-1.4x leads were kept as the baseline); else the two
    fastest when their medians are tied."""
    if len(configs) < 2:
        return []
    first, second = leaders(timed, configs)
    if baseline in timed and first != baseline:
        fast, base = timed[first], timed[baseline]
        if fast.median + fast.spread >= base.median - base.spread:
            return [first, baseline]
    return [first, second] if tied(timed[first], timed[second]) else []


def _waiting(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _load(job: dict[str, Any], policy: str) -> dict[str, Any]:
    load = machine_load(job.get("threads"))
    found = {**load.as_dict(), "line": load.line(), "omp_wait_policy": policy}
    found["isa"] = host_isa().line()
    return found


def _record(outcome: dict[str, Any], timed: dict[str, Any]) -> None:
    for name, t in timed.items():
        entry = {"runtime_s": t.median, "spread_s": t.spread, "range_s": t.range}
        entry["rounds"] = len(t.samples)
        if name.startswith("lib:"):
            outcome["library"][name[4:]].update(entry)
        else:
            outcome["configs"][name].update(entry)


def _run_one_at_a_time(
    job: dict[str, Any], matrix: Any, source: Any, operands: tuple
) -> dict[str, Any]:
    """Each config, then each library reference, prepared, checked and timed alone (its own
    calls for at least LEAD_IN_S, then ``rounds`` timed blocks), and released before the
    next: one packed A and one output held at a time. Calls of over ``SLOW_CALL_S`` get
    ``SLOW_ROUNDS`` rounds (the spread is reported with every median); no re-measure."""
    from cognate.targets.cpu import pipeline
    from cognate.targets.cpu.measure.check import reference_for
    from cognate.targets.cpu.measure.library import LIBRARY_ERRORS, library_makers

    op, width = job["op"], int(job["width"])
    ref = reference_for(matrix.csr, op, operands, held=held_bytes(matrix.csr, op, width, 1))
    outcome: dict[str, Any] = {"configs": {}, "library": {}, "library_missing": {}}
    outcome["checked"], outcome["timing"] = ref.describe(), "one at a time"
    timed: dict[str, Any] = {}
    policy = wait_policy()
    with timing_lock(on_wait=_waiting):
        outcome["load"] = _load(job, policy)
        packs = pipeline.Packs()
        # Configs of one layout next to each other: each layout packed once.
        entries = sorted(job["configs"], key=lambda e: pipeline.layout_key(e["knobs"]))
        tick = _ticker(job, "verify: checked and timed one at a time", len(entries))
        for done, entry in enumerate(entries):
            tick(done)
            key = entry["key"]
            call, outcome["configs"][key], first_s = _prepare_config(
                job, source, operands, ref, entry["knobs"], packs
            )
            if call is not None:
                timed[key] = _time_alone(key, call, first_s, job)
            del call  # its output goes before the next config's
        tick(len(entries))
        del packs
        if job.get("library", True):
            for name, make in library_makers(matrix.csr, op, operands, job.get("threads")):
                if not _asked(job, name):
                    continue
                try:
                    lib = make()
                except LIBRARY_ERRORS as exc:
                    outcome["library_missing"][name] = " ".join(str(exc).split())
                    continue
                start = time.perf_counter()
                run, problem = _prepare_library(lib, ref)
                first_s = time.perf_counter() - start
                if run is None:
                    outcome["library_missing"][name] = problem
                else:
                    outcome["library"][name] = _library_entry(lib)
                    timed[f"lib:{name}"] = _time_alone(name, run, first_s, job)
                del lib, run
    outcome["remeasured"] = []
    _record(outcome, timed)
    return outcome


SLOW_CALL_S = 0.5
SLOW_ROUNDS = 3


def _time_alone(name: str, call: Callable[[], Any], first_s: float, job: dict[str, Any]) -> Timed:
    """Its own calls for at least LEAD_IN_S (other runtimes' threads stop spinning), then
    ``rounds`` consecutive timed blocks of at least ``min_sample_s`` each."""
    rounds = job.get("rounds", ROUNDS)
    if first_s > SLOW_CALL_S:
        rounds = min(rounds, SLOW_ROUNDS)
    number = calls_per_sample(call, job.get("min_sample_s", MIN_SAMPLE_S)) if first_s < 1 else 1
    quiet_at = time.perf_counter() + LEAD_IN_S
    while time.perf_counter() < quiet_at:
        call()
    timed = Timed(name)
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            call()
        timed.samples.append((time.perf_counter() - start) / number)
    return timed


def main(argv: list[str]) -> None:
    """``JOB.json [PARENT_PID PDEATHSIG]``: run the job; with a parent, die with it."""
    if len(argv) > 2:
        die_with_parent(int(argv[2]), pdeathsig=len(argv) < 4 or argv[3] == "1")
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
    try:
        main(sys.argv)
    except KeyboardInterrupt:  # a SIGINT sent to the job itself: the parent says what stopped
        sys.exit(130)
