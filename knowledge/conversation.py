"""The thread's chat: which question a run answers, the earlier turns, the answer message.

A thread's ``messages`` hold what chat front-ends sent (human messages) and one AI message per
finished run. Each AI message records the question it answered in ``additional_kwargs``, so
the earlier turns are known whether the questions came as ``question`` or as ``messages``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, NotRequired

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from typing_extensions import TypedDict

from crag.core.question_channel import CarriedQuestion
from crag.core.state import KnowledgeStrip
from crag.knowledge.words import heading_of

MAX_TURNS = 3
"""Earlier turns given to the contextualiser by default: the most recent ones (the setting
``max_history_turns``)."""

MIN_CUT_CHARS = 20
"""A text cut shorter than this says nothing: the turn is left out instead."""


class Turn(NamedTuple):
    """One finished exchange on a thread."""

    question: str
    answer: str


def _is_human(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) or message.type == "human"


def _is_ai(message: BaseMessage) -> bool:
    return isinstance(message, AIMessage) or message.type == "ai"


def _last_ai_index(messages: Sequence[BaseMessage]) -> int:
    return max((i for i, m in enumerate(messages) if _is_ai(m)), default=-1)


def answered_question(messages: Sequence[BaseMessage]) -> str | None:
    """The question the thread's last AI message answered, if it says."""
    index = _last_ai_index(messages)
    if index < 0:
        return None
    question = messages[index].additional_kwargs.get("question")
    return question if isinstance(question, str) else None


def pending_human(messages: Sequence[BaseMessage]) -> BaseMessage | None:
    """The last human message sent after the thread's last AI message (not answered yet)."""
    pending = [m for m in messages[_last_ai_index(messages) + 1 :] if _is_human(m)]
    return pending[-1] if pending else None


def question_from_messages(state_question: Any, messages: Sequence[BaseMessage]) -> Any:
    """The question this run answers: the caller's ``question`` or the new human message.

    ``question`` stays in a thread's state after a run, so a question an earlier run left (a
    :class:`~crag.core.question_channel.CarriedQuestion`, also one whose run failed) or one equal
    to the question the last AI message answered is not this run's: a new human message wins
    over it. A ``question`` sent with this run's messages wins over them (both sent at once).
    Returns the raw value (validated by the caller), ``None`` when there is none.
    """
    human = pending_human(messages)
    stale = (
        state_question is None
        or isinstance(state_question, CarriedQuestion)
        or state_question == answered_question(messages)
    )
    if human is not None and stale:
        return human.text
    return state_question


def earlier_turns(messages: Sequence[BaseMessage], limit: int | None = MAX_TURNS) -> list[Turn]:
    """The thread's finished exchanges, oldest first, at most the last ``limit`` (None: all).

    An AI message's question is the one it recorded, else the human message before it (a
    history a client sent itself).
    """
    turns: list[Turn] = []
    last_human = ""
    for message in messages:
        if _is_human(message):
            last_human = message.text.strip()
        elif _is_ai(message):
            recorded = message.additional_kwargs.get("question")
            question = recorded.strip() if isinstance(recorded, str) else last_human
            answer = message.text.strip()
            if question and answer:
                turns.append(Turn(question, answer))
            last_human = ""
    if limit is None:
        return turns
    return turns[-limit:] if limit > 0 else []


