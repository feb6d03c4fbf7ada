"""Generate: answer from the question and the chosen knowledge, citing it by number.

The knowledge in the prompt is bounded (setting ``max_knowledge_chars``, and a local model's
context length less the answer's tokens): standard RAG with ``top_k=50`` once sent 50 passages
and took half a minute and 1.75 GB. Past the bound the lowest-ranked entries are dropped (the
instructions and the question always stay) and a note says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from crag.core.state import KnowledgeStrip, State, StateUpdate
from crag.generator.endpoint_config import EndpointConfig, EndpointError
from crag.knowledge.attribution import Attribution, attribute
from crag.knowledge.combination import (
    UNSCORED_RANK,
    best_first,
    best_within_words,
    combine_knowledge,
)
from crag.knowledge.conversation import answer_message, clip_text
from crag.knowledge.passages import one_per_passage
from crag.knowledge.words import heading_of
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.prompts.generate import GENERATE_HUMAN, GENERATE_SYSTEM, NO_ANSWER, NO_KNOWLEDGE
from crag.settings.run_settings import RunSettings

logger = logging.getLogger(__name__)

PROMPT_MARGIN_TOKENS = 16
"""Tokens of a local model's context left unused: the knowledge is counted line by line, which
can differ by a token or two from the block as the prompt holds it."""

NUMBER_TOKENS = 4
"""Tokens counted for a ``[n] `` prefix when the knowledge is numbered."""


def render_strip(text: str) -> str:
    """One line per strip: a heading line becomes a ``heading: text`` prefix."""
    heading = heading_of(text)
    if heading is None:
        return " ".join(text.split())
    return f"{heading}: {' '.join(text.partition(chr(10))[2].split())}"


def format_knowledge(strips: list[KnowledgeStrip], numbered: bool = False) -> str:
    """Render strips one per line (``heading: text``), internal first.

    ``numbered``: each line starts with its number from 1 (``[1] heading: text``), for a
    generator that cites.
    """
    if not strips:
        return NO_KNOWLEDGE
    if not numbered:
        return "\n".join(render_strip(s["text"]) for s in strips)
    return "\n".join(f"[{n}] {render_strip(s['text'])}" for n, s in enumerate(strips, start=1))


def prompt_messages(knowledge: str, question: str) -> list[BaseMessage]:
    """The generator's prompt: the instructions, then the knowledge block and the question."""
    return [
        SystemMessage(GENERATE_SYSTEM.format(no_answer=NO_ANSWER)),
        HumanMessage(GENERATE_HUMAN.format(knowledge=knowledge, question=question)),
    ]


class KnowledgeBudget(NamedTuple):
    """How much knowledge the generator's prompt may hold."""

    chars: int
    """Characters of knowledge (``max_knowledge_chars``)."""
    tokens: int | None = None
    """Tokens left for knowledge in the model's context; ``None`` when it is not known."""
    window: int | None = None
    """The model's context length in tokens, for the note."""


def knowledge_budget(model: Any, settings: RunSettings, question: str) -> KnowledgeBudget:
    """The knowledge budget of a prompt to ``model``.

    ``max_knowledge_chars``, and for a model that says its context length (a local one:
    ``context_length``) the tokens that the instructions, the question and the answer's
    ``max_new_tokens`` leave of it.
    """
    window = getattr(model, "context_length", None)
    if not isinstance(window, int) or window <= 0:
        return KnowledgeBudget(settings.deployment.max_knowledge_chars)
    fixed = model.get_num_tokens_from_messages(prompt_messages("", question))
    free = window - fixed - settings.max_new_tokens - PROMPT_MARGIN_TOKENS
    return KnowledgeBudget(settings.deployment.max_knowledge_chars, free, window)


def ranked(knowledge: Sequence[KnowledgeStrip]) -> list[int]:
    """Indices of ``knowledge``, best first.

    By score, unscored first (as :func:`~crag.knowledge.combination.best_first` ranks); ties keep
    their order, which for unscored passages is the retriever's.
    """

    def rank(index: int) -> float:
        score = knowledge[index]["score"]
        return UNSCORED_RANK if score is None else score

    return sorted(range(len(knowledge)), key=lambda index: -rank(index))


Bound = Literal["chars", "tokens"]
"""What cut the knowledge: ``max_knowledge_chars`` or the model's context length."""


def _limit_words(budget: KnowledgeBudget, bound: Bound, new_tokens: int) -> str:
    if bound == "tokens":
        window = f"{budget.window:,}"
        return f"the generator's context of {window} tokens, {new_tokens} kept for the answer"
    return f"max_knowledge_chars {budget.chars:,}"


