from typing import Any

import pytest

from crag.graph.routers import route_action, route_answer, route_tutorial
from crag.knowledge.action_trigger import trigger_action
from crag.settings.method import MethodConfig


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"action": "correct"}, ["refine"]),
        ({"action": "incorrect"}, ["rewrite_query"]),
        ({"action": "ambiguous"}, ["refine", "rewrite_query"]),
    ],
)
def test_route_action_table(state: dict[str, Any], expected: list[str]) -> None:
    assert route_action(state) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("state", [{}, {"action": "maybe"}, {"action": None}])
def test_route_action_rejects_unknown(state: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="unexpected action"):
        route_action(state)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "expected"),
    [({"answerable": True}, "generate"), ({"answerable": False}, "abstain"), ({}, "abstain")],
)
def test_route_answer_generates_only_with_knowledge(state: dict[str, Any], expected: str) -> None:
    assert route_answer(state) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("state", [{}, {"action": "maybe"}, {"action": None}])
def test_route_tutorial_rejects_unknown(state: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="unexpected action"):
        route_tutorial(state)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scores", "action"),
    [
        ([0.60, -1.0], "correct"),  # any above upper
        ([0.59, 0.59], "ambiguous"),  # exactly upper is not above it
        ([-0.995, -1.0], "incorrect"),  # all below lower
        ([-0.99, -1.0], "ambiguous"),  # exactly lower is not below it
        ([-1.0, 0.0], "ambiguous"),
        ([], "incorrect"),  # nothing retrieved
        ([1.0], "correct"),
    ],
)
def test_action_trigger_table(scores: list[float], action: str) -> None:
    assert trigger_action(scores, upper=0.59, lower=-0.99)["action"] == action


def test_crossed_thresholds_are_refused_when_the_method_is_built() -> None:
    # Checked in MethodConfig, before anything is retrieved or graded, not in the action trigger.
    with pytest.raises(ValueError, match=r"lower_threshold .* must not be above upper"):
        MethodConfig(upper_threshold=-0.5, lower_threshold=0.5)
