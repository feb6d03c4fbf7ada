"""Feedback on answers over HTTP: ``/crag/feedback``, beside the chat page's routes.

:func:`feedback_routes` gives :func:`crag.app.web.http.served_app` its routes, behind
:class:`crag.app.web.gate.Gate` like every other: a request without a known caller is refused
there (401), a browser's change must carry its session's CSRF token, a body must be JSON and is
bounded. The records are :mod:`crag.app.feedback_store`'s, in the threads database.

* ``POST /crag/feedback``: ``{"thread_id", "verdict": "good"|"bad", "run_id"?, "expected"?,
  "comment"?, "better"?: "crag"|"rag"|"same"}``. The thread must be the caller's (an admin's:
  anyone's); another's, a deleted one and an unknown one are all the same 404. The run (the
  thread's latest finished one, or ``run_id``'s) is read from the thread's state and recorded
  with the feedback (:func:`crag.app.feedback_record.run_record`). 201 with the record; 200
  when it replaced the caller's earlier feedback on the same run.
* ``GET /crag/feedback[?thread_id=ID&limit=N]``: the caller's records, newest first (an
  admin's: everyone's), ``{"feedback": [...]}``.
* ``DELETE /crag/feedback/{id}``: remove one of the caller's records (an admin: anyone's);
  another's and an unknown one are the same 404.

Threads are read from the server in the same process: under langgraph-api through its loopback
(``langgraph_sdk.get_client(url=None)``, which skips its authentication), under Aegra (``make
cluster``, which has no such client) from Aegra's database and served graphs
(:class:`AegraThreads`). The owner check is made here, on the thread's ``metadata.owner`` that
:mod:`crag.app.web.server_auth` stamped, before anything of the thread is read. Every error
is ``{"detail": "<one sentence>"}`` with its status.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import logging
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from crag.app.feedback_record import finished, run_record, run_settings
from crag.app.feedback_store import (
    MAX_ID_CHARS,
    FeedbackError,
    FeedbackInput,
    FeedbackStore,
    checked_input,
)
from crag.app.web.credentials import Identity
from crag.app.web.gate import IDENTITY_KEY, gate_config
from crag.settings.setting_checks import InvalidSettingError

__all__ = [
    "FEEDBACK_PATH",
    "MAX_BODY_BYTES",
    "AegraThreads",
    "RunState",
    "ServerThreads",
    "ThreadSource",
    "feedback_routes",
    "served_feedback_store",
    "served_threads",
]

logger = logging.getLogger(__name__)

FEEDBACK_PATH = "/crag/feedback"
MAX_BODY_BYTES = 16_384
"""The most bytes of a feedback request's body (two texts of 2,000 characters fit many times)."""
DEFAULT_LIMIT = 100
MAX_LIMIT = 1_000
_API_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class RunState:
    """A thread's state at the end of one run: its values, its pending nodes, its metadata."""

    values: Mapping[str, Any]
    pending: tuple[Any, ...]
    metadata: Mapping[str, Any]
    checkpoint_id: str


class ThreadSource(Protocol):
    """Where the routes read threads: their owner first, then one run's state."""

    async def owner(self, thread_id: str) -> str | None:
        """The thread's owner (``""`` when it has none), or ``None`` when there is no thread."""

    async def run(self, thread_id: str, run_id: str) -> RunState | None:
        """The state at the end of ``run_id`` (empty: the thread's latest), or ``None``."""


class ServerThreads:
    """The threads of the langgraph-api server this process runs (its in-process loopback)."""

    @functools.cached_property
    def _client(self) -> Any:
        from langgraph_sdk import get_client

        return get_client(url=None, api_key=None)

    async def owner(self, thread_id: str) -> str | None:
        """The thread's ``metadata.owner``; ``None`` when the server has no such thread.

        The server's thread ids are UUIDs; anything else is no thread, and is never put into
        a loopback request's path (``../assistants/...`` would name another of its resources).
        """
        import httpx

        if not _thread_uuid(thread_id):
            return None
        try:
            thread = await self._client.threads.get(thread_id)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code in {404, 422}:  # unknown, deleted, not a thread's id
                return None
            raise
        metadata = thread.get("metadata") or {}
        return str(metadata.get("owner") or "")

    async def run(self, thread_id: str, run_id: str) -> RunState | None:
        """The thread's current state, or the newest checkpoint ``run_id`` wrote."""
        threads = self._client.threads
        if run_id:
            states = await threads.get_history(thread_id, limit=1, metadata={"run_id": run_id})
            if not states:
                return None
            state = states[0]
        else:
            state = await threads.get_state(thread_id)
        checkpoint = state.get("checkpoint") or {}
        return RunState(
            values=state.get("values") or {},
            pending=tuple(state.get("next") or ()),
            metadata=state.get("metadata") or {},
            checkpoint_id=str(checkpoint.get("checkpoint_id") or ""),
        )


