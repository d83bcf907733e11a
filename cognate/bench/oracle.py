"""The summary of a timed grid of configs per matrix: the oracle (best config of each
matrix) and the best fixed config chosen leave-one-out, both as speedups over the baseline."""

from __future__ import annotations

from cognate.stats import geomean

BASELINE = "baseline"
AGAIN = "noise:baseline"  # the baseline packed and timed a second time: the noise floor
FIXED_BAR = 1.15  # the bar the space must clear: the oracle beats the best fixed config by this
NOT_CONFIGS = ("lib:", "kept:", "noise:")  # library, kept-pick and noise entries of a row


def config_speedups(seconds: dict[str, float]) -> dict[str, float]:
    """Each config's speedup over the row's baseline (library and noise entries left out)."""
    return {k: seconds[BASELINE] / v for k, v in seconds.items() if not k.startswith(NOT_CONFIGS)}


def oracle_and_fixed(rows: list[dict]) -> tuple[list[float], list[float], list[str]]:
    """Per row (matrix, with ``seconds``: name -> median seconds): the oracle's speedup over
    the baseline, the speedup of the config chosen leave-one-out (best geomean speedup over
    the other rows, among the configs every row measured), and that config's name."""
    speedups = [config_speedups(r["seconds"]) for r in rows]
    oracle = [max(s.values()) for s in speedups]
    fixed, picks = [], []
    for index, s in enumerate(speedups):
        others = speedups[:index] + speedups[index + 1 :]
        names = sorted(set.intersection(*(set(o) for o in others)) & set(s))
        pick = max(names, key=lambda n: geomean([o[n] for o in others]))
        picks.append(pick)
        fixed.append(s[pick])
    return oracle, fixed, picks
