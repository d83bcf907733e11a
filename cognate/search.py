"""Search: rank a target's candidate schedules for one matrix with a cost model, verify the top.

The matrix is featurized once; the candidates (spade: the whole 256-config space; cpu: a
seeded WACO-recipe sample of tens of thousands of legal configs) are encoded and scored in
batches, and ranked by score (lower = faster, DESIGN 8). ``verify`` measures the top-k and
the baseline config with the target's own runner (real kernels, checked against scipy before
a timing counts) and, on cpu, times the library reference (MKL) in a separate process.

torch is imported inside the functions that need it so that ``cognate --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cognate.config import Config
from cognate.errors import CognateError
from cognate.matrix import Matrix
from cognate.paths import data_dir
from cognate.runner import Measurement
from cognate.space import Space
from cognate.targets import Target, get_target
from cognate.targets.cpu.codegen import MAX_SPECIALISED_WIDTH as MAX_WIDTH

DEFAULT_CANDIDATES = 20_000
DEFAULT_SEED = 0
SCORE_BATCH = 8192
# Modules that register extra config encoders (e.g. the transfer autoencoder "ae") on import;
# a checkpoint naming such an encoder loads only after its module has been imported.
ENCODER_PLUGIN_MODULES: tuple[str, ...] = ("cognate.transfer.autoencoder",)


# --- the model ------------------------------------------------------------------------------


def shipped_model_path(target: str, op: str) -> Path:
    """Where the shipped model for (target, op) lives: data/models/<target>-<op>.safetensors."""
    return data_dir() / "models" / f"{target}-{op}.safetensors"


def resolve_model_path(model: str | Path | None, target: str, op: str) -> Path:
    """The model file to use; a missing file is a one-line error saying how to get one."""
    if model is not None:
        path = Path(model).expanduser()
        if not path.is_file():
            raise CognateError(f"{path}: no such model file")
        return path
    path = shipped_model_path(target, op)
    if not path.is_file():
        raise CognateError(
            f"no shipped model for target {target}, op {op} ({path}); train one with "
            f"`cognate pretrain --db STORE --target {target} --op {op} -o {path}` "
            "(or scripts/train_shipped_models.sh), or pass --model PATH"
        )
    return path


def _import_encoder_plugins() -> None:
    for name in ENCODER_PLUGIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


@dataclass
class LoadedModel:
    """A cost model ready to score configs of one space."""

    path: Path
    model: Any  # cognate.model.predictor.CostModel
    encoder: Any  # cognate.model.encoding.ConfigEncoder
    metadata: dict[str, Any]


def load_model(path: Path, space: Space) -> LoadedModel:
    """Load a checkpoint for ``space`` (pretrained or finetuned: both use the same format)."""
    from cognate.model.train import load_checkpoint, read_metadata

    meta = read_metadata(path)
    if (meta.get("target"), meta.get("op")) != (space.target, space.op):
        raise CognateError(
            f"{path}: model is for target {meta.get('target')}, op {meta.get('op')}, "
            f"not {space.target}, {space.op}"
        )
    if "transfer" in meta:  # fine-tuned: the encoder is rebuilt from its transfer options
        from cognate.transfer.finetune import load_transfer_model

        model, encoder, meta = load_transfer_model(path, space)
    else:
        _import_encoder_plugins()
        model, encoder, meta = load_checkpoint(path, space)
    return LoadedModel(path, model, encoder, meta)


# --- ranking --------------------------------------------------------------------------------


@dataclass
class Timings:
    """Seconds spent per search phase (what scripts/bench_tune.py reports)."""

    candidates_s: float = 0.0  # drawing the candidate set
    featurize_s: float = 0.0  # the matrix embedding (once per matrix)
    encode_s: float = 0.0  # config encodings
    score_s: float = 0.0  # the predictor over all candidates
    rank_s: float = 0.0  # sorting the scores
    filter_s: float = 0.0  # checking that the top layouts fit the size limit (cpu)
    # Wall time of candidates + featurize + encode + score + rank: featurize overlaps the
    # candidates and their encoding (``rank``), so this is less than the phases' sum.
    search_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class Candidate:
    """One ranked config; ``runtime_s`` / ``status`` are set when it was measured."""

    rank: int
    config: Config
    score: float
    description: str
    status: str | None = None
    runtime_s: float | None = None  # verified: the median over interleaved rounds (cpu)
    error: str | None = None
    family_pick: bool = False  # below the top-k, measured as its kernel family's best-ranked
    spread_s: float | None = None  # verified on cpu: interquartile range of the rounds

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rank": self.rank,
            "config": dict(self.config.knobs),
            "description": self.description,
            "hash": self.config.hash,
            "score": self.score,
            "family_pick": self.family_pick,
        }
        if self.status is not None:
            out.update(status=self.status, runtime_s=self.runtime_s, spread_s=self.spread_s)
            if self.error:
                out["error"] = self.error
        return out


def candidate_set(space: Space, shape: tuple[int, int], n: int, seed: int) -> list[Config]:
    """The space's search candidates plus its baseline, distinct, in a deterministic order."""
    configs = space.candidates(n, seed, shape)
    baseline = space.baseline(shape)
    if not any(_same(c, baseline) for c in configs):
        configs = [*configs, baseline]
    return configs


