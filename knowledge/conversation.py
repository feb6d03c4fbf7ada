"""The thread's chat: which question a run answers, the earlier turns, the answer message.

A thread's ``messages`` hold what chat front-ends sent (human messages) and one AI message per
finished run. Each AI message records the question it answered in ``additional_kwargs``, so
the earlier turns are known whether the questions came as ``question`` or as ``messages``.

Generic chat front-ends (LangChain's Agent Chat UI, assistant-ui's LangGraph runtime) show a
message's text only, as Markdown, and read nothing of ``additional_kwargs``; so the AI
message's text is the answer followed by what crag knows of it (:func:`message_text`): its
citation markers, a line when a web search corrected the answer or crag abstained, and the
cited sources, numbered as the markers. The plain answer stays in ``additional_kwargs``
(``answer``): it is what the earlier turns hold (:func:`plain_answer`), so a follow-up's
rewrite never reads the sources block.
"""

from __future__ import annotations

import re
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
    history a client sent itself); its answer is the plain answer (:func:`plain_answer`),
    never the sources block and note its text adds for chat front-ends.
    """
    turns: list[Turn] = []
    last_human = ""
    for message in messages:
        if _is_human(message):
            last_human = message.text.strip()
        elif _is_ai(message):
            recorded = message.additional_kwargs.get("question")
            question = recorded.strip() if isinstance(recorded, str) else last_human
            answer = plain_answer(message).strip()
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


SOURCES_HEADING = "**Sources**"
"""The line above the cited sources in an AI message's text."""

NOTE_LINES = {
    "incorrect": "Corrected by a web search: the stored documents did not answer the question, "
    "so this answer is from the web.",
    "ambiguous": "Completed by a web search: the stored documents were not conclusive, so this "
    "answer also draws on the web.",
    "abstained": "crag abstained: nothing it found was good enough to answer from, so no answer "
    "was generated.",
}
"""The one line (in italics) an AI message's text adds when a web search corrected the
answer (action ``incorrect`` or ``ambiguous``, and web knowledge cited) or crag abstained."""

MAX_TITLE_CHARS = 200
"""Longest title a source line shows (a heading line is short; a source may not be)."""

CITED_TEXT_CHARS = 300
"""Longest excerpt of a cited strip a citation annotation carries."""

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>!~|])")
_URL = re.compile(r"https?://[^\s<>]+")
_MARKERS_AT_END = re.compile(r"(?:\s\[\d+\])+\Z")
_SOURCES_AT_END = re.compile(
    r"\n\n" + re.escape(SOURCES_HEADING) + r"\n\n(?:- \[\d+\] [^\n]*(?:\n|\Z))+\Z"
)


def markdown_literal(text: str) -> str:
    """``text`` on one line with Markdown's inline characters escaped, shown as it is.

    Titles and sources come from documents and web pages: a title like ``[click](javascript:…)``
    or ``<img …>`` must stay text in a front-end that renders the message as Markdown.
    """
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.split()))


def _location_markdown(strip: KnowledgeStrip) -> str:
    """Where the strip is, as Markdown: a web page's URL as a link, else literal text."""
    location = source_location(strip)
    if strip["chunk"] is None and _URL.fullmatch(location):
        return f"<{location}>"
    return markdown_literal(location)


def source_line(number: int, strip: KnowledgeStrip) -> str:
    """``- [n] Title — where`` (``- [n] where`` when the title is the source), as ``crag ask``."""
    title = source_title(strip)
    where = _location_markdown(strip)
    if title != strip["source"]:
        where = f"{markdown_literal(clip_text(title, MAX_TITLE_CHARS))} — {where}"
    writer = source_writer(strip)
    return f"- [{number}] {where}{' ' + markdown_literal(writer) if writer else ''}"


def note_line(cited: Sequence[KnowledgeStrip], action: str | None, abstained: bool) -> str:
    """The message's note: crag abstained, or a web search corrected the answer; else empty.

    Corrected: the action sent the run to the web and the answer cites web knowledge
    (``cited``, the cited strips); a refusal cites nothing, so it is not said to be "from the
    web".
    """
    if abstained:
        return NOTE_LINES["abstained"]
    used_web = any(k["origin"] == "external" for k in cited)
    if used_web and action in ("incorrect", "ambiguous"):
        return NOTE_LINES[action]
    return ""


def _cited(knowledge: Sequence[KnowledgeStrip], citations: Sequence[int]) -> list[int]:
    """The cited entry numbers that are in ``knowledge``, each once, in citation order."""
    return list(dict.fromkeys(n for n in citations if 1 <= n <= len(knowledge)))


