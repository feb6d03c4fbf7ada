"""Scoring that survives a failing evaluator: the shipped embedding evaluator steps in.

An evaluator on a model server (the ``llm`` evaluator with ``evaluator_model=endpoint``) can
fail mid-run: the server is down, busy past the timeout, or does not know the model. As with a
web search that fails, the run goes on with what it has and says so: the passages (and later
strips and web paragraphs) are scored by the embedding evaluator, which runs in-process on the
store's own embedder, and the run's ``graded_by`` records the switch, so that the action
thresholds and every later scoring step follow the evaluator that actually scored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from crag.core.state import State
from crag.evaluator.base import EvaluatorError, RetrievalEvaluator
from crag.nodes.components import Components
from crag.settings.run_settings import RunSettings

logger = logging.getLogger(__name__)

FALLBACK_EVALUATOR = "embedding"
"""The evaluator that scores when the configured one fails: in-process, always at hand."""


def with_evaluator(settings: RunSettings, name: str) -> RunSettings:
    """``settings`` with the evaluator ``name`` (its own model and thresholds' defaults)."""
    return settings.replaced(evaluator=name, evaluator_model="")


def scoring_settings(state: State, settings: RunSettings) -> RunSettings:
    """The settings this run scores with: its own, or the fallback evaluator's after a failure."""
    graded_by = state.get("graded_by") or ""
    if not graded_by or graded_by == settings.deployment.evaluator:
        return settings
    return with_evaluator(settings, graded_by)


class Scored(NamedTuple):
    """Scores, the settings they were made under, and notes on a fallback (else none)."""

    scores: list[float]
    settings: RunSettings
    """The settings of the evaluator that scored: its thresholds go with its scores."""
    notes: list[str]


def evaluator_name(components: Components, settings: RunSettings) -> str:
    """The name of the evaluator ``settings`` asks for (its setting, if it does not load)."""
    try:
        return str(getattr(components.evaluator(settings), "name", settings.deployment.evaluator))
    except EvaluatorError:
        return settings.deployment.evaluator


def score_or_fall_back(
    state: State,
    settings: RunSettings,
    components: Components,
    score: Callable[[RetrievalEvaluator], list[float]],
) -> Scored:
    """``score(evaluator)`` with the run's evaluator, or the fallback one if that one fails.

    Only ``grade`` records a switch in ``graded_by``: refine and the web search run side by
    side, and may not both write it.

    Raises:
        EvaluatorError: The fallback evaluator failed too, or the run's evaluator is it.
    """
    scoring = scoring_settings(state, settings)
    try:
        return Scored(score(components.evaluator(scoring)), scoring, [])
    except EvaluatorError as exc:
        if scoring.deployment.evaluator == FALLBACK_EVALUATOR:
            raise
        logger.warning(
            "the %s evaluator failed (%s); scoring with %s",
            scoring.deployment.evaluator,
            exc,
            FALLBACK_EVALUATOR,
        )
        fallback = with_evaluator(settings, FALLBACK_EVALUATOR)
        scores = score(components.evaluator(fallback))
        note = (
            f"the {scoring.deployment.evaluator} evaluator failed ({exc}); scored with the "
            f"{FALLBACK_EVALUATOR} evaluator instead"
        )
        return Scored(scores, fallback, [note])
