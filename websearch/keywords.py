"""Clean the rewriter's output into a search query, with a deterministic fallback."""

from __future__ import annotations

import re

_STOPWORDS = frozenset(
    """a an the of in on at to for from by with about as into over under and or but is are was
    were be been being do does did done has have had what which who whom whose when where why how
    that this these those it its their his her he she they them i you we me my our your not no
    yes can could would should will shall may might must than then there here also just only
    very much many some any each every other such own same so too please tell give name""".split()
)
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


def clean_query(raw: str, limit: int = 3) -> str | None:
    """Clean a model's keyword output; ``None`` when it is unusable.

    Keeps the first non-empty line, strips ``query:``-style prefixes, quotes and trailing
    punctuation, and keeps at most ``limit`` comma-separated keywords. Output that is empty,
    has no letters, or is implausibly long is unusable.
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
    return query
