"""Progress lines for long jobs, readable through a pipe as on a terminal.

A progress bar draws nothing when stderr is not a terminal (a log file, ``| tee``, a batch
job), so a job that runs for minutes looked hung. These are plain lines on stderr, flushed
at once, at most one per ``every`` seconds while a phase runs plus one when it ends, each
with the time so far and an estimate of the time left.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

EVERY_S = 15.0  # a line at least this often while a phase runs: often enough to see it move


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``2 h 05 min``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def plural(count: int, noun: str) -> str:
    """``1 epoch``, ``3 epochs``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def say(text: str, stream: TextIO | None = None) -> None:
    """One line on stderr (or ``stream``), flushed: a pipe sees it now, not at exit."""
    print(text, file=stream or sys.stderr, flush=True)


class Ticker:
    """``what: done/total (pct), elapsed, ETA left`` lines for one phase of ``total`` items."""

    def __init__(
        self,
        what: str,
        total: int,
        every: float = EVERY_S,
        stream: TextIO | None = None,
        unit: str = "",
        emit: Callable[[str], None] | None = None,
    ) -> None:
        """``emit``: where a line goes (default: ``say`` on ``stream``)."""
        self.what, self.total, self.every, self.stream = what, total, every, stream
        self.emit = emit or (lambda text: say(text, stream))
        self.unit = f" {unit}" if unit else ""
        self.started = self.last = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def update(self, done: int, note: str = "") -> None:
        """Report ``done`` items: printed when ``every`` seconds passed since the last line,
        and always for the last item."""
        now = time.monotonic()
        if done < self.total and now - self.last < self.every:
            return
        self.last = now
        self.emit(self.line(done, note))

    def line(self, done: int, note: str = "") -> str:
        elapsed = self.elapsed
        text = f"{self.what}: {done}/{self.total}{self.unit}"
        if self.total:
            text += f" ({100 * done / self.total:.0f}%)"
        text += f", {duration(elapsed)}"
        if 0 < done < self.total:
            text += f", ETA {duration(elapsed / done * (self.total - done))}"
        return text + (f"; {note}" if note else "")


class EpochReporter:
    """A training ``progress`` callback (``cognate.model.train.ProgressFn``) that prints a
    line per epoch (its time, its validation metrics, the time so far and the ETA of the
    remaining epochs) and, within a long epoch, a line per ``every`` seconds."""

    def __init__(
        self,
        epochs: int,
        every: float = EVERY_S,
        stream: TextIO | None = None,
        before: str = "training",
    ) -> None:
        self.epochs, self.every, self.stream, self.before = epochs, every, stream, before
        self.started = time.monotonic()
        self.epoch_started = self.started
        self.trained_s = 0.0  # time of the training epochs (1..), for the ETA
        self.ticker: Ticker | None = None

    def __call__(self, epoch: int, step: int, total: int, metrics: dict[str, float] | None) -> None:
        if metrics is None:
            if self.ticker is None or self.ticker.what != f"epoch {epoch}/{self.epochs}":
                what = f"epoch {epoch}/{self.epochs}"
                self.ticker = Ticker(what, total, self.every, self.stream, "matrices")
                self.ticker.started = self.epoch_started
            if step < total:  # the epoch's end gets its own line below
                self.ticker.update(step)
            return
        now = time.monotonic()
        took = now - self.epoch_started
        self.epoch_started, self.ticker = now, None
        scores = (
            f"val acc {metrics['pairwise_accuracy']:.3f}, top-1 {metrics['top1']:.3f}x, "
            f"top-5 {metrics['top5']:.3f}x, oracle {metrics['oracle']:.3f}x"
        )
        if epoch == 0:
            # epoch 0 scores the model before any step (embedding the validation matrices)
            say(f"epoch 0 (before {self.before}, {duration(took)}): {scores}", self.stream)
            return
        self.trained_s += took
        left = self.epochs - epoch
        eta = (
            f"ETA {duration(self.trained_s / epoch * left)} for {plural(left, 'more epoch')} "
            "(early stopping may end sooner)"
            if left
            else "last epoch"
        )
        say(
            f"epoch {epoch}/{self.epochs} ({duration(took)}): {scores}; "
            f"{duration(now - self.started)} so far, {eta}",
            self.stream,
        )
