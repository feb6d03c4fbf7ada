"""The chat page in a real browser: headless Chromium against a real ``langgraph dev``.

One server for the module, as ``make serve`` starts it, with the shipped models, a small store
(the Mona Lisa summary and 40 unrelated ones), a SearxNG stand-in on 127.0.0.1 that finds one
page about liquid nitrogen, and an ingest root (uploads land in its ``uploads`` folder). The
page is opened at ``/chat/`` and used as a person would: typing, Enter, clicks. Requests the
page makes to any other origin are aborted and recorded (:mod:`tests.browser_support`), so the
page is shown to work offline. The last test stops the server in the middle of a run.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import langgraph_sdk
import pytest

from crag.settings.context import Context
from crag_bench.dev_server import DevServer
from tests.browser_support import PHONE, chromium_missing, open_page, screenshot
from tests.document_factory import PAGES, ZEPHYR, write_pdf
from tests.server_support import build_server_store, langgraph_server, served_environment
from tests.websearch_server import WebsearchServer

sync_client: Any = langgraph_sdk.get_sync_client
"""The SDK's client, its replies read as the JSON they are (its TypedDicts are looser)."""

if chromium_missing():
    pytest.fail(str(chromium_missing()), pytrace=False)

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

MONA_QUESTION = "Who painted the Mona Lisa?"
NITROGEN_QUESTION = "What is the boiling point of liquid nitrogen in kelvin?"
NITROGEN_PAGE = "Liquid nitrogen boils at 77 kelvin (minus 196 degrees Celsius) at sea level."
ZEPHYR_QUESTION = "How many megawatts does the Zephyr turbine produce?"
ANSWER_TIMEOUT = 180_000


@pytest.fixture(scope="module")
def search_server() -> Iterator[WebsearchServer]:
    """A SearxNG stand-in whose every search finds one page about liquid nitrogen."""
    with WebsearchServer() as server:
        page = server.add_page("/wiki/Liquid_nitrogen", "Liquid nitrogen", NITROGEN_PAGE)
        server.results = [server.result("Liquid nitrogen", page, "Liquid nitrogen boils at 77 K.")]
        yield server


@pytest.fixture(scope="module")
def ingest_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ingest_root")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, search_server: WebsearchServer, ingest_root: Path
) -> Iterator[DevServer]:
    store = build_server_store(tmp_path_factory.mktemp("store") / "chroma")
    env = served_environment(store, search_server.url, ingest_root)
    with langgraph_server(tmp_path_factory.mktemp("langgraph_dev"), env) as started:
        yield started


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def ask(page: Any, question: str) -> Any:
    """Type ``question`` and press Enter; the newest turn's CRAG answer once it is finished."""
    turns = page.locator(".turn").count()
    page.locator("#question").fill(question)
    page.locator("#question").press("Enter")
    answer = page.locator(".turn").nth(turns).locator(".answer.graph-crag")
    answer.locator(".correction, .answer-error").first.wait_for(timeout=ANSWER_TIMEOUT)
    return answer


def watch_tokens(page: Any) -> None:
    """Count the changes of every answer's text from now on (``window.tokenChanges``)."""
    page.evaluate(
        """() => {
        window.tokenChanges = 0;
        new MutationObserver((records) => {
          for (const r of records) {
            const text = r.target.closest ? r.target.closest('.answer-text')
                                          : r.target.parentElement.closest('.answer-text');
            if (text && text.getAttribute('aria-busy') === 'true') window.tokenChanges++;
          }
        }).observe(document.getElementById('turns'),
                   {subtree: true, childList: true, characterData: true});
        }"""
    )


# -- tests ------------------------------------------------------------------------------------


def test_the_page_is_served_offline_with_the_run_settings_from_the_schema(
    server: DevServer, chromium: Any, shots: Path
) -> None:
    response = httpx.get(f"{server.url}/chat/", headers=server.headers, timeout=30)
    assert response.status_code == 200
    assert "default-src 'self'" in response.headers["content-security-policy"]
    page, watch = open_page(chromium, server.url, token=server.token)
    names = page.eval_on_selector_all("#settings-form [name]", "els => els.map(e => e.name)")
    assert set(names) == set(Context.model_fields), names
    assert page.locator(".error").is_hidden()
    assert watch.foreign == [] and watch.console_errors == []
    page.locator("#toggle-settings").click()
    screenshot(page, shots, "chat-settings")


