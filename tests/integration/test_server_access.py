"""Attacks on a real ``langgraph dev`` serving crag: nothing a stranger does gets through.

One server is started as ``make serve`` starts it (the repository's ``langgraph.json``: the
gate, LangGraph's auth, CORS off), with the operator's defaults for what may be ingested (no
``CRAG_INGEST_ROOT``). A second HTTP server on another port of 127.0.0.1 stands for any web
site the same person visits; headless Chromium, signed in to crag, opens its page, and the page
tries what the issue found open: reading threads and the session, creating a thread, planting
one with a form (``enctype=text/plain``: no preflight), uploading a file, opening the thread
WebSocket. A ``file://`` page (origin ``null``) tries the same. Each attempt is checked on the
server's side with the operator's key: nothing was created, planted or uploaded. Programs: a
foreign ``Host`` (DNS rebinding), the Studio header, a wrong key, ingesting a file outside the
upload folder. And no secret (the token, the session cookie) reaches the server's log.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import langgraph_sdk
import pytest

from crag_bench.dev_server import HOST, DevServer, free_port
from tests.browser_support import chromium_missing
from tests.server_support import MEMBER_PASSWORD, member_keys, team_server

sync_client: Any = langgraph_sdk.get_sync_client
"""The SDK's client, its replies read as the JSON they are (its TypedDicts are looser)."""

if chromium_missing():
    pytest.fail(str(chromium_missing()), pytrace=False)

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

PASSWORD = MEMBER_PASSWORD

ATTACKS = """async (crag) => {
  const results = {};
  const attempt = async (name, action) => {
    try { results[name] = await action(); }
    catch (error) { results[name] = 'blocked: ' + error.name; }
  };
  await attempt('read_threads', async () => {
    const r = await fetch(crag + '/threads/search', {method: 'POST', credentials: 'include',
      headers: {'content-type': 'application/json'}, body: '{}'});
    return 'read ' + r.status + ' ' + (await r.text()).slice(0, 80);
  });
  await attempt('read_session', async () => {
    const r = await fetch(crag + '/chat/api/session', {credentials: 'include'});
    return 'read ' + r.status + ' ' + (await r.text()).slice(0, 80);
  });
  await attempt('simple_post', async () => {
    const r = await fetch(crag + '/threads', {method: 'POST', mode: 'no-cors',
      credentials: 'include', headers: {'content-type': 'text/plain'},
      body: JSON.stringify({metadata: {planted: 'fetch'}})});
    return 'sent ' + r.type;
  });
  await attempt('upload', async () => {
    const r = await fetch(crag + '/chat/api/uploads?name=planted.txt', {method: 'POST',
      mode: 'no-cors', credentials: 'include', body: 'planted by another site'});
    return 'sent ' + r.type;
  });
  results.websocket = await new Promise((resolve) => {
    let socket;
    try { socket = new WebSocket(crag.replace('http', 'ws') + '/threads/x/stream/events'); }
    catch (error) { resolve('blocked: ' + error.name); return; }
    socket.onopen = () => { socket.close(); resolve('opened'); };
    socket.onerror = () => resolve('blocked: error');
    setTimeout(() => resolve('blocked: timeout'), 5000);
  });
  return results;
}"""
FORM = """(crag) => {
  const form = document.createElement('form');
  form.method = 'POST';
  form.action = crag + '/threads';
  form.enctype = 'text/plain';
  const input = document.createElement('input');
  input.name = '{"metadata": {"planted": "form", "x": "';
  input.value = '"}}';
  form.appendChild(input);
  document.body.appendChild(form);
  form.submit();
}"""


class _Site(http.server.SimpleHTTPRequestHandler):
    """Another web site on this machine: a blank page."""

    def do_GET(self) -> None:
        body = b"<!doctype html><title>another site</title><p>hello</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture(scope="module")
def other_site() -> Iterator[str]:
    site = http.server.ThreadingHTTPServer((HOST, free_port()), _Site)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{site.server_address[1]}"
    finally:
        site.shutdown()
        site.server_close()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def accounts(store_dir: Path) -> dict[str, str]:
    return member_keys(store_dir / "threads.sqlite")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, store_dir: Path, accounts: dict[str, str]
) -> Iterator[DevServer]:
    """The operator's defaults for uploads and ingestion: no ingest root; two accounts."""
    with team_server(tmp_path_factory.mktemp("langgraph_dev"), store_dir) as started:
        yield started


