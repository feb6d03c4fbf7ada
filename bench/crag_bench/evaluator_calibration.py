"""Fit the action trigger's two thresholds to labelled (question, passage) pairs.

The paper's trigger calls retrieval Correct when a passage scores above the upper threshold
and Incorrect when every passage scores below the lower one. Its thresholds (0.59 and -0.99
on PopQA) belong to its T5 evaluator; another evaluator needs its own. Given each pair's score
and its label (+1 gold page, -1 not), :func:`fit_thresholds` picks

* ``upper``: the smallest threshold such that, among the pairs scoring above it, at least the
  target share are positives (the precision of "Correct");
* ``lower``: the largest threshold such that, among the pairs scoring below it, at least the
  target share are negatives (the precision of "Incorrect").

Thresholds lie in the gaps between observed scores, at the shortest decimal near the middle
of the gap, so they print cleanly and do not sit on a training score. The comparisons are
strict, as in :func:`crag.knowledge.action_trigger.trigger_action`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from crag.settings.method import PAPER_THRESHOLDS

logger = logging.getLogger(__name__)

PAPER_UPPER: float = PAPER_THRESHOLDS[0]
"""The paper's upper threshold (PopQA), used when no threshold reaches the target."""

PAPER_LOWER: float = PAPER_THRESHOLDS[1]
"""The paper's lower threshold (PopQA), used when no threshold reaches the target."""

EDGE_MARGIN: float = 0.01
"""How far outside the observed scores an "all pairs" threshold is placed."""

_TOLERANCE = 1e-12


@dataclass(frozen=True)
class Thresholds:
    """Fitted thresholds and what they give on the pairs they were fitted to.

    Pairs scoring above ``upper`` are Correct, below ``lower`` Incorrect, the rest Ambiguous.
    """

    upper: float
    lower: float
    target_precision: float
    upper_fitted: bool
    """False: no threshold reached the target and ``upper`` is the paper's 0.59."""
    lower_fitted: bool
    """False: no threshold reached the target and ``lower`` is the paper's -0.99."""
    crossed: bool
    """The two thresholds crossed (lower above upper) and were merged into one."""
    pairs: int
    positives: int
    negatives: int
    correct: int
    """Pairs scoring above ``upper``."""
    ambiguous: int
    incorrect: int
    """Pairs scoring below ``lower``."""
    upper_precision: float | None
    """Share of positives among Correct pairs (``None``: no pair is Correct)."""
    upper_recall: float | None
    """Share of the positives that are Correct (``None``: no positives)."""
    lower_precision: float | None
    """Share of negatives among Incorrect pairs (``None``: no pair is Incorrect)."""
    lower_recall: float | None
    """Share of the negatives that are Incorrect (``None``: no negatives)."""

    @property
    def used_defaults(self) -> bool:
        """Whether a threshold fell back to the paper's value because none reached the target."""
        return not (self.upper_fitted and self.lower_fitted)

    @property
    def coverage(self) -> float:
        """Share of pairs that get a decision (Correct or Incorrect), not Ambiguous."""
        return (self.correct + self.incorrect) / self.pairs if self.pairs else 0.0

    def set_arguments(self) -> str:
        """The ``crag`` options that apply these thresholds."""
        return f"--set upper_threshold={self.upper!r} --set lower_threshold={self.lower!r}"


def threshold_between(low: float, high: float) -> float:
    """A short decimal strictly between ``low`` and ``high``, near their middle.

    Returns the value with the fewest decimals that lies in the middle half of the interval,
    e.g. ``0.6`` between ``0.2`` and ``0.9``.

    Raises:
        ValueError: ``low`` is not below ``high``.
    """
    if not low < high:
        raise ValueError(f"no threshold between {low} and {high}")
    middle = (low + high) / 2
    slack = (high - low) / 4
    for digits in range(17):
        value = round(middle, digits)
        if low < value < high and abs(value - middle) <= slack:
            return value + 0.0  # no negative zero
    return middle


@dataclass(frozen=True)
class _Gaps:
    """Distinct scores ascending and cumulative label counts below each gap.

    Gap ``i`` (0..m) lies below the distinct score ``values[i]``: gap 0 is below every score,
    gap m above every one.
    """

    values: list[float]
    pos_below: list[int]
    neg_below: list[int]

    @property
    def size(self) -> int:
        return len(self.values)

    @property
    def positives(self) -> int:
        return self.pos_below[-1]

    @property
    def negatives(self) -> int:
        return self.neg_below[-1]

    def threshold(self, gap: int) -> float:
        if gap == 0:
            return threshold_between(self.values[0] - EDGE_MARGIN, self.values[0])
        if gap == self.size:
            return threshold_between(self.values[-1], self.values[-1] + EDGE_MARGIN)
        return threshold_between(self.values[gap - 1], self.values[gap])


def _gaps(scores: Sequence[float], labels: Sequence[int]) -> _Gaps:
    counts: dict[float, list[int]] = {}
    for score, label in zip(scores, labels, strict=True):
        entry = counts.setdefault(float(score), [0, 0])
        entry[0 if label > 0 else 1] += 1
    values = sorted(counts)
    pos_below, neg_below = [0], [0]
    for value in values:
        pos_below.append(pos_below[-1] + counts[value][0])
        neg_below.append(neg_below[-1] + counts[value][1])
    return _Gaps(values, pos_below, neg_below)