def test_the_readme_question_streams_an_answer_with_its_action_scores_and_citation(
    server: DevServer, chromium: Any, shots: Path
) -> None:
    page, watch = open_page(chromium, server.url, token=server.token)
    watch_tokens(page)
    page.keyboard.press("Tab")  # the skip link, then straight to the question
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "question"
    answer = ask(page, MONA_QUESTION)
    assert "Leonardo" in answer.locator(".answer-text").inner_text()
    assert page.evaluate("window.tokenChanges") >= 3, "the answer arrived in one piece"
    assert answer.get_attribute("data-action") == "correct"
    assert answer.locator(".badge").inner_text() == "Correct"
    path = answer.locator(".path li").evaluate_all("els => els.map(e => e.dataset.node)")
    assert path[:4] == ["contextualize", "retrieve", "grade", "decide_action"]
    assert path[-1] == "generate"
    answer.locator(".correction-details summary").click()
    scores = answer.locator("table.scores tbody tr")
    assert scores.count() == Context().top_k
    assert answer.locator(".score-chart circle").count() == scores.count()
    assert answer.locator(".score-chart line.threshold").count() == 2
    assert answer.locator("mark.kept").count() >= 1
    answer.locator(".citation-link").first.click()
    dialog = page.locator("#citation-dialog")
    assert dialog.is_visible()
    assert "Mona Lisa" in dialog.locator("#citation-title").inner_text()
    assert "Leonardo" in dialog.locator("#citation-text").inner_text()
    # The dialog says "Looking for the document's file…" until the server has answered.
    unshared = dialog.locator("#citation-file").filter(has_text="does not share this document's")
    unshared.wait_for(timeout=30_000)
    screenshot(page, shots, "chat-citation")
    dialog.locator("#citation-close").click()
    screenshot(page, shots, "chat-answer")
    assert watch.foreign == []


def test_a_follow_up_stays_in_its_thread_and_the_thread_comes_back(
    server: DevServer, chromium: Any
) -> None:
    page, _ = open_page(chromium, server.url, token=server.token)
    ask(page, MONA_QUESTION)
    follow_up = ask(page, "Where is it displayed?")
    assert follow_up.get_attribute("data-done") == "true"
    thread = page.locator(".thread[aria-current='true']")
    assert thread.locator(".thread-title").inner_text() == MONA_QUESTION
    thread_id = thread.get_attribute("data-thread")
    client = sync_client(url=server.url, api_key=server.token)
    humans = [
        m for m in client.threads.get_state(thread_id)["values"]["messages"] if m["type"] == "human"
    ]
    assert [m["content"] for m in humans] == [MONA_QUESTION, "Where is it displayed?"]
    page.reload()
    page.wait_for_selector("body[data-ready='true']")
    page.locator(f".thread[data-thread='{thread_id}']").click()
    page.locator(".turn").nth(1).wait_for()
    assert page.locator(".turn .question").all_inner_texts()[0].endswith(MONA_QUESTION)
    first = page.locator(".turn").first.locator(".answer")
    assert first.get_attribute("data-action") == "correct"
    assert "Leonardo" in first.locator(".answer-text").inner_text()


def test_a_question_the_store_cannot_answer_shows_the_web_results_and_notes(
    server: DevServer, chromium: Any, shots: Path
) -> None:
    page, _ = open_page(chromium, server.url, token=server.token)
    answer = ask(page, NITROGEN_QUESTION)
    assert answer.get_attribute("data-action") in {"incorrect", "ambiguous"}
    answer.locator(".correction-details summary").click()
    web = answer.locator("section.web")
    assert "/wiki/Liquid_nitrogen" in web.locator("a").first.get_attribute("href")
    assert "77 kelvin" in web.inner_text()
    screenshot(page, shots, "chat-web")


