"""Red team, round three: crag's ``/mcp``, ``/crag/feedback`` and CORS on a real ``langgraph dev``.

One server is started as ``make serve`` starts it (the repository's ``langgraph.json``: the gate,
LangGraph's auth), with two members' accounts and one listed origin (``CRAG_SERVER_ORIGINS``).
Bob attacks Alice through the MCP tool (her thread's id; a ``thread_id`` that steers the tool's
request to the server to another route; text that is no Unicode), a browser signed in as Alice is
made to post to ``/mcp`` and ``/crag/feedback`` from another site (``text/plain``, a form), and
pages of origins that are not listed try to read. Each attack is checked on the server's side too:
nothing was run, copied or recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import pytest

from crag.app.web.accounts import Accounts
from crag_bench.dev_server import DevServer
from tests.server_support import MEMBER_PASSWORD, langgraph_server, member_keys, team_server

pytestmark = [pytest.mark.server, pytest.mark.timeout(600)]

PASSWORD = MEMBER_PASSWORD
LISTED = "http://listed.example:8080"
ATTACKER = "http://attacker.example"
NOT_TEXT = "a lone surrogate \\ud800"
"""JSON for a string that holds half of a UTF-16 pair: valid JSON, no text any database keeps."""


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
    with team_server(
        tmp_path_factory.mktemp("langgraph_dev"), store_dir, {"CRAG_SERVER_ORIGINS": LISTED}
    ) as started:
        yield started


def _key(key: str) -> dict[str, str]:
    return {"x-api-key": key}


def _thread(server: DevServer, key: str) -> str:
    created = httpx.post(f"{server.url}/threads", json={}, headers=_key(key), timeout=60)
    assert created.status_code == 200, created.text
    return str(created.json()["thread_id"])


def _threads(server: DevServer, key: str) -> list[Any]:
    found = httpx.post(
        f"{server.url}/threads/search", json={"limit": 1000}, headers=_key(key), timeout=60
    )
    assert found.status_code == 200, found.text
    return list(found.json())


def _tool_call(server: DevServer, key: str, arguments: dict[str, Any]) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "crag", "arguments": arguments},
    }
    return httpx.post(f"{server.url}/mcp", json=body, headers=_key(key), timeout=300)


def _tool_error(response: httpx.Response) -> str:
    """The text of a tool error (the call must have been answered with one)."""
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True, result
    return str(result["content"][0]["text"])


def _signed_in(server: DevServer, name: str) -> httpx.Client:
    """A browser's cookie jar signed in as ``name`` with the sign-in form."""
    browser = httpx.Client(base_url=server.url, timeout=60)
    signed_in = browser.post("/chat/signin", data={"name": name, "password": PASSWORD})
    assert signed_in.status_code == 303, signed_in.text
    return browser


def test_a_member_can_neither_continue_nor_read_anothers_thread_through_mcp(
    server: DevServer, keys: dict[str, str]
) -> None:
    alices = _thread(server, keys["alice"])
    for given in (alices, alices.upper()):
        refused = _tool_call(
            server, keys["bob"], {"question": "What did she ask?", "thread_id": given}
        )
        assert _tool_error(refused) == (
            f"no thread {alices} of yours was found: ask without thread_id to start one"
        )
    runs = httpx.get(f"{server.url}/threads/{alices}/runs", headers=_key(keys["alice"]))
    assert runs.status_code == 200 and runs.json() == []  # nothing ran on her thread
    state = httpx.get(f"{server.url}/threads/{alices}/state", headers=_key(keys["alice"]))
    assert not (state.json().get("values") or {}).get("messages")


@pytest.mark.parametrize("tail", ["/copy?", "/state?", "/history?"])
def test_a_thread_id_cannot_steer_the_tools_request_to_another_route(
    server: DevServer, keys: dict[str, str], tail: str
) -> None:
    """The tool's ``thread_id`` went into the path of its request to the server as it came:
    ``ID/copy?`` copied the thread (and answered an empty "answer"), ``../assistants/search?``
    crashed the route (500)."""
    own = _thread(server, keys["bob"])
    before = len(_threads(server, keys["bob"]))
    answered = _tool_call(server, keys["bob"], {"question": "Who?", "thread_id": own + tail})
    assert _tool_error(answered) == "thread_id must be the thread_id of an earlier answer"
    assert len(_threads(server, keys["bob"])) == before  # no copy was made
    elsewhere = _tool_call(
        server, keys["bob"], {"question": "Who?", "thread_id": "../assistants/search?"}
    )
    assert _tool_error(elsewhere) == "thread_id must be the thread_id of an earlier answer"


