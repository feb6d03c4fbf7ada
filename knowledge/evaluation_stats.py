"""The statistics of an evaluation: is CRAG better than plain RAG on these questions.

Shared by ``crag eval FILE`` (the operator's own questions, :mod:`crag.app.cli.eval_command`)
and ``crag-bench eval`` (the benchmark's sets, ``crag_bench.significance`` re-exports these):

* one rate's 95% interval: Wilson's score interval (:func:`wilson_interval`), which stays
  inside [0, 1] and is sensible for few questions and rates near 0 or 1;
* two pipelines on the same questions: the paired difference of two rates (accuracy,
  knowledge recall) with a percentile interval from a seeded paired bootstrap (the questions
  are resampled with replacement, each keeping both of its outcomes), and McNemar's exact
  test: under "A and B are equally good" the questions only one of them gets right fall to
  either side with probability 1/2, so the two-sided p-value is an exact binomial test on those
  discordant questions. A difference is called significant only when both agree: the interval
  leaves out 0 and p is below 0.05;
* the rates split by the action CRAG took (:func:`by_action`), with the baseline's rates on the
  same questions: where correction pays and where it costs;
* a latency's median and 95th percentile (:func:`spread`).

Everything here is numpy and the standard library, not scipy, which crag does not otherwise
need: scipy is 143 MB installed and ``import scipy.stats`` took 1.6 s on two loaded cores
(2026-12-02), for about 40 lines here. :func:`mcnemar_exact` is the two-sided p-value of
``scipy.stats.binomtest(min, n, 0.5)``; :func:`paired_bootstrap` draws multinomial counts of
the distinct differences instead of resampling n questions (the same distribution).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import comb, sqrt
from typing import Any, Literal, TypedDict, Unpack

import numpy as np

__all__ = [
    "ACTIONS",
    "ALPHA",
    "CONFIDENCE",
    "MEASURES",
    "RESAMPLES",
    "BootstrapSettings",
    "PairedRate",
    "Significance",
    "by_action",
    "compare_outcomes",
    "format_p",
    "mcnemar_exact",
    "paired_bootstrap",
    "paired_rate",
    "spread",
    "wilson_interval",
]

RESAMPLES = 10_000
"""Bootstrap resamples per interval."""

CONFIDENCE = 0.95
"""Coverage of the intervals."""

ALPHA = 0.05
"""A p-value below this (with an interval that leaves out 0) is significant."""

Significance = Literal["better", "worse", "not significant"]

MEASURES: tuple[str, ...] = ("accuracy", "knowledge_recall")
"""The paired outcomes of a question: answered right, and the answer reached the generator."""

ACTIONS: tuple[str, ...] = ("correct", "ambiguous", "incorrect")
"""CRAG's actions, in the paper's order."""


class BootstrapSettings(TypedDict, total=False):
    """Keywords passed through to :func:`paired_bootstrap`, which holds their defaults."""

    resamples: int
    confidence: float
    seed: int


def wilson_interval(
    successes: int, trials: int, confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """Wilson's score interval of a rate ``successes / trials``; ``None`` without trials.

    Raises:
        ValueError: A count is negative, ``successes`` exceeds ``trials``, or ``confidence``
            is not between 0 and 1.
    """
    if successes < 0 or trials < 0 or successes > trials:
        raise ValueError(f"cannot take {successes} successes of {trials} trials")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    if trials == 0:
        return None
    z = statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    rate = successes / trials
    denominator = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denominator
    half = z * sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """McNemar's exact two-sided p-value from the discordant counts.

    Args:
        a_only: Questions only A got right.
        b_only: Questions only B got right.

    Returns:
        ``min(1, 2 * P(X <= min(a_only, b_only)))`` for ``X ~ Binomial(a_only + b_only, 1/2)``;
        1.0 when there are no discordant questions. Exact integer arithmetic, so large counts
        neither overflow nor lose precision (a tiny p may underflow to 0.0).

    Raises:
        ValueError: A count is negative.
    """
    if a_only < 0 or b_only < 0:
        raise ValueError(f"discordant counts must be 0 or more, not {a_only} and {b_only}")
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(a_only, b_only) + 1))
    p_value: float = 2 * tail / 2**n
    return min(1.0, p_value)


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float, float]:
    """The mean of ``a - b`` and its paired-bootstrap percentile interval.

    Resampling n questions with replacement is a multinomial draw over the distinct paired
    differences (for 0/1 outcomes: -1, 0 and 1), so each resample costs a few numbers, not n.

    Returns:
        ``(difference, low, high)``.

    Raises:
        ValueError: The sequences differ in length or are empty, or a setting is out of range.
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes differ in length: {len(a)} and {len(b)}")
    if not a:
        raise ValueError("no paired outcomes to compare")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence}")
    differences = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = len(differences)
    values, counts = np.unique(differences, return_counts=True)
    draws = np.random.default_rng(seed).multinomial(n, counts / n, size=resamples)
    means = draws @ values / n
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(differences.mean()), float(low), float(high)


