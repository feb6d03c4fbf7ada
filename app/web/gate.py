"""The LangGraph server's front door: who may call it, from where, and with what.

:class:`Gate` is the outermost middleware of the served app (:mod:`crag.app.web.http`), in front of
langgraph-api's own (CORS, logging, authentication) and of every route, the chat page's and
the API's, HTTP and WebSocket alike. In this order, each refusal one sentence with its status:

1. ``GET /ok`` answers anyone: it tells only that the server is up (to a listed origin with
   the CORS headers, so a page can tell that its server is up).
2. **Host**: the ``Host`` header must name a loopback name (127.0.0.1, localhost, [::1]) or one
   of ``server_hosts``: 403 otherwise, so a page cannot reach the server through a name it
   controls (DNS rebinding).
3. **Origin**: a request from a web page carries ``Origin``; it must be the server's own
   (``scheme://Host``) or one of ``server_origins``: 403 otherwise (``null``, a ``file://``
   page's, included). Only those listed origins get CORS headers (langgraph-api's own ``*``
   is turned off in ``langgraph.json``), on every answer, each refusal below included (so a
   page of theirs reads why, rather than "failed to connect"), and their preflights are
   answered here, before any credential is asked for.
4. **Sign-in**: ``POST /chat/token`` (the sign-in form's token field) with the right token
   starts the operator's session (:mod:`crag.app.web.sessions`), sets its cookie and sends the
   browser to ``/chat/``; so does ``GET /chat/?token=TOKEN``, the address ``make serve``
   prints, whose one hop stops here (the token never reaches the server's log, and the
   redirect leaves the address bar without it); ``POST /chat/signin`` (the sign-in form's name
   and password, checked against the accounts of :mod:`crag.app.web.accounts`, failures slowed
   per account) starts that account's; ``/chat/`` without a credential is the sign-in page
   (401), ``/chat/assets/*`` is public.
5. **Credential**: every other request must prove it holds the server's token or an
   account's API key, carry a live session, or come from the trusted reverse proxy naming the
   person (``proxy_user_header``, with ``proxy_secret`` or from ``proxy_addresses``; off by
   default). A proxy's person gets a session of their own at ``GET /chat/api/session``, whose
   CSRF token their browser's changes carry
   (:func:`crag.app.web.credentials.identify`): 401 or 403 otherwise. The caller's
   :class:`~crag.app.web.credentials.Identity` is put in the scope (:data:`IDENTITY_KEY`) for the
   page's routes.
6. **Body**: a request that changes something and has a body must say it is JSON
   (``application/json``; the upload route also takes ``application/octet-stream``): a form's
   types are refused (415), so no form of another site can send one. A body longer than
   ``server_max_request_bytes`` (``upload_max_bytes`` for an upload) is refused (413) before it
   is read whole, and one that does not arrive within ``upload_seconds`` is abandoned (408).

langgraph-api's internal loopback calls (``root_path`` ``/noauth``, which no request can set)
pass as langgraph-api lets them pass.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import html
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crag.app.web.accounts import MAX_PASSWORD_CHARS, Account, Accounts
from crag.app.web.asgi_response import send_response
from crag.app.web.credentials import (
    OPERATOR,
    AccessDeniedError,
    Identity,
    csrf_token,
    identify,
    proxy_identity,
    server_token,
)
from crag.app.web.sessions import Sessions, cookie_name
from crag.app.web.sign_in_guard import (
    BUSY,
    PasswordChecks,
    SignInBusyError,
    SignInThrottle,
    shared_password_checks,
)
from crag.settings.deployment import DeploymentSettings, deployment_settings

__all__ = [
    "IDENTITY_KEY",
    "LOOPBACK_HOSTS",
    "TOKEN_PATH",
    "CallerLeftError",
    "Gate",
    "GateConfig",
    "end_session",
    "gate_config",
    "set_session_cookie",
]

logger = logging.getLogger(__name__)


IDENTITY_KEY = "crag.identity"
"""The scope key under which the gate leaves the caller's identity for the routes."""
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
PAGE_PATHS = frozenset({"/chat", "/chat/"})
SIGN_IN_PATH = "/chat/signin"
TOKEN_PATH = "/chat/token"
"""Where the sign-in form posts the server's token."""
SESSION_PATH = "/chat/api/session"
_FORM = "application/x-www-form-urlencoded"
_MAX_SIGN_IN_BYTES = 4_096
UPLOAD_PATH = "/chat/api/uploads"
_PUBLIC_PREFIX = "/chat/assets/"
OIDC_PREFIX = "/chat/oidc"
"""The routes of the sign-in through the team's OpenID Connect provider (public)."""
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_JSON = "application/json"
_OCTETS = "application/octet-stream"
_EXPOSED = "x-pagination-total, x-pagination-next, content-location"