def clip_text(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its start cut at a word and "…".

    Empty when ``limit`` leaves fewer than :data:`MIN_CUT_CHARS` characters to keep.
    """
    if len(text) <= limit:
        return text
    if limit < MIN_CUT_CHARS:
        return ""
    head = text[: limit - 1]
    mid_word = not head[-1].isspace() and not text[limit - 1].isspace()
    word_end = head.rfind(" ")
    if mid_word and word_end >= limit // 2:  # end at the last whole word
        head = head[:word_end]
    return head.rstrip() + "…"


class History(NamedTuple):
    """The earlier turns a run reads, and what was left out to bound them."""

    turns: list[Turn]
    """The turns read, oldest first, each text cut to fit."""
    left_out: int
    """Earlier turns not read: older than the most recent ``max_turns``, or no room left."""
    cut: int
    """Questions and answers read only in part."""


def bounded_history(turns: Sequence[Turn], max_turns: int, max_chars: int) -> History:
    """The most recent ``max_turns`` of ``turns`` in at most ``max_chars`` characters.

    A chat may carry any text (a client sends the history it likes; an answer may be long), so
    what the contextualizer reads is bounded: turns are taken newest first while there is room,
    a text too long for the room left is cut (:func:`clip_text`), and the answer keeps at least
    half of the room when it needs it (it usually names what a follow-up refers to).
    """
    recent = list(turns[-max_turns:]) if max_turns > 0 else []
    room, cut = max_chars, 0
    kept: list[Turn] = []
    for turn in reversed(recent):
        question = clip_text(turn.question, room - min(len(turn.answer), room // 2))
        answer = clip_text(turn.answer, room - len(question))
        if not question or not answer:
            break
        cut += (question != turn.question) + (answer != turn.answer)
        kept.append(Turn(question, answer))
        room -= len(question) + len(answer)
    kept.reverse()
    return History(kept, len(turns) - len(kept), cut)


def sources_of(knowledge: Sequence[KnowledgeStrip]) -> list[str]:
    """The distinct sources (documents and URLs) of the knowledge, in order."""
    return list(dict.fromkeys(k["source"] for k in knowledge if k["source"]))


class Citation(TypedDict):
    """One cited knowledge entry, as a chat front-end shows it under the answer."""

    number: int
    """The entry's number in ``knowledge`` (1-based), as in the answer's ``[n]``."""
    title: str
    """The strip's heading (a page or document title), else its source."""
    source: str
    """The URL (web knowledge) or the document (internal knowledge)."""
    chunk: int | None
    """The chunk within the document; ``None`` for web knowledge."""
    location: NotRequired[str]
    """Where the chunk is in the document ("p. 12", "slide 3", "Method > Evaluator"), when
    its format says."""
    writer: NotRequired[str]
    """Who stored the passage when it is not the operator: ``"served"``, a run of the served
    ``ingest`` graph (whoever could reach the server), not the operator's own documents."""


def source_title(strip: KnowledgeStrip) -> str:
    """A strip's title: its heading line (page or document title), else its source."""
    return heading_of(strip["text"]) or strip["source"]


WRITER_NOTES = {"served": "added by a served run"}
"""How a source list says who stored a passage that is not the operator's."""


def source_writer(strip: KnowledgeStrip) -> str:
    """`` (added by a served run)`` for a passage not the operator's; empty for the operator's."""
    writer = strip.get("writer")
    if not writer:
        return ""
    return f" ({WRITER_NOTES.get(writer, f'added by {writer}')})"


def source_location(strip: KnowledgeStrip) -> str:
    """Where a strip is: a URL (web), ``document, p. 12`` or ``document#chunk`` (internal).

    Internal knowledge shows where in the document it is when the format says (a page, a
    slide, rows of a sheet, a heading path), else the chunk's index.
    """
    if strip["chunk"] is None:
        return strip["source"]
    if strip.get("location"):
        return f"{strip['source']}, {strip.get('location')}"
    return f"{strip['source']}#{strip['chunk']}"


def citation_entry(number: int, strip: KnowledgeStrip) -> Citation:
    """Knowledge entry ``number`` (1-based) as a citation."""
    entry: Citation = {
        "number": number,
        "title": source_title(strip),
        "source": strip["source"],
        "chunk": strip["chunk"],
    }
    if "location" in strip:
        entry["location"] = strip["location"]
    if "writer" in strip:
        entry["writer"] = strip["writer"]
    return entry


def citation_entries(knowledge: Sequence[KnowledgeStrip], numbers: Sequence[int]) -> list[Citation]:
    """The cited entries of ``knowledge`` by their 1-based ``numbers`` (others are skipped)."""
    return [citation_entry(n, knowledge[n - 1]) for n in numbers if 1 <= n <= len(knowledge)]


def answer_message(
    answer: str,
    *,
    question: str,
    knowledge: Sequence[KnowledgeStrip],
    action: str | None,
    message_id: str | None,
    citations: Sequence[int] = (),
    abstained: bool = False,
) -> AIMessage:
    """The AI message a run appends to the thread's chat.

    ``additional_kwargs`` carry the distinct ``sources``, the ``citations`` (number, title,
    source, chunk and location of each cited entry), whether the run ``abstained``, the
    ``question`` and the ``action``. ``message_id`` is the generator reply's id, so chat
    front-ends merge the streamed tokens and the stored message into one.
    """
    extra: dict[str, Any] = {
        "sources": sources_of(knowledge),
        "citations": citation_entries(knowledge, citations),
        "abstained": abstained,
        "question": question,
    }
    if action is not None:
        extra["action"] = action
    return AIMessage(content=answer, id=message_id, additional_kwargs=extra)
