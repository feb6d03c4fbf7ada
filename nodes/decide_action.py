"""Decide action: the paper's action trigger with an upper and a lower threshold."""

from __future__ import annotations

from langgraph.runtime import Runtime

from crag.core.state import State, StateUpdate
from crag.knowledge.action_trigger import trigger_action
from crag.nodes.progress import emit
from crag.nodes.scoring import scoring_settings
from crag.settings.run_settings import RunSettings


def decide_action(state: State, runtime: Runtime[RunSettings]) -> StateUpdate:
    """Record the action for the graded passages."""
    settings = scoring_settings(state, runtime.context)  # thresholds follow the evaluator
    scores = [d["score"] for d in state.get("documents", []) if d["score"] is not None]
    upper, lower = settings.action_thresholds()
    decision = trigger_action(
        scores,
        upper,
        lower,
        force=settings.force_action,
        disable=settings.disable_action,
    )
    emit(
        runtime,
        "decide_action",
        "decided",
        action=decision["action"],
        max_score=decision["max_score"],
    )
    return {"decision": decision, "action": decision["action"]}
