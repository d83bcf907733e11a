"""GpuRunner: times the Triton kernels on CUDA, after checking each config against scipy.

Per matrix batch: the inputs are seeded and uploaded once, the scipy reference is computed
once, and cuSPARSE (through torch.sparse on CUDA) is checked and timed once as the library
reference; its time goes into every measurement's counters (``library_s``), so a ratio to
the library is a ratio within one batch. Per config: validate the knobs against the space
(they become compiled code), plan the index maps, run once into a NaN-filled output and
compare with the reference (a wrong kernel never gets a timing), then time it: warm-up
runs, then ``repeats`` runs, each between its own pair of CUDA events with the L2 cache
flushed before it (as triton.testing.do_bench does; written out here because do_bench
picks its repeat count from a time budget and ``cognate collect --repeats`` asks for a
count), and report the median with the interquartile range and max - min of the runs
(``cognate.stats.timing_spread``). A config whose single run exceeds
``timeout_s`` gets status ``timeout``.

``device="cpu"`` exists for tests only: it needs ``TRITON_INTERPRET=1``, runs the kernels
in Triton's interpreter and times them with a wall clock, which says nothing about a GPU.
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.runner import ERROR_CHARS, Measurement, Runner
from cognate.stats import Spread, timing_spread
from cognate.targets.gpu.kernels import load_kernels
from cognate.targets.gpu.problem import Problem, make_problem
from cognate.targets.gpu.space import GpuSpace
from cognate.util import describe


def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def _import_torch():
    try:
        import torch
    except ImportError:
        raise CognateError("gpu target: torch is not installed") from None
    return torch


@dataclass
class _Batch:
    """One (matrix, op, width) on the device: the problem and its uploaded tensors."""

    problem: Problem
    a: Any  # kernels.Csr
    dense: dict[str, Any]  # b, or x and y (device tensors)
    reference: Any  # the problem's reference and bound on the device (float64)
    bound: Any


class GpuRunner(Runner):
    """Measures gpu configs; the constructor fails with one line when there is no CUDA."""

    target = "gpu"

    def __init__(
        self,
        device: str = "cuda",
        repeats: int = 20,
        warmups: int = 3,
        timeout_s: float = 1.0,
    ) -> None:
        if repeats < 1 or warmups < 0 or not timeout_s > 0:
            raise CognateError("gpu target: repeats must be >= 1, warmups >= 0, timeout_s > 0")
        torch = _import_torch()
        if device == "cuda":
            if not torch.cuda.is_available():
                raise CognateError(
                    "gpu target: no CUDA device (torch.cuda.is_available() is False); "
                    "run it on a machine with an NVIDIA GPU and a CUDA build of torch"
                )
            if interpreter_on():
                raise CognateError(
                    "gpu target: TRITON_INTERPRET is set, so kernels would run in the "
                    "interpreter; unset it to time them on the GPU"
                )
        elif device == "cpu":
            if not interpreter_on():
                raise CognateError("gpu target: device 'cpu' needs TRITON_INTERPRET=1 (tests only)")
        else:
            raise CognateError(f"gpu target: unknown device {device!r} (cuda or cpu)")
        self.torch = torch
        self.device = device
        self.repeats = repeats
        self.warmups = warmups
        self.timeout_s = timeout_s
        self._flush = None  # L2-sized buffer, zeroed before each timed run
        self.kernels = load_kernels()
        self._spaces: dict[str, GpuSpace] = {}
        # The current batch (set by begin_batch): None with a failure message if setup failed.
        self._batch: _Batch | None = None
        self._library: dict[str, Any] = {}
        self._failure = "no batch begun"

    # ------------------------------------------------------------------ public

    def begin_batch(self, matrix: Matrix, op: str, width: int) -> None:
        """Upload the inputs and time the library reference once for the whole batch."""
        self._space(op)  # an unknown op fails the batch with one line, before any upload
        self._batch, self._library = None, {}  # free the last batch's tensors before uploading
        try:
            batch = self._prepare(matrix, op, width)
            library = self._library_reference(batch)
        except CognateError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. out of device memory for the inputs
            self._batch, self._library, self._failure = None, {}, describe(exc, ERROR_CHARS)
            return
        self._batch, self._library, self._failure = batch, library, ""

    def end_batch(self) -> None:
        # The inputs leave the device with the batch, as they did when it was a local.
        self._batch, self._library, self._failure = None, {}, "no batch begun"

    def measure_one(self, matrix: Matrix, op: str, width: int, config: Config) -> Measurement:
        if self._batch is None:  # the batch's setup failed: every config records why
            return Measurement(config, _status_of_failure(self._failure), error=self._failure)
        result = self._measure_config(self._space(op), self._batch, config)
        result.counters.update(self._library)
        return result

    # ------------------------------------------------------------------ per batch

    def _space(self, op: str) -> GpuSpace:
        if op not in self._spaces:
            self._spaces[op] = GpuSpace(op)
        return self._spaces[op]

    def _prepare(self, matrix: Matrix, op: str, width: int) -> _Batch:
        problem = make_problem(matrix, op, width)
        a = self.kernels.to_device(matrix.csr, self.device)
        upload = self.torch.from_numpy
        dense = {k: upload(v).to(self.device) for k, v in problem.inputs.items()}
        reference, bound = upload(problem.reference), upload(problem.bound)
        return _Batch(problem, a, dense, reference.to(self.device), bound.to(self.device))

    def _library_reference(self, batch: _Batch) -> dict[str, Any]:
        """Check and time torch.sparse (cuSPARSE on CUDA) on the same inputs."""
        name = "cusparse (torch.sparse)" if self.device == "cuda" else "torch.sparse (cpu)"
        try:
            fn = self._library_fn(batch)
            out = fn()
            self._sync()
            problem = self._check(batch, out)
            if problem:
                return {"library": name, "library_error": problem}
            median, spread = self._time(fn)
        except Exception as exc:  # noqa: BLE001 - a library failure must not stop the batch
            return {"library": name, "library_error": describe(exc, ERROR_CHARS)}
        return {
            "library": name,
            "library_s": median,
            "library_spread_s": spread.iqr_s,
            "library_range_s": spread.range_s,
        }

    def _library_fn(self, batch: _Batch) -> Callable[[], Any]:
        torch, a = self.torch, batch.a
        with warnings.catch_warnings():  # "sparse CSR support is in beta": known, not news
            warnings.simplefilter("ignore", UserWarning)
            csr = torch.sparse_csr_tensor(
                a.indptr, a.indices, a.values, size=a.shape, check_invariants=False
            )
        if batch.problem.op == "spmm":
            b = batch.dense["b"]
            return lambda: torch.sparse.mm(csr, b)
        x, y_t = batch.dense["x"], batch.dense["y"].t()
        # sampled_addmm samples X @ Y^T at A's pattern (beta=0: A's values are not used),
        # so A's values are multiplied in afterwards, as the SDDMM definition asks.
        return lambda: torch.sparse.sampled_addmm(csr, x, y_t, beta=0.0).values() * a.values

    # ------------------------------------------------------------------ per config

    def _measure_config(self, space: GpuSpace, batch: _Batch, config: Config) -> Measurement:
        try:
            knobs = dict(space.validate(config.knobs).knobs)
        except CognateError as exc:
            return Measurement(config, "error", error=str(exc))
        try:
            fn, out = self._bind(batch, knobs)
            out.fill_(float("nan"))  # a row the kernel forgets cannot pass the check
            fn()
            self._sync()
            problem = self._check(batch, out)
            if problem:
                return Measurement(config, "error", error=problem)
            once = self._time_once(fn)
            if once > self.timeout_s:
                return Measurement(
                    config,
                    "timeout",
                    error=f"one run took {once:.3g} s, over the {self.timeout_s} s limit",
                )
            median, spread = self._time(fn)
        except Exception as exc:  # noqa: BLE001 - a runner never raises for a bad candidate
            message = describe(exc, ERROR_CHARS)
            return Measurement(config, _status_of_failure(message), error=message)
        return Measurement(
            config, "ok", runtime_s=median, spread_s=spread.iqr_s, range_s=spread.range_s
        )

    def _bind(self, batch: _Batch, knobs: dict[str, Any]) -> tuple[Callable[[], None], Any]:
        """A no-argument callable running the config, and the output it writes."""
        torch, k, a = self.torch, self.kernels, batch.a
        op = batch.problem.op
        plan = k.make_plan(a, knobs, with_fixup=op == "spmm")
        if op == "spmm":
            b = batch.dense["b"]
            out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device=self.device)
            return (lambda: k.run_spmm(a, b, knobs, plan, out)), out
        x, y = batch.dense["x"], batch.dense["y"]
        out = torch.empty(a.nnz, dtype=torch.float32, device=self.device)
        return (lambda: k.run_sddmm(a, x, y, knobs, plan, out)), out

    def _check(self, batch: _Batch, out: Any) -> str | None:
        """Compare on the device (fast: one batch holds hundreds of configs); the host
        check, which describes the mismatch, runs only when something is off."""
        if out.shape == batch.reference.shape:
            error = (out.detach().double() - batch.reference).abs()
            if bool((error <= batch.bound).all()):  # NaN compares false: it fails
                return None
        return batch.problem.check(out.detach().cpu().numpy())

    # ------------------------------------------------------------------ timing

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _time_once(self, fn: Callable[[], Any]) -> float:
        if self.device != "cuda":
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3

    def _time(self, fn: Callable[[], Any]) -> tuple[float, Spread]:
        """(median, spread) in seconds over ``repeats`` runs after ``warmups``."""
        if self.device != "cuda":
            times = [self._time_once(fn) for _ in range(self.repeats)]
            return statistics.median(times), timing_spread(times)
        torch = self.torch
        if self._flush is None:
            # 256 MiB: larger than any current GPU's L2 (H100/H200: 50-60 MB), as do_bench
            self._flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
        for _ in range(self.warmups):
            fn()
        pairs = []
        for _ in range(self.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._flush.zero_()
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) / 1e3 for start, end in pairs]
        return statistics.median(times), timing_spread(times)


def _status_of_failure(message: str) -> str:
    """Running out of device memory or on-chip resources means too large, else an error."""
    lowered = message.lower()
    if "outofmemory" in lowered.replace(" ", "") or "outofresources" in lowered.replace(" ", ""):
        return "too_large"
    return "error"
