"""Whether a text holds one of a question's answers, as whole words after normalisation.

SQuAD's normalisation on both sides (lower case, no punctuation, no articles, single spaces),
with punctuation turned into a space rather than dropped, so that "1452-1519" holds "1519" and
"Newton's" holds "Newton". An answer must occur as a whole run of words: "4" is not in "1945",
nor "Paris" in "Parisian".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DECIMAL_POINT = re.compile(r"(?<=\d)\.(?=\d)")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def _is_punctuation(char: str) -> bool:
    """Unicode punctuation (dashes and quotes included) and ASCII symbols such as ``$``."""
    category = unicodedata.category(char)
    return category.startswith("P") or (char.isascii() and category.startswith("S"))


def normalize_text(text: str) -> str:
    """Lower case, digit groups joined, no punctuation or articles, single spaces.

    Examples:
        >>> normalize_text("The Eiffel Tower!")
        'eiffel tower'
        >>> normalize_text("1,234.5 people")
        '12345 people'
    """
    text = unicodedata.normalize("NFKC", text).lower()
    text = _DECIMAL_POINT.sub("", _THOUSANDS.sub("", text))
    text = "".join(" " if _is_punctuation(char) else char for char in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def holds_answer(answers: Sequence[str], texts: Iterable[str]) -> bool:
    """Whether any of ``answers`` occurs as whole words in any of ``texts``.

    An answer that normalises to nothing (only punctuation or articles) never matches.
    """
    needles = [f" {needle} " for needle in map(normalize_text, answers) if needle]
    for text in texts:
        haystack = f" {normalize_text(text)} "
        if any(needle in haystack for needle in needles):
            return True
    return False
