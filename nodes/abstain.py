"""Decide whether to answer, and abstain when no knowledge was found (the ``crag`` graph's end).

A small generator given no knowledge answers anyway, from what it half remembers. When nothing
from the store or the web passed the strip threshold, the ``crag`` graph says it could not find
the answer instead (a fixed sentence) and does not ask the generator; ``notes`` say which
sources gave nothing. The setting ``abstain_without_knowledge`` turns this off. Whether weak
knowledge that was kept also abstains follows the reader (``abstention_threshold``, unset:
:data:`~crag.settings.method.READER_ABSTENTION`): with the shipped SmolLM2, which answers from
anything it is given, a run none of whose knowledge scores above -0.9 abstains; with any other
generator "no knowledge" means no knowledge, and the reader judges the rest (abstaining on weak
knowledge threw away answers a stronger reader gets right).

The graph draws the choice: :func:`decide_answer` (where the branches join) records whether the
run's knowledge supports an answer (``answerable``), and the router
:func:`~crag.graph.routers.route_answer` sends the run to ``generate`` or to :func:`abstain`.
"""

from __future__ import annotations

import logging

from langgraph.runtime import Runtime

from crag.core.state import KnowledgeStrip, State, StateUpdate
from crag.knowledge.conversation import answer_message
from crag.nodes.generate import gathered_knowledge
from crag.nodes.progress import emit
from crag.prompts.generate import ABSTENTION, ABSTENTION_WITHOUT_WEB
from crag.settings.run_settings import RunSettings

logger = logging.getLogger(__name__)


def _store_reason(state: State, settings: RunSettings) -> str:
    """Why the store gave no knowledge."""
    decision = state.get("decision")
    if not state.get("documents"):
        return "returned no passages"
    if state.get("action") == "incorrect":
        return f"no passage used: {decision['reason'] if decision else 'action incorrect'}"
    if not settings.refine_knowledge:
        return "no passage kept"
    return f"no strip scored above {settings.strip_threshold:g}"


def _web_reason(state: State, settings: RunSettings) -> str:
    """Why the web gave no knowledge: the reason the web search recorded, when it gave one."""
    if state.get("action") == "correct":
        return "not searched (action correct)"
    return state.get("web_reason") or f"no strip scored above {settings.strip_threshold:g}"


def supports_an_answer(knowledge: list[KnowledgeStrip], threshold: float) -> bool:
    """Whether any strip scores above ``threshold`` (an unscored strip always counts).

    At -1 (the default), the bottom of the scale, any knowledge does: only a run with none
    abstains.
    """
    if threshold <= -1:
        return bool(knowledge)
    scores = [k.get("score") for k in knowledge]
    return any(score is None or score > threshold for score in scores)


def abstention_note(state: State, settings: RunSettings, knowledge: list[KnowledgeStrip]) -> str:
    """The note of an abstaining run: which sources gave nothing, and why."""
    if knowledge:
        best = max(score for k in knowledge if (score := k.get("score")) is not None)
        return (
            "abstained, the generator was not asked: no knowledge scored above the abstention "
            f"threshold ({settings.answer_threshold():g}): best of {len(knowledge)} strips "
            f"{best:.3f}"
        )
    return (
        "abstained, the generator was not asked: no knowledge passed the strip threshold "
        f"({settings.strip_threshold:g}); store: {_store_reason(state, settings)}; "
        f"web: {_web_reason(state, settings)}"
    )


def decide_answer(state: State, runtime: Runtime[RunSettings]) -> StateUpdate:
    """Record whether the run may answer: some knowledge scores above the abstention threshold.

    The knowledge is the run's gathered knowledge (:func:`~crag.nodes.generate.gathered_knowledge`,
    what ``generate`` would be given); with ``abstain_without_knowledge`` off every run answers.
    """
    settings = runtime.context
    knowledge = gathered_knowledge(state, settings)
    supported = supports_an_answer(knowledge, settings.answer_threshold())
    return {"answerable": supported or not settings.abstain_without_knowledge}


def abstain(state: State, runtime: Runtime[RunSettings]) -> StateUpdate:
    """The update of a run without usable knowledge: the abstention sentence, no generator call.

    The run's knowledge (too weak to answer from) is named in the note only. The progress event
    is the answer step's (``generate``), as when the run answers. A run that turned the web off
    is not told the web was searched (:data:`~crag.prompts.generate.ABSTENTION_WITHOUT_WEB`).
    """
    knowledge = gathered_knowledge(state, runtime.context)
    note = abstention_note(state, runtime.context, knowledge)
    logger.info("%s", note)
    emit(runtime, "generate", "abstained")
    sentence = ABSTENTION if runtime.context.web_search else ABSTENTION_WITHOUT_WEB
    message = answer_message(
        sentence,
        question=state["question"],
        knowledge=[],
        action=state.get("action"),
        message_id=None,
        abstained=True,
    )
    return {
        "answer": sentence,
        "knowledge": [],
        "citations": [],
        "abstained": True,
        "messages": [message],
        "notes": [note],
    }
