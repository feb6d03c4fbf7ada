"""The server's own app: the chat page; and no run may set the method's or the operator's settings.

``langgraph.json`` serves :data:`app` (``"http": {"app": "crag.app.http:app"}``); langgraph-api
puts the app's routes before its built-in API routes, and its middleware in front of all of
them. The routes are the chat page's (:func:`crag.app.chat_page.chat_page_routes`: the page at
``/chat/``, its uploads and the files behind its citations, under ``/chat/api/``).

langgraph-api keeps only the context keys that are properties of the graph's context schema
(the per-run settings, :mod:`crag.core.run_context`) and drops the others without a word,
``config.configurable`` included (it is copied into the context). So a caller that sent
``store_path`` or ``force_action`` would see its run succeed as if it had been honoured.
:class:`RefuseOtherKinds` answers such a request 422, ``{"detail": "setting store_path is a
deployment setting: ..."}`` (:func:`crag.core.setting_kinds.other_kind_error`), before
langgraph-api reads it.

It looks only at the requests that create runs or set what every run of an assistant gets:
POST to ``/runs``, ``/runs/stream``, ``/runs/wait``, ``/runs/batch`` (a list of runs),
``/runs/crons``, ``/threads/{id}/runs``, ``/threads/{id}/runs/stream``,
``/threads/{id}/runs/wait``, ``/threads/{id}/runs/crons`` and ``/assistants``; PATCH to
``/assistants/{id}`` and ``/runs/crons/{id}``. It buffers only those requests' bodies, parses
them as JSON whatever the content type (as langgraph-api does), looks into the object (each
object of a list, for a batch) and replays the same bytes to the server. A body that is not
JSON, or holds no object, passes on for langgraph-api to answer. Every other request, and every
response (streams included), passes through untouched.

Only the server imports this module; Starlette (langgraph-api's) and the chat page's routes are
imported when ``app`` is first read, so the module itself needs nothing beyond crag's
dependencies.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from crag.core.setting_kinds import other_kind_error

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["RefuseOtherKinds", "refusal", "served_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_RUNS = r"(?:/threads/[^/]+)?/runs(?:/stream|/wait|/crons)?|/runs/batch"
_CHECKED: dict[str, re.Pattern[str]] = {
    "POST": re.compile(rf"(?:{_RUNS}|/assistants)/?"),
    "PATCH": re.compile(r"(?:/assistants/[^/]+|/runs/crons/[^/]+)/?"),
}


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


def refusal(body: bytes) -> str | None:
    """Why a run-creating request's ``body`` is refused, or ``None`` if it is not.

    ``None`` also for a body that is not JSON: langgraph-api answers that one itself.
    """
    try:
        payload = json.loads(body)
    except ValueError:  # not JSON, or not UTF-8
        return None
    error = other_kind_error(_given_names(payload))
    return None if error is None else str(error)


class RefuseOtherKinds:
    """Pure ASGI middleware: answer 422 to a run that sets what only the method or operator sets."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, its body replayed if it was read; or answer 422."""
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
        refused = refusal(body)
        if refused is not None:
            await _answer_422(send, refused)
            return
        await self.app(scope, _replaying(body, receive), send)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` once, then whatever the caller sends (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


async def _answer_422(send: Send, detail: str) -> None:
    content = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]
    await send({"type": "http.response.start", "status": 422, "headers": headers})
    await send({"type": "http.response.body", "body": content})


@functools.cache
def served_app() -> Starlette:
    """The app ``langgraph.json`` names: the chat page's routes, the gate, the refusals.

    :class:`crag.app.gate.Gate` (who may call, from where) is outermost, then
    :class:`RefuseOtherKinds`.
    """
    from starlette.applications import Starlette
    from starlette.middleware import Middleware

    from crag.app.chat_page import chat_page_routes
    from crag.app.gate import Gate

    return Starlette(
        routes=chat_page_routes(),
        middleware=[Middleware(Gate), Middleware(RefuseOtherKinds)],
    )


def __getattr__(name: str) -> Any:
    """``app``: :func:`served_app`, built when langgraph-api first reads it."""
    if name == "app":
        return served_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
