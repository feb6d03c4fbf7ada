"""The server's middleware refuses a run that sets a method parameter or a deployment setting.

:class:`crag.app.web.http.RefuseOtherKinds` is wrapped here around a tiny Starlette app that echoes
each request (its method, path and body bytes), the way langgraph-api wraps its API routes:
a refused request never reaches the app, and every other one reaches it unchanged.
``tests/integration/test_server.py`` sends the same refusals to a real ``langgraph dev``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import starlette  # noqa: F401 - missing, the test fails: it never skips
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from crag.app.web.api_docs import ApiDocs
from crag.app.web.gate import Gate
from crag.app.web.http import RefuseOtherKinds, refusal, served_app
from crag.nodes.caller import AUTH_KEYS, SERVED_KEY
from crag.settings.setting_kinds import DEPLOYMENT_NAMES, METHOD_NAMES, other_kind_error

REPO = Path(__file__).resolve().parents[2]
THREAD = "5b6b1f0e-3f5e-4d0e-9a55-0b0f8d3c1a11"
RUN_ROUTES = [
    "/runs",
    "/runs/stream",
    "/runs/wait",
    "/runs/crons",
    f"/threads/{THREAD}/runs",
    f"/threads/{THREAD}/runs/stream",
    f"/threads/{THREAD}/runs/wait",
    f"/threads/{THREAD}/runs/crons",
    "/assistants",
]
PATCH_ROUTES = [f"/assistants/{THREAD}", f"/runs/crons/{THREAD}"]
OTHER_ROUTES = [
    "/threads",
    "/threads/search",
    f"/threads/{THREAD}/state",
    f"/threads/{THREAD}/runs/{THREAD}/cancel",
    "/runs/cancel",
    "/runs/crons/search",
    "/assistants/search",
    "/store/items/search",
]


async def echo(request: Request) -> JSONResponse:
    """What the app received: method, path and the body's bytes (as latin-1 text)."""
    body = await request.body()
    return JSONResponse(
        {"method": request.method, "path": request.url.path, "body": body.decode("latin-1")}
    )


async def stream(request: Request) -> StreamingResponse:
    """Server-sent events: the body it received, then two more events."""
    body = await request.body()

    async def parts() -> Any:
        for part in (b"data: " + body + b"\n\n", b"data: one\n\n", b"data: two\n\n"):
            yield part

    return StreamingResponse(parts(), media_type="text/event-stream")


def _client(*routes: Route) -> TestClient:
    echoing = Route("/{rest:path}", echo, methods=["GET", "POST", "PATCH", "PUT", "DELETE"])
    app = Starlette(routes=[*routes, echoing], middleware=[Middleware(RefuseOtherKinds)])
    return TestClient(app)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return _client()


def _expected_detail(*names: str) -> str:
    error = other_kind_error(names)
    assert error is not None
    return str(error)


def _assert_refused(response: Any, *names: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"detail": _expected_detail(*names)}


# -- refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", RUN_ROUTES)
def test_a_deployment_setting_in_the_context_is_refused_on_every_run_route(
    client: TestClient, path: str
) -> None:
    response = client.post(path, json={"assistant_id": "crag", "context": {"store_path": "/x"}})
    _assert_refused(response, "store_path")
    assert "environment variable CRAG_STORE_PATH" in response.json()["detail"]


@pytest.mark.parametrize("path", RUN_ROUTES)
def test_a_method_parameter_in_configurable_is_refused_on_every_run_route(
    client: TestClient, path: str
) -> None:
    payload = {"assistant_id": "crag", "config": {"configurable": {"force_action": "correct"}}}
    response = client.post(path, json=payload)
    _assert_refused(response, "force_action")
    assert "parameter of the method" in response.json()["detail"]


@pytest.mark.parametrize("path", RUN_ROUTES)
@pytest.mark.parametrize("field", ["context", "configurable", "checkpoint"])
@pytest.mark.parametrize("name", [*AUTH_KEYS, SERVED_KEY])
def test_a_run_may_not_send_the_callers_identity_or_the_served_mark(
    client: TestClient, path: str, field: str, name: str
) -> None:
    """Wherever langgraph-api reads a run's configurable from: ``checkpoint`` is copied in."""
    sent: dict[str, Any] = {name: "alice"}
    payload: dict[str, Any] = {"assistant_id": "crag"}
    if field == "configurable":
        payload["config"] = {"configurable": sent}
    else:
        payload[field] = sent
    response = client.post(path, json=payload)
    assert response.status_code == 422, response.text
    assert response.json() == {
        "detail": f"{name} is set by the server (the caller's identity, or the mark of a served "
        "run); a run may not send it"
    }


