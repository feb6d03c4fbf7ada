"""The answers of one line of a questions file (``crag thresholds``, ``crag eval``)."""

from __future__ import annotations

from typing import Any

__all__ = ["ANSWER_KEYS", "answers_of"]

ANSWER_KEYS = ("answers", "possible_answers")
"""Where a line's answers are: ``answers``, or ``possible_answers`` as the benchmark's files."""


def answers_of(record: dict[str, Any]) -> list[str]:
    """The line's answers, non-blank strings; empty when it has none."""
    for key in ANSWER_KEYS:
        value = record.get(key)
        if value is not None:
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                return []
            return [answer for answer in value if answer.strip()]
    return []
