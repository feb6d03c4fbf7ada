"""The chat page, served at ``/chat/`` by the LangGraph server beside its API.

:func:`chat_page_routes` gives :func:`crag.app.web.http.served_app` its routes (langgraph-api puts
them before its own):

Every route is behind :class:`crag.app.web.gate.Gate`, which signs people in (the page itself
without a credential is its sign-in page) and refuses strangers.

* ``GET /chat``: 307 to ``/chat/``.
* ``GET /chat/``: the built page, ``app/web/dist/index.html``; ``GET /chat/assets/{name}``: a
  file of ``app/web/dist`` (a plain name: no folders, no dot files, no links). Both under a
  strict ``Content-Security-Policy`` (:data:`PAGE_POLICY`), ``nosniff``, no referrer and
  ``Cache-Control: no-cache``, and gzipped when the client accepts it: ``GZipMiddleware`` sits
  on their ``Mount`` only, never on langgraph-api's streaming routes.
* ``POST /chat/api/uploads?name=FILE``: the raw body is the file (no multipart: the server has
  no python-multipart). Stored by :mod:`crag.app.web.uploads`; answered 201 with ``{"path", "name",
  "bytes", "sha256"}``, the path being the file's name (``upload:...``, never the server's
  folder: :mod:`crag.core.public_names`), what to send to the ingest graph.
* ``GET /chat/api/documents?source=SOURCE``: the file behind a citation, where the server
  shares it (:mod:`crag.app.web.document_files`).
* ``GET /chat/api/session``: who is signed in and the session's CSRF token, ``{"user",
  "role", "csrf"}``, which the page sends with every change; ``DELETE``: sign out (the session
  ends in the threads database, so the old cookie signs no one in, and the cookie is forgotten).
* ``GET /chat/api/method``: the action trigger's thresholds the served ``crag`` graph runs with
  (the operator's method under the operator's evaluator), ``{"upper_threshold",
  "lower_threshold", "evaluator"}``, which the page draws each passage's score against. They
  are not in a run's output, and the page may not ask a run for them.

Every error is ``{"detail": "<one sentence>"}`` with its status, as langgraph-api answers its
own (a method a route does not answer too: 405). The deployment settings are read at each
request (:func:`~crag.settings.deployment.deployment_settings`) unless the routes were given some.
Only the server imports this module: it needs Starlette (langgraph-api's).
"""

from __future__ import annotations

import asyncio
import logging
import re
import stat
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from crag.app.web.document_files import served_as, served_file, still_stored, unserved_reason
from crag.app.web.gate import IDENTITY_KEY, end_session, gate_config
from crag.app.web.uploads import UploadRefusedError, receive_upload
from crag.settings.deployment import DeploymentSettings, deployment_settings
from crag.settings.method import operator_method
from crag.settings.setting_checks import InvalidSettingError

__all__ = ["DIST", "PAGE_HEADERS", "PAGE_POLICY", "chat_page_routes"]

logger = logging.getLogger(__name__)

DIST = Path(__file__).resolve().parent / "dist"
"""The built page: ``index.html``, ``app.js``, ``app.css`` (package data of ``crag.app``)."""
PAGE_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
"""The page's Content-Security-Policy: its own files only, never framed."""
PAGE_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": PAGE_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""Headers of the page and its assets."""
GZIP_MINIMUM_BYTES = 500
"""Smaller responses are sent as they are: gzip would not make them shorter."""