def test_the_notes_say_what_was_skipped_and_that_the_run_abstained(
    server: DevServer, chromium: Any
) -> None:
    page, _ = open_page(chromium, server.url, token=server.token)
    page.locator("#toggle-settings").click()
    page.locator("#setting-web_search").uncheck()
    answer = ask(page, NITROGEN_QUESTION)
    assert answer.get_attribute("data-action") in {"incorrect", "ambiguous"}
    answer.locator(".correction-details summary").click()
    notes = answer.locator("section.notes li").all_inner_texts()
    assert any("web search is off for this run" in note for note in notes), notes
    if answer.get_attribute("data-action") == "incorrect":
        assert any("abstained" in note for note in notes), notes
        assert "the web was not searched" in answer.locator(".answer-text").inner_text()


def test_rag_and_crag_answer_side_by_side(server: DevServer, chromium: Any, shots: Path) -> None:
    page, _ = open_page(chromium, server.url, token=server.token)
    page.locator("#compare").check()
    ask(page, MONA_QUESTION)
    rag = page.locator(".turn").last.locator(".answer.graph-rag")
    rag.locator(".correction, .answer-error").first.wait_for(timeout=ANSWER_TIMEOUT)
    assert rag.get_attribute("data-done") == "true"
    assert rag.locator(".badge").inner_text() == "No correction"
    assert rag.locator(".path li").evaluate_all("els => els.map(e => e.dataset.node)") == [
        "contextualize",
        "retrieve",
        "pass_passages",
        "generate",
    ]
    crag = page.locator(".turn").last.locator(".answer.graph-crag")
    assert crag.locator(".badge").inner_text() == "Correct"
    screenshot(page, shots, "chat-compare")


def test_an_uploaded_pdf_is_ingested_with_its_tags_and_its_citation_opens_the_page(
    server: DevServer, chromium: Any, shots: Path, tmp_path: Path
) -> None:
    pdf = write_pdf(tmp_path / "wind-report.pdf", PAGES)
    page, _ = open_page(chromium, server.url, token=server.token)
    page.locator("#toggle-documents").click()
    page.locator("#upload-files").set_input_files(str(pdf))
    page.locator("#upload-tags").fill("wind")
    page.locator("#upload-button").click()
    page.locator("#upload-results .summary").wait_for(timeout=ANSWER_TIMEOUT)
    assert page.locator("#upload-results .added").inner_text() == "wind-report.pdf: added"
    screenshot(page, shots, "chat-upload")
    page.locator("#toggle-settings").click()
    page.locator("#setting-scope_tags").fill("wind")
    answer = ask(page, ZEPHYR_QUESTION)
    assert "4.2" in answer.locator(".answer-text").inner_text()
    answer.locator(".citation-link").first.click()
    link = page.locator("#citation-file-link")
    link.wait_for()
    assert link.inner_text() == "Open the PDF at page 3"
    href = link.get_attribute("href")
    assert href.endswith("#page=3")
    fetched = page.request.get(f"{server.url}/chat/{href.split('#')[0]}")
    assert fetched.headers["content-type"] == "application/pdf"
    assert fetched.body() == pdf.read_bytes()
    assert ZEPHYR in page.locator("#citation-text").inner_text()
    screenshot(page, shots, "chat-pdf-citation")


def test_a_refused_upload_says_why(server: DevServer, chromium: Any, tmp_path: Path) -> None:
    fake = tmp_path / "report.pdf"
    fake.write_bytes(b"MZ\x90\x00 not a PDF at all")
    program = tmp_path / "setup.exe"
    program.write_bytes(b"MZ\x90\x00")
    page, _ = open_page(chromium, server.url, token=server.token)
    page.locator("#toggle-documents").click()
    page.locator("#upload-files").set_input_files([str(fake), str(program)])
    page.locator("#upload-button").click()
    page.locator("#upload-results .refused").nth(1).wait_for(timeout=60_000)
    refused = page.locator("#upload-results .refused").all_inner_texts()
    assert refused[0].startswith("report.pdf: refused.") and "PDF" in refused[0]
    assert refused[1].startswith("setup.exe: refused.") and ".exe" in refused[1]