@pytest.fixture(scope="module")
def client(server: DevServer) -> Any:
    return sync_client(url=server.url, api_key=server.token, timeout=120)


def _planted(client: Any) -> list[Any]:
    return [
        thread
        for thread in client.threads.search(limit=1000)
        if "planted" in (thread.get("metadata") or {})
    ]


def _signed_in_context(chromium: Any, server: DevServer) -> Any:
    """A browser context signed in to crag, as after opening the address make serve printed."""
    context = chromium.new_context()
    page = context.new_page()
    page.goto(server.page_url)
    page.wait_for_selector("body[data-ready='true']", timeout=60_000)
    page.close()
    return context


def _assert_all_blocked(results: dict[str, str]) -> None:
    for name in ("read_threads", "read_session", "websocket"):
        assert results[name].startswith("blocked"), (name, results)


def test_a_page_of_another_origin_can_neither_read_nor_change_anything(
    server: DevServer, client: Any, chromium: Any, other_site: str, store_dir: Path
) -> None:
    context = _signed_in_context(chromium, server)
    try:
        page = context.new_page()
        page.goto(f"{other_site}/")
        results = page.evaluate(ATTACKS, server.url)
        _assert_all_blocked(results)
        with page.expect_navigation():
            page.evaluate(FORM, server.url)
        assert "requests from pages of" in page.content()  # the form's answer: refused
    finally:
        context.close()
    assert _planted(client) == []
    assert not list(store_dir.rglob("planted.txt"))


def test_a_file_page_can_neither_read_nor_change_anything(
    server: DevServer, client: Any, chromium: Any, tmp_path: Path, store_dir: Path
) -> None:
    downloaded = tmp_path / "downloaded.html"
    downloaded.write_text("<!doctype html><title>a downloaded file</title>", encoding="utf-8")
    context = _signed_in_context(chromium, server)
    try:
        page = context.new_page()
        page.goto(downloaded.as_uri())
        _assert_all_blocked(page.evaluate(ATTACKS, server.url))
    finally:
        context.close()
    assert _planted(client) == []
    assert not list(store_dir.rglob("planted.txt"))


def test_the_signed_in_page_itself_still_reads_and_changes(
    server: DevServer, chromium: Any
) -> None:
    context = _signed_in_context(chromium, server)
    try:
        page = context.new_page()
        page.goto(f"{server.url}/chat/")
        page.wait_for_selector("body[data-ready='true']", timeout=60_000)
        assert page.locator("#signed-in").inner_text() == "Signed in as operator"
        page.locator("#sign-out").click()
        page.wait_for_selector("input[name='token']", timeout=30_000)
        assert page.evaluate("() => document.title") == "crag: sign in"
    finally:
        context.close()


@pytest.mark.parametrize("host", ["rebind.example", "rebind.example:8123", "127.0.0.1.nip.io"])
def test_a_foreign_host_is_refused_and_chat_redirects_nowhere_else(
    server: DevServer, host: str
) -> None:
    response = httpx.get(f"{server.url}/chat", headers={**server.headers, "host": host})
    assert response.status_code == 403
    assert "does not answer the host name" in response.json()["detail"]
    own = httpx.get(f"{server.url}/chat", headers=server.headers)
    assert own.status_code == 307 and own.headers["location"] == "/chat/"


def test_nothing_answers_a_program_without_the_token_but_ok(server: DevServer) -> None:
    assert httpx.get(f"{server.url}/ok").status_code == 200
    attempts = [
        ("POST", "/threads/search", {}),
        ("GET", "/assistants/search", None),
        ("POST", "/runs/wait", {"assistant_id": "crag", "input": {"question": "x"}}),
        ("GET", "/openapi.json", None),
        ("GET", "/docs", None),
        ("GET", "/info", None),
        ("GET", "/metrics", None),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ("POST", "/store/items/search", {}),
    ]
    for headers in ({}, {"x-auth-scheme": "langsmith"}, {"x-api-key": "wrong" * 8}):
        for method, path, body in attempts:
            response = httpx.request(method, f"{server.url}{path}", json=body, headers=headers)
            assert response.status_code == 401, (method, path, headers, response.text)


def test_a_served_run_ingests_no_file_outside_the_upload_folder(
    server: DevServer, client: Any, tmp_path: Path
) -> None:
    private = tmp_path / "private-notes.md"
    private.write_text("# Private\n\nThe safe's code is 4711.\n", encoding="utf-8")
    out = client.runs.wait(None, "ingest", input={"paths": [str(private)]}, raise_error=False)
    assert out["__error__"]["error"] == "InvalidIngestInputError", out
    assert "upload the file instead" in out["__error__"]["message"]