_API_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
_MEDIA_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
}
"""Media types of the built files, whatever the system's ``mimetypes`` table says."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

Handler = Callable[[Request], Awaitable[Response]]
StoredCheck = Callable[[str, DeploymentSettings, str | None], bool]


def _error(status: int, detail: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """An error as langgraph-api answers its own: ``{"detail": ...}``."""
    return JSONResponse(
        {"detail": detail}, status_code=status, headers={**_API_HEADERS, **(headers or {})}
    )


def _route(path: str, **handlers: Handler) -> Route:
    """A route answering ``handlers``' methods (HEAD as GET), and 405 with a sentence to others."""
    allowed = sorted({*handlers, *(["HEAD"] if "GET" in handlers else [])})

    async def endpoint(request: Request) -> Response:
        handler = handlers.get("GET" if request.method == "HEAD" else request.method)
        if handler is None:
            return _error(
                405,
                f"{request.url.path} does not answer {request.method}, only {', '.join(allowed)}",
                {"Allow": ", ".join(allowed)},
            )
        return await handler(request)

    return Route(path, endpoint, methods=_METHODS, include_in_schema=False)


def _member(request: Request) -> str | None:
    """The member the gate let in (their own uploads and files); ``None``: an admin."""
    identity = request.scope.get(IDENTITY_KEY)
    return None if identity is None or identity.is_admin else str(identity.user)


def _declared_bytes(request: Request) -> int | None:
    """The request's ``Content-Length``, or ``None`` when it has none (or a malformed one)."""
    value = request.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


class _ChatPage:
    """The routes' handlers, over the built page's folder and the deployment settings."""

    def __init__(
        self,
        dist: Path,
        deployment: DeploymentSettings | None,
        token: str | None,
        is_stored: StoredCheck,
    ) -> None:
        self.dist = dist
        self.deployment = deployment
        self._token = token
        self.is_stored = is_stored

    def token(self) -> str:
        """The server's token given, else the served gate's."""
        return self._token if self._token is not None else gate_config().token

    def settings(self) -> DeploymentSettings:
        """The settings given, else the operator's as they are now."""
        return self.deployment or deployment_settings()

    def built_file(self, name: str) -> Path | None:
        """The built file ``name``: a plain name of a regular file (not a link) in the folder."""
        if not _PLAIN_NAME.fullmatch(name):
            return None
        path = self.dist / name
        try:
            return path if stat.S_ISREG(path.lstat().st_mode) else None
        except OSError:
            return None

    def built_response(self, name: str, missing: str) -> Response:
        """The built file ``name`` with the page's headers, or 404 saying ``missing``."""
        path = self.built_file(name)
        if path is None:
            return _error(404, missing)
        media_type = _MEDIA_TYPES.get(path.suffix.lower(), "application/octet-stream")
        return FileResponse(path, media_type=media_type, headers=dict(PAGE_HEADERS))

    async def redirect(self, request: Request) -> Response:
        """``/chat`` to ``/chat/``, whose relative links the page uses.

        The address is relative: never one built from the request's ``Host``.
        """
        return RedirectResponse("/chat/", status_code=307)

    async def session(self, request: Request) -> Response:
        """Who is signed in, and the CSRF token the page sends with each change."""
        identity = request.scope.get(IDENTITY_KEY)
        if identity is None:
            return _error(401, "sign in first: open the address `make serve` printed")
        body = {"user": identity.user, "role": identity.role, "csrf": identity.csrf}
        return JSONResponse(body, headers=_API_HEADERS)

    async def sign_out(self, request: Request) -> Response:
        """End the session (the old cookie then signs no one in) and forget its cookie."""
        forget = await asyncio.to_thread(
            end_session,
            gate_config(),
            request.scope.get(IDENTITY_KEY),
            request.url.scheme == "https",
        )
        response = JSONResponse({"signed_out": True}, headers=_API_HEADERS)
        response.headers.append("set-cookie", forget)
        return response

    async def page(self, request: Request) -> Response:
        """The page."""
        return self.built_response(
            "index.html",
            "the chat page is not built: app/web/dist/index.html is missing "
            "(npm run build in app/web)",
        )

    async def asset(self, request: Request) -> Response:
        """One of the page's files."""
        name = request.path_params["name"]
        return self.built_response(name, f"the chat page has no file named {name[:100]!r}")

    async def not_found(self, request: Request) -> Response:
        """Any other path under ``/chat/``."""
        return _error(404, f"the chat page has nothing at {request.url.path[:200]}")

    async def upload(self, request: Request) -> Response:
        """Store the body as the file ``?name=``: 201 with where it lies, or an error."""
        name = request.query_params.get("name", "")
        if not name.strip():
            return _error(
                400,
                "the upload names no file: send POST /chat/api/uploads?name=FILE_NAME with "
                "the file's bytes as the body",
            )
        try:
            stored = await receive_upload(
                name,
                request.stream(),
                self.settings(),
                declared_bytes=_declared_bytes(request),
                member=_member(request),
            )
        except UploadRefusedError as refused:
            logger.info("upload %r refused (%d): %s", name[:200], refused.status, refused)
            return _error(refused.status, str(refused))
        except InvalidSettingError as exc:
            return _error(500, f"the server's settings are invalid: {exc}")
        logger.info("stored upload %s (%d bytes)", stored.path, stored.bytes)
        # as_json resolves folders (os.getcwd for a relative store path): not in the event loop
        reply = await asyncio.to_thread(stored.as_json, self.settings())
        return JSONResponse(reply, status_code=201, headers=_API_HEADERS)

    async def method(self, request: Request) -> Response:
        """The thresholds the served graphs' action trigger uses."""
        try:
            settings = self.settings()
            upper, lower = operator_method().thresholds_for(
                settings.evaluator, settings.evaluator_model
            )
        except InvalidSettingError as exc:
            return _error(500, f"the server's settings are invalid: {exc}")
        thresholds = {"upper_threshold": upper, "lower_threshold": lower}
        return JSONResponse({**thresholds, "evaluator": settings.evaluator}, headers=_API_HEADERS)

    async def document(self, request: Request) -> Response:
        """The file behind the citation ``?source=``, where the server shares it."""
        source = request.query_params.get("source", "")
        if not source:
            return _error(
                400,
                "the request names no document: send GET /chat/api/documents?source=SOURCE "
                "with the cited passage's source",
            )
        try:
            settings = self.settings()
        except InvalidSettingError as exc:
            return _error(500, f"the server's settings are invalid: {exc}")
        path = await asyncio.to_thread(
            served_file, source, settings, self.is_stored, _member(request)
        )
        if path is None:
            return _error(404, unserved_reason(source))
        served = served_as(path)
        return FileResponse(
            path,
            media_type=served.media_type,
            filename=path.name,
            content_disposition_type=served.disposition,
            headers={
                **served.headers,
                "Cache-Control": "no-cache",
                "Referrer-Policy": "no-referrer",
            },
        )