def _thread_uuid(thread_id: str) -> bool:
    """Whether ``thread_id`` is a server's thread id, a UUID written as the servers write it.

    Anything else is no thread, and is never put into a loopback request's path
    (``../assistants/...`` would name another of the server's resources) or a query.
    """
    try:
        return str(uuid.UUID(thread_id)) == thread_id.lower()  # not braces, urn:uuid:, no dashes
    except ValueError:
        return False


def _run_state(snapshot: Any) -> RunState:
    """A LangGraph ``StateSnapshot`` as a :class:`RunState`."""
    configurable = (snapshot.config or {}).get("configurable") or {}
    return RunState(
        values=snapshot.values or {},
        pending=tuple(snapshot.next or ()),
        metadata=snapshot.metadata or {},
        checkpoint_id=str(configurable.get("checkpoint_id") or ""),
    )


class AegraThreads:
    """The threads of the Aegra server this process runs (``make cluster``).

    Aegra has no in-process loopback client: the thread's row (its ``metadata``: the owner
    :mod:`crag.app.web.server_auth` stamped, and the graph it runs) is read from Aegra's
    database through its own ORM session, and the run's state through the graph Aegra serves,
    with Aegra's checkpointer attached (what its ``/threads/{id}/state`` does).
    """

    @staticmethod
    def _aegra(module: str) -> Any:
        """One of Aegra's own modules: the server this process runs, not a dependency of crag.

        Aegra is installed beside crag by scripts/install_cluster.sh (it needs Python 3.12),
        and only a process that runs it reaches this class (:func:`served_threads`).
        """
        return importlib.import_module(f"aegra_api.{module}")

    async def _metadata(self, thread_id: str) -> dict[str, Any] | None:
        """The thread's metadata in Aegra's database; ``None`` when there is no such thread."""
        if not _thread_uuid(thread_id):
            return None
        orm = self._aegra("core.orm")
        async with orm.get_session_maker()() as session:
            row = await session.get(orm.Thread, thread_id)  # by its primary key
        return None if row is None else dict(row.metadata_json or {})

    async def owner(self, thread_id: str) -> str | None:
        """The thread's ``metadata.owner``; ``None`` when Aegra has no such thread."""
        metadata = await self._metadata(thread_id)
        return None if metadata is None else str(metadata.get("owner") or "")

    async def run(self, thread_id: str, run_id: str) -> RunState | None:
        """The thread's current state, or the newest checkpoint ``run_id`` wrote."""
        service = self._aegra("services.langgraph_service")
        graph_id = ((await self._metadata(thread_id)) or {}).get("graph_id")
        if not graph_id:  # a thread no run has used yet: no run, nothing finished
            return None if run_id else RunState({}, (), {}, "")
        config = service.create_thread_config(thread_id, None)
        async with service.get_langgraph_service().get_graph(
            graph_id, config=config, access_context="threads.read"
        ) as graph:
            if not run_id:
                return _run_state(await graph.aget_state(config))
            found = graph.aget_state_history(config, filter={"run_id": run_id}, limit=1)
            states = [snapshot async for snapshot in found]
        return _run_state(states[0]) if states else None


def served_threads() -> ThreadSource:
    """The threads of the server this process runs: Aegra's, or langgraph-api's."""
    return AegraThreads() if "aegra_api" in sys.modules else ServerThreads()


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=_API_HEADERS)


def _route(path: str, **handlers: Handler) -> Route:
    """A route answering ``handlers``' methods (HEAD as GET), and 405 with a sentence to others."""
    allowed = sorted({*handlers, *(["HEAD"] if "GET" in handlers else [])})

    async def endpoint(request: Request) -> Response:
        handler = handlers.get("GET" if request.method == "HEAD" else request.method)
        if handler is None:
            response = _error(
                405,
                f"{request.url.path} does not answer {request.method}, only {', '.join(allowed)}",
            )
            response.headers["Allow"] = ", ".join(allowed)
            return response
        return await handler(request)

    return Route(path, endpoint, methods=_METHODS, include_in_schema=False)


def _no_thread(thread_id: str) -> FeedbackError:
    """The one answer for another's thread, a deleted one and one that never was."""
    return FeedbackError(f"there is no thread {thread_id[:MAX_ID_CHARS]!r} of yours", 404)


async def _body(request: Request) -> Any:
    """The request's JSON, read up to :data:`MAX_BODY_BYTES`."""
    chunks: list[bytes] = []
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > MAX_BODY_BYTES:
                raise FeedbackError(
                    f"a feedback request's body may have at most {MAX_BODY_BYTES:,} bytes", 413
                )
            chunks.append(chunk)
    except ClientDisconnect:
        raise FeedbackError("the caller left before its request's body arrived", 400) from None
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        raise FeedbackError("the feedback request's body is not JSON", 400) from None


def _limit(request: Request) -> int:
    text = request.query_params.get("limit", "")
    if not text:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise FeedbackError(f"limit must be a whole number from 1 to {MAX_LIMIT:,}", 422)
    return int(text)