@pytest.mark.parametrize("path", RUN_ROUTES)
def test_a_run_asking_for_a_webhook_is_refused(client: TestClient, path: str) -> None:
    """langgraph-api would post the run's output there, private networks included."""
    response = client.post(
        path, json={"assistant_id": "crag", "webhook": "http://10.0.0.7:8080/collect"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("webhook: this server sends no webhooks")
    batch = client.post(path, json=[{"assistant_id": "crag"}, {"webhook": "http://10.0.0.7/"}])
    assert batch.status_code == 422, batch.text
    empty = client.post(path, json={"assistant_id": "crag", "webhook": None})
    assert empty.status_code != 422, empty.text


@pytest.mark.parametrize("path", PATCH_ROUTES)
def test_an_assistant_or_cron_patched_with_another_kind_is_refused(
    client: TestClient, path: str
) -> None:
    response = client.patch(path, json={"context": {"top_k": 3, "strips_kept": 2}})
    _assert_refused(response, "strips_kept")
    response = client.patch(path, json={"config": {"configurable": {"generator": "local:/m"}}})
    _assert_refused(response, "generator")


def test_every_name_of_another_kind_is_refused_and_per_run_names_are_not() -> None:
    for name in sorted(METHOD_NAMES | DEPLOYMENT_NAMES):
        body = json.dumps({"context": {"top_k": 3, name: None}}).encode()
        assert refusal(body) == _expected_detail(name), name
    assert refusal(b'{"context": {"top_k": 3, "web_search": false}}') is None


def test_one_refusal_names_every_setting_deployment_first(client: TestClient) -> None:
    payload = {
        "context": {"force_action": "correct", "top_k": 3},
        "config": {"configurable": {"allowed_hosts": "10.0.0.0/8", "search_url": "http://x"}},
    }
    response = client.post("/runs/wait", json=payload)
    _assert_refused(response, "allowed_hosts", "search_url", "force_action")
    assert response.json()["detail"].startswith("settings allowed_hosts, search_url are deployment")


def test_a_batch_is_refused_if_any_of_its_runs_is(client: TestClient) -> None:
    runs = [
        {"assistant_id": "crag", "context": {"top_k": 3}},
        "not a run",
        {"assistant_id": "crag", "config": {"configurable": {"upper_threshold": 0.5}}},
    ]
    _assert_refused(client.post("/runs/batch", json=runs), "upper_threshold")
    fine = [{"assistant_id": "crag", "context": {"top_k": 3}}] * 2
    assert client.post("/runs/batch", json=fine).status_code == 200


# -- passed on, unchanged -----------------------------------------------------------------------


@pytest.mark.parametrize("path", [*RUN_ROUTES, "/runs/batch"])
def test_per_run_settings_reach_the_app_byte_for_byte(client: TestClient, path: str) -> None:
    # Odd spacing, key order and an escaped character: the app must see exactly these bytes.
    raw = (
        b'{ "context" :{"top_k":3,  "scope_tags":["caf\\u00e9"], "web_search":false},'
        b'"config":{"configurable":{"thread_id":"t", "checkpoint_ns":""}} ,"input":{}}'
    )
    if path == "/runs/batch":
        raw = b"[" + raw + b"," + raw + b"]"
    response = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert response.json() == {"method": "POST", "path": path, "body": raw.decode("latin-1")}


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b'{"context": {"store_path": ', b"[1, 2]", b'"text"', b"null"],
    ids=["empty", "text", "truncated", "list", "string", "null"],
)
def test_a_body_that_is_not_a_json_object_is_left_to_the_server(
    client: TestClient, raw: bytes
) -> None:
    response = client.post("/runs/wait", content=raw)
    assert response.status_code == 200
    assert response.json()["body"] == raw.decode("latin-1")


