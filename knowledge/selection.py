"""Filter scored strips and recompose them (the paper's filter and recompose steps)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from graph.state import KnowledgeStrip, RetrievedPassage

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


def best_passage_whole(
    kept: Sequence[KnowledgeStrip], passages: Sequence[RetrievedPassage]
) -> list[KnowledgeStrip]:
    """``kept`` with the strips of the best-scored strip's passage replaced by that passage.

    The passage, whole, takes the place of its first kept strip and the best strip's score;
    its other kept strips go (they are in it). Strips are matched to their passage by source
    and chunk. Nothing changes when no kept strip is scored or its passage is not given.
    """
    scored = [strip for strip in kept if strip["score"] is not None]
    if not scored:
        return list(kept)
    best = max(scored, key=lambda strip: strip["score"] or 0.0)
    key = (best["source"], best["chunk"])
    passage = next((p for p in passages if (p["source"], p["chunk"]) == key), None)
    if passage is None:
        return list(kept)
    whole: KnowledgeStrip = {
        "text": passage["text"],
        "source": passage["source"],
        "chunk": passage["chunk"],
        "origin": best["origin"],
        "score": best["score"],
    }
    result: list[KnowledgeStrip] = []
    for strip in kept:
        if (strip["source"], strip["chunk"]) != key:
            result.append(strip)
        elif whole not in result:
            result.append(whole)
    return result