class _Feedback:
    """The routes' handlers, over a feedback store and a source of threads."""

    def __init__(
        self, store: Callable[[], FeedbackStore], threads: ThreadSource, per_hour: int | None
    ) -> None:
        self._store = store
        self.threads = threads
        self.per_hour = per_hour

    @property
    def store(self) -> FeedbackStore:
        """The store given, else the one of the served gate's threads database."""
        return self._store()

    async def answer(
        self, request: Request, action: Callable[[Request, Identity], Any]
    ) -> Response:
        """``action``'s answer for the identified caller, or the refusal as one sentence."""
        identity = request.scope.get(IDENTITY_KEY)
        if not isinstance(identity, Identity):
            return _error(401, "sign in first: feedback is given by a known caller")
        try:
            response: Response = await action(request, identity)
        except FeedbackError as refused:
            logger.info("feedback of %s refused (%d): %s", identity.user, refused.status, refused)
            return _error(refused.status, str(refused))
        except InvalidSettingError as exc:
            return _error(500, f"the server's settings are invalid: {exc}")
        return response

    async def post(self, request: Request) -> Response:
        """Record the caller's feedback on one run of their thread."""
        return await self.answer(request, self._give)

    async def get(self, request: Request) -> Response:
        """The caller's records (an admin's: everyone's)."""
        return await self.answer(request, self._list)

    async def delete(self, request: Request) -> Response:
        """Remove one of the caller's records (an admin: anyone's)."""
        return await self.answer(request, self._delete)

    async def _run_of(self, identity: Identity, given: FeedbackInput) -> RunState:
        """The run ``given`` judges, once the thread is known to be the caller's."""
        owner = await self.threads.owner(given.thread_id)
        if owner is None or (not identity.is_admin and owner != identity.user):
            raise _no_thread(given.thread_id)
        state = await self.threads.run(given.thread_id, given.run_id)
        if state is None:
            raise FeedbackError(
                f"the thread {given.thread_id[:MAX_ID_CHARS]!r} has no run "
                f"{given.run_id[:MAX_ID_CHARS]!r}",
                404,
            )
        if not finished(state.values, state.pending):
            raise FeedbackError(
                f"the thread {given.thread_id[:MAX_ID_CHARS]!r} has no finished answer to judge "
                "yet: give feedback once its run has ended",
                409,
            )
        return state

    async def _give(self, request: Request, identity: Identity) -> Response:
        given = checked_input(await _body(request))
        state = await self._run_of(identity, given)
        settings = await asyncio.to_thread(run_settings)
        record = run_record(state.values, state.metadata, settings)
        run_id = str(state.metadata.get("run_id") or state.checkpoint_id)
        saved, new = await asyncio.to_thread(
            self.store.save, identity.user, given, run_id, record, per_hour=self.per_hour
        )
        logger.info("%s gave %s feedback on %s", identity.user, given.verdict, given.thread_id)
        return JSONResponse(saved.as_json(), status_code=201 if new else 200, headers=_API_HEADERS)

    async def _list(self, request: Request, identity: Identity) -> Response:
        owner = None if identity.is_admin else identity.user
        thread_id = request.query_params.get("thread_id", "")[:MAX_ID_CHARS]
        found = await asyncio.to_thread(
            self.store.records, owner, thread_id=thread_id, limit=_limit(request)
        )
        return JSONResponse({"feedback": [f.as_json() for f in found]}, headers=_API_HEADERS)

    async def _delete(self, request: Request, identity: Identity) -> Response:
        feedback_id = str(request.path_params["feedback_id"])
        owner = None if identity.is_admin else identity.user
        await asyncio.to_thread(self.store.delete, feedback_id, owner)
        logger.info("%s removed feedback %s", identity.user, feedback_id[:MAX_ID_CHARS])
        return JSONResponse({"deleted": feedback_id}, headers=_API_HEADERS)


@functools.cache
def served_feedback_store() -> FeedbackStore:
    """The feedback of the served gate's threads database (its accounts' connections)."""
    accounts = gate_config().accounts
    if accounts is None:  # pragma: no cover - the served gate always has its accounts
        raise FeedbackError("this server keeps no threads database for feedback", 503)
    return FeedbackStore(accounts.database)


def feedback_routes(
    store: FeedbackStore | None = None,
    *,
    threads: ThreadSource | None = None,
    per_hour: int | None = None,
) -> list[BaseRoute]:
    """The feedback routes (see the module), to put before langgraph-api's.

    Args:
        store: Where the records are kept; ``None``: the served gate's threads database.
        threads: Where threads are read; ``None``: this process's server's
            (:func:`served_threads`: langgraph-api's or Aegra's).
        per_hour: The most new records an owner gives an hour; ``None``:
            :data:`~crag.app.feedback_store.FEEDBACK_PER_HOUR`.
    """
    from crag.app.feedback_store import FEEDBACK_PER_HOUR

    chosen = (lambda: store) if store is not None else served_feedback_store
    feedback = _Feedback(
        chosen, threads or served_threads(), FEEDBACK_PER_HOUR if per_hour is None else per_hour
    )
    return [
        _route(FEEDBACK_PATH, GET=feedback.get, POST=feedback.post),
        _route(FEEDBACK_PATH + "/{feedback_id}", DELETE=feedback.delete),
    ]
