"""Grade: the retrieval evaluator scores every (question, passage) pair."""

from __future__ import annotations

from langgraph.runtime import Runtime

from crag.core.state import RetrievedPassage, State, StateUpdate
from crag.nodes.components import Components
from crag.nodes.progress import emit
from crag.nodes.scoring import evaluator_name, score_or_fall_back, scoring_settings
from crag.settings.run_settings import RunSettings


def grade(state: State, runtime: Runtime[RunSettings], components: Components) -> StateUpdate:
    """Score all retrieved passages against the question in one batched evaluator call.

    If the evaluator fails, the embedding evaluator scores instead (:mod:`crag.nodes.scoring`):
    ``graded_by`` and a note say so.
    """
    documents = state.get("documents", [])
    if not documents:
        emit(runtime, "grade", "scored", passages=0, best=None)
        return {"documents": []}
    emit(
        runtime,
        "grade",
        "scoring",
        passages=len(documents),
        evaluator=evaluator_name(components, scoring_settings(state, runtime.context)),
    )
    texts = [d["text"] for d in documents]
    scores, scoring, notes = score_or_fall_back(
        state, runtime.context, components, lambda e: e.score(state["question"], texts)
    )
    update: StateUpdate = {}
    if scoring.deployment.evaluator != runtime.context.deployment.evaluator:
        update = {"graded_by": scoring.deployment.evaluator, "notes": notes}
    graded: list[RetrievedPassage] = [
        {**doc, "score": round(float(score), 4)}
        for doc, score in zip(documents, scores, strict=True)
    ]
    best = max(round(float(score), 4) for score in scores)
    emit(runtime, "grade", "scored", passages=len(graded), best=best)
    return {**update, "documents": graded}
