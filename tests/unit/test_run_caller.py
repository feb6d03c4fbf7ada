"""Who started a served run (crag.nodes.caller.run_caller), as each server of the API says it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from crag.nodes.caller import Caller, run_caller

USER, ID, PERMISSIONS = (
    "langgraph_auth_user",
    "langgraph_auth_user_id",
    "langgraph_auth_permissions",
)


class _Seen(TypedDict, total=False):
    caller: Any


def _caller_of(configurable: dict[str, Any]) -> Caller | None:
    """What ``run_caller`` says inside a run whose config has ``configurable``."""

    def look(state: _Seen) -> _Seen:
        return {"caller": run_caller()}

    builder = StateGraph(_Seen)
    builder.add_node("look", look)
    builder.add_edge(START, "look")
    builder.add_edge("look", END)
    out = builder.compile().invoke({}, config={"configurable": configurable})
    found: Caller | None = out.get("caller")
    return found


def test_outside_a_run_there_is_no_caller() -> None:
    assert run_caller() is None


@pytest.mark.parametrize(
    ("configurable", "expected"),
    [
        ({}, None),  # plain Python, the CLI: the operator's
        ({"langgraph_auth_user_id": "ann", "langgraph_auth_permissions": []}, Caller("ann", False)),
        (
            {"langgraph_auth_user_id": "op", "langgraph_auth_permissions": ["admin"]},
            Caller("op", True),
        ),
        # a server that gives only the user object (Aegra): never the operator's for want of keys
        (
            {"langgraph_auth_user": SimpleNamespace(identity="bo", permissions=[])},
            Caller("bo", False),
        ),
        ({USER: {"identity": "cy", "permissions": ["admin"]}}, Caller("cy", True)),
        ({USER: SimpleNamespace(identity="", permissions=[])}, None),
    ],
)
def test_the_caller_is_read_from_either_form(
    configurable: dict[str, Any], expected: Caller | None
) -> None:
    assert _caller_of(configurable) == expected
