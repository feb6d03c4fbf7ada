"""Figures of merit for retrieval evaluators: pair accuracy and ROC AUC.

Labels follow :class:`crag_bench.pairs.LabelledPair`: a label above 0 (``+1``) marks a passage
from the question's gold page, anything else (``-1``) one that is not.
"""

from __future__ import annotations

from collections.abc import Sequence


def _check_lengths(scores: Sequence[float], labels: Sequence[int]) -> None:
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores but {len(labels)} labels")


def pair_accuracy(
    scores: Sequence[float], labels: Sequence[int], threshold: float = 0.0
) -> float | None:
    """Share of pairs whose score sign agrees with the label.

    A pair agrees when it scores above ``threshold`` and is positive, or scores at or below
    it and is negative.

    Args:
        scores: One score per pair.
        labels: One label per pair (above 0: positive).
        threshold: Decision threshold on the score (0: the middle of [-1, 1]).

    Returns:
        The accuracy in [0, 1], or ``None`` when there are no pairs.

    Raises:
        ValueError: ``scores`` and ``labels`` differ in length.
    """
    _check_lengths(scores, labels)
    if not scores:
        return None
    right = sum(
        (score > threshold) == (label > 0) for score, label in zip(scores, labels, strict=True)
    )
    return right / len(scores)


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values`` in ascending order; tied values share their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        mean_rank = (start + end) / 2 + 1
        for position in range(start, end + 1):
            ranks[order[position]] = mean_rank
        start = end + 1
    return ranks


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """Area under the ROC curve by the rank-sum (Mann-Whitney) formula.

    It equals the probability that a random positive scores above a random negative, a tie
    counting one half.

    Args:
        scores: One score per pair.
        labels: One label per pair (above 0: positive).

    Returns:
        The AUC in [0, 1], or ``None`` when there are no positives or no negatives.

    Raises:
        ValueError: ``scores`` and ``labels`` differ in length.
    """
    _check_lengths(scores, labels)
    positives = sum(1 for label in labels if label > 0)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return None
    ranks = average_ranks(scores)
    rank_sum = sum(rank for rank, label in zip(ranks, labels, strict=True) if label > 0)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)
