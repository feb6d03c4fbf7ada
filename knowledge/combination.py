"""Combine internal and external knowledge into what the generator reads.

Correct runs have internal knowledge only, Incorrect runs external only, Ambiguous runs both
(the paper's "both, combined"). Two things happen here:

* **Duplicates go.** The web and the store can hold the same text (a Wikipedia page and its
  ingested copy), so the same strip can come back from both branches; it is given once, where
  it first appears (internal before external).
* **Whole passages are bounded by RAG's words** (the ``passages`` knowledge form): the
  retrieved passages and the web's paragraphs compete on one scale (both scored with the
  evaluator's passage map) for as many words as the top-k retrieved passages hold, so a
  stronger reader never reads less than standard RAG would give it where the store has the
  answer, and reads the web's best in place of the store's weakest where it may not.
* **Ambiguous knowledge can be pooled** (``ambiguous_knowledge="pooled"``): instead of each
  branch's best ``strips_kept`` strips side by side (up to twice as much text), the best
  ``strips_kept`` of both together, in their original order. A small generator reads short
  knowledge better. Both branches are scored by the same evaluator, but not always on one
  scale: the embedding evaluator scores store strips with its strip map and whole web
  paragraphs (``refine_web_knowledge`` off, the default) with its passage map. Scoring the
  paragraphs with the strip map too put everything on one scale but answered fewer dev
  questions (README, "Changes judged on dev"), so the pooled ranking mixes the two maps.
"""

from __future__ import annotations

from collections.abc import Sequence

from crag.core.state import KnowledgeStrip
from crag.knowledge.selection import select_top

UNSCORED_RANK = 1.0
"""Where a strip without a score ranks: above any score (unscored knowledge was kept unjudged)."""


def _key(strip: KnowledgeStrip) -> str:
    """Strips are the same when their text is, whitespace and case aside."""
    return " ".join(strip["text"].split()).casefold()


def _rank(strip: KnowledgeStrip) -> float:
    return UNSCORED_RANK if strip["score"] is None else strip["score"]


def without_duplicates(strips: Sequence[KnowledgeStrip]) -> list[KnowledgeStrip]:
    """``strips`` with each text kept once, where it first appears."""
    seen: set[str] = set()
    unique: list[KnowledgeStrip] = []
    for strip in strips:
        key = _key(strip)
        if key not in seen:
            seen.add(key)
            unique.append(strip)
    return unique


def combine_knowledge(
    internal: Sequence[KnowledgeStrip],
    external: Sequence[KnowledgeStrip],
    *,
    pooled_keep: int | None = None,
) -> list[KnowledgeStrip]:
    """Internal then external knowledge, without duplicates.

    Args:
        internal: The refined strips from the store, in their recomposed order.
        external: The selected strips from the web, in page order.
        pooled_keep: When both are given, keep only the ``pooled_keep`` best-scored strips of
            the two together (unscored strips rank first), in their combined order; ``None``
            keeps every strip.
    """
    strips = without_duplicates([*internal, *external])
    if pooled_keep is None or not internal or not external:
        return strips
    return select_top(strips, [_rank(s) for s in strips], pooled_keep, threshold=-float("inf"))


def best_within_words(strips: Sequence[KnowledgeStrip], budget: int) -> list[KnowledgeStrip]:
    """The best-scored ``strips`` whose words fit in ``budget``, in their given order.

    Strips are taken best first (unscored first); one that would overflow the budget is
    skipped and the next tried, so a long weak passage does not crowd out short strong ones.
    The best strip is kept even when it alone is longer than the budget (the prompt's own
    bound cuts it later).
    """
    order = sorted(range(len(strips)), key=lambda i: (-_rank(strips[i]), i))
    kept: set[int] = set()
    used = 0
    for index in order:
        words = len(strips[index]["text"].split())
        if kept and used + words > budget:
            continue
        kept.add(index)
        used += words
    return [strip for index, strip in enumerate(strips) if index in kept]


def best_first(strips: Sequence[KnowledgeStrip]) -> list[KnowledgeStrip]:
    """``strips`` ordered by score, best first (unscored first; ties keep their order)."""
    return sorted(strips, key=lambda s: -_rank(s))
