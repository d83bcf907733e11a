"""What a collection did: counts per status, failures, repeat agreement; one line for the CLI."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from cognate.runner import STATUSES


@dataclass
class CollectSummary:
    """What a collection did; ``line()`` is the one-line report the CLI prints."""

    matrices: int = 0  # matrices whose planned work all reached the store
    written: int = 0  # records written, the re-timed baselines included
    skipped: int = 0  # configs the store already had
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (path, one-line reason)
    retried: int = 0  # timeout / error records measured again
    noisy: int = 0  # records timed while the machine was busy (marked in the store)
    repeats: list[tuple[float, float]] = field(default_factory=list)  # (first, repeat) runtimes
    interrupted: bool = False
    stop_exit_code: int = 130  # 128 + the signal that stopped the run (SIGINT, TERM, HUP)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return self.stop_exit_code
        return 1 if self.failures else 0

    def line(self) -> str:
        counts = ", ".join(f"{s} {self.statuses[s]}" for s in STATUSES if self.statuses[s])
        text = (
            f"collected {self.written} records ({counts or 'none new'}) over "
            f"{self.matrices} matrices; {self.skipped} configs already stored"
        )
        if self.retried:
            text += f"; {self.retried} failed record(s) retried"
        if self.noisy:
            text += f"; {self.noisy} timed on a busy machine (marked noisy)"
        if self.repeats:
            text += f"; {repeat_agreement(self.repeats)}"
        if self.failures:
            text += f"; {len(self.failures)} matrix file(s) failed: "
            text += ", ".join(path for path, _ in self.failures)
        if self.interrupted:
            text += "; interrupted (what was measured is stored; rerun to resume)"
        return text


def repeat_agreement(pairs: Sequence[tuple[float, float]]) -> str:
    """How well repeated timings agree: Spearman rank correlation of first vs repeat runtime
    over all repeated pairs, and the median relative spread |a - b| / mean(a, b)."""
    import numpy as np
    from scipy.stats import spearmanr

    first, again = (np.array(x, dtype=float) for x in zip(*pairs, strict=True))
    spread = float(np.median(np.abs(first - again) / ((first + again) / 2)))
    rho = spearmanr(first, again).statistic if len(pairs) > 1 else float("nan")
    rank = "n/a" if not np.isfinite(rho) else f"{rho:.3f}"
    return f"{len(pairs)} repeats: Spearman {rank}, median spread {100 * spread:.1f}%"
