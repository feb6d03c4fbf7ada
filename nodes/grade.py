"""Grade: the retrieval evaluator scores every (question, passage) pair."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.components import current_components
from graph.context import Context, resolve_context
from graph.progress import emit
from graph.state import RetrievedPassage, State


def grade(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Score all retrieved passages against the question in one batched evaluator call."""
    context = resolve_context(runtime.context)
    documents = state.get("documents", [])
    if not documents:
        emit(runtime, "grade", "scored", passages=0, best=None)
        return {"documents": []}
    evaluator = current_components().evaluator(context)
    emit(
        runtime,
        "grade",
        "scoring",
        passages=len(documents),
        evaluator=getattr(evaluator, "name", "unknown"),
    )
    scores = evaluator.score(state["question"], [d["text"] for d in documents])
    graded: list[RetrievedPassage] = [
        {**doc, "score": round(float(score), 4)}
        for doc, score in zip(documents, scores, strict=True)
    ]
    best = max(round(float(score), 4) for score in scores)
    emit(runtime, "grade", "scored", passages=len(graded), best=best)
    return {"documents": graded}