@dataclass(frozen=True)
class GateConfig:
    """What the gate checks against: the token and the operator's hosts, origins and limits."""

    token: str
    hosts: frozenset[str] = LOOPBACK_HOSTS
    origins: frozenset[str] = frozenset()
    max_request_bytes: int = 10_000_000
    upload_max_bytes: int = 50_000_000
    body_seconds: float = 120.0
    session_seconds: float = 24 * 3600.0
    accounts: Accounts | None = None
    throttle: SignInThrottle = field(default_factory=SignInThrottle)
    password_checks: PasswordChecks = field(default_factory=shared_password_checks)
    """Where passwords are hashed: a small pool of its own, shared by the process's gates."""
    oidc: bool = False
    """Whether the team's OpenID Connect provider signs people in (:mod:`crag.app.web.oidc`)."""
    proxy_header: str = ""
    """The header a trusted reverse proxy names the signed-in person in; empty: off."""
    proxy_addresses: frozenset[str] = frozenset()
    """The proxy's peer addresses (none: only its secret tells it)."""
    proxy_secret: str = field(default="", repr=False)
    """What the proxy sends in ``X-Crag-Proxy-Secret`` (empty: only its addresses tell it)."""
    admins: frozenset[str] = frozenset()
    """The names that are admins when the provider or the proxy signs them in."""

    def proxied(self, headers: Mapping[bytes, bytes], scope: Mapping[str, Any]) -> Identity | None:
        """The person the trusted proxy names, or ``None`` (see :func:`proxy_identity`).

        A peer address that the request's own ``X-Forwarded-For`` names is no proxy's: uvicorn
        (``proxy_headers``, on by default for 127.0.0.1) takes the client from that header, so
        any process of this host could otherwise say it is the proxy.
        """
        client = scope.get("client") or ("", 0)
        peer = str(client[0])
        return proxy_identity(
            headers,
            "" if peer in _forwarded_for(scope) else peer,
            self.proxy_header,
            self.proxy_addresses,
            self.admins,
            self.proxy_secret,
        )

    @property
    def sessions(self) -> Sessions | None:
        """The server's sessions, in the accounts' database (``None``: the server keeps none)."""
        if self.accounts is None:
            return None
        return Sessions(self.accounts.database, self.token, self.session_seconds)

    def cookie_name(self, secure: bool) -> str:
        """The session cookie's name on this server (:func:`crag.app.web.sessions.cookie_name`)."""
        database = self.accounts.database.target if self.accounts is not None else ""
        return cookie_name(self.token, database, secure)

    @classmethod
    def from_settings(
        cls, settings: DeploymentSettings, token: str, accounts: Accounts | None = None
    ) -> GateConfig:
        """The gate of a server with the operator's ``settings``, ``token`` and ``accounts``."""
        return cls(
            token=token,
            accounts=accounts,
            throttle=SignInThrottle(database=accounts.database if accounts else None),
            hosts=LOOPBACK_HOSTS | {_host_name(h) for h in _items(settings.server_hosts)},
            origins=frozenset(o.rstrip("/").lower() for o in _items(settings.server_origins)),
            max_request_bytes=settings.server_max_request_bytes,
            upload_max_bytes=settings.upload_max_bytes,
            body_seconds=settings.upload_seconds,
            session_seconds=settings.server_session_hours * 3600.0,
            oidc=bool(settings.oidc_issuer.strip()),
            proxy_header=_checked_proxy(settings),
            proxy_addresses=frozenset(_items(settings.proxy_addresses)),
            proxy_secret=settings.proxy_secret.get_secret_value().strip(),
            admins=frozenset(name.lower() for name in _items(settings.team_admins)),
        )


