"""The paper's action trigger: Correct, Incorrect or Ambiguous from the passage scores.

The ``decide_action`` node applies it to a run's graded passages; the evaluator report
(:mod:`crag_bench.evaluator_report`) replays it on scored pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from crag.core.state import Action, ActionDecision


def trigger_action(
    scores: Sequence[float],
    upper: float,
    lower: float,
    *,
    force: Action | Literal[""] = "",
    disable: Action | Literal[""] = "",
) -> ActionDecision:
    """Map passage scores to Correct, Incorrect or Ambiguous.

    Correct if any score is above ``upper``; Incorrect if every score is below ``lower``
    (also when nothing was retrieved); Ambiguous otherwise.

    The paper's ablations: ``force`` takes one action whatever the scores (CRAG with only that
    action); ``disable`` removes one (its Table 2): without Correct or Incorrect that case
    becomes Ambiguous; without Ambiguous one threshold halfway between the two decides.

    The thresholds are expected in order (``lower <= upper``):
    :class:`~crag.settings.run_settings.RunSettings` refuses reversed ones when it is built, before
    anything is retrieved or graded.
    """
    best_or_none = max(scores) if scores else None
    if force:
        return {"action": force, "max_score": best_or_none, "reason": f"action forced to {force}"}
    decision = _trigger(scores, upper, lower)
    if not disable or decision["action"] != disable:
        return decision
    if disable == "ambiguous":
        cut = (upper + lower) / 2
        if best_or_none is not None and best_or_none > cut:
            action: Action = "correct"
            relation = ">"
        else:
            action, relation = "incorrect", "<="
        best_text = "none" if best_or_none is None else f"{best_or_none:.3f}"
        reason = f"ambiguous disabled: best passage scores {best_text} {relation} {cut:g}"
        return {"action": action, "max_score": best_or_none, "reason": reason}
    reason = f"{disable} disabled: {decision['reason']}, so ambiguous"
    return {"action": "ambiguous", "max_score": best_or_none, "reason": reason}


def _trigger(scores: Sequence[float], upper: float, lower: float) -> ActionDecision:
    """The action trigger proper (thresholds already checked)."""
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