def _costs(
    lines: Sequence[str], numbered: bool, count_tokens: Callable[[str], int] | None
) -> tuple[list[int], list[int]]:
    """Each rendered line's characters and tokens in the prompt (tokens 0 when not counted)."""
    prefix = len(f"[{len(lines)}] ") if numbered else 0
    chars = [prefix + len(line) + 1 for line in lines]
    if count_tokens is None:
        return chars, [0] * len(lines)
    extra = 1 + (NUMBER_TOKENS if numbered else 0)
    return chars, [count_tokens(line) + extra for line in lines]


def _cut_best(
    strip: KnowledgeStrip, line: str, chars: int, tokens: int, budget: KnowledgeBudget
) -> list[KnowledgeStrip]:
    """The best entry alone, cut to the budget (its tokens taken as even over its text)."""
    room = budget.chars - (chars - len(line)) - 1
    if budget.tokens is not None and tokens > 0:
        room = min(room, len(line) * budget.tokens // tokens - (chars - len(line)) - 1)
    text = clip_text(strip["text"], room)
    return [{**strip, "text": text}] if text else []


def fit_knowledge(
    knowledge: list[KnowledgeStrip],
    budget: KnowledgeBudget,
    *,
    numbered: bool = False,
    count_tokens: Callable[[str], int] | None = None,
) -> tuple[list[KnowledgeStrip], Bound | None]:
    """The entries of ``knowledge`` that fit ``budget``, in their order, and what cut them.

    Entries are taken best first (:func:`ranked`) while they fit, so the lowest-ranked go
    first; when not even the best one fits, it is cut to fit (:func:`clip_text`). Tokens are
    counted with ``count_tokens`` when the budget has a token limit. Returns the kept entries
    and ``None`` when everything fit, else the limit that cut.
    """
    lines = [render_strip(strip["text"]) for strip in knowledge]
    counter = count_tokens if budget.tokens is not None else None
    chars, tokens = _costs(lines, numbered, counter)
    order = ranked(knowledge)
    kept: list[int] = []
    used_chars = used_tokens = 0
    for index in order:
        if used_chars + chars[index] > budget.chars:
            bound: Bound = "chars"
        elif counter is not None and used_tokens + tokens[index] > (budget.tokens or 0):
            bound = "tokens"
        else:
            kept.append(index)
            used_chars, used_tokens = used_chars + chars[index], used_tokens + tokens[index]
            continue
        if kept:
            return [knowledge[i] for i in sorted(kept)], bound
        best = order[0]
        return _cut_best(knowledge[best], lines[best], chars[best], tokens[best], budget), bound
    return knowledge, None


def fit_note(before: list[KnowledgeStrip], after: list[KnowledgeStrip], limit: str) -> str:
    """The note on knowledge cut to fit the prompt."""
    if len(after) == 1 and after[0]["text"] not in {k["text"] for k in before}:
        dropped = f", the other {len(before) - 1} dropped" if len(before) > 1 else ""
        return (
            f"knowledge cut to fit the generator's prompt: only the best entry, cut to "
            f"{len(after[0]['text']):,} characters{dropped} ({limit})"
        )
    return (
        f"knowledge cut to fit the generator's prompt: {len(after)} of {len(before)} entries "
        f"kept, the {len(before) - len(after)} lowest-ranked dropped ({limit})"
    )


def bounded_knowledge(
    knowledge: list[KnowledgeStrip], model: Any, settings: RunSettings, question: str
) -> tuple[list[KnowledgeStrip], list[str]]:
    """``knowledge`` fitted to ``model``'s prompt (:func:`fit_knowledge`) and the notes on it."""
    budget = knowledge_budget(model, settings, question)
    fitted, bound = fit_knowledge(
        knowledge,
        budget,
        numbered=settings.number_knowledge,
        count_tokens=model.get_num_tokens if budget.tokens is not None else None,
    )
    if bound is None:
        return knowledge, []
    note = fit_note(knowledge, fitted, _limit_words(budget, bound, settings.max_new_tokens))
    logger.info("%s", note)
    return fitted, [note]


def gathered_knowledge(state: State, settings: RunSettings) -> list[KnowledgeStrip]:
    """The knowledge of the run: internal strips, then external ones, each text once.

    Correct runs give only internal knowledge, Incorrect only external, Ambiguous both: each
    branch fills only its own list and ``retrieve`` clears both at the start of a run. An
    Ambiguous run's knowledge is pooled with ``ambiguous_knowledge="pooled"`` (the best
    ``strips_kept`` of both; :mod:`crag.knowledge.combination`). The kept strips of one stored
    passage are then one entry (:mod:`crag.knowledge.passages`); ``knowledge_order="score"``
    puts the best-scored entries first. In the ``passages`` knowledge form the whole passages
    and paragraphs of every branch are pooled within the words of the retrieved passages
    (:func:`~crag.knowledge.combination.best_within_words`).
    """
    whole = settings.reader_knowledge_form() == "passages"
    pooled = (
        not whole
        and state.get("action") == "ambiguous"
        and settings.ambiguous_knowledge == "pooled"
    )
    knowledge = combine_knowledge(
        state.get("internal_knowledge", []),
        state.get("external_knowledge", []),
        pooled_keep=settings.strips_kept if pooled else None,
    )
    if whole:
        budget = sum(len(d["text"].split()) for d in state.get("documents", []))
        if budget:
            knowledge = best_within_words(knowledge, budget)
    knowledge = one_per_passage(knowledge)  # one number, citation and source per passage
    if settings.knowledge_order == "score":
        knowledge = best_first(knowledge)
    return knowledge


def attribute_answer(answer: str, knowledge: list[KnowledgeStrip], question: str) -> Attribution:
    """The answer without ``[n]`` markers and the knowledge entries it cites.

    A refusal (:data:`~crag.prompts.generate.NO_ANSWER`) cites nothing.
    """
    attribution = attribute(answer, [k["text"] for k in knowledge], question)
    if attribution.answer == NO_ANSWER:
        return Attribution(attribution.answer, [], "none")
    return attribution


def empty_answer(model: Any, reply: BaseMessage) -> EndpointError | None:
    """The failure that an empty reply of a model server is; ``None`` for other models.

    A model server's empty answer (no text: ``null`` content, a reasoning model that spent its
    ``max_tokens`` thinking) fails as its other failures do, one line naming the endpoint;
    a local model's empty answer stays an answer, as it always was.
    """
    endpoint = getattr(model, "endpoint", None)
    if not isinstance(endpoint, EndpointConfig):
        return None
    finish = reply.response_metadata.get("finish_reason")
    why = f" (finish reason {finish!r})" if isinstance(finish, str) and finish else ""
    return EndpointError(
        f"the model server {endpoint.where} replied with an empty answer{why}", "malformed"
    )


def generate(state: State, runtime: Runtime[RunSettings], components: Components) -> StateUpdate:
    """Ask the generator to answer from the knowledge, then attribute the answer.

    The knowledge is bounded first (:func:`bounded_knowledge`: the lowest-ranked entries
    dropped past ``max_knowledge_chars`` or the model's context, with a note) and numbered in
    the prompt when ``number_knowledge`` is on. The answer's valid ``[n]`` markers become
    ``citations`` (and leave the answer text); an answer without one cites the entries it
    shares the most content words with (:mod:`crag.knowledge.attribution`). The answer is
    also appended to ``messages`` as an AI message carrying the sources, citations and action
    (what chat front-ends show). A model server's empty answer ends the run as its other
    failures do (:func:`empty_answer`).
    """
    model = components.chat_model(runtime.context)
    knowledge, notes = bounded_knowledge(
        gathered_knowledge(state, runtime.context), model, runtime.context, state["question"]
    )
    messages = prompt_messages(
        format_knowledge(knowledge, runtime.context.number_knowledge), state["question"]
    )
    internal = sum(1 for k in knowledge if k["origin"] == "internal")
    emit(
        runtime,
        "generate",
        "generating",
        internal=internal,
        external=len(knowledge) - internal,
    )
    reply = _reply(model, messages)
    answer, citations, method = attribute_answer(reply.text.strip(), knowledge, state["question"])
    logger.info("generate: cites %s (%s)", citations, method)
    emit(runtime, "generate", "generated", chars=len(answer))
    if not knowledge:
        notes.append("no knowledge reached the generator; the answer is unsupported")
    return _answer_update(state, knowledge, answer, citations, reply, notes)


def _reply(model: Any, messages: list[BaseMessage]) -> BaseMessage:
    """The model's reply; a model server's empty one raises (:func:`empty_answer`)."""
    reply: BaseMessage = model.invoke(messages)
    if not reply.text.strip():
        failure = empty_answer(model, reply)
        if failure is not None:
            raise failure
    return reply


def _answer_update(
    state: State,
    knowledge: list[KnowledgeStrip],
    answer: str,
    citations: list[int],
    reply: BaseMessage,
    notes: list[str],
) -> StateUpdate:
    """The answer, its knowledge and citations, and the AI message chat front-ends show."""
    message = answer_message(
        answer,
        question=state["question"],
        knowledge=knowledge,
        action=state.get("action"),
        message_id=reply.id,
        citations=citations,
    )
    update: StateUpdate = {
        "answer": answer,
        "knowledge": knowledge,
        "citations": citations,
        "abstained": False,
        "messages": [message],
    }
    if notes:
        update["notes"] = notes
    return update
