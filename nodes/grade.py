"""Grade: the retrieval evaluator scores every (question, passage) pair."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.components import current_components
from graph.context import Context, resolve_context
from graph.state import RetrievedPassage, State


def grade(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Score all retrieved passages against the question in one batched evaluator call."""
    context = resolve_context(runtime.context)
    documents = state.get("documents", [])
    if not documents:
        return {"documents": []}
    evaluator = current_components().evaluator(context)
    scores = evaluator.score(state["question"], [d["text"] for d in documents])
    graded: list[RetrievedPassage] = [
        {**doc, "score": round(float(score), 4)}
        for doc, score in zip(documents, scores, strict=True)
    ]
    return {"documents": graded}
