"""Answer matching: whether a text contains one of the gold answers.

This is the "match" metric of the CRAG paper (an answer counts as correct when a gold answer
occurs in it), with SQuAD-style normalisation on both sides: lowercase, no punctuation, no
articles, single spaces. Two choices make token matching fairer than plain substring search:

* punctuation (Unicode dashes and quotes included) becomes a space rather than vanishing,
  so "1452-1519" still holds the token "1519" and "Newton's" the token "newton";
  thousands separators ("1,234") and decimal points ("3.5") are dropped first, so a
  number stays one token;
* an answer must occur as a whole sequence of tokens, so "4" does not match "1945" and
  "Paris" does not match "Parisian".
"""

from __future__ import annotations

from collections.abc import Sequence

from crag.knowledge.answer_match import holds_answer, normalize_text

normalize_answer = normalize_text
"""Lowercase, join digit groups, drop punctuation and articles, collapse whitespace (crag's
own :func:`crag.knowledge.answer_match.normalize_text`, which ``crag thresholds`` uses too).

Examples:
    >>> normalize_answer("The Eiffel Tower!")
    'eiffel tower'
    >>> normalize_answer("1,234 people")
    '1234 people'
"""


def answer_in_text(answers: Sequence[str], text: str) -> bool:
    """Whether any gold answer occurs in ``text`` as whole tokens, after normalisation.

    Answers that normalise to nothing (only punctuation or articles) never match.

    Args:
        answers: The gold answers (any of them counts).
        text: The generated answer or passage to look in.
    """
    return holds_answer(answers, [text])


LOOP_NGRAM = 4
"""Words in the n-grams :func:`is_looping` looks for."""


def is_looping(answer: str, size: int = LOOP_NGRAM) -> bool:
    """Whether an answer repeats itself: some run of ``size`` words occurs at least twice.

    A one-sentence answer never needs to (the benchmark's answers are short); a degenerate
    reply ("The Grapes of Wrath: The Grapes of Wrath: ...") always does.
    """
    words = normalize_answer(answer).split()
    seen: set[tuple[str, ...]] = set()
    for start in range(len(words) - size + 1):
        gram = tuple(words[start : start + size])
        if gram in seen:
            return True
        seen.add(gram)
    return False
