"""The server's front door (:mod:`crag.app.web.gate`, :mod:`crag.app.web.credentials`), in-process.

The gate sits in front of a small app that records what reaches it, under Starlette's test
client: every refusal of issue "Closed to strangers" that does not need a real server is here
(a foreign Host, another origin, ``null``, a form's types, a body too long or too slow, the
Studio header, a wrong or missing token, a cookie without its CSRF token or from another site,
an expired session), each checked to leave the app untouched. The same attacks against a real
``langgraph dev`` and a browser are in ``tests/integration/test_server_access.py``.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import starlette  # noqa: F401 - missing, the test fails: it never skips
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from crag.app.web.accounts import Accounts
from crag.app.web.credentials import (
    CSRF_HEADER,
    OPERATOR,
    PROXY_SECRET_HEADER,
    AccessDeniedError,
    csrf_token,
    identify,
    server_token,
    token_path,
)
from crag.app.web.gate import IDENTITY_KEY, Gate, GateConfig
from crag.settings.deployment import deployment_with

TOKEN = "k" * 40
BASE = "http://127.0.0.1:8123"
KEY = {"x-api-key": TOKEN}


def _app(config: GateConfig, reached: list[str]) -> Starlette:
    async def endpoint(request: Request) -> JSONResponse:
        body = await request.body()
        reached.append(f"{request.method} {request.url.path} {len(body)}")
        identity = request.scope.get(IDENTITY_KEY)
        return JSONResponse({"user": identity.user if identity else None})

    routes = [
        Route(path, endpoint, methods=["GET", "POST", "PATCH", "DELETE"])
        for path in (
            "/ok",
            "/threads/search",
            "/threads",
            "/chat/",
            "/chat/assets/app.css",
            "/chat/api/session",
        )
    ]
    routes.append(Route("/chat/api/uploads", endpoint, methods=["POST"]))
    return Starlette(routes=routes, middleware=[Middleware(Gate, config=config)])


@pytest.fixture
def reached() -> list[str]:
    return []


@pytest.fixture
def accounts(tmp_path: Path) -> Accounts:
    """The threads database the gate keeps its sessions in."""
    return Accounts(tmp_path / "threads.sqlite")


@pytest.fixture
def config(accounts: Accounts) -> GateConfig:
    return GateConfig(
        token=TOKEN, max_request_bytes=2_000, upload_max_bytes=5_000, accounts=accounts
    )


@pytest.fixture
def client(config: GateConfig, reached: list[str]) -> TestClient:
    return TestClient(_app(config, reached), base_url=BASE)


def _detail(response: Any, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    assert words in response.json()["detail"], response.json()


# -- who -----------------------------------------------------------------------------------------


def test_only_ok_answers_without_the_token(client: TestClient, reached: list[str]) -> None:
    assert client.get("/ok").status_code == 200
    for method, path in (("POST", "/threads/search"), ("GET", "/threads"), ("DELETE", "/threads")):
        _detail(client.request(method, path, json={}), 401, "sign in first")
    assert reached == ["GET /ok 0"]


def test_a_program_signs_in_with_the_token_as_a_key_or_a_bearer(client: TestClient) -> None:
    assert client.post("/threads/search", json={}, headers=KEY).json() == {"user": OPERATOR}
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert client.post("/threads/search", json={}, headers=bearer).json() == {"user": OPERATOR}
    _detail(client.post("/threads/search", json={}, headers={"x-api-key": "x" * 40}), 401, "wrong")
    _detail(client.post("/threads/search", headers={"authorization": "Basic eDp5"}), 401, "sign in")


def test_the_studio_header_grants_nothing(client: TestClient, reached: list[str]) -> None:
    studio = {"x-auth-scheme": "langsmith", "authorization": ""}
    _detail(client.post("/threads/search", json={}, headers=studio), 401, "sign in first")
    assert reached == []


# -- where from ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["rebind.example:8123", "127.0.0.1.rebind.example", "10.0.0.1:8123", ""]
)
def test_a_foreign_host_is_refused_even_with_the_token(
    client: TestClient, reached: list[str], host: str
) -> None:
    response = client.post("/threads/search", json={}, headers={**KEY, "host": host})
    _detail(response, 403, "does not answer the host name")
    assert reached == []


@pytest.mark.parametrize("host", ["localhost:8123", "[::1]:8123", "127.0.0.1", "LOCALHOST."])
def test_loopback_names_are_answered(client: TestClient, host: str) -> None:
    assert client.post("/threads/search", json={}, headers={**KEY, "host": host}).status_code == 200


def test_the_operator_adds_host_names(reached: list[str]) -> None:
    settings = deployment_with(server_hosts="crag.team.example, Other.Example")
    config = GateConfig.from_settings(settings, TOKEN)
    client = TestClient(_app(config, reached), base_url="http://crag.team.example")
    assert client.get("/threads", headers=KEY).status_code == 200
    assert client.get("/threads", headers={**KEY, "host": "other.example:443"}).status_code == 200


@pytest.mark.parametrize(
    "origin", ["http://127.0.0.1:9999", "null", "http://localhost:8123", "https://127.0.0.1:8123"]
)
def test_another_origin_is_refused_even_with_the_token(
    client: TestClient, reached: list[str], origin: str
) -> None:
    response = client.post("/threads/search", json={}, headers={**KEY, "origin": origin})
    _detail(response, 403, "requests from pages of")
    assert "access-control-allow-origin" not in response.headers
    assert reached == []


def test_the_servers_own_origin_passes_without_cors_headers(client: TestClient) -> None:
    response = client.post("/threads/search", json={}, headers={**KEY, "origin": BASE})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


def test_a_listed_origin_gets_its_preflight_and_cors_headers(reached: list[str]) -> None:
    studio = "https://smith.langchain.com"
    config = GateConfig.from_settings(deployment_with(server_origins=studio + "/"), TOKEN)
    client = TestClient(_app(config, reached), base_url=BASE)
    preflight = client.options(
        "/threads/search",
        headers={"origin": studio, "access-control-request-method": "POST"},
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == studio
    assert reached == []  # a preflight never reaches the API
    answered = client.post("/threads/search", json={}, headers={**KEY, "origin": studio})
    assert answered.status_code == 200
    assert answered.headers["access-control-allow-origin"] == studio
    assert answered.headers["access-control-allow-credentials"] == "true"
    stranger = client.options(
        "/threads/search",
        headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
    )
    assert stranger.status_code == 403


STUDIO = "https://smith.langchain.com"


def _assert_cors(response: Any, origin: str) -> None:
    assert response.headers["access-control-allow-origin"] == origin, response.headers
    assert response.headers["access-control-allow-credentials"] == "true"
    assert "origin" in response.headers["vary"].lower()
    assert "x-pagination-total" in response.headers["access-control-expose-headers"]


def test_every_refusal_to_a_listed_origin_carries_its_cors_headers(
    accounts: Accounts, reached: list[str]
) -> None:
    settings = deployment_with(server_origins=STUDIO, server_max_request_bytes=2_000)
    client = TestClient(_app(GateConfig.from_settings(settings, TOKEN, accounts), reached), BASE)
    origin = {"origin": STUDIO}
    refusals = [
        (client.post("/threads/search", json={}, headers={**origin, "x-api-key": "x"}), 401),
        (client.post("/threads/search", json={}, headers=origin), 401),
        (client.get("/chat/", headers=origin), 401),  # the sign-in page
        (client.post("/threads", content=b"{}", headers={**origin, **KEY}), 415),
        (
            client.post(
                "/threads",
                content=b"x" * 3_000,
                headers={**origin, **KEY, "content-type": "application/json"},
            ),
            413,
        ),
        (client.get("/threads", headers={**origin, **KEY, "host": "rebind.example"}), 403),
    ]
    for response, status in refusals:
        assert response.status_code == status, response.text
        _assert_cors(response, STUDIO)
    assert reached == []
    stranger = client.post(
        "/threads/search", json={}, headers={"origin": "https://evil.example", "x-api-key": "x"}
    )
    assert stranger.status_code == 403
    assert not [name for name in stranger.headers if name.startswith("access-control-")]


def test_a_listed_origins_preflight_allows_the_headers_it_asks_for(reached: list[str]) -> None:
    config = GateConfig.from_settings(deployment_with(server_origins=STUDIO), TOKEN)
    client = TestClient(_app(config, reached), base_url=BASE)
    preflight = client.options(
        "/threads/search",
        headers={
            "origin": STUDIO,
            "access-control-request-method": "POST",
            "access-control-request-headers": "X-Request-Id, x-api-key, x-b@d",
            "x-api-key": "wrong",
        },
    )
    assert preflight.status_code == 204
    allowed = [
        name.strip() for name in preflight.headers["access-control-allow-headers"].split(",")
    ]
    assert {"authorization", "x-api-key", "content-type", "x-request-id"} <= set(allowed)
    assert "x-b@d" not in allowed
    assert reached == []


def _asgi_call(gate: Gate, scope: dict[str, Any], messages: list[dict[str, Any]]) -> list[Any]:
    """Call ``gate`` with ``messages`` to receive (then a disconnect); what it sent."""
    sent: list[Any] = []
    pending = list(messages)

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(gate(scope, receive, send))
    return sent


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    host = [(b"host", b"127.0.0.1:8123"), (b"x-api-key", TOKEN.encode())]
    return {"type": "http", "method": method, "path": path, "headers": host + headers,
            "query_string": b"", "scheme": "http", "client": ("127.0.0.1", 5)}  # fmt: skip


def test_a_caller_that_leaves_mid_body_ends_quietly(
    config: GateConfig, caplog: pytest.LogCaptureFixture
) -> None:
    from starlette.requests import Request

    async def reads_its_body(scope: Any, receive: Any, send: Any) -> None:
        await Request(scope, receive).body()  # raises ClientDisconnect: the caller left

    gate = Gate(reads_its_body, config)
    chunk = {"type": "http.request", "body": b'{"limit": ', "more_body": True}
    typed = [(b"content-type", b"application/json")]
    with caplog.at_level("DEBUG", logger="crag.app.web.gate"):
        sized = _asgi_call(
            gate, _scope("POST", "/threads", [*typed, (b"content-length", b"99")]), [chunk]
        )
        chunked = _asgi_call(
            gate, _scope("POST", "/threads", [*typed, (b"transfer-encoding", b"chunked")]), [chunk]
        )
    assert sized == [] and chunked == []  # nothing to answer: nobody is there
    left = [record for record in caplog.records if "the caller left" in record.getMessage()]
    assert len(left) == 2 and all(record.levelname == "DEBUG" for record in left)
    assert not [record for record in caplog.records if record.exc_info]


# -- what ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "media", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x", ""]
)
def test_a_forms_content_types_are_refused(
    client: TestClient, reached: list[str], media: str
) -> None:
    headers = {**KEY, "content-type": media} if media else KEY
    response = client.post("/threads", content=b'{"metadata": {}}', headers=headers)
    _detail(response, 415, "must send application/json")
    assert reached == []


def test_an_upload_takes_octets_and_nothing_a_form_sends(client: TestClient) -> None:
    octets = {**KEY, "content-type": "application/octet-stream"}
    assert client.post("/chat/api/uploads", content=b"abc", headers=octets).status_code == 200
    plain = {**KEY, "content-type": "text/plain"}
    _detail(client.post("/chat/api/uploads", content=b"abc", headers=plain), 415, "octet-stream")


def test_a_body_over_the_limit_is_refused_before_it_is_read(
    client: TestClient, reached: list[str]
) -> None:
    big = b"[" + b"0," * 2_000 + b"0]"
    _detail(
        client.post("/threads", content=big, headers={**KEY, "content-type": "application/json"}),
        413,
        "server_max_request_bytes",
    )
    octets = {**KEY, "content-type": "application/octet-stream"}
    _detail(
        client.post("/chat/api/uploads", content=b"x" * 6_000, headers=octets),
        413,
        "upload_max_bytes",
    )
    assert reached == []


def test_a_body_without_a_length_is_counted_as_it_arrives(
    client: TestClient, reached: list[str]
) -> None:
    def chunks(count: int) -> Any:
        yield from (b"[" + b"1," * 100 + b"1]" for _ in range(count))

    headers = {**KEY, "content-type": "application/json"}
    _detail(client.post("/threads", content=chunks(20), headers=headers), 413, "over 2,000 bytes")
    assert client.post("/threads", content=chunks(1), headers=headers).status_code == 200
    assert reached == ["POST /threads 203"]


def test_a_body_that_drips_is_abandoned(reached: list[str]) -> None:
    config = GateConfig(token=TOKEN, body_seconds=0.2)
    gate = Gate(_app(config, reached), config)
    messages = [{"type": "http.request", "body": b"[1,", "more_body": True}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await asyncio.sleep(5)
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/threads",
        "root_path": "",
        "scheme": "http",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8123"),
            (b"x-api-key", TOKEN.encode()),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
    }
    started = time.monotonic()
    asyncio.run(gate(scope, receive, send))
    assert time.monotonic() - started < 3
    assert sent[0]["status"] == 408
    assert reached == []


# -- the page ------------------------------------------------------------------------------------


def test_the_token_in_the_address_becomes_a_cookie_and_leaves_the_address(
    client: TestClient, config: GateConfig
) -> None:
    response = client.get(f"/chat/?token={TOKEN}", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/chat/"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{config.cookie_name(False)}=")
    for flag in ("HttpOnly", "SameSite=Strict", "Path=/"):
        assert flag in cookie
    assert TOKEN not in cookie
    page = client.get("/chat/")
    assert page.json() == {"user": OPERATOR}


def test_without_a_credential_the_page_is_the_sign_in_page(
    client: TestClient, reached: list[str]
) -> None:
    page = client.get("/chat/")
    assert page.status_code == 401
    assert 'name="token"' in page.text and "<script" not in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    wrong = client.get("/chat/?token=guess", follow_redirects=False)
    assert wrong.status_code == 401 and "That token is not this server" in wrong.text
    assert "set-cookie" not in wrong.headers
    assert client.get("/chat/assets/app.css").status_code == 200  # public: the page's style
    assert reached == ["GET /chat/assets/app.css 0"]


def test_a_cookie_alone_reads_but_changes_nothing_without_its_csrf_token(
    client: TestClient, reached: list[str], config: GateConfig
) -> None:
    client.get(f"/chat/?token={TOKEN}")
    session = client.cookies[config.cookie_name(False)]
    assert client.get("/threads").status_code == 200
    _detail(client.post("/threads", json={}), 403, CSRF_HEADER)
    _detail(client.post("/threads", json={}, headers={CSRF_HEADER: "0" * 64}), 403, CSRF_HEADER)
    good = {CSRF_HEADER: csrf_token(TOKEN, session)}
    assert client.post("/threads", json={}, headers=good).status_code == 200
    # Another site's page (another port is the same site, not the same origin) sends the
    # cookie, but the browser says where the request comes from.
    for site in ("same-site", "cross-site"):
        _detail(client.get("/threads", headers={"sec-fetch-site": site}), 403, "another site")
    assert client.get("/threads", headers={"sec-fetch-site": "same-origin"}).status_code == 200


def test_an_expired_or_foreign_session_is_refused(
    config: GateConfig, reached: list[str], accounts: Accounts
) -> None:
    short = GateConfig(token=TOKEN, session_seconds=1, accounts=accounts)
    name = short.cookie_name(False)
    signed_in = TestClient(_app(short, reached), base_url=BASE)
    signed_in.get(f"/chat/?token={TOKEN}")
    session = signed_in.cookies[name]
    # The browser drops the cookie at its Max-Age; one kept past it is refused all the same.
    kept = TestClient(_app(short, reached), base_url=BASE, cookies={name: session})
    assert kept.get("/threads").status_code == 200
    time.sleep(2.1)
    _detail(kept.get("/threads"), 401, "expired")
    # Another server's session (another token, the same database) is not this one's.
    other = GateConfig(token="o" * 40, accounts=accounts)
    theirs = TestClient(_app(other, reached), base_url=BASE)
    theirs.get(f"/chat/?token={'o' * 40}")
    stolen = theirs.cookies[other.cookie_name(False)]
    assert other.cookie_name(False) != config.cookie_name(False)
    foreign = TestClient(_app(config, reached), base_url=BASE, cookies={name: stolen})
    _detail(foreign.get("/threads"), 401, "is not this server's")


# -- credentials ---------------------------------------------------------------------------------


def test_the_token_is_made_once_beside_the_store_and_kept_private(tmp_path: Path) -> None:
    settings = deployment_with(store_path=str(tmp_path / "data" / "chroma"), server_token="")
    first = server_token(settings)
    assert token_path(settings) == tmp_path / "data" / "server-token"
    assert stat.S_IMODE(os.stat(token_path(settings)).st_mode) == 0o600
    assert len(first) >= 40 and server_token(settings) == first
    assert server_token(deployment_with(settings, server_token="e" * 30)) == "e" * 30
    with pytest.raises(ValueError, match="at least 24 characters"):
        server_token(deployment_with(settings, server_token="short"))
    renewed = server_token(settings, renew=True)
    assert renewed != first and server_token(settings) == renewed
    assert stat.S_IMODE(os.stat(token_path(settings)).st_mode) == 0o600
    with pytest.raises(ValueError, match="CRAG_SERVER_TOKEN: change it there"):
        server_token(deployment_with(settings, server_token="e" * 30), renew=True)
    token_path(settings).write_text("x\n", encoding="ascii")
    with pytest.raises(ValueError, match="server-token"):
        server_token(settings)


def test_the_operators_token_is_read_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAG_SERVER_TOKEN", "f" * 32)
    assert server_token(deployment_with()) == "f" * 32
    assert "f" * 32 not in repr(deployment_with())  # a secret: never in a repr or a log


def test_no_refusal_repeats_a_secret(config: GateConfig, accounts: Accounts) -> None:
    assert config.sessions is not None
    session = config.sessions.start(OPERATOR, "operator")
    name = config.cookie_name(False)
    attempts: list[dict[bytes, bytes]] = [
        {b"x-api-key": b"wrong-" + TOKEN.encode()},
        {b"cookie": f"{name}={session}".encode(), b"sec-fetch-site": b"cross-site"},
        {b"cookie": f"{name}={session}x".encode()},
        {b"cookie": f"{name}={session}".encode()},
    ]
    for headers in attempts:
        with pytest.raises(AccessDeniedError) as denied:
            identify(headers, "POST", TOKEN, session_seconds=60, accounts=accounts)
        assert TOKEN not in str(denied.value) and session not in str(denied.value)


# -- a trusted reverse proxy ---------------------------------------------------------------------


SECRET = "the proxy's secret, 32 characters"


def _proxied_client(
    reached: list[str], accounts: Accounts, addresses: frozenset[str], secret: str = ""
) -> TestClient:
    config = GateConfig(
        token=TOKEN,
        accounts=accounts,
        proxy_header="X-Forwarded-User",
        proxy_addresses=addresses,
        proxy_secret=secret,
        admins=frozenset({"ivan"}),
    )
    return TestClient(_app(config, reached), base_url=BASE)  # its peer is "testclient"


def test_a_trusted_proxy_names_the_person_and_their_changes_need_the_csrf_token(
    reached: list[str], accounts: Accounts
) -> None:
    client = _proxied_client(reached, accounts, frozenset({"testclient"}))
    judy = {"x-forwarded-user": "Judy"}
    assert client.get("/threads", headers=judy).json() == {"user": "judy"}
    _detail(client.post("/threads", json={}, headers=judy), 403, CSRF_HEADER)
    _detail(
        client.post("/threads", json={}, headers={**judy, CSRF_HEADER: "0" * 64}), 403, CSRF_HEADER
    )
    # The page's session read gives the browser a proxy session of its own, and its CSRF token.
    client.get("/chat/api/session", headers=judy)
    session = next(value for name, value in client.cookies.items() if "crag_session" in name)
    good = {**judy, CSRF_HEADER: csrf_token(TOKEN, session)}
    assert client.post("/threads", json={}, headers=good).status_code == 200
    # That session signs no one in without the proxy, nor anyone else the proxy names.
    assert client.get("/threads").status_code == 401
    other = {"x-forwarded-user": "ivan", CSRF_HEADER: good[CSRF_HEADER]}
    _detail(client.post("/threads", json={}, headers=other), 403, CSRF_HEADER)
    _detail(client.get("/threads", headers={**judy, "sec-fetch-site": "cross-site"}), 403, "site")
    _detail(client.get("/threads", headers={"x-forwarded-user": "../root"}), 403, "name")
    assert client.get("/threads").status_code == 401  # the proxy named no one


def test_the_proxy_names_no_one_whose_account_the_operator_removed(
    reached: list[str], accounts: Accounts
) -> None:
    accounts.add("kate", "a password of kate's, long enough")
    client = _proxied_client(reached, accounts, frozenset({"testclient"}))
    kate = {"x-forwarded-user": "kate"}
    assert client.get("/threads", headers=kate).json() == {"user": "kate"}
    accounts.remove("kate")
    _detail(client.get("/threads", headers=kate), 403, "the account kate was removed")
    assert client.get("/threads", headers={"x-forwarded-user": "liam"}).json() == {"user": "liam"}


def test_the_proxy_header_from_anywhere_else_signs_no_one_in(
    reached: list[str], accounts: Accounts
) -> None:
    judy = {"x-forwarded-user": "judy"}
    client = _proxied_client(reached, accounts, frozenset({"127.0.0.1"}))
    _detail(client.get("/threads", headers=judy), 401, "sign in first")
    # Loopback is no default address of the proxy: with neither addresses nor a secret, no one.
    unset = _proxied_client(reached, accounts, frozenset())
    _detail(unset.get("/threads", headers=judy), 401, "sign in first")
    assert reached == []
    off = TestClient(_app(GateConfig(token=TOKEN), reached), base_url=BASE)
    _detail(off.get("/threads", headers=judy), 401, "sign in first")


def test_with_a_secret_only_a_request_carrying_it_names_a_person(
    reached: list[str], accounts: Accounts
) -> None:
    client = _proxied_client(reached, accounts, frozenset(), SECRET)
    judy = {"x-forwarded-user": "judy"}
    _detail(client.get("/threads", headers=judy), 401, "sign in first")
    wrong = {**judy, PROXY_SECRET_HEADER: SECRET[:-1] + "x"}
    _detail(client.get("/threads", headers=wrong), 401, "sign in first")
    assert client.get("/threads", headers={**judy, PROXY_SECRET_HEADER: SECRET}).json() == {
        "user": "judy"
    }
    # With addresses named as well, the secret is needed from them.
    elsewhere = _proxied_client(reached, accounts, frozenset({"10.0.0.5"}), SECRET)
    _detail(elsewhere.get("/threads", headers={**judy, PROXY_SECRET_HEADER: SECRET}), 401, "sign")