@dataclass(frozen=True)
class PairedRate:
    """One rate of A against B on the same questions."""

    a: float
    b: float
    difference: float
    """``a - b``."""
    low: float
    high: float
    a_only: int
    """Questions where only A's outcome is true."""
    b_only: int
    p_value: float
    """McNemar's exact p-value."""

    @property
    def verdict(self) -> Significance:
        """A is "better" or "worse" when the interval leaves out 0 and p < 0.05."""
        if self.p_value >= ALPHA or self.low <= 0 <= self.high:
            return "not significant"
        return "better" if self.difference > 0 else "worse"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures, the verdict included."""
        return {
            "a": self.a,
            "b": self.b,
            "difference": self.difference,
            "low": self.low,
            "high": self.high,
            "a_only": self.a_only,
            "b_only": self.b_only,
            "p_value": self.p_value,
            "significant": self.verdict != "not significant",
            "verdict": self.verdict,
        }


def paired_rate(
    a: Sequence[bool], b: Sequence[bool], **settings: Unpack[BootstrapSettings]
) -> PairedRate:
    """Compare two paired 0/1 outcomes: rates, bootstrap interval of A - B, McNemar p.

    ``settings`` (``resamples``, ``confidence``, ``seed``) go to :func:`paired_bootstrap`.
    """
    difference, low, high = paired_bootstrap(
        [float(x) for x in a], [float(x) for x in b], **settings
    )
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return PairedRate(
        a=sum(map(bool, a)) / len(a),
        b=sum(map(bool, b)) / len(b),
        difference=difference,
        low=low,
        high=high,
        a_only=a_only,
        b_only=b_only,
        p_value=mcnemar_exact(a_only, b_only),
    )


def compare_outcomes(
    a: Mapping[str, Mapping[str, bool]],
    b: Mapping[str, Mapping[str, bool]],
    measures: Sequence[str],
    **settings: Unpack[BootstrapSettings],
) -> dict[str, Any] | None:
    """Every measure of A against B over the questions both have; ``None`` when none.

    Args:
        a: Question id → measure → outcome, for A.
        b: The same for B.
        measures: The outcomes to compare (e.g. ``"accuracy"``).
        **settings: ``resamples``, ``confidence`` and ``seed`` of the bootstrap, as for
            :func:`paired_bootstrap` (the same seed for every measure).

    Returns:
        ``{"questions": n, measure: PairedRate.as_dict(), ...}``; questions in the order of A.
    """
    shared = [qid for qid in a if qid in b]
    if not shared:
        return None
    figures: dict[str, Any] = {"questions": len(shared)}
    for measure in measures:
        rate = paired_rate(
            [a[q][measure] for q in shared], [b[q][measure] for q in shared], **settings
        )
        figures[measure] = rate.as_dict()
    return figures


Rows = Sequence[Mapping[str, Any]]


def by_action(
    rows: Rows, baseline: Mapping[str, Mapping[str, Any]], rates: Callable[[Rows], dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """CRAG's rows split by the action taken, with ``rates`` of CRAG and the baseline there.

    Args:
        rows: CRAG's rows; each has an ``id`` and an ``action`` (rows with none are left out).
        baseline: The baseline's rows by question id.
        rates: The figures of some rows (accuracy, knowledge recall, ...).

    Returns:
        Action → ``questions``, ``share`` (of the rows with an action), ``crag``
        (``rates`` of its rows, ``None`` when none took it) and ``rag`` (``rates`` of the
        baseline's rows for the same questions; ``None`` unless it has every one of them).
    """
    acted = [r for r in rows if r.get("action") in ACTIONS]
    found: dict[str, dict[str, Any]] = {}
    for action in ACTIONS:
        taken = [r for r in acted if r["action"] == action]
        paired = [baseline[str(r["id"])] for r in taken if str(r["id"]) in baseline]
        found[action] = {
            "questions": len(taken),
            "share": len(taken) / len(acted) if acted else None,
            "crag": rates(taken) if taken else None,
            "rag": rates(paired) if taken and len(paired) == len(taken) else None,
        }
    return found


def _p95(values: Sequence[float]) -> float:
    """The 95th percentile, interpolated between the closest ranks (as numpy's default)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """The median, the 95th percentile and the count of ``values`` (``None`` when empty)."""
    return {
        "median": statistics.median(values) if values else None,
        "p95": _p95(values) if values else None,
        "n": len(values),
    }


def format_p(value: float) -> str:
    """A p-value as the reports print it: 3 decimals, ``< 0.001`` below that."""
    return "< 0.001" if value < 0.001 else f"{value:.3f}"
