"""The admins' quality view on the chat page: headless Chromium against a real ``langgraph dev``.

The server is a team's (:func:`tests.server_support.team_server`) with an admin, ada, and a
member, bob, made as ``crag users add`` makes them, and the operator's setting ``eval_dir``. Its
threads database holds three feedback records, stored as the server stores them; the last
evaluation is ``crag eval`` run on their ``crag feedback export`` file (the fakes' components,
in this process), written into ``eval_dir``. Ada opens the view with the page's Quality button
and sees the counts, the thresholds in force, the evaluation's table and its picture, and
downloads the export; bob's page has no such button, and the server refuses him the view.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import pytest

from crag.app.cli.commands import main
from crag.app.feedback_store import FeedbackInput, FeedbackStore
from crag.app.web.account_store import AccountDatabase
from crag.app.web.accounts import Accounts
from crag_bench.dev_server import DevServer
from tests.browser_support import screenshot
from tests.fakes import mona_lisa_app_components
from tests.integration.test_chat_feedback import signed_in
from tests.server_support import MEMBER_PASSWORD, member_keys, team_server

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

MONA = "Who painted the Mona Lisa?"
NITROGEN = "What is the boiling point of liquid nitrogen?"
VOTES = [  # (thread, question, action, verdict, better)
    ("t1", MONA, "correct", "good", None),
    ("t2", NITROGEN, "incorrect", "bad", "rag"),
    ("t3", MONA, "correct", "bad", "same"),
]
LOADED_TIMEOUT = 30_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's folder: threads database (accounts, feedback), its exports, its evaluations."""
    folder = tmp_path_factory.mktemp("chat_quality")
    db = folder / "threads.sqlite"
    member_keys(db, ("bob",))
    Accounts(db).add("ada", MEMBER_PASSWORD, "admin")
    store = FeedbackStore(AccountDatabase(db))
    for thread, question, action, verdict, better in VOTES:
        given = FeedbackInput(thread_id=thread, verdict=verdict, better=better)  # type: ignore[arg-type]
        record = {"question": question, "answer": "Leonardo da Vinci.", "action": action}
        store.save("bob", given, f"run-{thread}", record, per_hour=None)
    store.database.close()
    export = folder / "feedback.jsonl"
    assert main(["feedback", "export", "--threads-db", str(db), "--output", str(export)]) == 0
    with pytest.MonkeyPatch.context() as patch:
        mona_lisa_app_components(patch)
        assert main(["eval", str(export), "--output", str(folder / "eval" / "first")]) == 0
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data: Path) -> Iterator[DevServer]:
    extra = {"CRAG_EVAL_DIR": str(data / "eval")}
    with team_server(tmp_path_factory.mktemp("langgraph_dev"), data, extra) as started:
        yield started


def opened_quality(page: Any) -> Any:
    """Press the page's Quality button; the view once it has loaded."""
    page.get_by_role("button", name="Quality", exact=True).click()
    body = page.locator("#quality-panel .quality-body[data-loaded='true']")
    body.wait_for(timeout=LOADED_TIMEOUT)
    return page.locator("#quality-panel")


def test_an_admin_sees_the_counts_the_thresholds_the_evaluation_and_downloads_the_export(
    server: DevServer, chromium: Any, data: Path, tmp_path: Path
) -> None:
    page = signed_in(chromium, server, "ada")
    view = opened_quality(page)
    counts = {
        (action, verdict): view.locator(f"tr[data-action='{action}'] .count-{verdict}").inner_text()
        for action in ("correct", "ambiguous", "incorrect")
        for verdict in ("good", "bad")
    }
    assert counts == {
        ("correct", "good"): "1",
        ("correct", "bad"): "1",
        ("ambiguous", "good"): "0",
        ("ambiguous", "bad"): "0",
        ("incorrect", "good"): "0",
        ("incorrect", "bad"): "1",
    }
    assert view.locator(".quality-comparisons").inner_text() == (
        "Side-by-side votes: CRAG better 0, standard RAG better 1, the same 1."
    )
    method = httpx.get(
        f"{server.url}/chat/api/method", headers={"x-api-key": server.token}, timeout=30
    ).json()
    shown = view.locator(".quality-thresholds dd").all_inner_texts()
    assert shown == [str(method["upper_threshold"]), str(method["lower_threshold"]), "embedding"]
    assert view.locator(".quality-run").inner_text().startswith("first: written ")
    table = view.locator(".quality-table").inner_text()
    assert table.startswith(f"questions: 3 from {data / 'feedback.jsonl'}")
    picture = view.locator("img.quality-picture")
    picture.wait_for()
    page.wait_for_function("document.querySelector('img.quality-picture').complete")
    assert picture.evaluate("img => img.naturalWidth") == 840  # report.svg's width: it loaded
    assert view.locator("svg").count() == 0  # an image, never the file's markup in the page
    with page.expect_download() as downloading:
        view.get_by_role("link", name="Download the feedback export").click()
    download = downloading.value
    assert download.suggested_filename == "crag-feedback.jsonl"
    saved = tmp_path / "downloaded.jsonl"
    download.save_as(saved)
    written = tmp_path / "written.jsonl"
    db = data / "threads.sqlite"
    assert main(["feedback", "export", "--threads-db", str(db), "--output", str(written)]) == 0
    assert saved.read_bytes() == written.read_bytes()
    screenshot(page, tmp_path, "quality-view")


def test_a_member_has_no_quality_view_and_is_refused_its_routes(
    server: DevServer, chromium: Any
) -> None:
    page = signed_in(chromium, server, "bob")
    assert page.locator("#toggle-quality").count() == 0
    assert page.locator("#quality-panel").count() == 0
    assert page.get_by_text("Quality", exact=True).count() == 0
    for path in ("/crag/quality", "/crag/quality/report.svg", "/crag/quality/export"):
        refused = page.request.get(f"{server.url}{path}")
        assert refused.status == 403, path
        assert "Mona" not in refused.text()