def _same(a: Config, b: Config) -> bool:
    """``a == b``, cheaply: Config equality hashes its canonical JSON (sha256), so a plain
    scan of 20k candidates cost ~0.3 s; equal configs have equal knob dicts, so comparing
    those first skips the hashing for all but the matches."""
    return a.knobs == b.knobs and a == b


def score_configs(
    loaded: LoadedModel,
    matrix: Matrix,
    configs: Sequence[Config],
    width: int,
    timings: Timings,
    batch: int = SCORE_BATCH,
    embedding: Future | None = None,
) -> np.ndarray:
    """Scores (lower = faster) of ``configs`` for ``matrix``: embed once, encode and score in
    batches. ``embedding``: the matrix embedding already under way (``rank`` starts it in a
    thread before drawing the candidates); else it is computed here."""
    import torch

    with torch.inference_mode():
        features = []
        for lo in range(0, len(configs), batch):
            start = time.perf_counter()
            features.append(loaded.encoder.encode(configs[lo : lo + batch], matrix.shape, width))
            timings.encode_s += time.perf_counter() - start
        vector = embedding.result() if embedding is not None else embed(loaded, matrix, timings)
        start = time.perf_counter()
        out = [loaded.model.score(vector, width, f).float().numpy() for f in features]
        timings.score_s += time.perf_counter() - start
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def embed(loaded: LoadedModel, matrix: Matrix, timings: Timings) -> Any:
    """The matrix embedding (torch inference mode is per thread: entered here)."""
    import torch

    with torch.inference_mode():
        start = time.perf_counter()
        vector = loaded.model.featurizer.embed(matrix)
        timings.featurize_s += time.perf_counter() - start
    return vector


def rank(
    loaded: LoadedModel,
    space: Space,
    matrix: Matrix,
    width: int,
    n_candidates: int = DEFAULT_CANDIDATES,
    seed: int = DEFAULT_SEED,
) -> tuple[list[Candidate], Timings]:
    """All candidates ranked by predicted score (rank 1 = predicted fastest).

    The featurizer (numpy / torch array work, which releases the GIL) runs in a thread while
    this one draws and encodes the candidates (Python work per config): on 2 cores the two
    overlap, and the search takes about the longer of them, not their sum.
    """
    timings = Timings()
    wall = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cognate-embed") as pool:
        embedding = pool.submit(embed, loaded, matrix, timings)
        start = time.perf_counter()
        configs = candidate_set(space, matrix.shape, n_candidates, seed)
        timings.candidates_s = time.perf_counter() - start
        scores = score_configs(loaded, matrix, configs, width, timings, embedding=embedding)
    start = time.perf_counter()
    order = np.argsort(scores, kind="stable")
    timings.rank_s = time.perf_counter() - start
    timings.search_s = time.perf_counter() - wall
    ranked = [
        Candidate(r, configs[i], float(scores[i]), "") for r, i in enumerate(order.tolist(), 1)
    ]
    return ranked, timings


