"""Answer, or abstain when no knowledge was found (the ``crag`` graph's last step).

A small generator given no knowledge answers anyway, from what it half remembers. When nothing
from the store or the web passed the strip threshold, the ``crag`` graph says it could not find
the answer instead (a fixed sentence) and does not ask the generator; ``notes`` say which
sources gave nothing. The setting ``abstain_without_knowledge`` turns this off.
"""

from __future__ import annotations

import logging
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context, resolve_context
from graph.conversation import answer_message
from graph.progress import emit
from graph.state import State
from nodes.generate import gathered_knowledge, generate
from prompts.generate import ABSTENTION

logger = logging.getLogger(__name__)


def _store_reason(state: State, context: Context) -> str:
    """Why the store gave no knowledge."""
    decision = state.get("decision")
    if not state.get("documents"):
        return "returned no passages"
    if state.get("action") == "incorrect":
        return f"no passage used: {decision['reason'] if decision else 'action incorrect'}"
    if not context.refine_knowledge:
        return "no passage kept"
    return f"no strip scored above {context.strip_threshold:g}"


def _web_reason(state: State, context: Context) -> str:
    """Why the web gave no knowledge: the web search's own note, when it left one."""
    if state.get("action") == "correct":
        return "not searched (action correct)"
    for note in state.get("notes", []):
        if note.startswith("web search"):
            return note.partition("; answered without")[0]
    return f"no strip scored above {context.strip_threshold:g}"


def abstention_note(state: State, context: Context) -> str:
    """The note of an abstaining run: which sources gave nothing, and why."""
    return (
        "abstained, the generator was not asked: no knowledge passed the strip threshold "
        f"({context.strip_threshold:g}); store: {_store_reason(state, context)}; "
        f"web: {_web_reason(state, context)}"
    )


def abstain(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """The update of a run that found no knowledge: the abstention sentence, no generator call."""
    context = resolve_context(runtime.context)
    note = abstention_note(state, context)
    logger.info("%s", note)
    emit(runtime, "generate", "abstained")
    message = answer_message(
        ABSTENTION,
        question=state["question"],
        knowledge=[],
        action=state.get("action"),
        message_id=None,
        abstained=True,
    )
    return {
        "answer": ABSTENTION,
        "knowledge": [],
        "citations": [],
        "abstained": True,
        "messages": [message],
        "notes": [note],
    }


def answer_or_abstain(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Abstain when the run gathered no knowledge, else :func:`~nodes.generate.generate`.

    ``abstain_without_knowledge`` off: the generator answers even without knowledge.
    """
    context = resolve_context(runtime.context)
    if context.abstain_without_knowledge and not gathered_knowledge(state):
        return abstain(state, runtime)
    return generate(state, runtime)