def _checked_proxy(settings: DeploymentSettings) -> str:
    """``proxy_user_header``, with an error logged when nothing could tell the proxy's requests."""
    header = settings.proxy_user_header.strip()
    secret = settings.proxy_secret.get_secret_value().strip()
    addresses = set(_items(settings.proxy_addresses))
    if header and not secret and not addresses:
        logger.error(
            "proxy_user_header is %s, but neither proxy_secret nor proxy_addresses is set: the "
            "header is believed from no one (set CRAG_PROXY_SECRET, and have the proxy send it "
            "as X-Crag-Proxy-Secret)",
            header,
        )
    elif header and not secret and addresses & LOOPBACK_HOSTS:
        logger.warning(
            "proxy_addresses names a loopback address without proxy_secret: every process of "
            "this host may name anyone in %s (set CRAG_PROXY_SECRET)",
            header,
        )
    return header


@functools.cache
def gate_config() -> GateConfig:
    """The served app's gate: the operator's settings and token, read once per process."""
    from crag.app.threads import configured_threads_db

    settings = deployment_settings()
    database = configured_threads_db()
    accounts = Accounts(database)
    return GateConfig.from_settings(settings, server_token(settings), accounts)


def _forwarded_for(scope: Mapping[str, Any]) -> set[str]:
    """Every address the request's ``X-Forwarded-For`` headers (each of them) name."""
    return {
        part.strip()
        for name, value in scope.get("headers") or ()
        if bytes(name).lower() == b"x-forwarded-for"
        for part in bytes(value).decode("latin-1").split(",")
    }


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _host_name(host: str) -> str:
    """The name in a ``Host`` value, without its port or IPv6 brackets, lower-case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, colon, port = host.rpartition(":")
    return (name if colon and port.isdigit() else host).rstrip(".")


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers (the last of a repeated name), names lower-case."""
    return {name.lower(): value for name, value in scope.get("headers", [])}


def _text(headers: dict[bytes, bytes], name: str) -> str:
    return headers.get(name.encode(), b"").decode("latin-1").strip()


def _own_origin(scope: Scope, host: str) -> str:
    secure = scope.get("scheme") in {"https", "wss"}
    return f"{'https' if secure else 'http'}://{host.lower()}"


@dataclass(frozen=True)
class _Request:
    """What the gate reads of one request."""

    scope: Scope
    headers: dict[bytes, bytes]

    @property
    def method(self) -> str:
        return str(self.scope.get("method", "GET")) if self.is_http else "WEBSOCKET"

    @property
    def is_http(self) -> bool:
        return bool(self.scope["type"] == "http")

    @property
    def path(self) -> str:
        path: str = self.scope["path"]
        root: str = self.scope.get("root_path", "")
        return path[len(root) :] if root and path.startswith(root + "/") else path

    @property
    def host(self) -> str:
        return _text(self.headers, "host")

    @property
    def origin(self) -> str:
        return _text(self.headers, "origin").rstrip("/").lower()


