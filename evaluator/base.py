"""The retrieval evaluator interface shared by grading, refinement and web selection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


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
