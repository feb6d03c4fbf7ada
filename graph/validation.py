"""Checks on what callers send, with errors that name the problem."""

from __future__ import annotations

from typing import Any


class InvalidQuestionError(ValueError):
    """The question cannot be answered as given (empty, not text, not UTF-8, or too long)."""


def _check_encodable(question: str) -> None:
    r"""Refuse lone surrogates, which no tokenizer or JSON encoder accepts.

    They reach Python strings from bytes that are not UTF-8: ``sys.argv`` decodes such bytes
    with ``surrogateescape`` (``crag ask "$(printf 'Who painted \xff?')"``), and callers may
    pass them directly (``"\udcff"``). Every later step would fail on them with a traceback.
    """
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:
        count = sum(1 for char in question if "\ud800" <= char <= "\udfff")
        raise InvalidQuestionError(
            "the question is not valid UTF-8 text: it contains "
            f"{count} unpaired surrogate{'s' if count != 1 else ''} (the first at character "
            f"{exc.start + 1}), e.g. from bytes that are not UTF-8"
        ) from None


def validate_question(question: Any, max_chars: int) -> str:
    """Return the stripped question or raise :class:`InvalidQuestionError` saying what is wrong."""
    if question is None:
        raise InvalidQuestionError("no question given: send {'question': '...'}")
    if not isinstance(question, str):
        raise InvalidQuestionError(f"the question must be a string, not {type(question).__name__}")
    _check_encodable(question)
    stripped = question.strip()
    if not stripped:
        raise InvalidQuestionError("the question is empty")
    if len(stripped) > max_chars:
        raise InvalidQuestionError(
            f"the question is {len(stripped):,} characters long; the limit is {max_chars:,} "
            "(setting max_question_chars)"
        )
    return stripped