class Gate:
    """Pure ASGI middleware: the checks of the module, then the app."""

    def __init__(self, app: ASGIApp, config: GateConfig | Callable[[], GateConfig] = gate_config):
        self.app = app
        self._config = config

    @property
    def config(self) -> GateConfig:
        """The configuration given, or the one its factory makes (the operator's)."""
        return self._config if isinstance(self._config, GateConfig) else self._config()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse what the module says, else pass the request on; a caller that left, quietly.

        A caller that hangs up while its body is read (here, or by any route behind: Starlette
        raises ``ClientDisconnect``) is no error of the server's: one debug line, no traceback.
        """
        try:
            await self._guard(scope, receive, send)
        except _caller_left() as left:
            path = str(scope.get("path", ""))[:200]
            logger.debug("%s %s: the caller left (%s)", scope.get("method"), path, left)

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The checks, in the module's order; a listed origin's answers all carry CORS headers."""
        if scope["type"] not in {"http", "websocket"} or _internal(scope):
            await self.app(scope, receive, send)
            return
        request = _Request(scope, _headers(scope))
        config = self.config
        listed = bool(request.origin) and request.origin in config.origins
        answer = _with_cors(send, request.origin) if listed else send
        if request.is_http and request.path == "/ok" and request.method in {"GET", "HEAD"}:
            await self.app(scope, receive, answer)
            return
        refusal = _where_refusal(request, config)
        if refusal is not None:
            await _refuse(request, answer, 403, refusal)
            return
        if listed and _is_preflight(request):
            await _answer_preflight(send, request)
            return
        await self._checked(request, receive, answer, config)

    async def _checked(
        self, request: _Request, receive: Receive, send: Send, config: GateConfig
    ) -> None:
        """Sign-in, then the credential: the identified request passes on, else the refusal."""
        if _is_token_exchange(request):
            await _exchange_token(request, send, config)
            return
        if request.is_http and request.method == "POST" and request.path == TOKEN_PATH:
            await _post_token(request, receive, send, config)
            return
        if request.is_http and request.method == "POST" and request.path == SIGN_IN_PATH:
            await _sign_in(request, receive, send, config)
            return
        try:
            identity = await asyncio.to_thread(
                identify,
                request.headers,
                request.method,
                config.token,
                session_seconds=config.session_seconds,
                accounts=config.accounts,
                proxied=config.proxied(request.headers, request.scope),
                secure=_secure(request),
            )
        except AccessDeniedError as denied:
            await self._unidentified(request, receive, send, denied)
            return
        await self._identified(request, receive, send, identity)

    async def _unidentified(
        self, request: _Request, receive: Receive, send: Send, denied: AccessDeniedError
    ) -> None:
        """The sign-in page, a public asset, or the refusal."""
        if request.is_http and request.method in {"GET", "HEAD"}:
            if request.path in PAGE_PATHS:
                await _sign_in_page(send, str(denied), oidc=self.config.oidc)
                return
            if request.path.startswith(_PUBLIC_PREFIX) or (
                self.config.oidc and request.path.startswith(OIDC_PREFIX + "/")
            ):
                await self.app(request.scope, receive, send)
                return
        await _refuse(request, send, denied.status, str(denied))

    async def _identified(
        self,
        request: _Request,
        receive: Receive,
        send: Send,
        identity: Identity,
    ) -> None:
        """Check the body's type and size, then pass the request on with the identity."""
        config = self.config
        if request.is_http and request.method in _UNSAFE:
            problem = _body_problem(request, config)
            if problem is not None:
                await _refuse(request, send, *problem)
                return
            if request.path != UPLOAD_PATH and "content-length" not in {
                name.decode() for name in request.headers
            }:
                body = await _read_limited(receive, config)
                if isinstance(body, tuple):
                    await _refuse(request, send, *body)
                    return
                receive = _replaying(body, receive)
        if identity.via == "proxy" and not identity.session and _is_session_read(request):
            identity, send = await _proxy_session(config, request, identity, send)
        request.scope[IDENTITY_KEY] = identity
        await self.app(request.scope, receive, send)


def _internal(scope: Scope) -> bool:
    """langgraph-api's in-process calls, which its own auth also lets through."""
    root = str(scope.get("root_path", ""))
    return root == "/noauth" or root.startswith("/noauth/")


def _where_refusal(request: _Request, config: GateConfig) -> str | None:
    """Why the request's Host or Origin is refused, or ``None``."""
    name = _host_name(request.host)
    if not request.host or name not in config.hosts:
        return (
            f"this server does not answer the host name {name[:100]!r}: it answers "
            f"{', '.join(sorted(config.hosts))} (the operator adds names with CRAG_SERVER_HOSTS)"
        )
    origin = request.origin
    if (
        origin
        and origin != _own_origin(request.scope, request.host)
        and (origin not in config.origins)
    ):
        return (
            f"requests from pages of {origin[:100]!r} are refused: this server answers its own "
            "pages only (the operator adds origins with CRAG_SERVER_ORIGINS)"
        )
    return None


def _secure(request: _Request) -> bool:
    return request.scope.get("scheme") in {"https", "wss"}


