"""Decompose passages into knowledge strips (the paper's decompose step), or keep them whole."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from crag.core.state import KnowledgeStrip, RetrievedPassage
from crag.knowledge.words import heading_of

StripMode = Literal["sentences", "words", "passage"]

# A sentence ends at . ! or ? followed by space and an upper-case letter, digit or quote.
# Single capitals ("J. R. R.") and common abbreviations do not end a sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = re.compile(
    r"(?:\b[A-Z]|\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Mt|vs|etc|e\.g|i\.e|c|ca|No|Gen|Col|Lt|U\.S))\.$"
)


def split_sentences(text: str) -> list[str]:
    """Split text into sentences with a rule-based splitter (no model, deterministic)."""
    pieces: list[str] = []
    for block in (b.strip() for b in text.splitlines()):
        if not block:
            continue
        start = 0
        for match in _SENTENCE_END.finditer(block):
            candidate = block[start : match.start()].rstrip("\"')] ")
            if _ABBREVIATIONS.search(block[start : match.start()].rstrip()) or not candidate:
                continue
            pieces.append(block[start : match.start()].strip())
            start = match.end()
        tail = block[start:].strip()
        if tail:
            pieces.append(tail)
    return pieces


def decompose(text: str, mode: StripMode = "sentences", size: int = 1) -> list[str]:
    """Split a passage into strips.

    Args:
        text: The passage.
        mode: ``"sentences"``: groups of ``size`` sentences; ``"words"``: windows of ``size``
            words; ``"passage"``: the passage itself is the only strip.
        size: Sentences or words per strip (at least 1).

    A passage of at most two sentences is one strip, as in the paper. A passage that starts
    with a heading line (a document title) gives strips that each start with that heading
    line, so that a strip such as "It was painted in 1503." still says what it is about, to
    the evaluator and to the generator.
    """
    text = text.strip()
    if not text:
        return []
    if mode == "passage":
        return [text]
    heading = heading_of(text)
    body = text.partition("\n")[2].strip() if heading else text
    size = max(1, size)
    if mode == "words":
        words = body.split()
        strips = [" ".join(words[i : i + size]) for i in range(0, len(words), size)]
    else:
        sentences = split_sentences(body)
        if len(sentences) <= 2:
            strips = [" ".join(sentences)]
        else:
            strips = [" ".join(sentences[i : i + size]) for i in range(0, len(sentences), size)]
    return [f"{heading}\n{strip}" if heading else strip for strip in strips if strip]


def internal_strip(text: str, passage: RetrievedPassage, score: float | None) -> KnowledgeStrip:
    """A strip of internal knowledge cut from ``passage``: its source, chunk, location, writer."""
    strip: KnowledgeStrip = {
        "text": text,
        "source": passage["source"],
        "chunk": passage["chunk"],
        "origin": "internal",
        "score": score,
    }
    if "location" in passage:
        strip["location"] = passage["location"]
    if "writer" in passage:
        strip["writer"] = passage["writer"]
    return strip


def as_internal_knowledge(documents: Sequence[RetrievedPassage]) -> list[KnowledgeStrip]:
    """Passages, whole, as internal knowledge strips (keeping their scores, if any)."""
    return [internal_strip(doc["text"], doc, doc["score"]) for doc in documents]
