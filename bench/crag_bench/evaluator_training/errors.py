"""The one error type of evaluator training."""

from __future__ import annotations

from crag.evaluator.base import EvaluatorError


class TrainingError(EvaluatorError, ValueError):
    """Training cannot start or go on: bad arguments, pairs, base model or checkpoint.

    It is both an :class:`~crag.evaluator.base.EvaluatorError` (what the command line reports) and a
    :class:`ValueError` (most causes are bad arguments), so callers may catch either.
    """
