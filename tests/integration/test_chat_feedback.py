"""Feedback on answers from the chat page: headless Chromium against a real ``langgraph dev``.

The server is the chat page's (:mod:`tests.integration.test_chat_page`: the shipped models, the
small store, the SearxNG stand-in) with a threads database holding two members' accounts,
alice and bob, and an admin's, ada, made as ``crag users add`` makes them. They sign in with
the page's form, as a person does. Alice votes on an answer with the buttons under it; the
record is then read back through ``/crag/feedback`` with her API key, the way a script of hers
would. Bob sees none of it. At the end both vote, ada downloads the export from her quality
view, and ``crag eval`` on that file answers both questions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import langgraph_sdk
import pytest

from crag.app.cli.commands import main
from crag.app.web.accounts import Accounts
from crag_bench.dev_server import DevServer
from tests.browser_support import DESKTOP, screenshot
from tests.integration.test_chat_page import (  # noqa: F401 - search_server, shots: fixtures
    ANSWER_TIMEOUT,
    MONA_QUESTION,
    ask,
    search_server,
    shots,
)
from tests.server_support import build_server_store, langgraph_server, served_environment
from tests.websearch_server import WebsearchServer

sync_client: Any = langgraph_sdk.get_sync_client

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

PASSWORD = "correct horse battery"
SAVED_TIMEOUT = 30_000
"""Milliseconds for a vote to be stored and shown (the server reads the thread's state)."""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chat_feedback")


@pytest.fixture(scope="module")
def keys(data: Path) -> dict[str, str]:
    """Two members' API keys; their passwords sign them in on the page."""
    made = Accounts(data / "threads.sqlite")
    keys = {name: made.add(name, PASSWORD) for name in ("alice", "bob")}
    keys["ada"] = made.add("ada", PASSWORD, "admin")
    return keys


@pytest.fixture(scope="module")
def environment(
    data: Path,
    search_server: WebsearchServer,  # noqa: F811 - the fixture imported above
) -> dict[str, str]:
    """The operator's settings of the server (and of their own ``crag eval``)."""
    store = build_server_store(data / "chroma")
    ingest_root = data / "ingest_root"
    ingest_root.mkdir()
    return {
        **served_environment(store, search_server.url, ingest_root),
        "CRAG_THREADS_DB": str(data / "threads.sqlite"),
    }


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, environment: dict[str, str], keys: dict[str, str]
) -> Iterator[DevServer]:
    with langgraph_server(tmp_path_factory.mktemp("langgraph_dev"), environment) as started:
        yield started


