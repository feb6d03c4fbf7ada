"""Contextualize: turn a follow-up on a thread into a standalone question before retrieval.

"Who painted it?" retrieves nothing useful on its own; "Who painted the Mona Lisa?" does. The
generator rewrites the follow-up from the thread's earlier turns. Its rewrite is kept only when
it resolved the references and kept the follow-up's intent; otherwise the follow-up gets the
previous turn's key words appended, deterministically.

A question with no earlier turns, or one that refers to nothing before it, passes through
unchanged without a generator call: single questions (benchmarks) are answered exactly as
without this node, and a small model never gets to spoil a question that needs no rewriting.

The earlier turns read are bounded (settings ``max_history_turns`` and ``max_history_chars``):
a chat may hold any text, and one 40,000-character answer made a single run take 102.5 s.
What was left out is noted; ``retrieve`` starts the run's notes afresh, so the note waits in
``input_notes`` and :func:`retrieve_with_input_notes` carries it over.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import NamedTuple

from langgraph.constants import TAG_NOSTREAM
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from crag.core.state import State, StateUpdate
from crag.core.validation import validate_question
from crag.generator.reply_cap import reply_cap
from crag.knowledge.conversation import (
    History,
    Turn,
    bounded_history,
    earlier_turns,
    question_from_messages,
)
from crag.knowledge.words import STOPWORDS, content_tokens
from crag.nodes.caller import run_caller
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.nodes.retrieve import retrieve
from crag.prompts.contextualize import contextualize_turns
from crag.prompts.generate import NO_ANSWER
from crag.settings.run_settings import RunSettings

logger = logging.getLogger(__name__)

REWRITE_TOKENS = 48
"""Longest rewrite, in tokens (a question, not an answer)."""

FALLBACK_WORDS = 8
"""Most key words the fallback appends."""

SHORT_ANSWER_WORDS = 6
"""An earlier answer this short (a name, a date) lends its words to the fallback."""

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_REFERRING = frozenset(
    """it its itself he him his himself she her hers herself they them their theirs
    themselves this these those""".split()
)
"""Words that point back to something said earlier."""
_REFERRING_AT_END = frozenset({"that", "there", "then"})
"""Words that point back only at the end of a question ("When was that?", "Who lived there?")."""
_ELLIPTIC_START = ("and ", "what about ", "how about ", "what else")
_LABEL = re.compile(
    r"^(?:standalone question|rewritten question|follow-up question|question|q)\s*:\s*",
    re.IGNORECASE,
)


def needs_context(question: str) -> bool:
    """Whether ``question`` refers to something outside itself (a pronoun, "there", "and ...")."""
    words = [w.lower() for w in _WORD.findall(question)]
    if not words:
        return False
    if any(w in _REFERRING for w in words) or words[-1] in _REFERRING_AT_END:
        return True
    return question.strip().lower().startswith(_ELLIPTIC_START)


def usable_rewrite(raw: str, follow_up: str, turns: Sequence[Turn], max_chars: int) -> str | None:
    """The model's standalone question, or ``None`` when it is not usable.

    Usable: one non-empty line within ``max_chars`` that no longer refers back, keeps at least
    half of the follow-up's content words (its intent; an answer would not), and brings in a
    word from the earlier turns (it resolved something).
    """
    line = next((part.strip() for part in raw.splitlines() if part.strip()), "")
    line = _LABEL.sub("", line).strip().strip("\"'`").strip()
    if not line or len(line) > max_chars or needs_context(line):
        return None
    asked, rewritten = content_tokens(follow_up), content_tokens(line)
    if asked and 2 * len(asked & rewritten) < len(asked):
        return None
    history: set[str] = set()
    for turn in turns:
        history |= content_tokens(turn.question) | content_tokens(turn.answer)
    if not (rewritten - asked) & history:
        return None
    return line


def _key_words(text: str, exclude: set[str], seen: set[str]) -> list[str]:
    words = []
    for word in _WORD.findall(text):
        stem = word.lower()[:5]
        if word.lower() in STOPWORDS or stem in exclude or stem in seen:
            continue
        seen.add(stem)
        words.append(word)
    return words


def fallback_question(follow_up: str, turns: Sequence[Turn], max_chars: int) -> str:
    """The follow-up with the previous turn's key words appended in brackets.

    "When was he born?" after "Who painted the Mona Lisa?" / "Leonardo da Vinci." becomes
    "When was he born? (painted Mona Lisa; Leonardo da Vinci)": retrieval and the generator see
    the subject. The answer's words count only when it is short (a name, a date).
    """
    if not turns:
        return follow_up
    last = turns[-1]
    exclude, seen = content_tokens(follow_up), set[str]()
    groups = [_key_words(last.question, exclude, seen)]
    answer = last.answer.strip()
    if answer != NO_ANSWER and len(answer.split()) <= SHORT_ANSWER_WORDS:
        groups.append(_key_words(answer, exclude, seen))
    kept: list[list[str]] = []
    budget = FALLBACK_WORDS
    for group in groups:
        if group[:budget]:
            kept.append(group[:budget])
            budget -= len(kept[-1])
    if not kept:
        return follow_up
    question = f"{follow_up} ({'; '.join(' '.join(g) for g in kept)})"
    return question if len(question) <= max_chars else follow_up


class Rewrite(NamedTuple):
    """The standalone question, whether the fallback made it, and why (a failure) if so."""

    question: str
    fallback: bool
    failure: str = ""


def _rewrite(
    question: str, turns: Sequence[Turn], settings: RunSettings, components: Components
) -> Rewrite:
    """Ask the contextualizer's model (the generator unless set) for a standalone question."""
    prompt = contextualize_turns([(t.question, t.answer) for t in turns], question)
    raw = ""
    failure = ""
    try:
        model = components.chat_model(settings.for_role("contextualizer"))
        quiet = model.with_config(tags=[TAG_NOSTREAM])
        raw = quiet.invoke(prompt, **reply_cap(model, REWRITE_TOKENS)).text
    except Exception as exc:  # noqa: BLE001 - any provider error: the fallback runs
        logger.warning("contextualizing the follow-up failed: %s", exc)
        failure = str(exc)
    rewritten = usable_rewrite(raw, question, turns, settings.deployment.max_question_chars)
    if rewritten is not None:
        return Rewrite(rewritten, False)
    logger.info("unusable standalone question %r; falling back to key words", raw)
    return Rewrite(
        fallback_question(question, turns, settings.deployment.max_question_chars), True, failure
    )