def test_text_that_is_no_unicode_is_one_json_rpc_error(
    server: DevServer, keys: dict[str, str]
) -> None:
    """``\\ud800`` in a call's JSON was Python's encoding error, as a bare HTTP 400."""
    body = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "crag", '
        f'"arguments": {{"question": "{NOT_TEXT}"}}}}}}'
    )
    headers = {**_key(keys["bob"]), "content-type": "application/json"}
    answer = httpx.post(f"{server.url}/mcp", content=body, headers=headers, timeout=60)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == {
        "code": -32700,
        "message": "the request's JSON holds a string that is not Unicode text (a lone surrogate)",
    }


@pytest.mark.parametrize(
    ("origin", "media"),
    [
        (ATTACKER, "text/plain"),
        (ATTACKER, "application/x-www-form-urlencoded"),
        ("null", "text/plain"),
        (None, "text/plain"),  # a browser that sent no Origin: the CSRF token is still asked
    ],
)
def test_another_sites_form_cannot_post_to_mcp_or_feedback_with_the_cookie(
    server: DevServer, keys: dict[str, str], origin: str | None, media: str
) -> None:
    alices = _thread(server, keys["alice"])
    before = len(_threads(server, keys["alice"]))
    call = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "crag", '
        '"arguments": {"question": "planted"}}}'
    )
    feedback = f'{{"thread_id": "{alices}", "verdict": "bad", "comment": "planted"}}'
    headers = {"content-type": media, **({"origin": origin} if origin else {})}
    why = "requests from pages of" if origin else "x-crag-csrf"  # which guard refuses it
    browser = _signed_in(server, "alice")
    try:
        for path, body in (("/mcp", call), ("/crag/feedback", feedback)):
            sent = browser.post(path, content=body, headers=headers)
            assert sent.status_code == 403, (path, sent.text)
            assert why in sent.json()["detail"], (path, sent.text)
            assert "access-control-allow-origin" not in sent.headers
    finally:
        browser.close()
    assert len(_threads(server, keys["alice"])) == before
    listed = httpx.get(f"{server.url}/crag/feedback", headers=server.headers).json()
    assert [f for f in listed["feedback"] if f["comment"] == "planted"] == []


UNLISTED = [
    "null",
    "http://127.0.0.1:1",
    "http://localhost",
    "http://listed.example:8081",
    "https://listed.example:8080",
    "http://listed.example.:8080",
    "http://listed.example:8080/path",
    "http://listed.example:8080.attacker.example",
]


@pytest.mark.parametrize("origin", UNLISTED)
def test_an_unlisted_origin_reads_nothing_not_even_why(
    server: DevServer, keys: dict[str, str], origin: str
) -> None:
    headers = {**_key(keys["alice"]), "origin": origin}
    for method, path in (("POST", "/threads/search"), ("GET", "/crag/feedback"), ("GET", "/docs")):
        answer = httpx.request(method, f"{server.url}{path}", headers=headers, json={})
        assert answer.status_code == 403, (path, answer.text)
        assert not {h for h in answer.headers if h.startswith("access-control-")}, answer.headers
    asked = {"origin": origin, "access-control-request-method": "POST"}
    preflight = httpx.options(f"{server.url}/threads/search", headers=asked)
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers


def test_the_listed_origin_reads_its_answers_and_refusals_varying_by_origin(
    server: DevServer, keys: dict[str, str]
) -> None:
    for key in (keys["alice"], "wrong" * 8):
        answer = httpx.post(
            f"{server.url}/threads/search", json={}, headers={**_key(key), "origin": LISTED}
        )
        assert answer.headers["access-control-allow-origin"] == LISTED
        assert answer.headers["access-control-allow-credentials"] == "true"
        assert "origin" in answer.headers["vary"].lower()
    asked = ",".join(f"x-h{i}" for i in range(1_000)) + ",x-a;b=c,cookie2:1"
    preflight = httpx.options(
        f"{server.url}/threads/search",
        headers={"origin": LISTED, "access-control-request-method": "POST",
                 "access-control-request-headers": asked},
    )  # fmt: skip
    assert preflight.status_code == 204
    names = [name.strip() for name in preflight.headers["access-control-allow-headers"].split(",")]
    assert len(names) <= 43 and "x-a;b=c" not in names and "cookie2:1" not in names
    assert "origin" in preflight.headers["vary"].lower()


