"""Generate: answer from the question and the chosen knowledge, citing it by number."""

from __future__ import annotations

import logging

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from graph.components import current_components
from graph.context import Context
from graph.conversation import answer_message
from graph.progress import emit
from graph.state import KnowledgeStrip, State, StateUpdate
from knowledge.attribution import Attribution, attribute
from knowledge.combination import best_first, combine_knowledge
from knowledge.lexical import heading_of
from prompts.generate import GENERATE_HUMAN, GENERATE_SYSTEM, NO_ANSWER, NO_KNOWLEDGE

logger = logging.getLogger(__name__)


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


def gathered_knowledge(state: State, context: Context) -> list[KnowledgeStrip]:
    """The knowledge of the run: internal strips, then external ones, each text once.

    Correct runs give only internal knowledge, Incorrect only external, Ambiguous both: each
    branch fills only its own list and ``retrieve`` clears both at the start of a run. An
    Ambiguous run's knowledge is pooled with ``ambiguous_knowledge="pooled"`` (the best
    ``strips_kept`` of both; :mod:`knowledge.combination`); ``knowledge_order="score"`` puts
    the best-scored strips first.
    """
    pooled = state.get("action") == "ambiguous" and context.ambiguous_knowledge == "pooled"
    knowledge = combine_knowledge(
        state.get("internal_knowledge", []),
        state.get("external_knowledge", []),
        pooled_keep=context.strips_kept if pooled else None,
    )
    if context.knowledge_order == "score":
        knowledge = best_first(knowledge)
    return knowledge


def attribute_answer(answer: str, knowledge: list[KnowledgeStrip], question: str) -> Attribution:
    """The answer without ``[n]`` markers and the knowledge entries it cites.

    A refusal (:data:`~prompts.generate.NO_ANSWER`) cites nothing.
    """
    attribution = attribute(answer, [k["text"] for k in knowledge], question)
    if attribution.answer == NO_ANSWER:
        return Attribution(attribution.answer, [], "none")
    return attribution


def generate(state: State, runtime: Runtime[Context]) -> StateUpdate:
    """Ask the generator to answer from the knowledge, then attribute the answer.

    The knowledge is numbered in the prompt when ``number_knowledge`` is on. The answer's
    valid ``[n]`` markers become ``citations`` (and leave the answer text); an
    answer without one cites the entries it shares the most content words with
    (:mod:`knowledge.attribution`). The answer is also appended to ``messages`` as an AI
    message carrying the sources, citations and action (what chat front-ends show).
    """
    knowledge = gathered_knowledge(state, runtime.context)
    messages = [
        SystemMessage(GENERATE_SYSTEM.format(no_answer=NO_ANSWER)),
        HumanMessage(
            GENERATE_HUMAN.format(
                knowledge=format_knowledge(knowledge, runtime.context.number_knowledge),
                question=state["question"],
            )
        ),
    ]
    model = current_components().chat_model(runtime.context)
    internal = sum(1 for k in knowledge if k["origin"] == "internal")
    emit(
        runtime,
        "generate",
        "generating",
        internal=internal,
        external=len(knowledge) - internal,
    )
    reply = model.invoke(messages)
    answer, citations, method = attribute_answer(reply.text.strip(), knowledge, state["question"])
    logger.info("generate: cites %s (%s)", citations, method)
    emit(runtime, "generate", "generated", chars=len(answer))
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
    if not knowledge:
        update["notes"] = ["no knowledge reached the generator; the answer is unsupported"]
    return update