def _reaches(hits: int, total: int, target: float) -> bool:
    return total > 0 and hits >= target * total - _TOLERANCE


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def fit_thresholds(
    scores: Sequence[float], labels: Sequence[int], target_precision: float = 0.9
) -> Thresholds:
    """Fit the upper and lower thresholds for a target precision.

    ``upper`` is the smallest threshold whose Correct pairs (scoring above it) are at least
    ``target_precision`` positives; ``lower`` the largest whose Incorrect pairs (scoring below
    it) are at least ``target_precision`` negatives. A threshold that no cut reaches falls back
    to the paper's value (0.59 or -0.99) and the result says so (``upper_fitted``,
    ``lower_fitted``, ``used_defaults``). When the fitted thresholds cross (lower above
    upper: the classes barely overlap, or the target is low), no pair need be Ambiguous: both
    become the one threshold between them that classifies the most pairs right. When only
    one was fitted and the paper's value for the other crosses it, the default moves onto
    the fitted one.

    Args:
        scores: One evaluator score per pair.
        labels: One label per pair: above 0 for a gold-page passage, otherwise not.
        target_precision: Required precision of Correct and of Incorrect, in (0, 1].

    Returns:
        The thresholds and the counts, precisions and recalls they give on these pairs.

    Raises:
        ValueError: No pairs, lengths differ, a score is not finite, or the target is
            outside (0, 1].
    """
    _check_inputs(scores, labels, target_precision)
    gaps = _gaps(scores, labels)
    upper_gap = _upper_gap(gaps, target_precision)
    lower_gap = _lower_gap(gaps, target_precision)
    upper, lower, crossed = _place(gaps, upper_gap, lower_gap)
    _log_fallbacks(target_precision, upper_gap, lower_gap)
    correct, correct_pos, incorrect, incorrect_neg = _decisions(scores, labels, upper, lower)
    positives, negatives = gaps.positives, gaps.negatives
    return Thresholds(
        upper=upper,
        lower=lower,
        target_precision=target_precision,
        upper_fitted=upper_gap is not None,
        lower_fitted=lower_gap is not None,
        crossed=crossed,
        pairs=len(scores),
        positives=positives,
        negatives=negatives,
        correct=correct,
        ambiguous=len(scores) - correct - incorrect,
        incorrect=incorrect,
        upper_precision=_ratio(correct_pos, correct),
        upper_recall=_ratio(correct_pos, positives),
        lower_precision=_ratio(incorrect_neg, incorrect),
        lower_recall=_ratio(incorrect_neg, negatives),
    )


def _log_fallbacks(target_precision: float, upper_gap: int | None, lower_gap: int | None) -> None:
    """Say which thresholds no cut reached (they fall back to the paper's values)."""
    if upper_gap is None or lower_gap is None:
        logger.info(
            "no threshold reaches precision %.3f for %s; using the paper's value",
            target_precision,
            " and ".join(
                name for name, gap in (("upper", upper_gap), ("lower", lower_gap)) if gap is None
            ),
        )


def _decisions(
    scores: Sequence[float], labels: Sequence[int], upper: float, lower: float
) -> tuple[int, int, int, int]:
    """``(correct, correct positives, incorrect, incorrect negatives)`` at the thresholds."""
    correct_pos = sum(1 for s, y in zip(scores, labels, strict=True) if s > upper and y > 0)
    correct = sum(1 for s in scores if s > upper)
    incorrect_neg = sum(1 for s, y in zip(scores, labels, strict=True) if s < lower and y <= 0)
    incorrect = sum(1 for s in scores if s < lower)
    return correct, correct_pos, incorrect, incorrect_neg


def _check_inputs(scores: Sequence[float], labels: Sequence[int], target_precision: float) -> None:
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores but {len(labels)} labels")
    if not scores:
        raise ValueError("no pairs to fit thresholds on")
    if not 0.0 < target_precision <= 1.0:
        raise ValueError(f"target precision must be in (0, 1], got {target_precision}")
    if any(score != score or score in (float("inf"), float("-inf")) for score in scores):
        raise ValueError("every score must be a finite number")


def _upper_gap(gaps: _Gaps, target_precision: float) -> int | None:
    """The lowest gap above which the pairs are at least ``target_precision`` positives."""
    positives, negatives = gaps.positives, gaps.negatives
    return next(
        (
            gap
            for gap in range(gaps.size)
            if _reaches(
                positives - gaps.pos_below[gap],
                (positives - gaps.pos_below[gap]) + (negatives - gaps.neg_below[gap]),
                target_precision,
            )
        ),
        None,
    )


def _lower_gap(gaps: _Gaps, target_precision: float) -> int | None:
    """The highest gap below which the pairs are at least ``target_precision`` negatives."""
    return next(
        (
            gap
            for gap in range(gaps.size, 0, -1)
            if _reaches(
                gaps.neg_below[gap], gaps.neg_below[gap] + gaps.pos_below[gap], target_precision
            )
        ),
        None,
    )


def _place(gaps: _Gaps, upper_gap: int | None, lower_gap: int | None) -> tuple[float, float, bool]:
    """``(upper, lower, crossed)``: the thresholds at the gaps (paper's values for none).

    Crossed thresholds become one: at the gap between them that classifies the most pairs
    right when both were fitted, else the fitted one.
    """
    if upper_gap is not None and lower_gap is not None and lower_gap > upper_gap:

        def right(gap: int) -> int:
            return (gaps.positives - gaps.pos_below[gap]) + gaps.neg_below[gap]

        best = max(range(upper_gap, lower_gap + 1), key=lambda gap: (right(gap), -gap))
        threshold = gaps.threshold(best)
        return threshold, threshold, True
    upper = gaps.threshold(upper_gap) if upper_gap is not None else PAPER_UPPER
    lower = gaps.threshold(lower_gap) if lower_gap is not None else PAPER_LOWER
    if lower <= upper:
        return upper, lower, False
    if upper_gap is None:
        return lower, lower, True
    return upper, upper, True
