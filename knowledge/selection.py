"""Filter scored strips and recompose them (the paper's filter and recompose steps)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from crag.core.state import KnowledgeStrip, RetrievedPassage

T = TypeVar("T")


def select_top(
    items: Sequence[T],
    scores: Sequence[float],
    keep: int,
    threshold: float,
    margin: float = 0.0,
) -> list[T]:
    """Keep the ``keep`` best-scoring items that score above ``threshold``, in original order.

    Filtering drops what the evaluator judged irrelevant; recomposition restores the order the
    strips had in their passages so the generator reads coherent text. With a positive
    ``margin`` (0: off), an item whose logit (``2 atanh(score)``: scores are expected labels,
    ``2 P - 1``) is more than ``margin`` below the best item's is dropped too: a strip the
    evaluator finds far less likely than the best one is a distractor the reader may copy.
    """
    if len(items) != len(scores):
        raise ValueError(f"{len(items)} items but {len(scores)} scores")
    ranked = sorted(
        (i for i, s in enumerate(scores) if s > threshold), key=lambda i: (-scores[i], i)
    )[: max(0, keep)]
    if margin > 0 and ranked:
        floor = score_logit(scores[ranked[0]]) - margin
        ranked = [i for i in ranked if score_logit(scores[i]) >= floor]
    return [items[i] for i in sorted(ranked)]


def score_logit(score: float) -> float:
    """The logit of a score in [-1, 1] read as ``2 P - 1`` (clipped away from infinity)."""
    clipped = min(max(score, -0.999999), 0.999999)
    return 2.0 * math.atanh(clipped)


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
    if "location" in passage:
        whole["location"] = passage["location"]
    result: list[KnowledgeStrip] = []
    for strip in kept:
        if (strip["source"], strip["chunk"]) != key:
            result.append(strip)
        elif whole not in result:
            result.append(whole)
    return result
