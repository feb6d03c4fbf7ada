"""Filter scored strips and recompose them (the paper's filter and recompose steps)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def select_top(items: Sequence[T], scores: Sequence[float], keep: int, threshold: float) -> list[T]:
    """Keep the ``keep`` best-scoring items that score above ``threshold``, in original order.

    Filtering drops what the evaluator judged irrelevant; recomposition restores the order the
    strips had in their passages so the generator reads coherent text.
    """
    if len(items) != len(scores):
        raise ValueError(f"{len(items)} items but {len(scores)} scores")
    ranked = sorted(
        (i for i, s in enumerate(scores) if s > threshold), key=lambda i: (-scores[i], i)
    )
    return [items[i] for i in sorted(ranked[: max(0, keep)])]
