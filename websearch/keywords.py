"""Clean the rewriter's output into a search query, with a deterministic fallback."""

from __future__ import annotations

import re

from crag.knowledge.words import STOPWORDS as _STOPWORDS
from crag.knowledge.words import content_tokens

_PREFIX = re.compile(r"^\s*(?:query|keywords?|search(?: query)?|answer)\s*[:\-]\s*", re.I)
_WORD = re.compile("[\\w'\u2019-]+", re.UNICODE)


def fallback_keywords(question: str, limit: int = 3) -> str:
    """Build up to ``limit`` comma-separated keywords from the question itself.

    Runs of capitalised words (names) stay together as one keyword; other content words are
    kept in order after stopwords are removed. Deterministic: the same question always gives
    the same query.
    """
    tokens = _WORD.findall(question)
    keywords: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            keywords.append(" ".join(run))
            run.clear()

    for index, token in enumerate(tokens):
        lower = token.lower()
        capitalised = token[:1].isupper() and (index > 0 or lower not in _STOPWORDS)
        if capitalised and lower not in _STOPWORDS:
            run.append(token)
            continue
        flush()
        if lower not in _STOPWORDS and len(lower) > 1:
            keywords.append(token)
    flush()
    unique = list(dict.fromkeys(keywords))
    # Names first: they carry the most information for a search engine.
    unique.sort(key=lambda k: 0 if k[:1].isupper() else 1)
    return ", ".join(unique[:limit]) or question.strip()


def clean_query(raw: str, limit: int = 3, question: str | None = None) -> str | None:
    """Clean a model's keyword output; ``None`` when it is unusable.

    Keeps the first non-empty line, strips ``query:``-style prefixes, quotes and trailing
    punctuation, and keeps at most ``limit`` comma-separated keywords. Output that is empty,
    has no letters, or is implausibly long is unusable; so is, when ``question`` is given,
    output of which fewer than half the content words come from the question (a small model
    copying the few-shot examples, or answering instead of extracting keywords).
    """
    for line in raw.splitlines():
        line = _PREFIX.sub("", line).strip().strip("\"'`“”*").strip()
        if line:
            break
    else:
        return None
    parts = [p.strip().strip("\"'`“”.;:!?") for p in line.split(",")]
    parts = [p for p in parts if p]
    if not parts or not any(ch.isalpha() for ch in "".join(parts)):
        return None
    query = ", ".join(parts[:limit])
    if len(query) > 200 or len(query.split()) > 24:
        return None
    if question is not None:
        words = content_tokens(query)
        if not words or len(words & content_tokens(question)) * 2 < len(words):
            return None
    return query
