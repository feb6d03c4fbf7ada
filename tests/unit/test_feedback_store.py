"""Feedback records in the threads database (SQLite and PostgreSQL): who sees and changes what.

The store is :mod:`crag.app.feedback_store`'s over the accounts' database, the one the server
keeps its accounts in (the ``accounts`` fixture of ``tests/unit/conftest.py``: a SQLite file
and a real PostgreSQL). Each member sees and removes only their own records, an admin
(``owner=None``) all of them; feedback on the same run replaces the owner's own; the hourly
quota refuses the record past it, and stores nothing of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from crag.app.feedback_store import (
    MAX_TEXT_CHARS,
    FeedbackError,
    FeedbackInput,
    FeedbackStore,
    checked_input,
)
from crag.app.web.accounts import Accounts

RECORD = {"question": "Who painted the Mona Lisa?", "answer": "Leonardo da Vinci."}


@pytest.fixture
def store(accounts: Accounts) -> Iterator[FeedbackStore]:
    """The feedback of the accounts' database, emptied afterwards (PostgreSQL is shared)."""
    made = FeedbackStore(accounts.database)
    try:
        yield made
    finally:
        with made.database.transaction() as db:
            db.execute("DELETE FROM crag_feedback")
            db.execute("DELETE FROM crag_feedback_given")


def _give(store: FeedbackStore, owner: str, thread: str, run: str = "r1", **fields: Any) -> Any:
    given = FeedbackInput(thread_id=thread, verdict=fields.pop("verdict", "good"), **fields)
    return store.save(owner, given, run, {**RECORD, "thread": thread}, per_hour=None)


def test_each_owner_sees_only_their_records_and_an_admin_sees_all(store: FeedbackStore) -> None:
    alices, new = _give(store, "alice", "t-alice", expected="Leonardo", better="crag")
    assert new and alices.owner == "alice" and alices.record["thread"] == "t-alice"
    bobs, _ = _give(store, "bob", "t-bob", verdict="bad", comment="wrong painter")
    assert [f.id for f in store.records("alice")] == [alices.id]
    assert [f.id for f in store.records("bob")] == [bobs.id]
    assert {f.id for f in store.records(None)} == {alices.id, bobs.id}
    assert store.records("alice", thread_id="t-bob") == []
    shown = store.records("alice")[0].as_json()
    assert shown["verdict"] == "good" and shown["expected"] == "Leonardo"
    assert shown["better"] == "crag" and shown["comment"] is None
    assert shown["record"]["question"] == RECORD["question"]


def test_feedback_on_the_same_run_replaces_the_owners_own(store: FeedbackStore) -> None:
    first, new = _give(store, "alice", "t1")
    again, replaced_new = _give(store, "alice", "t1", verdict="bad", comment="on second look")
    assert new and not replaced_new
    assert again.id == first.id and again.created == first.created
    assert again.verdict == "bad" and again.comment == "on second look"
    assert len(store.records("alice")) == 1
    other_run, _ = _give(store, "alice", "t1", run="r2")
    bobs, _ = _give(store, "bob", "t1")  # another owner's feedback on the same run is theirs
    assert len({first.id, other_run.id, bobs.id}) == 3


def test_a_member_removes_only_their_own_and_learns_nothing_of_anothers(
    store: FeedbackStore,
) -> None:
    alices, _ = _give(store, "alice", "t-alice")
    with pytest.raises(FeedbackError) as anothers:
        store.delete(alices.id, "bob")
    with pytest.raises(FeedbackError) as unknown:
        store.delete("no-such-record", "bob")
    assert anothers.value.status == unknown.value.status == 404
    assert str(anothers.value) == str(unknown.value).replace("no-such-record", alices.id)
    assert [f.id for f in store.records("alice")] == [alices.id]
    store.delete(alices.id, "alice")
    assert store.records(None) == []
    bobs, _ = _give(store, "bob", "t-bob")
    store.delete(bobs.id, None)  # an admin removes anyone's
    assert store.records(None) == []


