"""Routers: pure functions from state to the next node(s)."""

from __future__ import annotations

from typing import Literal

from crag.core.state import State

ActionRoute = Literal["refine", "rewrite_query"]
AnswerRoute = Literal["generate", "abstain"]
StartRoute = Literal["contextualize", "retrieve"]


def route_start(state: State) -> StartRoute:
    """Start at ``contextualize`` when there are chat messages, else at ``retrieve``.

    Chat messages are a thread's earlier turns or ``messages`` input; a single ``question``
    goes straight to ``retrieve``, as it always has.
    """
    return "contextualize" if state.get("messages") else "retrieve"


def _unexpected(action: object) -> ValueError:
    return ValueError(f"unexpected action {action!r}: expected correct, incorrect or ambiguous")


def route_action(state: State) -> list[ActionRoute]:
    """Send Correct to refine, Incorrect to rewrite_query, Ambiguous to both in parallel.

    Raises:
        ValueError: the state holds no action or one this router does not know.
    """
    action = state.get("action")
    if action == "correct":
        return ["refine"]
    if action == "incorrect":
        return ["rewrite_query"]
    if action == "ambiguous":
        return ["refine", "rewrite_query"]
    raise _unexpected(action)


def route_answer(state: State) -> AnswerRoute:
    """Send a run whose knowledge supports an answer to ``generate``, any other to ``abstain``.

    ``decide_answer`` records the verdict (``answerable``) once the branches have joined.
    """
    return "generate" if state.get("answerable") else "abstain"


TutorialRoute = Literal["transform_query", "generate"]


def route_tutorial(state: State) -> TutorialRoute:
    """The tutorial's rule: search the web as soon as any passage was graded irrelevant.

    ``grade_binary`` records ``correct`` when every passage was relevant, ``ambiguous`` or
    ``incorrect`` otherwise.

    Raises:
        ValueError: the state holds no action or one this router does not know.
    """
    action = state.get("action")
    if action == "correct":
        return "generate"
    if action in ("incorrect", "ambiguous"):
        return "transform_query"
    raise _unexpected(action)
