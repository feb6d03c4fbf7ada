"""Red team, round four: a served run acts for its caller as the accounts say *now*.

langgraph-api writes the caller's identity and permissions into a run's config when the run is
created (``langgraph_auth_user_id``, ``langgraph_auth_permissions``), and the worker runs it
with that config whenever it starts: a run created with ``after_seconds``, one queued behind
another on its thread (``multitask_strategy: enqueue``), one left pending when the server
restarted. Before, such a run kept the permissions its caller had when it was created: an
admin the operator made a member (``crag users role NAME member``) still searched every
member's private documents through a run they had queued, into a thread they still read; a
run of an account the operator removed still searched that account's documents.

The graphs are loaded from the paths ``langgraph.json`` names, as the server loads them, and run
with the config such a queued run carries, over a real store holding alice's private diary and
a real accounts database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crag.app.web.accounts import Accounts
from crag.nodes.caller import ADMIN_PERMISSION, NoCallerError
from tests.integration.test_served_runs_need_a_caller import (
    DIARY,
    QUESTION,
    served_graph,
    served_store,
)

pytestmark = pytest.mark.timeout(300)

__all__ = ["served_store"]  # the fixture, imported for this module's tests

PASSWORD = "correct horse battery"


@pytest.fixture
def accounts(served_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Accounts:
    """The team's accounts, in the threads database the served graphs' process is given."""
    database = tmp_path / "threads.sqlite"
    monkeypatch.setenv("CRAG_THREADS_DB", str(database))
    made = Accounts(database)
    for name in ("alice", "carol", "dave"):
        made.add(name, PASSWORD, "admin" if name == "carol" else "member")
    return made


def _queued_config(user: str, admin: bool) -> dict[str, Any]:
    """The config langgraph-api stored with a run ``user`` created while ``admin`` or not."""
    permissions = [ADMIN_PERMISSION] if admin else []
    return {
        "configurable": {"langgraph_auth_user_id": user, "langgraph_auth_permissions": permissions}
    }


def _retrieved(user: str, admin: bool) -> list[str]:
    """The passages a queued ``crag`` run of ``user`` retrieves when it starts."""
    seen: dict[str, Any] = {}
    config = _queued_config(user, admin)
    for update in served_graph("crag").stream(
        {"question": QUESTION}, config, stream_mode="updates"
    ):
        seen.update(update)
        if "retrieve" in seen:
            break
    return [passage["text"] for passage in seen["retrieve"]["documents"]]


def test_a_run_queued_by_an_admin_made_member_reads_no_members_documents(
    accounts: Accounts,
) -> None:
    assert DIARY in _retrieved("carol", admin=True)  # an admin's run reads everything
    accounts.set_role("carol", "member")
    assert DIARY not in _retrieved("carol", admin=True)


def test_a_run_queued_by_a_member_made_admin_acts_as_an_admin(accounts: Accounts) -> None:
    accounts.set_role("dave", "admin")
    assert DIARY in _retrieved("dave", admin=False)


def test_a_run_queued_by_a_removed_account_reads_nothing(accounts: Accounts) -> None:
    assert DIARY in _retrieved("alice", admin=False)  # her own diary
    accounts.remove("alice")
    with pytest.raises(NoCallerError):
        _retrieved("alice", admin=False)


def test_the_operators_queued_run_still_acts_as_the_operator(accounts: Accounts) -> None:
    assert DIARY in _retrieved("operator", admin=True)
