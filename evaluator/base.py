"""The retrieval evaluator interface shared by grading, refinement and web selection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable


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
    by: Literal["strips", "passages"] = "strips",
) -> list[float]:
    """Score knowledge strips (sentences of a passage, web paragraphs) with ``evaluator``.

    A backend may calibrate strips apart from whole passages by defining
    ``score_strips(question, strips)`` (the embedding evaluator does); the others score strips
    with ``score``, as the paper's T5 does. ``by="passages"`` (the ``strip_scoring`` setting)
    uses ``score`` for every backend.
    """
    method = getattr(evaluator, "score_strips", None)
    if by == "strips" and callable(method):
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
