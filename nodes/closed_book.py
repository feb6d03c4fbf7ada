"""Answer closed-book: the no-retrieval baseline (the generator alone)."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime
from langgraph.types import Overwrite

from crag.core.state import State, StateUpdate
from crag.core.validation import validate_question
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.prompts.generate import CLOSED_BOOK_SYSTEM
from crag.settings.run_settings import RunSettings


def answer_closed_book(
    state: State, runtime: Runtime[RunSettings], components: Components
) -> StateUpdate:
    """Validate the question and answer it with no retrieved or web knowledge."""
    settings = runtime.context
    question = validate_question(state.get("question"), settings.deployment.max_question_chars)
    model = components.chat_model(settings)
    emit(runtime, "generate", "generating", internal=0, external=0)
    reply = model.invoke([SystemMessage(CLOSED_BOOK_SYSTEM), HumanMessage(question)])
    answer = reply.text.strip()
    emit(runtime, "generate", "generated", chars=len(answer))
    return {
        "question": question,
        "answer": answer,
        "documents": [],
        "knowledge": [],
        "notes": Overwrite([]),
    }