def _is_session_read(request: _Request) -> bool:
    return request.is_http and request.method == "GET" and request.path == SESSION_PATH


async def _proxy_session(
    config: GateConfig, request: _Request, identity: Identity, send: Send
) -> tuple[Identity, Send]:
    """A session for a proxy's person, whose CSRF token the page reads (and its cookie)."""
    sessions = config.sessions
    if sessions is None:
        return identity, send
    session_id = await asyncio.to_thread(sessions.start, identity.user, "proxy")
    cookie = _cookie(config, session_id, _secure(request))

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie)]
        await send(message)

    return replace(identity, csrf=csrf_token(config.token, session_id), session=session_id), sending


def _is_preflight(request: _Request) -> bool:
    return request.method == "OPTIONS" and bool(
        _text(request.headers, "access-control-request-method")
    )


def _is_token_exchange(request: _Request) -> bool:
    return (
        request.is_http
        and request.method == "GET"
        and request.path in PAGE_PATHS
        and b"token=" in request.scope.get("query_string", b"")
    )


def _body_problem(request: _Request, config: GateConfig) -> tuple[int, str] | None:
    """Why a changing request's body is refused before it is read (415, 413), or ``None``."""
    length_text = _text(request.headers, "content-length")
    has_body = (length_text not in {"", "0"}) or bool(_text(request.headers, "transfer-encoding"))
    if not has_body:
        return None
    media = _text(request.headers, "content-type").split(";")[0].strip().lower()
    allowed = {_JSON, _OCTETS} if request.path == UPLOAD_PATH else {_JSON}
    if media not in allowed:
        return 415, (
            f"a request that changes something must send {' or '.join(sorted(allowed))}, not "
            f"{media[:80] or 'no content type'!r} (no form may post to this server)"
        )
    limit = config.upload_max_bytes if request.path == UPLOAD_PATH else config.max_request_bytes
    if length_text.isdigit() and int(length_text) > limit:
        return 413, (
            f"the request's body is {int(length_text):,} bytes; this server reads at most "
            f"{limit:,} (setting "
            f"{'upload_max_bytes' if request.path == UPLOAD_PATH else 'server_max_request_bytes'})"
        )
    return None


async def _read_limited(receive: Receive, config: GateConfig) -> bytes | tuple[int, str]:
    """A body sent without a length, read up to the limit within the time allowed."""
    chunks: list[bytes] = []
    total = 0
    try:
        async with asyncio.timeout(config.body_seconds):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise CallerLeftError("the caller left before its request's body arrived")
                chunk = message.get("body", b"")
                total += len(chunk)
                if total > config.max_request_bytes:
                    return 413, (
                        f"the request's body is over {config.max_request_bytes:,} bytes, the "
                        "most this server reads (setting server_max_request_bytes)"
                    )
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        return 408, (
            f"the request's body did not arrive within {config.body_seconds:g} s "
            "(setting upload_seconds)"
        )


class CallerLeftError(Exception):
    """The caller hung up before its request's body arrived: nothing is left to answer."""


@functools.cache
def _caller_left() -> tuple[type[Exception], ...]:
    """What tells the gate that the caller left: its own error, and Starlette's.

    Starlette is imported here, not with the module: only the server has it.
    """
    try:
        from starlette.requests import ClientDisconnect
    except ImportError:  # pragma: no cover - the server's extra holds Starlette
        return (CallerLeftError,)
    return (CallerLeftError, ClientDisconnect)