def test_context_or_configurable_that_is_not_an_object_is_left_to_the_server(
    client: TestClient,
) -> None:
    for payload in (
        {"context": ["store_path"]},
        {"context": "store_path=/x"},
        {"config": {"configurable": ["force_action"]}},
        {"config": "force_action"},
    ):
        response = client.post("/runs", json=payload)
        assert response.status_code == 200, payload


@pytest.mark.parametrize("path", OTHER_ROUTES)
def test_other_routes_pass_through_even_with_such_names(client: TestClient, path: str) -> None:
    raw = json.dumps({"context": {"store_path": "/x"}, "values": {"force_action": 1}}).encode()
    response = client.post(path, content=raw)
    assert response.status_code == 200
    assert response.json() == {"method": "POST", "path": path, "body": raw.decode("latin-1")}


def test_other_methods_pass_through(client: TestClient) -> None:
    raw = json.dumps({"context": {"store_path": "/x"}}).encode()
    assert client.put("/runs", content=raw).json()["body"] == raw.decode("latin-1")
    assert client.patch("/runs", content=raw).json()["method"] == "PATCH"
    assert client.get("/runs").json() == {"method": "GET", "path": "/runs", "body": ""}
    assert client.delete(f"/threads/{THREAD}/runs").status_code == 200


def test_a_streamed_run_gets_its_body_and_streams_its_answer() -> None:
    streaming = _client(Route("/threads/{thread_id}/runs/stream", stream, methods=["POST"]))
    raw = b'{"context": {"top_k": 3}}'
    response = streaming.post(f"/threads/{THREAD}/runs/stream", content=raw)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text == f"data: {raw.decode()}\n\ndata: one\n\ndata: two\n\n"
    refused = streaming.post(f"/threads/{THREAD}/runs/stream", json={"context": {"embedder": "x"}})
    _assert_refused(refused, "embedder")


# -- the ASGI messages themselves ---------------------------------------------------------------


def _call(
    middleware_app: Any, scope: dict[str, Any], incoming: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Run the middleware once; the messages it sends back."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(middleware_app(scope, receive, send))
    return sent


def _scope(path: str, method: str = "POST") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}


def test_a_body_in_pieces_is_replayed_whole_then_the_caller_is_heard_again() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["first"] = await receive()
        seen["next"] = await receive()
        seen["send"] = send

    pieces = [b'{"context": {"top', b'_k": 3}, ', b'"input": {}}']
    incoming: list[dict[str, Any]] = [
        {"type": "http.request", "body": piece, "more_body": i < 2}
        for i, piece in enumerate(pieces)
    ]
    incoming.append({"type": "http.disconnect"})
    _call(RefuseOtherKinds(app), _scope("/runs/stream"), incoming)
    assert seen["first"] == {"type": "http.request", "body": b"".join(pieces), "more_body": False}
    assert seen["next"] == {"type": "http.disconnect"}


def test_the_response_is_sent_by_the_app_itself_never_buffered() -> None:
    sends: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        sends.append(send)

    async def send(message: Any) -> None:
        raise AssertionError("nothing is sent")

    middleware = RefuseOtherKinds(app)
    incoming = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> Any:
        return incoming.pop(0)

    asyncio.run(middleware(_scope("/runs/stream"), receive, send))
    asyncio.run(middleware(_scope("/threads"), receive, send))
    assert sends == [send, send]


def test_a_mount_prefix_does_not_hide_a_run_route() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a refused request does not reach the app")

    scope = {**_scope("/api/v1/runs/wait"), "root_path": "/api/v1"}
    body = json.dumps({"context": {"store_path": "/x"}}).encode()
    sent = _call(RefuseOtherKinds(app), scope, [{"type": "http.request", "body": body}])
    assert sent[0]["status"] == 422
    assert json.loads(sent[1]["body"]) == {"detail": _expected_detail("store_path")}


def test_a_caller_gone_before_its_body_gets_no_answer() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app is not called")

    incoming: list[dict[str, Any]] = [
        {"type": "http.request", "body": b'{"con', "more_body": True},
        {"type": "http.disconnect"},
    ]
    assert _call(RefuseOtherKinds(app), _scope("/runs/wait"), incoming) == []


