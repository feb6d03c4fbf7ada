"""Checks on what callers send, with errors that name the problem."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages

CHAT_ROLES: tuple[str, ...] = ("user", "human", "assistant", "ai", "system", "developer", "tool")
"""The roles (or ``type``) a chat message may have: those LangChain reads, but ``function``
(OpenAI's deprecated form, which also needs a ``name``)."""

_ROLES_SHOWN = "'user' (or 'human'), 'assistant' (or 'ai'), 'system', 'developer', 'tool'"


class InvalidQuestionError(ValueError):
    """The question cannot be answered as given.

    It is empty, not text, not UTF-8 or too long, or the chat messages it comes in are
    malformed (an unknown role, no content).
    """


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


def _declared_role(message: Any) -> Any:
    """The role a message representation names; ``None`` for messages and strings.

    A dict's ``role``, else its ``type`` (as LangChain reads it); a ``(role, text)`` pair's
    first item. A message object or a string (a human message) always has a valid one.
    """
    if isinstance(message, dict):
        if message.get("lc") == 1 and message.get("type") == "constructor":
            return None  # a serialised message: LangChain reads its class
        return message.get("role", message.get("type"))
    if isinstance(message, tuple | list) and len(message) == 2:
        return message[0]
    return None


def chat_messages(value: Any) -> list[BaseMessage]:
    """``value`` (one message or a list of them) as LangChain messages, or a one-line error.

    Chat input arrives as LangChain messages, ``{"role"|"type", "content"}`` dicts,
    ``(role, text)`` pairs or strings (a human message). LangChain refuses a malformed one
    with a multi-line ``ValueError`` that names neither the message nor the roles it takes;
    this names the message by its index in what was sent.

    Raises:
        InvalidQuestionError: a message with a role not in :data:`CHAT_ROLES`, or one LangChain
            cannot read (no content, not a message at all).
    """
    items = value if isinstance(value, list) else [value]
    converted: list[BaseMessage] = []
    for index, item in enumerate(items):
        role = _declared_role(item)
        if role is not None and role not in (*CHAT_ROLES, "remove"):
            raise InvalidQuestionError(
                f"message {index} has the role {role!r}; allowed roles: {_ROLES_SHOWN}"
            )
        try:
            converted.extend(convert_to_messages([item]))
        except (ValueError, TypeError, NotImplementedError) as exc:
            reason = next((line for line in str(exc).splitlines() if line.strip()), "")
            raise InvalidQuestionError(
                f"message {index} is not a chat message: {reason or type(exc).__name__}"
            ) from None
    return converted
