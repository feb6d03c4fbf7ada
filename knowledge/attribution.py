"""Attribute an answer to the numbered knowledge it was written from.

The generator sees its knowledge numbered (``[1] Mona Lisa: ...``) and may cite it as ``[1]``.
What it wrote is checked: numbers outside the knowledge are dropped and the markers leave the
answer text (the citations are kept apart, so the answer stays what the model said). A small
model rarely cites, or cites wrongly, so an answer without a valid citation is attributed by
overlap instead: the entries sharing the most content words with it (deterministic).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal, NamedTuple

from crag.knowledge.words import content_tokens

_MARKER = re.compile(r"\s*\[\s*(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\s*\]")
"""``[1]``, ``[1, 2]``, ``[1;2]`` (at most three digits: ``[1503]`` is a year, not a marker)."""

Method = Literal["model", "overlap", "none"]


class Attribution(NamedTuple):
    """An answer with its citation markers removed and the entries it cites."""

    answer: str
    """The answer without ``[n]`` markers."""
    citations: list[int]
    """The cited entries, 1-based, in the order first cited (overlap: in knowledge order)."""
    method: Method
    """``model`` (valid markers the model wrote), ``overlap`` or ``none`` (nothing cited)."""


def cited_numbers(answer: str, count: int) -> list[int]:
    """The numbers the answer's ``[n]`` markers cite, within 1..``count``, each once, in order."""
    numbers: list[int] = []
    for match in _MARKER.finditer(answer):
        for part in re.split(r"[,;]", match.group(1)):
            number = int(part)
            if 1 <= number <= count and number not in numbers:
                numbers.append(number)
    return numbers


def strip_markers(answer: str) -> str:
    """The answer without its ``[n]`` markers (and the space before each)."""
    return _MARKER.sub("", answer).strip()


def overlap_citations(answer: str, texts: Sequence[str], question: str = "") -> list[int]:
    """The entries (1-based) sharing the most content words with ``answer``; none when no word.

    The answer's own words, those the question does not hold, decide: an answer restates its
    question, and every entry about the topic shares those words. So an answer whose own words
    ("Canberra") occur in no entry cites nothing, however many question words it shares; an
    answer with no words of its own is matched on all its words. The words shared in all break
    ties; entries tied on both are all cited.
    """
    words = content_tokens(answer)
    new = words - content_tokens(question)
    keys = []
    for text in texts:
        tokens = content_tokens(text)
        keys.append((len(new & tokens), len(words & tokens)))
    best = max(keys, default=(0, 0))
    if best[1] == 0 or (new and best[0] == 0):
        return []
    return [i for i, key in enumerate(keys, start=1) if key == best]


def attribute(answer: str, texts: Sequence[str], question: str = "") -> Attribution:
    """Remove the markers from ``answer`` and find what it cites among the numbered ``texts``.

    The valid markers the model wrote win; without any, the overlap attribution
    (:func:`overlap_citations`) decides.
    """
    numbers = cited_numbers(answer, len(texts))
    clean = strip_markers(answer)
    if numbers:
        return Attribution(clean, numbers, "model")
    overlap = overlap_citations(clean, texts, question)
    return Attribution(clean, overlap, "overlap" if overlap else "none")