def _replaying(body: bytes, receive: Receive) -> Receive:
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _with_cors(send: Send, origin: str) -> Send:
    """``send`` adding the CORS headers of a listed origin to the response."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            given = message.get("headers", [])
            headers = [
                (name, value)
                for name, value in given
                if not name.lower().startswith(b"access-control-") and name.lower() != b"vary"
            ]
            headers += [
                (b"access-control-allow-origin", origin.encode()),
                (b"access-control-allow-credentials", b"true"),
                (b"access-control-expose-headers", _EXPOSED.encode()),
                (b"vary", _vary_with_origin(given)),
            ]
            message["headers"] = headers
        await send(message)

    return sending


def _vary_with_origin(headers: list[tuple[bytes, bytes]]) -> bytes:
    """One ``Vary`` value: the response's own (the server behind may add ``Origin`` too) and ours.

    Two ``Vary: Origin`` lines are legal but were seen as one doubled value by proxies and
    tests; the names are merged without repeats, case-insensitively.
    """
    names: dict[bytes, bytes] = {}
    for name, value in headers:
        if name.lower() == b"vary":
            for part in value.split(b","):
                if part.strip():
                    names.setdefault(part.strip().lower(), part.strip())
    names.setdefault(b"origin", b"Origin")
    return b", ".join(names.values())


_PREFLIGHT_HEADERS = ("authorization", "x-api-key", "content-type")
_MAX_ASKED_HEADERS = 40


def _allowed_headers(request: _Request) -> bytes:
    """The headers a listed origin's preflight asked for (names only), and the key's and type's.

    Echoed rather than ``*``: with credentials a browser takes ``*`` literally, and the SDK and
    LangChain's Agent Chat UI send headers of their own. The origin is the operator's; what a
    header may carry is still the gate's to check.
    """
    asked = _text(request.headers, "access-control-request-headers").lower().split(",")
    names = [name.strip() for name in asked[:_MAX_ASKED_HEADERS]]
    valid = [name for name in names if name and len(name) <= 80 and _is_token(name)]
    return ", ".join(dict.fromkeys([*_PREFLIGHT_HEADERS, *valid])).encode()


def _is_token(name: str) -> bool:
    """Whether ``name`` is an HTTP header name (RFC 9110's token characters)."""
    return all(char.isalnum() or char in "!#$%&'*+-.^_`|~" for char in name) and name.isascii()


async def _answer_preflight(send: Send, request: _Request) -> None:
    """204 to a listed origin's preflight: what it may send; the credential is checked later."""
    headers = [
        (b"access-control-allow-origin", request.origin.encode()),
        (b"access-control-allow-credentials", b"true"),
        (b"access-control-allow-methods", b"GET, POST, PUT, PATCH, DELETE, OPTIONS"),
        (b"access-control-allow-headers", _allowed_headers(request)),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _refuse(request: _Request, send: Send, status: int, detail: str) -> None:
    """Answer ``{"detail": ...}`` with ``status``; a WebSocket is closed before it opens."""
    logger.info("refused %s %s (%d): %s", request.method, request.path[:200], status, detail)
    if not request.is_http:
        await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
        return
    body = json.dumps({"detail": detail}).encode()
    extra = [(b"www-authenticate", b'Bearer realm="crag"')] if status == 401 else []
    await send_response(send, status, body, _JSON.encode(), extra)


def _cookie(config: GateConfig, value: str, secure: bool, max_age: float | None = None) -> bytes:
    """The ``Set-Cookie`` of the session ``value`` (``max_age`` 0 and no value: forget it)."""
    seconds = config.session_seconds if max_age is None else max_age
    flags = f"; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(seconds)}"
    name = config.cookie_name(secure)
    return f"{name}={value}{flags}{'; Secure' if secure else ''}".encode()


def set_session_cookie(config: GateConfig, user: str, secure: bool) -> str:
    """Start a session for ``user`` (the operator, or an account): its ``Set-Cookie`` value.

    Blocking: the session is written to the threads database (call it in a thread).

    Raises:
        AccessDeniedError: The server keeps no sessions (no accounts' database), or the
            account was removed meanwhile.
    """
    sessions = config.sessions
    if sessions is None:
        raise AccessDeniedError("this server keeps no sessions: sign in with X-Api-Key")
    kind: Literal["operator", "account"] = "operator" if user == OPERATOR else "account"
    try:
        session_id = sessions.start(user, kind)
    except sessions.database.integrity_errors():
        raise AccessDeniedError(f"there is no account named {user[:60]!r}") from None
    return _cookie(config, session_id, secure).decode()


def end_session(config: GateConfig, identity: Identity | None, secure: bool) -> str:
    """Sign out: end ``identity``'s session, if it has one; the ``Set-Cookie`` forgetting it.

    Blocking: the session is removed from the threads database (call it in a thread).
    """
    sessions = config.sessions
    if identity is not None and identity.session and sessions is not None:
        sessions.end(identity.session)
        logger.info("%s signed out", identity.user)
    return _cookie(config, "", secure, max_age=0).decode()


async def _exchange_token(request: _Request, send: Send, config: GateConfig) -> None:
    """``/chat/?token=TOKEN``: the cookie and a redirect to ``/chat/``, or the sign-in page."""
    query = parse_qs(request.scope.get("query_string", b"").decode("latin-1"))
    await _token_sign_in(request, send, config, (query.get("token") or [""])[0].strip())


async def _post_token(request: _Request, receive: Receive, send: Send, config: GateConfig) -> None:
    """``POST /chat/token`` (the sign-in form's ``token`` field): as :func:`_exchange_token`."""
    form = await _sign_in_form(request, receive, send, config)
    if form is None:
        return
    await _token_sign_in(request, send, config, (form.get("token") or [""])[0].strip())


async def _sign_in_form(
    request: _Request, receive: Receive, send: Send, config: GateConfig
) -> dict[str, list[str]] | None:
    """A sign-in form's fields; ``None`` when the body is no small form (the page was sent)."""
    media = _text(request.headers, "content-type").split(";")[0].strip().lower()
    body = await _read_limited(receive, config)
    if media != _FORM or isinstance(body, tuple) or len(body) > _MAX_SIGN_IN_BYTES:
        await _sign_in_page(send, "Sign in with the form.", oidc=config.oidc)
        return None
    return parse_qs(body.decode("utf-8", "replace"))


async def _token_sign_in(request: _Request, send: Send, config: GateConfig, given: str) -> None:
    """The operator's session for the right token and a redirect to ``/chat/``, or the page."""
    if not hmac.compare_digest(given.encode(), config.token.encode()):
        logger.info("a sign-in with a wrong token was refused")
        await asyncio.sleep(1.0)  # slows down guessing
        await _sign_in_page(send, "That token is not this server's.", oidc=config.oidc)
        return
    try:
        cookie = await asyncio.to_thread(set_session_cookie, config, OPERATOR, _secure(request))
    except AccessDeniedError as denied:
        await _sign_in_page(send, str(denied), oidc=config.oidc)
        return
    logger.info("the operator signed in")
    await _signed_in(send, cookie)


async def _signed_in(send: Send, cookie: str) -> None:
    """303 to ``/chat/`` with the new session's cookie."""
    headers = [
        (b"location", b"/chat/"),
        (b"set-cookie", cookie.encode()),
        (b"referrer-policy", b"no-referrer"),
    ]
    await send_response(send, 303, b"", b"text/plain", headers)


async def _sign_in(request: _Request, receive: Receive, send: Send, config: GateConfig) -> None:
    """``POST /chat/signin`` (the sign-in form: name and password): the cookie, or the page.

    Only the server's own page posts it (a foreign Origin was refused already). A wrong name
    or password, and an attempt the throttle refuses unchecked, wait a second and get the same
    page (:data:`SIGN_IN_REFUSED`, 401); when the password checks are all busy the page says so
    at once (429).
    """
    form = await _sign_in_form(request, receive, send, config)
    if form is None:
        return
    name = (form.get("name") or [""])[0].strip().lower()
    password = (form.get("password") or [""])[0]
    try:
        account = await _checked_sign_in(request, config, name, password)
    except SignInBusyError:
        await _sign_in_busy(send, config)
        return
    if account is None:
        await asyncio.sleep(1.0)
        await _sign_in_page(send, SIGN_IN_REFUSED, oidc=config.oidc)
        return
    logger.info("%s signed in", account.name)
    try:
        cookie = await asyncio.to_thread(set_session_cookie, config, account.name, _secure(request))
    except AccessDeniedError as denied:
        await _sign_in_page(send, str(denied), oidc=config.oidc)
        return
    await _signed_in(send, cookie)


SIGN_IN_REFUSED = "That name and password do not match an account."
"""The one answer to a wrong password, an unknown name and an attempt refused unchecked."""


async def _checked_sign_in(
    request: _Request, config: GateConfig, name: str, password: str
) -> Account | None:
    """The account ``name`` if ``password`` is its own, else ``None``.

    The attempt is counted (:meth:`SignInThrottle.reserve`) before the password is checked,
    and checked only if it does not come too soon after failed ones; a password over
    :data:`MAX_PASSWORD_CHARS` is not hashed at all.

    Raises:
        SignInBusyError: The password checks are all busy (the attempt counts no more).
    """
    if config.accounts is None or len(password) > MAX_PASSWORD_CHARS:
        logger.info("a sign-in as %r was refused unchecked", name[:60])
        return None
    client = request.scope.get("client") or ("", 0)
    attempt = await asyncio.to_thread(config.throttle.reserve, name, str(client[0]))
    if not attempt.allowed:
        logger.info(
            "a sign-in as %r was refused unchecked, %.1f s too soon after failed ones",
            name[:60],
            attempt.wait,
        )
        return None
    try:
        account = await config.password_checks.run(config.accounts.check_password, name, password)
    except SignInBusyError:
        await asyncio.to_thread(config.throttle.release, attempt)
        logger.warning("a sign-in as %r was turned away: too many sign-ins at once", name[:60])
        raise
    if account is None:
        logger.info("a sign-in as %r failed", name[:60])
        return None
    await asyncio.to_thread(config.throttle.succeeded, attempt)
    return account


async def _sign_in_busy(send: Send, config: GateConfig) -> None:
    """The sign-in page saying that too many sign-ins are being checked (429, at once)."""
    extra = [(name.encode(), value.encode()) for name, value in SIGN_IN_HEADERS.items()]
    page = sign_in_html(BUSY, oidc=config.oidc)
    extra.append((b"retry-after", b"1"))
    await send_response(send, 429, page, b"text/html; charset=utf-8", extra)


SIGN_IN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>crag: sign in</title><link rel="icon" href="data:,">
<link rel="stylesheet" href="/chat/assets/app.css"></head>
<body><main id="main" class="sign-in">
<h1>crag</h1>
<p>This server answers only the people it knows. Sign in with the account the operator made
for you (<code>crag users add</code>), or, as the operator, open the address that
<code>make serve</code> printed or paste its token (<code>crag server-token</code>).</p>
<p role="alert">{reason}</p>
{oidc}
<form method="post" action="/chat/signin">
<label for="name">Name</label>
<input id="name" name="name" autocomplete="username" required>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>
<form method="post" action="/chat/token">
<label for="token">Server token (the operator)</label>
<input id="token" name="token" type="password" autocomplete="off" required>
<button type="submit">Sign in with the token</button>
</form></main></body></html>
"""
"""The page shown to a browser that has not signed in (no script: both forms post, so the
token never lands in an address, a history or a proxy's access log)."""

_PAGE_POLICY = (
    b"default-src 'none'; style-src 'self'; img-src data:; form-action 'self'; "
    b"frame-ancestors 'none'; base-uri 'none'"
)


SIGN_IN_HEADERS: dict[str, str] = {
    "content-security-policy": _PAGE_POLICY.decode(),
    # same-origin, not no-referrer: under no-referrer a browser posts the form with
    # ``Origin: null``, which the gate refuses.
    "referrer-policy": "same-origin",
}
"""Headers of the sign-in page, besides those of every answer of the gate (:func:`_respond`:
``no-store``, ``nosniff``)."""
_OIDC_LINK = (
    '<p><a href="/chat/oidc/login">Sign in with your organisation</a> (the team\'s sign-in '
    "provider)</p>"
)


def sign_in_html(reason: str, *, oidc: bool = False) -> bytes:
    """The sign-in page saying ``reason``; with the provider's link when ``oidc``."""
    return SIGN_IN_PAGE.format(reason=html.escape(reason), oidc=_OIDC_LINK if oidc else "").encode()


async def _sign_in_page(send: Send, reason: str, *, oidc: bool = False) -> None:
    extra = [(name.encode(), value.encode()) for name, value in SIGN_IN_HEADERS.items()]
    await send_response(
        send, 401, sign_in_html(reason, oidc=oidc), b"text/html; charset=utf-8", extra
    )
