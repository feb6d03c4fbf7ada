"""A served run's caller as the accounts say when it starts (:func:`_caller_now`).

langgraph-api writes the caller's identity and permissions into a run's config when the run is
made and runs it later with them (a queued run, ``after_seconds``, a cron); the served graphs
look the caller up again when the run starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crag.app.served_graphs import _caller_now
from crag.app.web.accounts import Accounts
from crag.nodes.caller import ADMIN_PERMISSION

PASSWORD = "a password long enough for the rules"


@pytest.fixture
def accounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Accounts:
    database = tmp_path / "threads.sqlite"
    monkeypatch.setenv("CRAG_THREADS_DB", str(database))
    with Accounts(database) as made:
        made.add("alice", PASSWORD)
        made.add("carol", PASSWORD, "admin")
        made.add("dave", PASSWORD, "admin")
        made.remove("dave")
    return Accounts(database)


def _as(name: str, permissions: list[str]) -> dict[str, object]:
    return {"langgraph_auth_user_id": name, "langgraph_auth_permissions": permissions}


@pytest.mark.parametrize("given", [[], [ADMIN_PERMISSION]])
def test_the_operator_is_an_admin_in_every_run_a_cron_too(
    accounts: Accounts, given: list[str]
) -> None:
    now = _caller_now({"langgraph_auth_user_id": "operator", "thread_id": "t"})
    assert now["langgraph_auth_permissions"] == [ADMIN_PERMISSION] and now["thread_id"] == "t"
    assert _caller_now(_as("operator", given))["langgraph_auth_permissions"] == [ADMIN_PERMISSION]


def test_an_account_has_its_role_of_now_and_a_removed_one_no_identity(accounts: Accounts) -> None:
    assert _caller_now(_as("alice", [ADMIN_PERMISSION]))["langgraph_auth_permissions"] == []
    assert _caller_now(_as("carol", []))["langgraph_auth_permissions"] == [ADMIN_PERMISSION]
    removed = _caller_now(_as("dave", [ADMIN_PERMISSION]))
    assert not {"langgraph_auth_user_id", "langgraph_auth_permissions"} & set(removed)


def test_no_caller_and_a_proxys_person_are_kept_as_given(accounts: Accounts) -> None:
    assert _caller_now({"thread_id": "t"}) == {"thread_id": "t"}
    assert _caller_now(_as("judy", [])) == _as("judy", [])  # no account: as the proxy said
