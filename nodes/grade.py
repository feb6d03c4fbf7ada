"""Grade: the retrieval evaluator scores every (question, passage) pair."""

from __future__ import annotations

from langgraph.runtime import Runtime

from crag.core.context import Context
from crag.core.progress import emit
from crag.core.state import RetrievedPassage, State, StateUpdate
from crag.nodes.components import Components


def grade(state: State, runtime: Runtime[Context], components: Components) -> StateUpdate:
    """Score all retrieved passages against the question in one batched evaluator call."""
    documents = state.get("documents", [])
    if not documents:
        emit(runtime, "grade", "scored", passages=0, best=None)
        return {"documents": []}
    evaluator = components.evaluator(runtime.context)
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