def message_text(
    answer: str,
    knowledge: Sequence[KnowledgeStrip],
    citations: Sequence[int],
    action: str | None,
    abstained: bool,
) -> str:
    """The Markdown text of the AI message: what a chat front-end that knows nothing of crag shows.

    The answer and its citation markers (`` [1] [3]``, as ``crag ask`` prints them), the note
    line (:func:`note_line`) in italics, then the cited sources under
    :data:`SOURCES_HEADING`, one ``- [n] Title — where`` line each, by number. A bullet list,
    not a numbered one: Markdown renumbers ``2.``, ``5.`` as 2, 3.
    """
    cited = _cited(knowledge, citations)
    parts = [answer + "".join(f" [{n}]" for n in cited)]
    if note := note_line([knowledge[n - 1] for n in cited], action, abstained):
        parts.append(f"*{note}*")
    if cited:
        lines = [source_line(n, knowledge[n - 1]) for n in sorted(cited)]
        parts.append(SOURCES_HEADING + "\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def strip_message_text(text: str) -> str:
    """The answer in a text :func:`message_text` made: without the sources, note and markers.

    For an AI message that lost its ``additional_kwargs`` (a client sending the history it
    kept, ``{"role": "assistant", "content": ...}``); any other text is returned as it is.
    """
    stripped = _SOURCES_AT_END.sub("", text)
    for note in NOTE_LINES.values():
        if stripped.endswith(f"\n\n*{note}*"):
            stripped = stripped[: -len(note) - 4]
            break
    if stripped == text:
        return text
    return _MARKERS_AT_END.sub("", stripped)


def plain_answer(message: BaseMessage) -> str:
    """The answer an AI message carries, without what :func:`message_text` added to it.

    The ``answer`` its ``additional_kwargs`` record, else its text with the block stripped
    (:func:`strip_message_text`). This is what the contextualizer reads of an earlier turn.
    """
    recorded = message.additional_kwargs.get("answer")
    if isinstance(recorded, str):
        return recorded
    return strip_message_text(message.text)


def citation_annotation(number: int, strip: KnowledgeStrip, text: str) -> dict[str, Any]:
    """A LangChain standard ``citation`` annotation of entry ``number`` in the message ``text``.

    Its ``start_index``/``end_index`` span the entry's ``[n]`` marker after the answer (the
    first one); ``url`` is set for web knowledge; ``extras`` hold crag's citation entry.
    """
    marker = f"[{number}]"
    start = text.find(f" {marker}") + 1
    annotation: dict[str, Any] = {
        "type": "citation",
        "title": source_title(strip),
        "start_index": start,
        "end_index": start + len(marker),
        "cited_text": clip_text(" ".join(strip["text"].split()), CITED_TEXT_CHARS),
        "extras": dict(citation_entry(number, strip)),
    }
    if strip["chunk"] is None and _URL.fullmatch(strip["source"]):
        annotation["url"] = strip["source"]
    return annotation


def message_content(
    answer: str,
    knowledge: Sequence[KnowledgeStrip],
    citations: Sequence[int],
    action: str | None,
    abstained: bool,
) -> list[str | dict[str, Any]]:
    """The AI message's content: one standard text block, its citations as annotations.

    Both Agent Chat UI (``getContentString``) and assistant-ui (``contentToParts``) show a
    ``text`` block's ``text`` as Markdown; LangChain's ``content_blocks`` keep the
    ``annotations`` (``langchain_core.messages.content.TextContentBlock``).
    """
    text = message_text(answer, knowledge, citations, action, abstained)
    block: dict[str, Any] = {"type": "text", "text": text}
    cited = _cited(knowledge, citations)
    if cited:
        block["annotations"] = [citation_annotation(n, knowledge[n - 1], text) for n in cited]
    return [block]


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

    Its content is the answer with what crag knows of it (:func:`message_content`), for chat
    front-ends that show the text only. ``additional_kwargs`` carry the plain ``answer``
    (what a follow-up reads, as ``state["answer"]``), the distinct ``sources``, the
    ``citations`` (number, title, source, chunk and location of each cited entry), whether
    the run ``abstained``, the ``question`` and the ``action``. ``message_id`` is the
    generator reply's id, so chat front-ends merge the streamed tokens and the stored message
    into one.
    """
    extra: dict[str, Any] = {
        "sources": sources_of(knowledge),
        "citations": citation_entries(knowledge, citations),
        "abstained": abstained,
        "question": question,
        "answer": answer,
    }
    if action is not None:
        extra["action"] = action
    content = message_content(answer, knowledge, citations, action, abstained)
    return AIMessage(content=content, id=message_id, additional_kwargs=extra)