def test_the_hourly_quota_refuses_the_record_past_it_and_keeps_nothing_of_it(
    store: FeedbackStore,
) -> None:
    given = [FeedbackInput(thread_id=f"t{n}", verdict="good") for n in range(3)]
    start = 1_000_000.0
    for item in given[:2]:
        store.save("alice", item, "r", RECORD, per_hour=2, now=start)
    with pytest.raises(FeedbackError) as refused:
        store.save("alice", given[2], "r", RECORD, per_hour=2, now=start + 10)
    assert refused.value.status == 429
    assert "at most 2 new feedback records an hour" in str(refused.value)
    assert len(store.records("alice")) == 2  # the refused one was rolled back
    # Replacing an earlier record is not a new one; another owner has a quota of their own.
    store.save("alice", FeedbackInput("t0", "bad"), "r", RECORD, per_hour=2, now=start + 20)
    store.save("bob", given[2], "r", RECORD, per_hour=2, now=start + 20)
    # An hour later the older ones no longer count.
    store.save("alice", given[2], "r", RECORD, per_hour=2, now=start + 3_601)
    assert len(store.records("alice")) == 3


def test_a_deleted_record_still_counts_toward_the_hourly_quota(store: FeedbackStore) -> None:
    start = 1_000_000.0
    first, _ = store.save("alice", FeedbackInput("t0", "good"), "r", RECORD, per_hour=2, now=start)
    store.save("alice", FeedbackInput("t1", "good"), "r", RECORD, per_hour=2, now=start + 1_800)
    store.delete(first.id, "alice")  # deleting frees no place: the quota counts records made
    for thread in ("t2", "t0"):  # a new thread, and again on the deleted record's run
        with pytest.raises(FeedbackError) as refused:
            store.save(
                "alice", FeedbackInput(thread, "good"), "r", RECORD, per_hour=2, now=start + 1_801
            )
        assert refused.value.status == 429
    assert [f.thread_id for f in store.records("alice")] == ["t1"]
    # Replacing a kept record is still free; an hour after the first, one place is free again.
    store.save("alice", FeedbackInput("t1", "bad"), "r", RECORD, per_hour=2, now=start + 1_802)
    store.save("alice", FeedbackInput("t2", "good"), "r", RECORD, per_hour=2, now=start + 3_601)
    with pytest.raises(FeedbackError):  # t1's place is still taken
        store.save("alice", FeedbackInput("t3", "good"), "r", RECORD, per_hour=2, now=start + 3_602)


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ([], "must be a JSON object"),
        ({"verdict": "good"}, "names no thread_id"),
        ({"thread_id": "t", "verdict": "great"}, "verdict must be 'good' or 'bad', not 'great'"),
        ({"thread_id": "t"}, "verdict must be 'good' or 'bad', not nothing"),
        ({"thread_id": "t", "verdict": "bad", "better": "both"}, "better must be 'crag' or"),
        ({"thread_id": "t", "verdict": "bad", "owner": "bob"}, "has no field 'owner'"),
        ({"thread_id": 7, "verdict": "bad"}, "thread_id must be a string, not int"),
        (
            {"thread_id": "t", "verdict": "bad", "expected": "x" * (MAX_TEXT_CHARS + 1)},
            "expected is 2,001 characters; it may have at most 2,000",
        ),
        (
            {"thread_id": "t", "verdict": "bad", "comment": "y" * (MAX_TEXT_CHARS + 1)},
            "comment is 2,001 characters; it may have at most 2,000",
        ),
        ({"thread_id": "t" * 201, "verdict": "bad"}, "thread_id is 201 characters"),
    ],
)
def test_what_a_caller_sends_is_checked_field_by_field(payload: Any, says: str) -> None:
    with pytest.raises(FeedbackError) as refused:
        checked_input(payload)
    assert says in str(refused.value)
    assert refused.value.status == 422


def test_a_full_input_is_kept_as_sent() -> None:
    given = checked_input(
        {
            "thread_id": " t1 ",
            "verdict": "bad",
            "run_id": "r1",
            "expected": "x" * MAX_TEXT_CHARS,
            "comment": "a comment",
            "better": "rag",
        }
    )
    assert given == FeedbackInput("t1", "bad", "r1", "x" * MAX_TEXT_CHARS, "a comment", "rag")
