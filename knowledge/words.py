"""Light lexical helpers shared by query rewriting and the embedding evaluator."""

from __future__ import annotations

import re

STOPWORDS = frozenset(
    """a an the of in on at to for from by with about as into over under and or but is are was
    were be been being do does did done has have had what which who whom whose when where why how
    that this these those it its their his her he she they them i you we me my our your not no
    yes can could would should will shall may might must than then there here also just only
    very much many some any each every other such own same so too please tell give name""".split()
)
"""English function words and question words: never keywords."""

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_STEM_LENGTH = 5


def content_tokens(text: str) -> set[str]:
    """Lower-cased content words of ``text``, crudely stemmed to their first five letters.

    The prefix stem makes "painted", "painter" and "painting" one token without a stemmer.
    """
    return {
        token.lower()[:_STEM_LENGTH]
        for token in _TOKEN.findall(text)
        if token.lower() not in STOPWORDS
    }


def heading_of(passage: str, max_words: int = 12) -> str | None:
    """The passage's heading: a short first line without closing punctuation, if it has one.

    Ingested documents start with their title (corpus summaries, Markdown and HTML titles),
    and knowledge strips and web results carry the same heading line.
    """
    first, sep, rest = passage.strip().partition("\n")
    first = first.strip().lstrip("#").strip()
    if not sep or not rest.strip() or not first:
        return None
    if first[-1] in ".!?;:" or len(first.split()) > max_words:
        return None
    return first


def heading_named(question: str, passage: str) -> float:
    """1.0 when every content word of the passage's heading occurs in the question, else 0.0.

    "Who painted the Mona Lisa?" names the heading "Mona Lisa": a strong, per-pair sign that
    the passage is about what the question asks.
    """
    heading = heading_of(passage)
    if heading is None:
        return 0.0
    words = content_tokens(heading)
    return 1.0 if words and words <= content_tokens(question) else 0.0


def question_overlap(question: str, text: str) -> float:
    """Share of the question's content words (see :func:`content_tokens`) found in ``text``.

    0.0 when the question has none. A sentence that repeats the question's rarer words
    ("painted", "Mona", "Lisa") is likelier to state its answer than one that only shares its
    topic, which sentence embeddings alone blur.
    """
    words = content_tokens(question)
    return len(words & content_tokens(text)) / len(words) if words else 0.0
