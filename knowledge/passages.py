"""One knowledge entry per passage: the kept strips of one stored chunk, joined.

Refinement keeps strips (sentences) and several may come from one retrieved passage. Numbered
apart, they were cited and listed apart: ``[1] Mona Lisa``, ``[2] Mona Lisa``, ``[3] Mona Lisa``,
all ``wikipedia:Mona Lisa#0``. Joined here, before the knowledge is numbered for the generator,
each passage has one number, so the answer's ``[n]``, the citations and the sources listed
under the answer agree. Web knowledge (no chunk) is left as it is: its strips are paragraphs
of a page, each already one passage.
"""

from __future__ import annotations

from collections.abc import Sequence

from crag.core.state import KnowledgeStrip
from crag.knowledge.words import heading_of

PassageKey = tuple[str, str, int]
"""``(origin, source, chunk)``: strips with the same key come from one stored passage."""


def _key(strip: KnowledgeStrip) -> PassageKey | None:
    chunk = strip["chunk"]
    return None if chunk is None else (strip["origin"], strip["source"], chunk)


def _body(text: str, heading: str | None) -> str:
    """``text`` without its first line when that line is ``heading`` (the passage's title)."""
    if heading is not None and heading_of(text) == heading:
        return text.strip().partition("\n")[2].strip()
    return text.strip()


def _score(scores: Sequence[float | None]) -> float | None:
    """The passage's score: its best strip's (unscored when any strip is)."""
    known = [s for s in scores if s is not None]
    return None if len(known) < len(scores) else max(known)


def _joined(strips: Sequence[KnowledgeStrip]) -> KnowledgeStrip:
    """The strips of one passage as one entry: the title once, the bodies in their order."""
    first = strips[0]
    if len(strips) == 1:
        return first
    heading = heading_of(first["text"])
    text = " ".join(_body(s["text"], heading) for s in strips)
    merged: KnowledgeStrip = {
        **first,
        "text": f"{heading}\n{text}" if heading else text,
        "score": _score([s["score"] for s in strips]),
    }
    return merged


def one_per_passage(strips: Sequence[KnowledgeStrip]) -> list[KnowledgeStrip]:
    """``strips`` with those of one stored passage joined into one entry, where the first was.

    The strips keep their order within the passage (give them in their original order), and
    the entry its best strip's score. Strips without a chunk (web knowledge) stay apart.
    """
    groups: dict[PassageKey | int, list[KnowledgeStrip]] = {}
    for index, strip in enumerate(strips):
        groups.setdefault(_key(strip) or index, []).append(strip)
    return [_joined(group) for group in groups.values()]