@pytest.fixture(scope="module")
def bobs_answer(server: DevServer, keys: dict[str, str]) -> str:
    """A thread of Bob's with one finished run (the shipped embeddings and generator)."""
    thread_id = _thread(server, keys["bob"])
    run = {
        "assistant_id": "crag",
        "input": {"question": "Who painted the Mona Lisa?"},
        "context": {"web_search": False},
    }
    answered = httpx.post(
        f"{server.url}/threads/{thread_id}/runs/wait", json=run, headers=_key(keys["bob"]),
        timeout=300,
    )  # fmt: skip
    assert answered.status_code == 200 and "answer" in answered.json(), answered.text
    return thread_id


@pytest.mark.parametrize("field", ["comment", "expected"])
def test_feedback_text_that_no_database_keeps_is_refused_in_one_sentence(
    server: DevServer, keys: dict[str, str], bobs_answer: str, field: str
) -> None:
    """A lone surrogate was Python's encoding error (400); a NUL, PostgreSQL's (500)."""
    body = f'{{"thread_id": "{bobs_answer}", "verdict": "bad", "{field}": "{NOT_TEXT}"}}'
    headers = {**_key(keys["bob"]), "content-type": "application/json"}
    sent = httpx.post(f"{server.url}/crag/feedback", content=body, headers=headers, timeout=60)
    assert sent.status_code == 422, sent.text
    assert sent.json()["detail"] == (
        f"the feedback's {field} holds a character no database keeps (a NUL or a lone surrogate)"
    )
    nul = {"thread_id": bobs_answer, "verdict": "bad", field: "a\x00b"}
    refused = httpx.post(f"{server.url}/crag/feedback", json=nul, headers=_key(keys["bob"]))
    assert refused.status_code == 422 and refused.json() == sent.json()
    listed = httpx.get(f"{server.url}/crag/feedback", headers=_key(keys["bob"])).json()
    assert listed == {"feedback": []}


PROXY = "127.0.0.2"
"""The trusted proxy's address: another loopback address, so that the test can be it."""


@pytest.fixture(scope="module")
def proxied_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A server that believes ``X-Remote-User`` from :data:`PROXY` (no secret); ``boss`` admin."""
    data = tmp_path_factory.mktemp("proxied")
    Accounts(data / "threads.sqlite").add("alice", PASSWORD)
    env = {
        "CRAG_STORE_PATH": str(data / "chroma"),
        "CRAG_DEFAULT_CORPUS": "false",
        "CRAG_THREADS_DB": str(data / "threads.sqlite"),
        "CRAG_PROXY_USER_HEADER": "X-Remote-User",
        "CRAG_PROXY_ADDRESSES": PROXY,
        "CRAG_TEAM_ADMINS": "boss",
    }
    with langgraph_server(tmp_path_factory.mktemp("langgraph_dev"), env) as started:
        yield started


@pytest.mark.parametrize("forwarded", [[PROXY], [PROXY, "127.0.0.1"], [f"198.51.100.7, {PROXY}"]])
def test_a_local_process_cannot_say_it_is_the_proxy_with_x_forwarded_for(
    proxied_server: DevServer, forwarded: list[str]
) -> None:
    """uvicorn takes a 127.0.0.1 caller's client address from ``X-Forwarded-For``: any process
    of the host was the proxy, and named the admin ``boss``."""
    proxy = httpx.HTTPTransport(local_address=PROXY)
    with httpx.Client(transport=proxy, base_url=proxied_server.url, timeout=60) as real:
        own = real.get("/chat/api/session", headers={"x-remote-user": "boss"})
    assert own.status_code == 200 and own.json()["user"] == "boss", own.text  # the real proxy
    headers = [("x-remote-user", "boss"), *(("x-forwarded-for", value) for value in forwarded)]
    for path in ("/chat/api/session", "/crag/feedback"):
        spoofed = httpx.get(f"{proxied_server.url}{path}", headers=headers, timeout=60)
        assert spoofed.status_code == 401, (path, spoofed.text)
