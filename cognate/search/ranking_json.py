"""The ``ranking`` object of ``tune --json``: one shape for every target and model.

A model's metadata says which ranking ``tune`` uses (``model.portfolio.ranking_used``) in
one of two forms: a validation decision between learned, fixed-K and their blend (what
``finetune`` and ``cognate portfolio`` store now), or a portfolio's own validation row
(older models, e.g. the shipped spade ones), or nothing (an unvalidated or zero-shot
model). Scripts should not have to know which: every form becomes the shape below, with
the unit in each figure's name (speedups are geomeans over the validation matrices of
baseline time / chosen time; fractions are of the validation oracle's speedup).
"""

from __future__ import annotations

from typing import Any

FIGURES = (
    ("top1", "top1_speedup_vs_baseline"),
    ("best_of_k", "best_of_k_speedup_vs_baseline"),
    ("top1_of_oracle", "top1_fraction_of_oracle"),
    ("best_of_k_of_oracle", "best_of_k_fraction_of_oracle"),
)


def ranking_json(used: dict[str, Any] | None) -> dict[str, Any] | None:
    """``ranking_used``'s dict in the one shape:

    ``used`` (learned | fixed-K | blend), ``portfolio`` (words), ``why`` (words),
    ``validation``: None when nothing validated the choice, else ``matrices`` (int or None
    where the model did not store it), ``k``, ``oracle_speedup_vs_baseline`` (or None) and
    ``options``: {name: the four figures of ``FIGURES`` (None where not stored),
    ``portfolio_size``, ``chosen``}; ``greedy_from``: which matrices the greedy fixed set
    came from (or None)."""
    if used is None:
        return None
    out: dict[str, Any] = {
        "used": used.get("used"),
        "portfolio": used.get("portfolio"),
        "why": used.get("why"),
        "validation": None,
        "greedy_from": used.get("greedy_from"),
    }
    if used.get("options"):
        out["validation"] = {
            "matrices": used.get("validation_matrices"),
            "k": used.get("k"),
            "oracle_speedup_vs_baseline": used.get("oracle"),
            "options": {
                name: _option(figures, name == used.get("chosen", used.get("used")))
                for name, figures in used["options"].items()
            },
        }
    elif used.get("validation"):  # a portfolio's own row: the chosen option's speedups
        row = used["validation"]
        out["validation"] = {
            "matrices": None,
            "k": row.get("k"),
            "oracle_speedup_vs_baseline": None,
            "options": {used.get("used"): _option(row, True)},
        }
    return out


def _option(figures: dict[str, Any], chosen: bool) -> dict[str, Any]:
    option: dict[str, Any] = {new: figures.get(old) for old, new in FIGURES}
    option["portfolio_size"] = figures.get("size")
    option["chosen"] = chosen
    return option
