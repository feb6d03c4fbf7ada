"""Feedback on answers through a real ``langgraph dev`` serving crag: ``/crag/feedback``.

The server is started as ``make serve`` starts it (the repository's ``langgraph.json``: the
gate, LangGraph's auth), with two members' accounts. Alice asks a real question on a thread of
hers (the shipped embeddings and generator); feedback on it records the run as its thread's
state holds it. Bob can neither give feedback on her thread nor see or remove her records, and
learns nothing from trying: another's thread, a deleted one and an unknown one get one
sentence. The operator (the server's token) sees everyone's. A request without a caller gets
401, and a browser session's change needs its CSRF token, as everywhere else on the server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import langgraph_sdk
import pytest

from crag_bench.dev_server import DevServer
from tests.server_support import MEMBER_PASSWORD, member_keys, team_server

sync_client: Any = langgraph_sdk.get_sync_client

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

PASSWORD = MEMBER_PASSWORD
MONA = "Who painted the Mona Lisa?"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def keys(store_dir: Path) -> dict[str, str]:
    return member_keys(store_dir / "threads.sqlite")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, store_dir: Path, keys: dict[str, str]
) -> Iterator[DevServer]:
    with team_server(tmp_path_factory.mktemp("langgraph_dev"), store_dir) as started:
        yield started


@pytest.fixture(scope="module")
def answered(server: DevServer, keys: dict[str, str]) -> dict[str, Any]:
    """A thread of Alice's with one finished run: its id, the run's id and final state."""
    alice = sync_client(url=server.url, api_key=keys["alice"], timeout=300)
    thread_id = alice.threads.create()["thread_id"]
    alice.runs.wait(thread_id, "crag", input={"question": MONA}, context={"top_k": 3})
    runs = alice.runs.list(thread_id)
    assert len(runs) == 1 and runs[0]["status"] == "success", runs
    state = alice.threads.get_state(thread_id)
    return {"thread_id": thread_id, "run_id": runs[0]["run_id"], "values": state["values"]}


def _call(server: DevServer, method: str, path: str, key: str | None, **kwargs: Any) -> Any:
    headers = {**({"x-api-key": key} if key else {}), **kwargs.pop("headers", {})}
    return httpx.request(method, f"{server.url}{path}", headers=headers, timeout=60, **kwargs)


def test_feedback_records_the_members_run_and_only_they_change_it(
    server: DevServer, keys: dict[str, str], answered: dict[str, Any]
) -> None:
    thread_id, run_id = answered["thread_id"], answered["run_id"]
    sent = {"thread_id": thread_id, "run_id": run_id, "verdict": "good"}
    given = _call(
        server, "POST", "/crag/feedback", keys["alice"],
        json={**sent, "expected": "Leonardo da Vinci", "better": "crag"},
    )  # fmt: skip
    assert given.status_code == 201, given.text
    saved = given.json()
    record, values = saved["record"], answered["values"]
    assert saved["owner"] == "alice" and saved["run_id"] == run_id
    assert saved["expected"] == "Leonardo da Vinci" and saved["better"] == "crag"
    assert record["question"] == MONA and record["answer"] == values["answer"]
    assert record["action"] == values["action"] and record["graph"] == "crag"
    assert [d["score"] for d in record["documents"]] == [d["score"] for d in values["documents"]]
    assert [k["source"] for k in record["knowledge"]] == [k["source"] for k in values["knowledge"]]
    assert record["generator"] == "smollm2" and set(record["thresholds"]) == {"upper", "lower"}
    assert record["message_id"] == values["messages"][-1]["id"]
    # Again, without the run's id (the thread's latest run): Alice's record is replaced.
    again = _call(
        server, "POST", "/crag/feedback", keys["alice"],
        json={"thread_id": thread_id, "verdict": "bad", "comment": "too short"},
    )  # fmt: skip
    assert again.status_code == 200, again.text
    assert again.json()["id"] == saved["id"] and again.json()["verdict"] == "bad"
    listed = _call(server, "GET", "/crag/feedback", keys["alice"]).json()["feedback"]
    assert [f["id"] for f in listed] == [saved["id"]]
    assert _call(server, "GET", "/crag/feedback", keys["bob"]).json() == {"feedback": []}
    everyone = _call(server, "GET", "/crag/feedback", server.token).json()["feedback"]
    assert saved["id"] in {f["id"] for f in everyone}
    # Bob cannot remove it, and cannot tell it from a record that never was.
    refused = _call(server, "DELETE", f"/crag/feedback/{saved['id']}", keys["bob"])
    unknown = _call(server, "DELETE", "/crag/feedback/no-such-record", keys["bob"])
    assert refused.status_code == unknown.status_code == 404
    assert refused.json()["detail"] == unknown.json()["detail"].replace(
        "no-such-record", saved["id"]
    )
    removed = _call(server, "DELETE", f"/crag/feedback/{saved['id']}", keys["alice"])
    assert removed.status_code == 200 and removed.json() == {"deleted": saved["id"]}
    assert _call(server, "GET", "/crag/feedback", keys["alice"]).json() == {"feedback": []}


def test_anothers_a_deleted_and_an_unknown_thread_are_one_refusal(
    server: DevServer, keys: dict[str, str], answered: dict[str, Any]
) -> None:
    alice = sync_client(url=server.url, api_key=keys["alice"], timeout=60)
    gone = alice.threads.create()["thread_id"]
    early = _call(
        server, "POST", "/crag/feedback", keys["alice"], json={"thread_id": gone, "verdict": "good"}
    )
    assert early.status_code == 409 and "no finished answer" in early.json()["detail"]
    alice.threads.delete(gone)
    details = {}
    for name, thread_id in (
        ("anothers", answered["thread_id"]),
        ("deleted", gone),
        ("unknown", str(uuid.uuid4())),
        ("not an id", "not-a-thread"),
        ("a path", f"../threads/{answered['thread_id']}"),  # never a loopback request's path
    ):
        key = keys["bob"] if name == "anothers" else keys["alice"]
        answer = _call(
            server, "POST", "/crag/feedback", key, json={"thread_id": thread_id, "verdict": "bad"}
        )
        assert answer.status_code == 404, (name, answer.text)
        details[name] = answer.json()["detail"].replace(thread_id, "ID")
    assert len(set(details.values())) == 1, details
    assert details["unknown"] == "there is no thread 'ID' of yours"
    # The operator may give feedback on anyone's thread.
    operators = _call(
        server, "POST", "/crag/feedback", server.token,
        json={"thread_id": answered["thread_id"], "verdict": "good"},
    )  # fmt: skip
    assert operators.status_code == 201 and operators.json()["owner"] == "operator"


def test_what_is_sent_is_bounded_and_a_stranger_gets_nothing(
    server: DevServer, keys: dict[str, str], answered: dict[str, Any]
) -> None:
    long = {"thread_id": answered["thread_id"], "verdict": "bad", "comment": "x" * 2_001}
    over = _call(server, "POST", "/crag/feedback", keys["alice"], json=long)
    assert over.status_code == 422
    assert over.json()["detail"] == (
        "the feedback's comment is 2,001 characters; it may have at most 2,000"
    )
    wrong = {"thread_id": answered["thread_id"], "verdict": "meh"}
    assert _call(server, "POST", "/crag/feedback", keys["alice"], json=wrong).status_code == 422
    form = _call(
        server, "POST", "/crag/feedback", keys["alice"],
        content=b"thread_id=x&verdict=good",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )  # fmt: skip
    assert form.status_code == 415
    for method, path in (("GET", "/crag/feedback"), ("DELETE", "/crag/feedback/some-id")):
        assert _call(server, method, path, None).status_code == 401
    stranger = _call(server, "POST", "/crag/feedback", None, json=wrong)
    assert stranger.status_code == 401
    assert _call(server, "POST", "/crag/feedback", "wrong" * 8, json=wrong).status_code == 401


def test_a_browser_session_changes_feedback_only_with_its_csrf_token(
    server: DevServer, keys: dict[str, str], answered: dict[str, Any]
) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as browser:
        signed_in = browser.post("/chat/signin", data={"name": "alice", "password": PASSWORD})
        assert signed_in.status_code == 303, signed_in.text
        csrf = browser.get("/chat/api/session").json()["csrf"]
        sent = {"thread_id": answered["thread_id"], "verdict": "good"}
        without = browser.post("/crag/feedback", json=sent)
        assert without.status_code == 403 and "x-crag-csrf" in without.json()["detail"]
        elsewhere = browser.post(
            "/crag/feedback",
            json=sent,
            headers={"x-crag-csrf": csrf, "origin": "http://attacker.example"},
        )
        assert elsewhere.status_code == 403
        given = browser.post("/crag/feedback", json=sent, headers={"x-crag-csrf": csrf})
        assert given.status_code in {200, 201}, given.text
        assert given.json()["owner"] == "alice"
        mine = browser.get("/crag/feedback", params={"thread_id": answered["thread_id"]})
        assert [f["id"] for f in mine.json()["feedback"]] == [given.json()["id"]]
        removed = browser.delete(f"/crag/feedback/{given.json()['id']}")
        assert removed.status_code == 403  # a change: the CSRF token is needed here too
        removed = browser.delete(
            f"/crag/feedback/{given.json()['id']}", headers={"x-crag-csrf": csrf}
        )
        assert removed.status_code == 200