FAMILY_PROBES = 3  # TooLarge configs tried per uncovered family before giving up on it


def runnable_top(
    ranked: Sequence[Candidate],
    matrix: Matrix,
    op: str,
    width: int,
    k: int,
    target: str,
    family: Callable[[Config], str] | None = None,
) -> tuple[list[Candidate], int]:
    """Copies of the first ``k`` ranked candidates that can run on this matrix, ranked 1..k
    among themselves, and how many better-ranked ones were skipped.

    On cpu a layout may exceed the size limit (20 x nnz, as WACO refuses): it depends on
    where the nonzeros fall, so it is checked by packing, top-down (a few packs, not 20k).
    Other targets run every config of their space.

    With ``family`` (config -> kernel family), each family's best-ranked runnable config is
    in the selection too, in place of the lowest-ranked picks of a family that has several
    (rank 1 always stays): a cost model compares knobs within a kernel family better than
    it compares kernels with each other, so one measurement per family keeps a family it
    underrates in the running (``Candidate.family_pick`` marks those)."""
    fits = _runnable_check(matrix, op, width, target)
    top: list[Candidate] = []
    skipped = 0
    for candidate in ranked:
        if len(top) == k:
            break
        if fits(candidate.config):
            top.append(candidate)
        else:
            skipped += 1
    if family is not None:
        top = _cover_families(top, ranked, family, fits)
    return [dataclasses.replace(c, rank=i) for i, c in enumerate(top, 1)], skipped


def _runnable_check(matrix: Matrix, op: str, width: int, target: str) -> Callable[[Config], bool]:
    if target != "cpu":
        return lambda config: True
    from cognate.targets.cpu.pack import TooLarge, pack

    def fits(config: Config) -> bool:
        try:
            pack(matrix, op, config.knobs, width=width)
        except TooLarge:
            return False
        return True

    return fits


def _cover_families(
    top: list[Candidate],
    ranked: Sequence[Candidate],
    family: Callable[[Config], str],
    fits: Callable[[Config], bool],
) -> list[Candidate]:
    """``top`` with the best runnable config of each family it lacks swapped in (see
    ``runnable_top``), in score order."""
    chosen = list(top)
    covered = {family(c.config) for c in chosen}
    probes: dict[str, int] = {}
    for candidate in ranked:
        name = family(candidate.config)
        if name in covered or probes.get(name, 0) >= FAMILY_PROBES:
            continue
        counts = Counter(family(c.config) for c in chosen)
        removable = [c for c in chosen[1:] if counts[family(c.config)] > 1]
        if not removable:
            break
        if not fits(candidate.config):
            probes[name] = probes.get(name, 0) + 1
            continue
        chosen.remove(removable[-1])
        chosen.append(dataclasses.replace(candidate, family_pick=True))
        covered.add(name)
    return sorted(chosen, key=lambda c: c.score)


# --- verification ---------------------------------------------------------------------------


def measure(
    target: Target,
    matrix: Matrix,
    op: str,
    width: int,
    configs: Sequence[Config],
    progress: Callable[[Measurement], None] | None = None,
    runner_options: dict[str, Any] | None = None,
) -> list[Measurement]:
    """Measure ``configs`` with the target's runner (closed afterwards if it can be)."""
    runner = target.runner(**(runner_options or {}))
    try:
        return runner.measure(matrix, op, width, configs, progress)
    finally:
        close = getattr(runner, "close", None)
        if callable(close):
            close()