def chat_page_routes(
    deployment: DeploymentSettings | None = None,
    *,
    dist: Path = DIST,
    token: str | None = None,
    is_stored: StoredCheck = still_stored,
) -> list[BaseRoute]:
    """The chat page's routes (see the module), to put before langgraph-api's.

    Args:
        deployment: The settings the uploads and documents follow; ``None``: the operator's,
            read at each request.
        dist: The built page's folder.
        token: The server's token (its sessions' CSRF tokens derive from it); ``None``: the
            served gate's (:func:`crag.app.web.gate.gate_config`).
        is_stored: Whether a cited source's document is still stored (default: the store is
            asked); a removed document's file is not served.
    """
    chat = _ChatPage(dist, deployment, token, is_stored)
    return [
        _route("/chat", GET=chat.redirect),
        _route("/chat/api/session", GET=chat.session, DELETE=chat.sign_out),
        _route("/chat/api/uploads", POST=chat.upload),
        _route("/chat/api/documents", GET=chat.document),
        _route("/chat/api/method", GET=chat.method),
        Mount(
            "/chat",
            routes=[
                _route("/", GET=chat.page),
                _route("/assets/{name}", GET=chat.asset),
                Route("/{rest:path}", chat.not_found, methods=_METHODS, include_in_schema=False),
            ],
            middleware=[Middleware(GZipMiddleware, minimum_size=GZIP_MINIMUM_BYTES)],
        ),
    ]
