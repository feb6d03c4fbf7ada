"""Checks on what callers send, with errors that name the problem."""

from __future__ import annotations

from typing import Any


class InvalidQuestionError(ValueError):
    """The question cannot be answered as given (empty, not text, or too long)."""


def validate_question(question: Any, max_chars: int) -> str:
    """Return the stripped question or raise :class:`InvalidQuestionError` saying what is wrong."""
    if question is None:
        raise InvalidQuestionError("no question given: send {'question': '...'}")
    if not isinstance(question, str):
        raise InvalidQuestionError(f"the question must be a string, not {type(question).__name__}")
    stripped = question.strip()
    if not stripped:
        raise InvalidQuestionError("the question is empty")
    if len(stripped) > max_chars:
        raise InvalidQuestionError(
            f"the question is {len(stripped):,} characters long; the limit is {max_chars:,} "
            "(setting max_question_chars)"
        )
    return stripped
