"""Pass passages: standard RAG's step, every retrieved passage straight to the generator."""

from __future__ import annotations

from langgraph.runtime import Runtime

from crag.core.state import State, StateUpdate
from crag.knowledge.strips import as_internal_knowledge
from crag.nodes.progress import emit
from crag.settings.run_settings import RunSettings


def pass_passages(state: State, runtime: Runtime[RunSettings]) -> StateUpdate:
    """Make every retrieved passage, whole and unscored, the internal knowledge."""
    knowledge = as_internal_knowledge(state.get("documents", []))
    emit(runtime, "pass_passages", "passed", passages=len(knowledge))
    return {"internal_knowledge": knowledge}