def test_each_member_sees_and_changes_only_their_own_threads(
    server: DevServer, client: Any, accounts: dict[str, str]
) -> None:
    alice, bob = (
        sync_client(url=server.url, api_key=accounts[name], timeout=60) for name in ("alice", "bob")
    )
    thread = alice.threads.create(metadata={"topic": "alice's notes"})
    thread_id = thread["thread_id"]
    assert thread["metadata"]["owner"] == "alice"
    assert [t["thread_id"] for t in alice.threads.search(limit=100)] == [thread_id]
    assert thread_id not in [t["thread_id"] for t in bob.threads.search(limit=100)]
    attempts: list[Callable[[], object]] = [
        lambda: bob.threads.get(thread_id),
        lambda: bob.threads.get_state(thread_id),
        lambda: bob.threads.get_history(thread_id),
        lambda: bob.threads.update(thread_id, metadata={"owner": "bob"}),
        lambda: bob.threads.delete(thread_id),
        lambda: bob.runs.list(thread_id),
    ]
    for attempt in attempts:
        with pytest.raises(httpx.HTTPStatusError) as refused:
            attempt()
        assert refused.value.response.status_code == 404
    # A member cannot make a thread look like another's: the owner is stamped, not taken.
    forged = bob.threads.create(metadata={"owner": "alice"})
    assert forged["metadata"]["owner"] == "bob"
    # The operator (the server's token) sees everyone's.
    seen = {t["thread_id"] for t in client.threads.search(limit=1000)}
    assert {thread_id, forged["thread_id"]} <= seen
    assert alice.threads.get(thread_id)["metadata"]["topic"] == "alice's notes"
    # Only the operator changes the served assistants.
    assistant = alice.assistants.search(graph_id="crag")[0]
    with pytest.raises(httpx.HTTPStatusError) as refused:
        alice.assistants.update(assistant["assistant_id"], context={"top_k": 1})
    assert refused.value.response.status_code == 403


def test_a_member_signs_in_on_the_page_with_a_password(
    server: DevServer, chromium: Any, accounts: dict[str, str]
) -> None:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(f"{server.url}/chat/")
        page.locator("#name").fill("alice")
        page.locator("#password").fill("not the password")
        page.locator("#password").press("Enter")
        page.wait_for_selector("text=That name and password do not match", timeout=30_000)
        page.locator("#name").fill("alice")
        page.locator("#password").fill(PASSWORD)
        page.locator("#password").press("Enter")
        page.wait_for_selector("body[data-ready='true']", timeout=60_000)
        assert page.locator("#signed-in").inner_text() == "Signed in as alice"
    finally:
        context.close()


ZEPHYR = "The Zephyr wind turbine, built by Northwind in 2031, produces 4.2 megawatts."


def _sources(client: Any, question: str, hidden: str = "") -> set[str]:
    """The sources of a run's passages; ``hidden`` (a server folder) appears nowhere in it."""
    out = client.runs.wait(None, "crag", input={"question": question}, context={"top_k": 3})
    assert not hidden or hidden not in json.dumps(out), "a served run shows a server folder"
    return {passage["source"] for passage in out["documents"]}


def test_a_members_documents_are_theirs_alone(
    server: DevServer, accounts: dict[str, str], store_dir: Path
) -> None:
    alice, bob = (
        sync_client(url=server.url, api_key=accounts[name], timeout=180)
        for name in ("alice", "bob")
    )
    stored = httpx.post(
        f"{server.url}/chat/api/uploads",
        params={"name": "zephyr.md"},
        content=f"# Zephyr\n\n{ZEPHYR}\n".encode(),
        headers={"x-api-key": accounts["alice"], "content-type": "application/octet-stream"},
        timeout=60,
    )
    assert stored.status_code == 201, stored.text
    path = stored.json()["path"]  # the file's name, never the server's folder
    assert path.startswith("upload:members/alice/") and str(store_dir) not in stored.text
    report = alice.runs.wait(None, "ingest", input={"paths": [path]})
    assert report["added"] == [path], report
    # Bob may not ingest Alice's upload by its path: it is outside his part of the folder.
    refused = bob.runs.wait(None, "ingest", input={"paths": [path]}, raise_error=False)
    assert refused["__error__"]["error"] == "InvalidIngestInputError", refused
    assert str(store_dir) not in json.dumps(refused)
    question = "How many megawatts does the Zephyr turbine produce?"
    assert path in _sources(alice, question, hidden=str(store_dir))
    assert path not in _sources(bob, question)
    assert "wikipedia:Mona Lisa" in _sources(bob, "Who painted the Mona Lisa?")  # shared
    documents = f"{server.url}/chat/api/documents"
    for key, status in ((accounts["alice"], 200), (accounts["bob"], 404), (server.token, 200)):
        answer = httpx.get(documents, params={"source": path}, headers={"x-api-key": key})
        assert answer.status_code == status, (key[:8], answer.text)