def test_a_failed_run_is_told_with_the_servers_reason(server: DevServer, chromium: Any) -> None:
    page, _ = open_page(chromium, server.url, token=server.token)
    page.locator("#toggle-settings").click()
    page.locator("#setting-top_k").fill("1000")
    answer = ask(page, MONA_QUESTION)
    failure = answer.locator(".answer-error").inner_text()
    assert failure.startswith("The answer failed"), failure
    assert "top_k" in failure, failure
    assert page.locator("#error").inner_text() == failure
    assert page.locator("#ask-button").is_enabled()


def test_stop_cancels_the_run_on_the_server(
    server: DevServer, chromium: Any, search_server: WebsearchServer
) -> None:
    page, _ = open_page(chromium, server.url, token=server.token)
    # The web search answers late, so the run is still going when Stop is pressed (a warm
    # server answered before the click about half the time); the question is one no earlier
    # test asked, so no cached search result answers it at once.
    search_server.search_delay = 20.0
    try:
        page.locator("#question").fill("At what temperature does liquid nitrogen freeze?")
        page.locator("#question").press("Enter")
        page.locator("#stop-button:enabled").wait_for()
        # The run is under way on the server: it made the conversation the page now lists.
        page.locator(".thread[aria-current='true']").wait_for(timeout=ANSWER_TIMEOUT)
        page.locator("#stop-button").click()
    finally:
        search_server.search_delay = 0.0
    answer = page.locator(".answer.graph-crag")
    answer.locator(".answer-error").wait_for(timeout=60_000)
    assert answer.locator(".answer-error").inner_text() == "Stopped: the run was cancelled."
    thread_id = page.locator(".thread[aria-current='true']").get_attribute("data-thread")
    client = sync_client(url=server.url, api_key=server.token)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        statuses = [run["status"] for run in client.runs.list(thread_id)]
        if statuses and statuses[0] != "running" and statuses[0] != "pending":
            break
        time.sleep(0.5)
    assert statuses == ["interrupted"], statuses
    assert page.locator("#ask-button").is_enabled()


def test_the_page_fits_a_phone_and_works_from_the_keyboard(
    server: DevServer, chromium: Any, shots: Path
) -> None:
    page, _ = open_page(chromium, server.url, viewport=PHONE, token=server.token)
    # A new browser lists the signed-in person's conversations started in other browsers.
    client = sync_client(url=server.url, api_key=server.token)
    theirs = client.threads.search(metadata={"page": "crag-chat", "owner": "operator"}, limit=100)
    listed = page.locator("#thread-list button").count()
    assert listed == len(theirs) or (not theirs and "No conversation yet." in page.content())
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea, button')]
          .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                       && !e.textContent.trim()).map(e => e.id || e.outerHTML)"""
    )
    assert unlabelled == []
    answer = ask(page, MONA_QUESTION)
    assert answer.get_attribute("data-done") == "true"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.evaluate("document.activeElement.id") == "question"
    screenshot(page, shots, "chat-phone")


def test_a_server_that_stops_mid_run_is_told_in_a_sentence(
    server: DevServer, chromium: Any, shots: Path
) -> None:
    """Last in the module: it kills the module's server (SIGKILL: a crash, not a shutdown,
    which would finish the run first). The SDK tries to reconnect to the run's stream for
    about 20 s, then the page says the server is not answering."""
    page, _ = open_page(chromium, server.url, token=server.token)
    page.locator("#question").fill(NITROGEN_QUESTION)
    page.locator("#question").press("Enter")
    page.locator("#stop-button:enabled").wait_for()
    time.sleep(0.5)
    os.killpg(server.process.pid, signal.SIGKILL)
    # the run's own failure, in its answer: the alert may say the same of another request (the
    # conversations' list, the thread's title) while the run's stream is still reconnecting
    failed = page.locator(".answer-error")
    failed.wait_for(state="visible", timeout=90_000)
    assert "is not answering, so the answer failed" in failed.inner_text(), failed.inner_text()
    alert = page.locator("#error")
    assert alert.is_visible() and "is not answering" in alert.inner_text(), alert.inner_text()
    assert "make serve" in alert.inner_text()
    page.locator("#ask-button:enabled").wait_for(timeout=5_000)
    screenshot(page, shots, "chat-server-down")
