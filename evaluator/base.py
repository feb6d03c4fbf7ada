"""The retrieval evaluator interface shared by grading, refinement and web selection."""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from crag.core.cancellation import raise_if_cancelled

logger = logging.getLogger(__name__)


class EvaluatorError(RuntimeError):
    """An evaluator could not be loaded or used (bad name, missing or wrong checkpoint)."""


@runtime_checkable
class RetrievalEvaluator(Protocol):
    """Scores how well passages answer a question, each in [-1, 1].

    +1 means "this passage is from the page that answers the question", -1 "it is not":
    the labels the paper trains its T5 evaluator on. Implementations score all passages of
    one call in batched forward passes and must return exactly one score per passage, in
    order; an empty passage scores -1.0 and no passages give an empty list.
    """

    name: str
    """Backend name, for logs and reports."""

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Return one score in [-1, 1] per passage, in the order given."""
        ...


def score_strips(
    evaluator: RetrievalEvaluator,
    question: str,
    strips: Sequence[str],
    by: Literal["strip-map", "passage-map"] = "strip-map",
) -> list[float]:
    """Score knowledge strips (sentences of a passage, web paragraphs) with ``evaluator``.

    A backend may calibrate strips apart from whole passages by defining
    ``score_strips(question, strips)`` (the embedding evaluator does); the others score strips
    with ``score``, as the paper's T5 does. ``by="passage-map"`` (the ``strip_scoring`` setting)
    uses ``score`` for every backend.
    """
    method = getattr(evaluator, "score_strips", None)
    if by == "strip-map" and callable(method):
        scores: list[float] = method(question, strips)
        return scores
    return evaluator.score(question, strips)


def scorable_indices(passages: Sequence[str]) -> list[int]:
    """Positions of the passages a backend must score; the others score -1.0 unscored.

    Every backend starts here so that an empty or whitespace-only passage gets the same
    defined score and a lone string is refused the same way.

    Raises:
        EvaluatorError: ``passages`` is a single string instead of a sequence of them.
    """
    if isinstance(passages, str):
        raise EvaluatorError("passages must be a sequence of strings, not one string")
    return [i for i, passage in enumerate(passages) if passage.strip()]


@dataclass(frozen=True)
class BatchScorer:
    """How a backend scores the passages of one ``score`` call, a batch at a time."""

    score: Callable[[list[int]], Sequence[float]]
    """Raw scores of the passages at these positions (of the ``passages`` given), in order."""
    sizes: Sequence[int] | None = None
    """One size per scorable passage, in order: batches are cut longest first, so each pads
    little; ``None``: batches in the order given."""


class BatchedEvaluator(ABC):
    """Base of the backends: one :meth:`score` around a per-backend batch scorer.

    :meth:`score` does what every backend must: refuse a lone string, give an empty or
    whitespace-only passage -1.0 without running the model, cut the others into batches of
    ``batch_size`` (longest first where the backend gives sizes), check before each batch
    whether the run was cancelled, and return exactly one score per passage, in order, clipped
    to [-1, 1] (a NaN scores -1.0, with a warning). A backend implements
    :meth:`_batch_scorer`: the work done once per call (embedding the question, tokenising the
    pairs) and the scoring of one batch.
    """

    name: str
    """Backend name, for logs and reports."""
    batch_size: int
    """Passages scored per batch (one model call)."""

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Return one score in [-1, 1] per passage, in the order given.

        Raises:
            EvaluatorError: ``passages`` is one string, or the model failed.
            RunCancelledError: The run was cancelled (see :mod:`crag.core.cancellation`).
        """
        return self._score_with(self._batch_scorer, question, passages)

    @abstractmethod
    def _batch_scorer(
        self, question: str, passages: Sequence[str], indices: list[int]
    ) -> BatchScorer:
        """Prepare to score ``passages[i]`` for every ``i`` in ``indices`` (all non-empty)."""

    def _score_with(
        self,
        prepare: Callable[[str, Sequence[str], list[int]], BatchScorer],
        question: str,
        passages: Sequence[str],
    ) -> list[float]:
        """:meth:`score` with another preparation (a backend's second scale, for strips)."""
        todo = scorable_indices(passages)
        scores = [-1.0] * len(passages)
        if not todo:
            return scores
        raise_if_cancelled()
        scorer = prepare(question, passages, todo)
        order = todo
        if scorer.sizes is not None:
            size = dict(zip(todo, scorer.sizes, strict=True))
            order = sorted(todo, key=lambda i: size[i], reverse=True)
        for start in range(0, len(order), self.batch_size):
            raise_if_cancelled()
            batch = order[start : start + self.batch_size]
            values = list(scorer.score(batch))
            if len(values) != len(batch):
                raise EvaluatorError(
                    f"the {self.name} evaluator gave {len(values)} scores for {len(batch)} passages"
                )
            for i, value in zip(batch, values, strict=True):
                scores[i] = self._clipped(float(value), i)
        return scores

    def _clipped(self, value: float, index: int) -> float:
        if math.isnan(value):
            logger.warning("%s evaluator: NaN score for passage %d; using -1", self.name, index)
            return -1.0
        return min(1.0, max(-1.0, value))
