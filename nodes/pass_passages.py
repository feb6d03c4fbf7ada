"""Pass passages: standard RAG's step, every retrieved passage straight to the generator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.progress import emit
from graph.state import KnowledgeStrip, RetrievedPassage, State


def as_internal_knowledge(documents: Sequence[RetrievedPassage]) -> list[KnowledgeStrip]:
    """Passages, whole, as internal knowledge strips (keeping their scores, if any)."""
    return [
        {
            "text": doc["text"],
            "source": doc["source"],
            "chunk": doc["chunk"],
            "origin": "internal",
            "score": doc["score"],
        }
        for doc in documents
    ]


def pass_passages(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Make every retrieved passage, whole and unscored, the internal knowledge."""
    knowledge = as_internal_knowledge(state.get("documents", []))
    emit(runtime, "pass_passages", "passed", passages=len(knowledge))
    return {"internal_knowledge": knowledge}