def test_lifespan_and_websockets_pass_through() -> None:
    called: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        called.append(scope["type"])

    for kind in ("lifespan", "websocket"):
        _call(RefuseOtherKinds(app), {"type": kind, "path": "/runs", "method": "POST"}, [])
    assert called == ["lifespan", "websocket"]


# -- what the server loads ----------------------------------------------------------------------


def test_langgraph_json_serves_the_middleware_app() -> None:
    served = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    # langgraph-api's own CORS answers no origin: the gate answers the operator's.
    # langgraph-api's own /mcp is off: crag serves its own (crag.app.mcp_tool).
    assert served["http"] == {
        "app": "crag.app.web.http:app",
        "cors": {"allow_origins": []},
        "disable_mcp": True,
        "disable_webhooks": True,
    }
    assert served["auth"] == {"path": "crag.app.web.server_auth:auth", "disable_studio_auth": True}
    import crag.app.web.http as http

    app = http.app
    assert isinstance(app, Starlette)
    assert app is served_app()
    classes: list[object] = [middleware.cls for middleware in app.user_middleware]
    assert classes == [Gate, ApiDocs, RefuseOtherKinds]  # the gate outermost
    with pytest.raises(AttributeError, match="no attribute 'other'"):
        _ = http.other


# -- what the attack on the served surfaces found (issue "Closed to strangers") -----------------


async def _unreached(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("a refused request reached the app")


def test_a_body_nested_too_deep_is_refused_not_a_crash() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    assert refusal(deep) == "the request's JSON is nested too deeply to read"
    sent = _call(RefuseOtherKinds(_unreached), _scope("/runs/wait"), [_request(deep)])
    assert sent[0]["status"] == 422


def _request(body: bytes) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": False}


def test_an_event_streaming_command_that_starts_a_run_is_checked() -> None:
    for method in ("run.start", "input.respond"):
        command = {
            "id": 1,
            "method": method,
            "params": {"assistant_id": "crag", "config": {"configurable": {"force_action": "x"}}},
        }
        detail = refusal(json.dumps(command).encode(), f"/threads/{THREAD}/commands")
        assert detail is not None and detail.startswith("setting force_action"), method
    harmless = {"id": 2, "method": "subscription.subscribe", "params": {"force_action": 1}}
    assert refusal(json.dumps(harmless).encode(), f"/threads/{THREAD}/commands") is None
    body = json.dumps({"method": "run.start", "params": {"context": {"store_path": "/"}}})
    sent = _call(
        RefuseOtherKinds(_unreached),
        _scope(f"/threads/{THREAD}/commands"),
        [_request(body.encode())],
    )
    assert sent[0]["status"] == 422


def test_an_mcp_tool_call_with_a_refused_setting_gets_a_json_rpc_error() -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "crag", "arguments": {}, "context": {"upper_threshold": 0.1}},
    }
    sent = _call(
        RefuseOtherKinds(_unreached), _scope("/mcp"), [_request(json.dumps(call).encode())]
    )
    assert sent[0]["status"] == 200
    answer = json.loads(sent[1]["body"])
    assert answer["id"] == 7 and answer["error"]["code"] == -32602
    assert answer["error"]["message"].startswith("setting upper_threshold is a parameter of")
    listing = {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"context": {"x": 1}}}
    assert refusal(json.dumps(listing).encode(), "/mcp") is None


def test_a_websocket_command_with_a_refused_setting_closes_the_socket() -> None:
    reached: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            reached.append(message)
            if message["type"] == "websocket.disconnect":
                return

    ok = {"id": 1, "method": "run.start", "params": {"context": {"top_k": 3}}}
    bad = {"id": 2, "method": "run.start", "params": {"context": {"store_path": "/"}}}
    incoming = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": json.dumps(ok)},
        {"type": "websocket.receive", "text": json.dumps(bad)},
    ]
    scope = {"type": "websocket", "path": f"/threads/{THREAD}/stream/events", "headers": []}
    sent = _call(RefuseOtherKinds(app), scope, incoming)
    assert [m["type"] for m in reached] == [
        "websocket.connect",
        "websocket.receive",
        "websocket.disconnect",
    ]
    assert sent[0]["type"] == "websocket.close" and sent[0]["code"] == 1008
    assert sent[0]["reason"].startswith("setting store_path is a deployment setting")