PLANS = {
    "alice": "The Quorvex plan of Alice: the Quorvex bridge opens in May.",
    "bob": "The Quorvex plan of Bob: the Quorvex bridge opens in October.",
}


def test_a_members_inline_source_names_meet_no_one_elses(
    server: DevServer, accounts: dict[str, str]
) -> None:
    """Two members send one source name (and one text): each stores and reads their own."""
    clients = {
        name: sync_client(url=server.url, api_key=accounts[name], timeout=180)
        for name in ("alice", "bob")
    }
    shared_text = "The Quorvex ferry sails at noon every day."
    for name, client in clients.items():
        sent = [{"text": PLANS[name], "source": "notes:quorvex"}, {"text": shared_text}]
        report = client.runs.wait(None, "ingest", input={"documents": sent})
        assert report["failed"] == [] and len(report["added"]) == 2, (name, report)
        assert "notes:quorvex" in report["added"], report  # the name it was sent with
    for name, client in clients.items():
        sources = _sources(client, "When does the Quorvex bridge open?")
        assert "notes:quorvex" in sources, (name, sources)
        out = client.runs.wait(
            None, "crag", input={"question": "When does the Quorvex bridge open?"}
        )
        texts = {d["text"] for d in out["documents"] if d["source"] == "notes:quorvex"}
        other = "bob" if name == "alice" else "alice"
        assert any(PLANS[name] in text for text in texts), (name, texts)
        assert not any(PLANS[other] in text for text in texts), (name, texts)


def _ask_on_the_page(chromium: Any, server: DevServer, name: str, question: str) -> list[str]:
    """Sign ``name`` in on the page, ask ``question``; the conversations the page then lists."""
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(f"{server.url}/chat/")
        page.locator("#name").fill(name)
        page.locator("#password").fill(PASSWORD)
        page.locator("#password").press("Enter")
        page.wait_for_selector("body[data-ready='true']", timeout=60_000)
        page.locator("#question").fill(question)
        page.locator("#question").press("Enter")
        page.locator(".answer.graph-crag .correction, .answer-error").first.wait_for(
            timeout=180_000
        )
        page.wait_for_function(
            "q => [...document.querySelectorAll('#thread-list button')]"
            ".some(b => b.textContent.includes(q))",
            arg=question[:40],
            timeout=30_000,
        )
        titles: list[str] = page.locator("#thread-list button").all_inner_texts()
        return titles
    finally:
        context.close()


def test_each_member_lists_only_their_own_conversations_on_the_page(
    server: DevServer, chromium: Any, accounts: dict[str, str]
) -> None:
    alices = _ask_on_the_page(chromium, server, "alice", "Who painted the Mona Lisa?")
    bobs = _ask_on_the_page(chromium, server, "bob", "Where is the Mona Lisa displayed?")
    assert any("Who painted" in title for title in alices)
    assert any("Where is" in title for title in bobs)
    assert not any("Who painted" in title for title in bobs)
    # A member cannot hand a thread to another: an update naming another owner keeps theirs.
    alice = sync_client(url=server.url, api_key=accounts["alice"])
    mine = alice.threads.search(metadata={"page": "crag-chat", "owner": "alice"})[0]
    alice.threads.update(mine["thread_id"], metadata={"owner": "bob"})
    assert alice.threads.get(mine["thread_id"])["metadata"]["owner"] == "alice"


def test_no_secret_reaches_the_servers_log(
    server: DevServer, chromium: Any, accounts: dict[str, str]
) -> None:
    """Last in the module: every sign-in and key above has been used by now."""
    context = _signed_in_context(chromium, server)
    cookies = [c["value"] for c in context.cookies() if c["name"].startswith("crag_session_")]
    context.close()
    assert cookies
    log = server.log.read_text(encoding="utf-8", errors="replace")
    secrets = [server.token, PASSWORD, *accounts.values(), *cookies]
    assert [secret[:6] for secret in secrets if secret in log] == []