def signed_in(chromium: Any, server: DevServer, name: str) -> Any:
    """A new browser page where ``name`` signed in with the page's form, ready to ask."""
    page = chromium.new_context(viewport=DESKTOP).new_page()
    page.goto(f"{server.url}/chat/")
    page.locator("#name").fill(name)
    page.locator("#password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_selector("body[data-ready='true']", timeout=60_000)
    return page


def feedback_of(server: DevServer, key: str, thread_id: str) -> list[dict[str, Any]]:
    """The records ``GET /crag/feedback?thread_id=`` gives the caller of ``key``."""
    response = httpx.get(
        f"{server.url}/crag/feedback",
        params={"thread_id": thread_id},
        headers={"x-api-key": key},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    records: list[dict[str, Any]] = response.json()["feedback"]
    return records


def current_thread(page: Any) -> str:
    """The id of the conversation the page shows (listed once the server named it)."""
    thread = page.locator(".thread[aria-current='true']")
    thread.wait_for(timeout=SAVED_TIMEOUT)
    thread_id: str = thread.get_attribute("data-thread")
    return thread_id


def vote(answer: Any, verdict: str) -> Any:
    """Press the answer's ``verdict`` button; the request the page sent."""
    with answer.page.expect_request(
        lambda r: r.url.endswith("/crag/feedback") and r.method == "POST"
    ) as sent:
        answer.get_by_role("button", name=f"{verdict.capitalize()} answer").click()
    return sent.value


def pressed(answer: Any, verdict: str) -> Any:
    """The answer's ``verdict`` button, once it shows as pressed."""
    button = answer.locator(f".vote-{verdict}[aria-pressed='true']")
    button.wait_for(timeout=SAVED_TIMEOUT)
    return button


# -- tests ------------------------------------------------------------------------------------


def test_a_vote_is_stored_replaced_and_shown_again_and_only_its_owner_sees_it(
    server: DevServer,
    chromium: Any,
    keys: dict[str, str],
    shots: Path,  # noqa: F811
) -> None:
    page = signed_in(chromium, server, "alice")
    answer = ask(page, MONA_QUESTION)
    assert answer.get_attribute("data-done") == "true"
    thread_id = current_thread(page)
    assert answer.locator(".vote[aria-pressed='true']").count() == 0
    sent = vote(answer, "good")
    pressed(answer, "good")
    assert answer.locator(".vote-bad").get_attribute("aria-pressed") == "false"
    runs = sync_client(url=server.url, api_key=keys["alice"]).runs.list(thread_id)
    assert sent.post_data_json == {
        "thread_id": thread_id,
        "run_id": runs[0]["run_id"],
        "verdict": "good",
    }
    [good] = feedback_of(server, keys["alice"], thread_id)
    assert good["verdict"] == "good" and good["owner"] == "alice"
    assert good["run_id"] == runs[0]["run_id"]
    assert good["record"]["question"] == MONA_QUESTION
    # Bad opens the form for the right answer and a comment; Send replaces the record.
    vote(answer, "bad")
    pressed(answer, "bad")
    assert answer.locator(".vote-good").get_attribute("aria-pressed") == "false"
    answer.get_by_label("The right answer (optional)").fill("Leonardo da Vinci, around 1503")
    answer.get_by_label("Comment (optional)").fill("It should say when it was painted.")
    screenshot(page, shots, "chat-feedback-form")
    answer.get_by_role("button", name="Send").click()
    answer.locator(".feedback-form").wait_for(state="hidden", timeout=SAVED_TIMEOUT)
    [bad] = feedback_of(server, keys["alice"], thread_id)
    assert bad["id"] == good["id"] and bad["verdict"] == "bad"
    assert bad["comment"] == "It should say when it was painted."
    assert bad["expected"] == "Leonardo da Vinci, around 1503"
    # The vote comes back when the conversation is reopened.
    page.reload()
    page.wait_for_selector("body[data-ready='true']")
    page.locator(f".thread[data-thread='{thread_id}']").click()
    reopened = page.locator(".turn").first.locator(".answer.graph-crag")
    assert pressed(reopened, "bad").get_attribute("aria-label") == "Bad answer"
    assert reopened.locator(".vote-good").get_attribute("aria-pressed") == "false"
    screenshot(page, shots, "chat-feedback-reopened")
    # Bob sees none of it, through the API or on the page.
    assert feedback_of(server, keys["bob"], thread_id) == []
    bobs = signed_in(chromium, server, "bob")
    assert bobs.locator(f".thread[data-thread='{thread_id}']").count() == 0
    refused = bobs.request.get(f"{server.url}/crag/feedback?thread_id={thread_id}")
    assert refused.status == 200 and refused.json() == {"feedback": []}
    # Pressing the pressed button again takes the vote back.
    reopened.locator(".vote-bad").click()
    reopened.locator(".vote-bad[aria-pressed='false']").wait_for(timeout=SAVED_TIMEOUT)
    assert feedback_of(server, keys["alice"], thread_id) == []


def test_side_by_side_the_better_answer_is_chosen_and_saved_with_the_vote(
    server: DevServer,
    chromium: Any,
    keys: dict[str, str],
    shots: Path,  # noqa: F811
) -> None:
    page = signed_in(chromium, server, "alice")
    page.locator("#compare").check()
    answer = ask(page, MONA_QUESTION)
    rag = page.locator(".turn").last.locator(".answer.graph-rag")
    rag.locator(".correction, .answer-error").first.wait_for(timeout=ANSWER_TIMEOUT)
    thread_id = current_thread(page)
    better = answer.get_by_role("group", name="Which answer was better?")
    better.get_by_role("button", name="CRAG was better").click()
    assert better.locator("[aria-pressed='true']").inner_text() == "CRAG"
    assert "good or bad" in answer.locator(".feedback-status").inner_text()
    assert feedback_of(server, keys["alice"], thread_id) == []  # saved with the vote
    sent = vote(answer, "good")
    assert sent.post_data_json["better"] == "crag"
    pressed(answer, "good")
    [saved] = feedback_of(server, keys["alice"], thread_id)
    assert saved["verdict"] == "good" and saved["better"] == "crag"
    # Changing the choice keeps the vote.
    better.get_by_role("button", name="The same: neither was better").click()
    answer.locator(".better[data-better='same'][aria-pressed='true']").wait_for()
    answer.locator(".feedback-status", has_text="Saved").wait_for(timeout=SAVED_TIMEOUT)
    [changed] = feedback_of(server, keys["alice"], thread_id)
    assert changed["verdict"] == "good" and changed["better"] == "same"
    screenshot(page, shots, "chat-feedback-compare")


def test_a_refused_vote_is_told_in_the_servers_sentence_beside_the_buttons(
    server: DevServer,
    chromium: Any,
    keys: dict[str, str],
    shots: Path,  # noqa: F811
) -> None:
    page = signed_in(chromium, server, "alice")
    answer = ask(page, MONA_QUESTION)
    thread_id = current_thread(page)
    sync_client(url=server.url, api_key=keys["alice"]).threads.delete(thread_id)
    vote(answer, "good")
    status = answer.locator(".feedback-status.refused")
    status.wait_for(timeout=SAVED_TIMEOUT)
    assert status.inner_text() == (
        f"Saving your feedback failed: the server answered 404: there is no thread "
        f"'{thread_id}' of yours"
    )
    assert answer.locator(".vote[aria-pressed='true']").count() == 0
    assert page.locator("#error").is_hidden()
    screenshot(page, shots, "chat-feedback-refused")


MUSEUM_QUESTION = "Which museum holds the Mona Lisa?"


def test_two_members_vote_the_admin_exports_both_and_crag_eval_answers_both(
    server: DevServer,
    chromium: Any,
    keys: dict[str, str],
    environment: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop of docs/evaluation.md: votes on the page, the admin's download, ``crag eval``."""
    from tests.integration.test_chat_quality import opened_quality

    alices = signed_in(chromium, server, "alice")
    vote(ask(alices, MONA_QUESTION), "good")
    pressed(alices.locator(".turn").last.locator(".answer.graph-crag"), "good")
    bobs = signed_in(chromium, server, "bob")
    answer = ask(bobs, MUSEUM_QUESTION)
    vote(answer, "bad")
    pressed(answer, "bad")
    answer.get_by_label("The right answer (optional)").fill("the Louvre")
    answer.get_by_role("button", name="Send").click()
    answer.locator(".feedback-form").wait_for(state="hidden", timeout=SAVED_TIMEOUT)
    bobs_thread = current_thread(bobs)
    assert feedback_of(server, keys["alice"], bobs_thread) == []  # each sees only their own
    view = opened_quality(signed_in(chromium, server, "ada"))
    with view.page.expect_download() as downloading:
        view.get_by_role("link", name="Download the feedback export").click()
    export = tmp_path / "feedback.jsonl"
    downloading.value.save_as(export)
    lines = [json.loads(line) for line in export.read_text(encoding="utf-8").splitlines()]
    assert {"alice", "bob"} <= {line["owner"] for line in lines}
    assert {line["question"] for line in lines} == {MONA_QUESTION, MUSEUM_QUESTION}
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "eval"
    assert main(["eval", str(export), "--output", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["questions"] == len(lines)
    picture = (out / "report.svg").read_text(encoding="utf-8")
    assert MONA_QUESTION in picture and MUSEUM_QUESTION in picture
