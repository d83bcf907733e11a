"""What ``tune`` found: the ranked top-k, the baseline, and the measurements when verified."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cognate.config import Config
from cognate.matrix import Matrix
from cognate.search.rank import Candidate, ScoredCount, Timings
from cognate.search.ranking_json import ranking_json
from cognate.targets import Verification, get_target


def _ran(c: Candidate) -> bool:
    return c.status == "ok" and bool(c.runtime_s)


def interval(c: Candidate) -> tuple[float, float]:
    """The median +- interquartile range of a measured candidate, as the table prints it
    (it holds the quartiles: a median lies between them)."""
    spread = c.spread_s or 0.0
    return c.runtime_s - spread, c.runtime_s + spread  # type: ignore[operator]


def beats(fast: Candidate, slow: Candidate) -> bool:
    """Whether ``fast`` ran faster than ``slow`` beyond the noise of both: their intervals
    (``interval``) do not overlap. A lead smaller than the two spreads together is what
    a busy machine produces between identical kernels."""
    return interval(fast)[1] < interval(slow)[0]


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
    library: str | None = None  # the fastest library reference timed
    library_runtime_s: float | None = None
    library_error: str | None = None  # why a library reference has no timing
    libraries: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> times
    skipped_too_large: int = 0  # better-ranked configs that cannot run on this matrix
    load: dict[str, Any] | None = None  # the machine's load when the timings were taken
    timing: str | None = None  # how the verify timed: "interleaved", "one at a time", ...
    checked: str | None = None  # the rows results were checked on against float64 scipy
    remeasured: list[str] = field(default_factory=list)  # hashes re-timed head to head
    space_version: str = ""
    ranking: dict[str, Any] | None = None  # which ranking the model used, and why
    # The model never trained on a host like this machine (``new_host_note``); and, where
    # its leave-one-host-out evaluation found its rank 1 below the baseline config on a new
    # host (docs/evaluation/hosts.md), an unverified pick is the baseline.
    new_host: bool = False
    new_host_baseline: bool = False
    scored_count: ScoredCount | None = None  # where the n_scored configs came from
    _kernel: Any = field(default=None, repr=False)

    @property
    def best(self) -> Candidate:
        """Verified: the fastest measured candidate that beats the baseline outside the
        spread of both (``beats``), else the baseline; unverified or nothing ran: rank 1
        (the baseline on a host the model never trained on, where its rank 1 lost to the
        baseline on such hosts: ``new_host_baseline``). A baseline that did not run gives
        way to the fastest candidate that did."""
        if not self.verified:
            return self.baseline if self.new_host_baseline else self.candidates[0]
        base = self.baseline
        measured = [c for c in self.candidates if _ran(c) and c.config != base.config]
        if not _ran(base):
            return min(measured, key=lambda c: (c.runtime_s, c.rank), default=self.candidates[0])
        winners = [c for c in measured if beats(c, base)]
        return min(winners, key=lambda c: (c.runtime_s, c.rank), default=base)

    @property
    def closest_rival(self) -> Candidate | None:
        """Verified and the baseline kept: the fastest candidate whose median is below the
        baseline's (its lead within the spreads), or None when none ran faster."""
        if not self.kept_baseline:
            return None
        base = self.baseline
        faster = [
            c for c in self.candidates
            if _ran(c) and c.config != base.config and c.runtime_s < base.runtime_s
        ]  # fmt: skip
        return min(faster, key=lambda c: (c.runtime_s, c.rank), default=None)

    @property
    def kept_baseline(self) -> bool:
        """Verified, and no candidate beat the baseline config."""
        return self.verified and self.best is self.baseline

    @property
    def all_failed(self) -> bool:
        """Verified, and not one config (candidate or baseline) ran."""
        return self.verified and not any(_ran(c) for c in [*self.candidates, self.baseline])

    def verdict(self) -> dict[str, Any] | None:
        """Verified: how ``best`` was decided, for the JSON: the rule, whether a candidate
        was named faster than the baseline, and both intervals (seconds)."""
        if not self.verified or self.all_failed:
            return None
        best, base = self.best, self.baseline
        return {
            "rule": "a candidate beats the baseline only when its median + interquartile range "
            "is below the baseline's median - interquartile range",
            "faster_than_baseline": best is not base and _ran(base),
            "best_interval_s": list(interval(best)) if _ran(best) else None,
            "baseline_interval_s": list(interval(base)) if _ran(base) else None,
            "unreliable": self.unreliable,
        }

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

    def take(self, verification: Verification) -> None:
        """Record a verify's measurements on the candidates and the baseline."""
        by_hash = {m.config.hash: m for m in verification.measurements}
        for candidate in [*self.candidates, self.baseline]:
            m = by_hash[candidate.config.hash]
            candidate.status, candidate.runtime_s, candidate.error = m.status, m.runtime_s, m.error
            candidate.spread_s, candidate.range_s = m.spread_s, m.range_s
        self.timing, self.load = verification.timing, verification.load
        self.checked = verification.checked
        self.remeasured = list(verification.remeasured)
        self.libraries, self.library_error = verification.libraries, verification.library_error
        if self.libraries:
            name = min(self.libraries, key=lambda n: self.libraries[n]["runtime_s"])
            self.library, self.library_runtime_s = name, self.libraries[name]["runtime_s"]
        self.verified = True

    def kernel(self, *operands: Any, out: Any = None) -> Any:
        """Run the chosen schedule, where the target has a callable kernel (cpu): SpMM
        ``kernel(B, out=None)`` -> A @ B; SDDMM ``kernel(X, Y, out=None)`` -> CSR with A's
        pattern, A * (X @ Y.T).

        A is packed and the kernel compiled once per dense width. The operands are read in
        place when they are float32 and C-contiguous (numpy arrays or torch CPU tensors);
        anything else is copied once into that form. The result is written into ``out`` when
        given (SpMM: float32 M x width; SDDMM: float32 A.nnz values in A's CSR order; a wrong
        shape or dtype is one clear CognateError), else into one newly allocated array.
        Torch inputs give torch outputs. See cognate/targets/cpu/tuned.py.
        """
        if self._kernel is None:
            self._kernel = get_target(self.target).kernel(self.matrix, self.op, self.config)
        return self._kernel(*operands, out=out)

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
            "ranking": ranking_json(self.ranking),
            "scored": self.n_scored,
            "scored_from": self.scored_count.as_dict() if self.scored_count else None,
            "skipped_too_large": self.skipped_too_large,
            "verified": self.verified,
            "new_host": self.new_host,
            "new_host_baseline": self.new_host_baseline,
            "baseline": base,
            "candidates": [c.as_dict() for c in self.candidates],
            "best": {
                "rank": best.rank,
                "scored_rank": best.scored_rank,  # place in the ranking of every scored config
                "config": dict(best.config.knobs),
                "description": best.description,
                "hash": best.config.hash,
                "runtime_s": best.runtime_s,
                "spread_s": best.spread_s,
                "is_baseline": best is self.baseline,
            },
            "verdict": self.verdict(),
            "all_failed": self.all_failed,
            "kept_baseline": self.kept_baseline,
            "speedup_vs_baseline": self.speedup_vs_baseline,
            "timings": self.timings.as_dict(),
        }
        if get_target(self.target).has_library:
            out["library"] = self.library
            out["library_runtime_s"] = self.library_runtime_s
            out["speedup_vs_library"] = self.speedup_vs_library
            out["library_error"] = self.library_error
            out["libraries"] = self.libraries
            if self.verified:
                out.update(timing=self.timing, remeasured=self.remeasured, load=self.load)
                out["checked_rows"] = self.checked
                out["unreliable"] = self.unreliable
        return out
