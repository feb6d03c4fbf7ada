"""Fit the action trigger's two thresholds to an operator's own questions.

Each question is reduced to its best passage score and whether the retrieved passages hold one
of its answers (:class:`Observation`). The thresholds are chosen for what the actions mean:

* Correct means "the store has it": the upper threshold is the lowest candidate such that, of
  the questions scoring above it, at least ``correct_precision`` hold an answer;
* Incorrect means "the store lacks it" (its passages are discarded): the lower threshold is the
  highest candidate, not above the upper one, such that, of the questions scoring below it, at
  most ``incorrect_miss`` hold an answer.

The candidates are the midpoints between consecutive distinct best scores, so a threshold never
splits questions of equal score. The actions are those of :func:`trigger_action`, the trigger
the graph runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from crag.core.state import Action
from crag.knowledge.action_trigger import trigger_action

ACTIONS: tuple[Action, ...] = ("correct", "ambiguous", "incorrect")


@dataclass(frozen=True)
class Observation:
    """One question: its best passage score and whether its passages hold an answer."""

    best_score: float | None
    """``None``: nothing was retrieved (the trigger's Incorrect, whatever the thresholds)."""
    holds_answer: bool


@dataclass(frozen=True)
class ThresholdFit:
    """The fitted pair; a threshold no candidate fitted is the current one."""

    upper: float
    lower: float
    upper_fitted: bool
    """False: no candidate met the Correct target, so ``upper`` is the current setting."""
    lower_fitted: bool
    """False: no candidate met the Incorrect target, so ``lower`` is the current setting (or the
    upper threshold, where the current lower one is above it)."""


@dataclass(frozen=True)
class ActionShare:
    """The questions one action takes, and how many of them hold an answer."""

    questions: int
    holding_answer: int


@dataclass(frozen=True)
class PairOutcome:
    """What a pair of thresholds does to the questions."""

    upper: float
    lower: float
    total: int
    actions: dict[Action, ActionShare]
    answers_discarded: int
    """Incorrect questions whose passages held an answer (the refined passages are dropped)."""
    web_skipped_without_answer: int
    """Correct questions whose passages lacked an answer (the web is not searched)."""


def _midpoint(low: float, high: float) -> float:
    """The midpoint of two scores, rounded to six decimals where that keeps it between them.

    The graph rounds scores to four decimals, so the midpoint is exact at five and prints as
    written (0.12345, not 0.12345000000000001).
    """
    middle = (low + high) / 2
    rounded = round(middle, 6)
    return rounded if low < rounded < high else middle


def candidate_thresholds(observations: Sequence[Observation]) -> list[float]:
    """The midpoints between consecutive distinct best scores, ascending."""
    scores = sorted({o.best_score for o in observations if o.best_score is not None})
    return [_midpoint(low, high) for low, high in itertools.pairwise(scores)]


def fit_upper(observations: Sequence[Observation], correct_precision: float) -> float | None:
    """The lowest candidate above which at least ``correct_precision`` hold an answer.

    ``None``: no candidate reaches it.
    """
    for threshold in candidate_thresholds(observations):
        above = [o for o in observations if o.best_score is not None and o.best_score > threshold]
        if above and sum(o.holds_answer for o in above) / len(above) >= correct_precision:
            return threshold
    return None


def fit_lower(
    observations: Sequence[Observation], incorrect_miss: float, ceiling: float
) -> float | None:
    """The highest candidate, at most ``ceiling``, below which at most ``incorrect_miss`` hold one.

    Questions with nothing retrieved count as below every candidate. ``None``: no candidate
    reaches it.
    """
    for threshold in reversed(candidate_thresholds(observations)):
        if threshold > ceiling:
            continue
        below = [o for o in observations if o.best_score is None or o.best_score < threshold]
        if below and sum(o.holds_answer for o in below) / len(below) <= incorrect_miss:
            return threshold
    return None


def fit_thresholds(
    observations: Sequence[Observation],
    *,
    correct_precision: float,
    incorrect_miss: float,
    current: tuple[float, float],
) -> ThresholdFit:
    """Fit (upper, lower); each one not met falls back to ``current`` (upper, lower).

    The lower threshold stays at most the upper one: a current lower threshold above a fitted
    upper one falls back to the upper one instead (no Ambiguous).
    """
    current_upper, current_lower = current
    upper = fit_upper(observations, correct_precision)
    fitted_upper = current_upper if upper is None else upper
    lower = fit_lower(observations, incorrect_miss, fitted_upper)
    fallback_lower = min(current_lower, fitted_upper)
    return ThresholdFit(
        upper=fitted_upper,
        lower=fallback_lower if lower is None else lower,
        upper_fitted=upper is not None,
        lower_fitted=lower is not None,
    )


def pair_outcome(observations: Sequence[Observation], upper: float, lower: float) -> PairOutcome:
    """The actions the trigger takes under (``upper``, ``lower``), and what each costs."""
    questions = dict.fromkeys(ACTIONS, 0)
    holding = dict.fromkeys(ACTIONS, 0)
    for observation in observations:
        scores = [] if observation.best_score is None else [observation.best_score]
        action = trigger_action(scores, upper, lower)["action"]
        questions[action] += 1
        holding[action] += observation.holds_answer
    return PairOutcome(
        upper=upper,
        lower=lower,
        total=len(observations),
        actions={a: ActionShare(questions[a], holding[a]) for a in ACTIONS},
        answers_discarded=holding["incorrect"],
        web_skipped_without_answer=questions["correct"] - holding["correct"],
    )