def interleaved_verify(
    matrix: Matrix,
    op: str,
    width: int,
    configs: Sequence[Config],
    threads: int | None = None,
    library: bool = True,
    timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Check and time ``configs`` (and the cpu library references) in interleaved rounds in
    one fresh process (cognate/targets/cpu/interleave.py); its outcome as a dict.

    Its own process: a crashing kernel cannot take the caller down, and the OpenMP / MKL / torch
    thread counts are set before any runtime starts. Raises CognateError when it fails.
    """
    from cognate.targets.cpu.interleave import save_job_matrix

    with tempfile.TemporaryDirectory(prefix="cognate-verify-") as tmp:
        job = {
            "npz": str(Path(tmp) / "a.npz"),
            "out": str(Path(tmp) / "outcome.json"),
            "op": op,
            "width": int(width),
            "threads": threads,
            "library": library,
            "configs": [{"key": c.hash, "knobs": dict(c.knobs)} for c in configs],
        }
        save_job_matrix(matrix, Path(job["npz"]))
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        cmd = [sys.executable, "-m", "cognate.targets.cpu.interleave", str(Path(tmp) / "job.json")]
        # stderr passes through: the job's only lines there are "waiting for the timing
        # lock" ones (its failures come back in the outcome file, as one line).
        try:
            done = subprocess.run(
                cmd, stdout=subprocess.DEVNULL, timeout=timeout_s, env=_thread_env(threads)
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
    """The verify process's environment: its thread count, and passive OpenMP waits (as the
    cpu runner's worker) unless the user chose otherwise, for every runtime alike."""
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")}
    if threads:
        env["OMP_NUM_THREADS"] = str(int(threads))
    return env


# --- the result -----------------------------------------------------------------------------


@dataclass
class TuneResult:
    """What ``tune`` found: the top-k ranked configs, and measurements when verified."""

    matrix: Matrix
    target: str
    op: str
    width: int
    candidates: list[Candidate]  # the top-k, best predicted first
    baseline: Candidate  # the target's baseline config (rank = its rank among all scored)
    n_scored: int
    model_path: Path
    timings: Timings
    verified: bool = False
    library: str | None = None  # the fastest library reference timed (cpu)
    library_runtime_s: float | None = None
    library_error: str | None = None  # why a library reference has no timing
    libraries: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> times
    skipped_too_large: int = 0  # better-ranked cpu configs whose layout exceeds the limit
    load: dict[str, Any] | None = None  # the machine's load when the timings were taken (cpu)
    timing: str | None = None  # "interleaved" or "sequential" (cpu verify)
    remeasured: list[str] = field(default_factory=list)  # hashes re-timed head to head
    space_version: str = ""
    _kernels: dict[int, Any] = field(default_factory=dict, repr=False)

    @property
    def best(self) -> Candidate:
        """Verified: the fastest measured of the top-k and the baseline (the baseline also when
        the fastest candidate is within the spread of it: no candidate beat it); unverified
        or nothing ran: rank 1."""
        if not self.verified:
            return self.candidates[0]
        pool = [*self.candidates, self.baseline]
        measured = [c for c in pool if c.status == "ok" and c.runtime_s]
        if not measured:
            return self.candidates[0]
        fastest = min(measured, key=lambda c: (c.runtime_s, c is not self.baseline, c.rank))
        base = self.baseline
        if fastest is not base and base.status == "ok" and base.runtime_s:
            noise = max(fastest.spread_s or 0.0, base.spread_s or 0.0)
            if base.runtime_s - fastest.runtime_s <= noise:
                return base
        return fastest

    @property
    def kept_baseline(self) -> bool:
        """Verified, and no candidate beat the baseline config."""
        return self.verified and self.best is self.baseline

    @property
    def unreliable(self) -> bool:
        """The machine was busy while the timings were taken."""
        return bool(self.load and self.load.get("unreliable"))

    @property
    def config(self) -> Config:
        """The chosen schedule."""
        return self.best.config

    @property
    def speedup_vs_baseline(self) -> float | None:
        best, base = self.best.runtime_s, self.baseline.runtime_s
        return base / best if best and base and self.best.status == "ok" else None

    @property
    def speedup_vs_library(self) -> float | None:
        best, lib = self.best.runtime_s, self.library_runtime_s
        return lib / best if best and lib and self.best.status == "ok" else None

    def kernel(self, *operands: Any, out: Any = None) -> Any:
        """Run the chosen schedule (cpu only): SpMM ``kernel(B, out=None)`` -> A @ B; SDDMM
        ``kernel(X, Y, out=None)`` -> CSR with A's pattern, A * (X @ Y.T).

        A is packed and the kernel compiled once per dense width. The operands are read in
        place when they are float32 and C-contiguous (numpy arrays or torch CPU tensors);
        anything else is copied once into that form. The result is written into ``out`` when
        given (SpMM: float32 M x width; SDDMM: float32 A.nnz values in A's CSR order; a wrong
        shape or dtype is one clear CognateError), else into one newly allocated array.
        Torch inputs give torch outputs. See cognate/targets/cpu/tuned.py.
        """
        if self.target != "cpu":
            raise CognateError(f"a callable kernel exists for the cpu target, not {self.target}")
        shape = getattr(operands[0], "shape", None) if operands else None
        kernel = self._kernels.get(shape[1]) if shape is not None and len(shape) == 2 else None
        if kernel is None:  # first call at this width: pack and compile
            from cognate.targets.cpu.kernel import check_operands
            from cognate.targets.cpu.tuned import TunedKernel, as_dense

            arrays = tuple(as_dense(a, f"operand {i}") for i, a in enumerate(operands))
            width = check_operands(self.op, self.matrix.shape, arrays)
            kernel = self._kernels.get(width)
            if kernel is None:
                kernel = self._kernels[width] = TunedKernel(
                    self.matrix, self.op, self.config, arrays
                )
        return kernel(*operands, out=out)

    def as_dict(self) -> dict[str, Any]:
        """The JSON object of ``cognate tune --json``."""
        best = self.best
        base = {"config": dict(self.baseline.config.knobs), "hash": self.baseline.config.hash}
        base["description"] = self.baseline.description
        base["rank"] = self.baseline.rank
        base["score"] = self.baseline.score
        if self.verified:
            base.update(status=self.baseline.status, runtime_s=self.baseline.runtime_s)
            base["spread_s"] = self.baseline.spread_s
        out: dict[str, Any] = {
            "matrix": self.matrix.name,
            "matrix_sha256": self.matrix.sha256,
            "shape": list(self.matrix.shape),
            "nnz": self.matrix.nnz,
            "target": self.target,
            "op": self.op,
            "width": self.width,
            "model": str(self.model_path),
            "scored": self.n_scored,
            "skipped_too_large": self.skipped_too_large,
            "verified": self.verified,
            "baseline": base,
            "candidates": [c.as_dict() for c in self.candidates],
            "best": {
                "rank": best.rank,
                "config": dict(best.config.knobs),
                "description": best.description,
                "runtime_s": best.runtime_s,
                "is_baseline": best is self.baseline,
            },
            "kept_baseline": self.kept_baseline,
            "speedup_vs_baseline": self.speedup_vs_baseline,
            "timings": self.timings.as_dict(),
        }
        if self.target == "cpu":
            out["library"] = self.library
            out["library_runtime_s"] = self.library_runtime_s
            out["speedup_vs_library"] = self.speedup_vs_library
            out["library_error"] = self.library_error
            out["libraries"] = self.libraries
            if self.verified:
                out.update(timing=self.timing, remeasured=self.remeasured, load=self.load)
                out["unreliable"] = self.unreliable
        return out


def _CpuKernel(  # the private wrapper's old name and call form, kept for its callers
    matrix: Matrix, op: str, config: Config, operands: Sequence[Any]
) -> Callable[..., Any]:
    """``_CpuKernel(A, op, config, operands)((x, y))``: a TunedKernel (zero-copy) behind the
    call form of the copying wrapper it replaced."""
    from cognate.targets.cpu.tuned import TunedKernel

    kernel = TunedKernel(matrix, op, config, tuple(operands))
    return lambda new_operands, out=None: kernel(*new_operands, out=out)


# --- tune: the whole search -----------------------------------------------------------------


def tune_matrix(
    matrix: Matrix,
    target: str = "cpu",
    op: str = "spmm",
    width: int = 64,
    top_k: int = 5,
    model: str | Path | None = None,
    verify: bool = False,
    n_candidates: int = DEFAULT_CANDIDATES,
    seed: int = DEFAULT_SEED,
    progress: Callable[[Measurement], None] | None = None,
    runner_options: dict[str, Any] | None = None,
    cover_families: bool = True,
    threads: int | None = None,
) -> TuneResult:
    """Rank the candidates of (target, op) for ``matrix``; with ``verify``, measure the top-k
    and the baseline (and on cpu the library references, all in interleaved rounds with
    ``threads`` threads, default all cores). ``cover_families``: the top-k holds each kernel
    family's best-ranked config (``runnable_top``)."""
    if threads is not None and (
        not isinstance(threads, int) or isinstance(threads, bool) or threads < 1
    ):
        raise CognateError(f"threads must be a positive integer, got {threads!r}")
    if not isinstance(width, int) or isinstance(width, bool) or not 1 <= width <= MAX_WIDTH:
        raise CognateError(f"width must be an integer in 1..{MAX_WIDTH}, got {width!r}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise CognateError(f"top-k must be a positive integer, got {top_k!r}")
    the_target = get_target(target)
    space = the_target.space(op)
    loaded = load_model(resolve_model_path(model, target, op), space)
    ranked, timings = rank(loaded, space, matrix, width, n_candidates, seed)
    baseline_config = space.baseline(matrix.shape)
    baseline = next(c for c in ranked if _same(c.config, baseline_config))
    start = time.perf_counter()
    family = space.family if cover_families else None
    top, skipped = runnable_top(ranked, matrix, op, width, top_k, target, family)
    timings.filter_s = time.perf_counter() - start
    for candidate in [*top, baseline]:
        candidate.description = space.describe(candidate.config)
    result = TuneResult(matrix, target, op, width, top, baseline, len(ranked), loaded.path, timings)
    result.skipped_too_large = skipped
    result.space_version = space.version
    if verify:
        _verify(result, the_target, progress, runner_options, threads)
    return result


def _verify(
    result: TuneResult,
    target: Target,
    progress: Callable[[Measurement], None] | None,
    runner_options: dict[str, Any] | None,
    threads: int | None = None,
) -> None:
    todo = [c.config for c in result.candidates]
    if result.baseline.config not in set(todo):
        todo.append(result.baseline.config)
    if result.target == "cpu":
        found = _verify_cpu(result, todo, progress, runner_options, threads)
    else:
        found = measure(
            target, result.matrix, result.op, result.width, todo, progress, runner_options
        )
    by_hash = {m.config.hash: m for m in found}
    for candidate in [*result.candidates, result.baseline]:
        m = by_hash[candidate.config.hash]
        candidate.status, candidate.runtime_s, candidate.error = m.status, m.runtime_s, m.error
        candidate.spread_s = m.spread_s
    result.verified = True


def _verify_cpu(
    result: TuneResult,
    todo: list[Config],
    progress: Callable[[Measurement], None] | None,
    runner_options: dict[str, Any] | None,
    threads: int | None,
) -> list[Measurement]:
    """Interleaved rounds of the configs and the library references in one process; if that
    process fails, the configs one by one with the isolated cpu runner (no library)."""
    try:
        outcome = interleaved_verify(result.matrix, result.op, result.width, todo, threads)
    except CognateError as exc:
        from cognate.timing import machine_load

        result.timing, result.library_error = "sequential", f"{exc}; library not timed"
        load = machine_load(threads)
        result.load = {**load.as_dict(), "line": load.line()}
        found = measure(
            get_target("cpu"), result.matrix, result.op, result.width, todo, progress,
            runner_options,
        )  # fmt: skip
        for m in found:
            m.counters.update(verify="sequential", load=result.load)
        return found
    result.timing, result.load = "interleaved", outcome["load"]
    result.remeasured = outcome["remeasured"]
    _take_library(result, outcome)
    found = []
    for config in todo:
        got = outcome["configs"][config.hash]
        counters = {"verify": "interleaved", "rounds": got.get("rounds"), "load": result.load}
        counters["remeasured"] = config.hash in result.remeasured
        m = Measurement(
            config, got["status"], got.get("runtime_s"), got.get("spread_s"), counters,
            got.get("error"),
        )  # fmt: skip
        found.append(m)
        if progress is not None:
            progress(m)
    return found


def _take_library(result: TuneResult, outcome: dict[str, Any]) -> None:
    """The library times of a verify outcome: all of them kept, the fastest as `library`."""
    result.libraries = {
        name: {k: v.get(k) for k in ("runtime_s", "spread_s", "inspect_s")}
        for name, v in outcome["library"].items()
        if v.get("runtime_s")
    }
    missing = outcome.get("library_missing") or {}
    if missing:
        result.library_error = "; ".join(f"{name}: {why}" for name, why in missing.items())
    if result.libraries:
        name = min(result.libraries, key=lambda n: result.libraries[n]["runtime_s"])
        result.library, result.library_runtime_s = name, result.libraries[name]["runtime_s"]


def record_verified(result: TuneResult, db: str | Path) -> int:
    """Store a verified result's measurements (top-k and baseline) with the store's public
    write path (the one collect uses), so the next training sees them. Rows written."""
    from cognate.store import Store

    if not result.verified:
        return 0
    seen: dict[str, Measurement] = {}
    for c in [*result.candidates, result.baseline]:
        if c.status is None or c.config.hash in seen:
            continue
        counters = {"verify": result.timing or "target runner"}
        if result.load is not None:
            counters["load"] = result.load
        if c.config.hash in result.remeasured:
            counters["remeasured"] = True
        seen[c.config.hash] = Measurement(
            c.config,
            c.status,
            c.runtime_s,
            c.spread_s,
            counters,
            c.error,  # type: ignore[arg-type]
        )
    with Store(db) as store:
        return store.record(
            result.matrix, result.target, result.op, result.width, list(seen.values()),
            space_version=result.space_version, baseline_hash=result.baseline.config.hash,
        )  # fmt: skip


# --- emit -----------------------------------------------------------------------------------


def _stem(result: TuneResult) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in result.matrix.name)
    return f"{safe or 'matrix'}-{result.target}-{result.op}-{result.config.hash}"


def emit(result: TuneResult, directory: str | Path) -> list[Path]:
    """Write the chosen schedule: cpu: its generated C source (and the runtime arguments);
    spade: the simulator configuration (machine + schedule) as YAML. Returns the files."""
    import yaml

    directory = Path(directory).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CognateError(f"{directory}: cannot create the emit directory: {err}") from None
    best, stem = result.best, _stem(result)
    info = {
        "matrix": result.matrix.name,
        "target": result.target,
        "op": result.op,
        "width": result.width,
        "config": dict(best.config.knobs),
        "description": best.description,
        "predicted_rank": best.rank,
        "runtime_s": best.runtime_s,
    }
    if result.target == "cpu":
        from cognate.targets.cpu.families import kernel_source

        # kernel_source re-validates every knob against the whitelists before codegen.
        source, entry, args = kernel_source(result.op, best.config.knobs, result.width)
        header = (
            f"/* cognate tune: {result.matrix.name}, {result.op}, width {result.width}\n"
            f" * schedule: {best.description}\n"
            f" * entry point {entry}; pass the runtime arguments "
            + ", ".join(f"{k}={v}" for k, v in args.items())
            + "\n * compile: cc -O3 -march=native -fopenmp -fPIC -shared */\n"
        )
        files = [directory / f"{stem}.c", directory / f"{stem}.json"]
        _write(files[0], header + source)
        _write(files[1], json.dumps({**info, "runtime_args": args}, indent=2) + "\n")
        return files
    if result.target == "spade":
        from cognate.targets.spade.space import SpadeSpace

        space = SpadeSpace(result.op)
        schedule = space.schedule(best.config)
        machine = _spade_machine(space)
        doc = {**info, "schedule": dataclasses.asdict(schedule), "machine": machine}
        path = directory / f"{stem}.yaml"
        _write(path, yaml.safe_dump(doc, sort_keys=False))
        return [path]
    path = directory / f"{stem}.json"
    _write(path, json.dumps(info, indent=2) + "\n")
    return [path]


def _spade_machine(space: Any) -> dict[str, Any]:
    from cognate.targets.spade.simulator import load_machine

    return load_machine(space.machine_name).model_dump(mode="json")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise CognateError(f"{path}: cannot write: {err}") from None
