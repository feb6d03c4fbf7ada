"""The server's own app: the chat page; and no run may set the method's or the operator's settings.

``langgraph.json`` serves :data:`app` (``"http": {"app": "crag.app.web.http:app"}``); langgraph-api
puts the app's routes before its built-in API routes, and its middleware in front of all of
them. The routes are the chat page's (:func:`crag.app.web.chat_page.chat_page_routes`: the page at
``/chat/``, its uploads and the files behind its citations, under ``/chat/api/``).

langgraph-api keeps only the context keys that are properties of the graph's context schema
(the per-run settings, :mod:`crag.settings.run_context`) and drops the others without a word,
``config.configurable`` included (it is copied into the context). So a caller that sent
``store_path`` or ``force_action`` would see its run succeed as if it had been honoured.
:class:`RefuseOtherKinds` answers such a request 422, ``{"detail": "setting store_path is a
deployment setting: ..."}`` (:func:`crag.settings.setting_kinds.other_kind_error`), before
langgraph-api reads it.

It looks only at the requests that create runs or set what every run of an assistant gets:
POST to ``/runs``, ``/runs/stream``, ``/runs/wait``, ``/runs/batch`` (a list of runs),
``/runs/crons``, ``/threads/{id}/runs``, ``/threads/{id}/runs/stream``,
``/threads/{id}/runs/wait``, ``/threads/{id}/runs/crons`` and ``/assistants``; the
event-streaming commands that start runs (POST ``/threads/{id}/commands``: ``run.start`` and
``input.respond``, whose ``params`` are a run's; the same commands sent over the thread's
WebSocket are checked message by message, and a refused one closes it with code 1008 and the
reason); MCP's ``tools/call`` (POST ``/mcp``: its ``params.context``; answered as a JSON-RPC
error, ``-32602``, naming the setting); PATCH to ``/assistants/{id}`` and
``/runs/crons/{id}``. It buffers only those requests' bodies (the gate, :mod:`crag.app.web.gate`,
has bounded them), parses them as JSON whatever the content type (as langgraph-api does), looks
into the object (each object of a list, for a batch) and replays the same bytes to the server.
A body that is not JSON, or holds no object, passes on for langgraph-api to answer. Every
other request, and every response (streams included), passes through untouched.

Only the server imports this module; Starlette (langgraph-api's) and the chat page's routes are
imported when ``app`` (or ``fastapi_app``, the same app as Aegra takes it) is first read, so the
module itself needs nothing beyond crag's dependencies.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crag.nodes.caller import AUTH_KEYS, SERVED_KEY
from crag.settings.setting_kinds import other_kind_error

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.applications import Starlette

__all__ = ["RefuseOtherKinds", "refusal", "served_app", "served_fastapi_app"]


_RUNS = r"(?:/threads/[^/]+)?/runs(?:/stream|/wait|/crons)?|/runs/batch"
_COMMANDS = re.compile(r"/threads/[^/]+/commands/?")
_MCP = re.compile(r"/mcp/?")
_CHECKED: dict[str, re.Pattern[str]] = {
    "POST": re.compile(rf"(?:{_RUNS}|/assistants|/threads/[^/]+/commands|/mcp)/?"),
    "PATCH": re.compile(r"(?:/assistants/[^/]+|/runs/crons/[^/]+)/?"),
}
_RUN_COMMANDS = frozenset({"run.start", "input.respond"})
"""Commands of the event-streaming protocol whose ``params`` carry a run's context and config."""
_INVALID_PARAMS = -32602
"""JSON-RPC's code for invalid parameters: how an MCP caller is told of a refused setting."""


def _route_path(scope: Scope) -> str:
    """The path the routes match: without the mount prefix (``root_path``), as Starlette does."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        return path[len(root) :]
    return path


def _checked(scope: Scope) -> bool:
    """Whether the request creates runs or sets an assistant's (or a cron's) context."""
    pattern = _CHECKED.get(scope["method"]) if scope["type"] == "http" else None
    return pattern is not None and pattern.fullmatch(_route_path(scope)) is not None


def _given_names(payload: Any) -> Iterator[str]:
    """The keys of a run payload's ``context`` and ``config.configurable`` (a list: each item's)."""
    for item in payload if isinstance(payload, list) else [payload]:
        if not isinstance(item, dict):
            continue
        config = item.get("config")
        configurable = config.get("configurable") if isinstance(config, dict) else None
        for settings in (item.get("context"), configurable):
            if isinstance(settings, dict):
                yield from settings


def _checkpoint_names(payload: Any) -> Iterator[str]:
    """The keys of a run payload's ``checkpoint`` (a list: each item's).

    langgraph-api copies a run's ``checkpoint`` into its ``config.configurable``, so a caller's
    identity keys sent there are forged as surely as in ``configurable`` itself.
    """
    for item in payload if isinstance(payload, list) else [payload]:
        checkpoint = item.get("checkpoint") if isinstance(item, dict) else None
        if isinstance(checkpoint, dict):
            yield from checkpoint


def _webhooks(payload: Any) -> Iterator[Any]:
    """The ``webhook`` values a run payload (a list: each item) sets, empty ones left out.

    langgraph-api would post the run's output there when it ends, and blocks only loopback
    targets by default (not private networks): ``langgraph.json`` turns webhooks off
    (``"http": {"disable_webhooks": true}``) and a run that asks for one is told so.
    """
    for item in payload if isinstance(payload, list) else [payload]:
        if isinstance(item, dict) and item.get("webhook"):
            yield item["webhook"]


def _run_payloads(payload: Any, path: str) -> Any:
    """What in ``payload`` holds a run's ``context`` and ``config``, as the route reads it.

    A run route's body itself (or its list); an event-streaming command's ``params``
    (``/threads/{id}/commands``: ``run.start``, ``input.respond``); an MCP ``tools/call``'s
    ``params`` (``/mcp``, whose ``context`` langgraph-api passes to the run it starts).
    """
    if not (_COMMANDS.fullmatch(path) or _MCP.fullmatch(path)):
        return payload
    wanted = _RUN_COMMANDS if _COMMANDS.fullmatch(path) else {"tools/call"}
    items = payload if isinstance(payload, list) else [payload]
    return [
        item.get("params")
        for item in items
        if isinstance(item, dict) and item.get("method") in wanted
    ]


def refusal(body: bytes, path: str = "/runs") -> str | None:
    """Why a run-creating request's ``body`` (sent to ``path``) is refused, or ``None``.

    ``None`` also for a body that is not JSON: langgraph-api answers that one itself. A body
    nested too deep to read is refused (langgraph-api refuses it too, elsewhere), never a crash.
    """
    try:
        payload = json.loads(body)
    except ValueError:  # not JSON, or not UTF-8
        return None
    except RecursionError:
        return "the request's JSON is nested too deeply to read"
    payloads = _run_payloads(payload, path)
    if any(_webhooks(payloads)):
        return (
            "webhook: this server sends no webhooks (a run's webhook would have the server "
            "post its answer to an address the caller chose)"
        )
    names = list(_given_names(payloads))
    forged = sorted({*names, *_checkpoint_names(payloads)} & {*AUTH_KEYS, SERVED_KEY})
    if forged:
        return (
            f"{forged[0]} is set by the server (the caller's identity, or the mark of a served "
            "run); a run may not send it"
        )
    error = other_kind_error(names)
    return None if error is None else str(error)


def _request_id(body: bytes) -> Any:
    """The JSON-RPC ``id`` of an MCP request (``None`` when there is none)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return payload.get("id") if isinstance(payload, dict) else None