def history_note(history: History, settings: RunSettings) -> str | None:
    """The note saying which earlier turns were left out or cut; ``None`` when none was."""
    if not history.left_out and not history.cut:
        return None
    read = len(history.turns)
    parts = [f"read {read} of {read + history.left_out} earlier turns"]
    if history.cut:
        parts.append(f"{history.cut} {'text' if history.cut == 1 else 'texts'} of them cut short")
    return (
        f"chat history bounded for the follow-up: {', '.join(parts)} (max_history_turns "
        f"{settings.deployment.max_history_turns}, max_history_chars "
        f"{settings.deployment.max_history_chars:,})"
    )


def contextualize(
    state: State, runtime: Runtime[RunSettings], components: Components
) -> StateUpdate:
    """Pick the run's question (``question`` or the new human message) and make it standalone.

    Only the most recent earlier turns are read, within ``max_history_chars``; a note in
    ``input_notes`` says what was left out.

    Raises:
        NoCallerError: A served run that carries no caller: refused before anything is read.
        InvalidQuestionError: no question, or an empty, non-text or too long one (the same
            errors for a ``question`` and for the last human message).
    """
    run_caller()  # a served run without its caller stops here (it raises)
    settings = runtime.context
    messages = state.get("messages", [])
    asked = question_from_messages(state.get("question"), messages)
    question = validate_question(asked, settings.deployment.max_question_chars)
    every_turn = earlier_turns(messages, limit=None)
    read = every_turn if needs_context(question) else []  # the turns are read only if needed
    history = bounded_history(
        read, settings.deployment.max_history_turns, settings.deployment.max_history_chars
    )
    note = history_note(history, settings)
    update: StateUpdate = {"input_notes": [note] if note else []}
    turns = history.turns
    if not turns:
        emit(runtime, "contextualize", "unchanged", turns=len(every_turn))
        return {**update, "question": question, "standalone_question": question}
    emit(runtime, "contextualize", "rewriting", turns=len(turns))
    standalone, fallback, failure = _rewrite(question, turns, settings, components)
    logger.info("standalone question: %r (fallback: %s)", standalone, fallback)
    emit(runtime, "contextualize", "rewritten", question=standalone, fallback=fallback)
    if failure:
        update["input_notes"] = [
            *update["input_notes"],
            f"the contextualizer failed ({failure}); the follow-up was completed with the "
            f"earlier turn's key words: {standalone!r}",
        ]
    return {**update, "question": standalone, "standalone_question": standalone}


def retrieve_with_input_notes(
    state: State, runtime: Runtime[RunSettings], components: Components
) -> StateUpdate:
    """``retrieve``, starting the run's notes with those ``contextualize`` left on its input.

    ``retrieve`` clears what an earlier run on the thread left, ``notes`` included; the notes
    this run's ``contextualize`` wrote before it (``input_notes``) are kept, followed by those
    ``retrieve`` starts the run with (a scope that matches nothing), and ``input_notes`` is
    emptied. The chat graphs add this as their ``retrieve`` node.
    """
    update = retrieve(state, runtime, components)
    started = update.get("notes")
    own = started.value if isinstance(started, Overwrite) else list(started or [])
    update["notes"] = Overwrite([*(state.get("input_notes") or []), *own])
    update["input_notes"] = []
    return update
