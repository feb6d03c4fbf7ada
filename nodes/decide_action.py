"""Decide action: the paper's action trigger with an upper and a lower threshold."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context, resolve_context
from graph.progress import emit
from graph.state import ActionDecision, State


def trigger_action(scores: Sequence[float], upper: float, lower: float) -> ActionDecision:
    """Map passage scores to Correct, Incorrect or Ambiguous.

    Correct if any score is above ``upper``; Incorrect if every score is below ``lower``
    (also when nothing was retrieved); Ambiguous otherwise.
    """
    if lower > upper:
        raise ValueError(f"lower threshold {lower} is above upper threshold {upper}")
    if not scores:
        return {
            "action": "incorrect",
            "max_score": None,
            "reason": "the store returned no passages",
        }
    best = max(scores)
    if best > upper:
        return {
            "action": "correct",
            "max_score": best,
            "reason": f"best passage scores {best:.3f} > upper threshold {upper}",
        }
    if best < lower:
        return {
            "action": "incorrect",
            "max_score": best,
            "reason": f"every passage scores below lower threshold {lower} (best {best:.3f})",
        }
    return {
        "action": "ambiguous",
        "max_score": best,
        "reason": f"best passage scores {best:.3f}, between {lower} and {upper}",
    }


def decide_action(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Record the action for the graded passages."""
    context = resolve_context(runtime.context)
    scores = [d["score"] for d in state.get("documents", []) if d["score"] is not None]
    decision = trigger_action(scores, context.upper_threshold, context.lower_threshold)
    emit(
        runtime,
        "decide_action",
        "decided",
        action=decision["action"],
        max_score=decision["max_score"],
    )
    return {"decision": decision, "action": decision["action"]}