class RefuseOtherKinds:
    """Pure ASGI middleware: answer 422 to a run that sets what only the method or operator sets."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, its body replayed if it was read; or answer 422."""
        if scope["type"] == "websocket":
            await self.app(scope, _checking_commands(receive, send), send)
            return
        if not _checked(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the caller left before its body arrived: nothing to answer
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        path = _route_path(scope)
        refused = refusal(body, path)
        if refused is not None and _MCP.fullmatch(path):
            await _answer_mcp_error(send, _request_id(body), refused)
            return
        if refused is not None:
            await _answer_422(send, refused)
            return
        await self.app(scope, _replaying(body, receive), send)


def _checking_commands(receive: Receive, send: Send) -> Receive:
    """A WebSocket's ``receive`` that closes it (1008) on a command that sets a refused name.

    The app is told the caller left, so the command is never carried out.
    """

    async def checked() -> Message:
        message = await receive()
        if message.get("type") != "websocket.receive":
            return message
        text = message.get("text")
        raw = text.encode() if isinstance(text, str) else message.get("bytes") or b""
        refused = refusal(raw, "/threads/-/commands")
        if refused is None:
            return message
        await send({"type": "websocket.close", "code": 1008, "reason": refused[:120]})
        return {"type": "websocket.disconnect", "code": 1008}

    return checked


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then whatever the caller sends (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


async def _answer_mcp_error(send: Send, request_id: Any, detail: str) -> None:
    """A JSON-RPC error naming the refused setting, as an MCP client reads one."""
    error = {"code": _INVALID_PARAMS, "message": detail}
    content = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": content})


async def _answer_422(send: Send, detail: str) -> None:
    content = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]
    await send({"type": "http.response.start", "status": 422, "headers": headers})
    await send({"type": "http.response.body", "body": content})


@functools.cache
def served_app() -> Starlette:
    """The app ``langgraph.json`` names: the chat page's routes, the gate, the refusals.

    :class:`crag.app.web.gate.Gate` (who may call, from where) is outermost, then
    :class:`crag.app.web.api_docs.ApiDocs` (``/docs`` and ``/openapi.json``, offline, which
    langgraph-api serves before any route of this app), then :class:`RefuseOtherKinds`.
    """
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    from crag.app.mcp_tool import mcp_routes
    from crag.app.web.api_docs import ApiDocs
    from crag.app.web.chat_page import chat_page_routes
    from crag.app.web.feedback_routes import feedback_routes
    from crag.app.web.gate import Gate, gate_config
    from crag.app.web.oidc import oidc_routes
    from crag.app.web.quality_routes import quality_routes
    from crag.settings.deployment import deployment_settings

    return Starlette(
        routes=oidc_routes(deployment_settings(), gate_config())
        + chat_page_routes()
        + feedback_routes()
        + quality_routes()
        + mcp_routes(),
        middleware=[Middleware(Gate), Middleware(ApiDocs), Middleware(RefuseOtherKinds)],
    )


@functools.cache
def served_fastapi_app() -> FastAPI:
    """:func:`served_app`'s routes and middleware on a FastAPI app: what Aegra serves.

    Aegra (``deploy/cluster/aegra.json``: ``crag.app.web.http:fastapi_app``) refuses any app but a
    FastAPI one, adds its API's routes to it and puts its own middleware (content-type
    rewriting, CORS, logging) outside the app's: the gate is no longer outermost there
    (docs/deployment.md). ``/docs`` and ``/openapi.json`` describe the whole API, behind the
    gate, as langgraph-api's do.
    """
    from fastapi import FastAPI

    app = served_app()
    return FastAPI(routes=list(app.routes), middleware=list(app.user_middleware))


def __getattr__(name: str) -> Any:
    """``app`` (:func:`served_app`), ``fastapi_app`` (:func:`served_fastapi_app`): made on read."""
    if name == "app":
        return served_app()
    if name == "fastapi_app":
        return served_fastapi_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
