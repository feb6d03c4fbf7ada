"""Generate: answer from the question and the chosen knowledge."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from graph.components import current_components
from graph.context import Context, resolve_context
from graph.conversation import answer_message
from graph.progress import emit
from graph.state import KnowledgeStrip, State
from knowledge.lexical import heading_of
from prompts.generate import GENERATE_HUMAN, GENERATE_SYSTEM, NO_ANSWER, NO_KNOWLEDGE


def render_strip(text: str) -> str:
    """One line per strip: a heading line becomes a ``heading: text`` prefix."""
    heading = heading_of(text)
    if heading is None:
        return " ".join(text.split())
    return f"{heading}: {' '.join(text.partition(chr(10))[2].split())}"


def format_knowledge(strips: list[KnowledgeStrip]) -> str:
    """Render strips one per line, internal knowledge first, in recomposed order."""
    return "\n".join(render_strip(s["text"]) for s in strips) if strips else NO_KNOWLEDGE


def generate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Combine internal and external knowledge (per the action) and ask the generator.

    Correct runs give only internal knowledge, Incorrect only external, Ambiguous both: each
    branch fills only its own list and ``retrieve`` clears both at the start of a run. The
    answer is also appended to ``messages`` as an AI message carrying the sources and action
    (what chat front-ends show).
    """
    context = resolve_context(runtime.context)
    knowledge = [*state.get("internal_knowledge", []), *state.get("external_knowledge", [])]
    messages = [
        SystemMessage(GENERATE_SYSTEM.format(no_answer=NO_ANSWER)),
        HumanMessage(
            GENERATE_HUMAN.format(knowledge=format_knowledge(knowledge), question=state["question"])
        ),
    ]
    model = current_components().chat_model(context)
    internal = sum(1 for k in knowledge if k["origin"] == "internal")
    emit(
        runtime,
        "generate",
        "generating",
        internal=internal,
        external=len(knowledge) - internal,
    )
    reply = model.invoke(messages)
    answer = reply.text.strip()
    emit(runtime, "generate", "generated", chars=len(answer))
    message = answer_message(
        answer,
        question=state["question"],
        knowledge=knowledge,
        action=state.get("action"),
        message_id=reply.id,
    )
    update: dict[str, Any] = {"answer": answer, "knowledge": knowledge, "messages": [message]}
    if not knowledge:
        update["notes"] = ["no knowledge reached the generator; the answer is unsupported"]
    return update
