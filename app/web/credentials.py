"""Who calls the LangGraph server: its token, the chat page's session cookie and CSRF token.

The server answers only callers that prove they hold its **token**, a random secret made once
per store (:func:`server_token`): ``CRAG_SERVER_TOKEN`` when the operator sets it, else the
file ``server-token`` beside the store (``.crag/server-token`` by default, mode 0600), written
on first use. ``make serve`` prints the chat page's address with the token in it, the way
Jupyter does.

* A program sends it as a header: ``X-Api-Key: TOKEN`` (what ``langgraph-sdk`` sends for its
  ``api_key``) or ``Authorization: Bearer TOKEN``.
* The chat page trades it once (``POST /chat/token``, or the address ``make serve`` prints) for
  a **session cookie** (:func:`crag.app.web.sessions.cookie_name`: HttpOnly, SameSite=Strict):
  an opaque random id of a session kept in the threads database (:mod:`crag.app.web.sessions`),
  which sign-out, the account's removal, its keys' revocation and ``server_session_hours`` end.
  A request carried by the cookie alone must also send the session's **CSRF token**
  (:func:`csrf_token`, header :data:`CSRF_HEADER`) when it changes anything, which a page of
  another origin cannot read or send.

:func:`identify` turns a request's headers into an :class:`Identity`, or says in one sentence
why not (:class:`AccessDeniedError`). Sessions are kept per token, so a new token signs
everyone out. Nothing here logs a secret, and no error repeats one.

Pure logic: no Starlette here.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Literal

from crag.app.web.accounts import AccountError, Accounts, Role, check_name
from crag.app.web.sessions import COOKIE_PREFIX, Session, Sessions, cookie_name
from crag.settings.deployment import DeploymentSettings
from crag.settings.setting_checks import env_name

__all__ = [
    "CSRF_HEADER",
    "OPERATOR",
    "PROXY_SECRET_HEADER",
    "SESSION_COOKIE",
    "TOKEN_ENV",
    "AccessDeniedError",
    "Identity",
    "cookie_names",
    "csrf_token",
    "identify",
    "proxy_identity",
    "server_token",
    "session_cookie",
    "token_path",
]

logger = logging.getLogger(__name__)

TOKEN_ENV = env_name("server_token")
"""The operator's token's variable, when they set one (at least :data:`MIN_TOKEN_CHARS`
characters)."""
TOKEN_FILE = "server-token"
"""The token's file, beside the store."""
MIN_TOKEN_CHARS = 24
SESSION_COOKIE = COOKIE_PREFIX
"""The start of the session cookie's name (each server's own: :func:`cookie_name`)."""
CSRF_HEADER = "x-crag-csrf"
PROXY_SECRET_HEADER = "x-crag-proxy-secret"
"""The header in which the trusted reverse proxy sends ``proxy_secret`` with each request."""
OPERATOR = "operator"
"""The one user of a server signed into with its token: the operator, who may do everything.

A user's name (the operator's identity, as a thread's or record's owner), not a role: the
operator's role is ``"admin"``, which team accounts may have too."""

_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_\-.~+/=]+")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class AccessDeniedError(Exception):
    """A request the server does not answer: one sentence, and the HTTP status (401 or 403)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Identity:
    """Who a request comes from, and how it proved it."""

    user: str
    role: Role
    via: Literal["key", "session", "proxy"]
    csrf: str = field(default="", repr=False, compare=False)
    """The CSRF token of the browser's session (empty: no session, e.g. a program's key)."""
    session: str = field(default="", repr=False, compare=False)
    """The session's id, which sign-out ends (a secret: never logged)."""

    @property
    def is_admin(self) -> bool:
        """Whether the caller may see and change everything (the operator)."""
        return self.role == "admin"


def token_path(settings: DeploymentSettings) -> Path:
    """Where the token is kept: ``server-token`` beside the store (``.crag/`` by default)."""
    return Path(settings.store_path).expanduser().absolute().parent / TOKEN_FILE


def _checked(token: str, where: str) -> str:
    token = token.strip()
    if len(token) < MIN_TOKEN_CHARS or not _TOKEN_CHARS.fullmatch(token):
        raise ValueError(
            f"the server token in {where} must be at least {MIN_TOKEN_CHARS} characters of "
            "letters, digits and -_.~+/="
        )
    return token


def server_token(settings: DeploymentSettings, *, renew: bool = False) -> str:
    """The server's token: setting ``server_token``, else the token file, made on first use.

    ``renew`` replaces the file's token with a new one: every session and link made with the
    old one stops working once the server is restarted.

    Raises:
        ValueError: The variable or the file holds something too short to be a secret, or a
            token set by ``CRAG_SERVER_TOKEN`` was to be renewed.
        OSError: The file cannot be read or written.
    """
    given = settings.server_token.get_secret_value()
    if given.strip():
        if renew:
            raise ValueError(f"the server token is set by {TOKEN_ENV}: change it there")
        return _checked(given, TOKEN_ENV)
    path = token_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    if renew:
        path.unlink(missing_ok=True)
    with contextlib.suppress(FileExistsError):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="ascii") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        logger.info("made the server token %s", path)
    return _checked(path.read_text(encoding="ascii"), str(path))


def _key(token: str, purpose: str) -> bytes:
    """A key for ``purpose`` derived from the token (never the token itself)."""
    return hmac.new(token.encode(), f"crag {purpose}".encode(), hashlib.sha256).digest()


def csrf_token(token: str, session: str) -> str:
    """The CSRF token of a session: what the page sends with each change (:data:`CSRF_HEADER`)."""
    return hmac.new(_key(token, "csrf"), session.encode(), hashlib.sha256).hexdigest()


def _header(headers: Mapping[bytes, bytes], name: str) -> str:
    return headers.get(name.encode(), b"").decode("latin-1").strip()


def _presented_key(headers: Mapping[bytes, bytes]) -> str | None:
    """The token a program sent: ``X-Api-Key``, or ``Authorization: Bearer``."""
    key = _header(headers, "x-api-key")
    if key:
        return key
    scheme, _, value = _header(headers, "authorization").partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def session_cookie(headers: Mapping[bytes, bytes], names: tuple[str, ...]) -> str | None:
    """The value of the first of the cookies ``names`` the request carries, if any."""
    raw = _header(headers, "cookie")
    if not raw:
        return None
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(raw)
    except CookieError:
        return None
    for name in names:
        morsel = cookies.get(name)
        if morsel is not None and morsel.value:
            return morsel.value
    return None


def _same_origin_browser(headers: Mapping[bytes, bytes], method: str) -> bool:
    """Whether a cookie-carried request comes from the server's own pages, as the browser says.

    ``Sec-Fetch-Site`` (sent by every current browser) must be ``same-origin``, or ``none``
    for a page the person opened themselves (a GET); a program sends none.
    """
    site = _header(headers, "sec-fetch-site").lower()
    return site in {"", "same-origin"} or (site == "none" and method in {"GET", "HEAD"})


def _check_browser(headers: Mapping[bytes, bytes], method: str, csrf: str) -> None:
    """Refuse a cookie-carried request from another site, or a change without the CSRF token."""
    if not _same_origin_browser(headers, method):
        raise AccessDeniedError("a page of another site may not use this server", 403)
    if method not in _SAFE_METHODS:
        sent = _header(headers, CSRF_HEADER)
        if not sent or not csrf or not hmac.compare_digest(sent, csrf):
            raise AccessDeniedError(
                f"a change sent with the sign-in cookie must carry its {CSRF_HEADER} header "
                "(the chat page sends it)",
                403,
            )


def _from_the_proxy(
    headers: Mapping[bytes, bytes], peer: str, trusted: frozenset[str], secret: str
) -> bool:
    """Whether a request comes from the trusted proxy.

    With a ``secret``, the request must carry it (:data:`PROXY_SECRET_HEADER`), and come from
    one of the ``trusted`` addresses when there are any; without one, it must come from one of
    them. Loopback is no default: every process of the host is there.
    """
    if secret:
        sent = _header(headers, PROXY_SECRET_HEADER)
        if not hmac.compare_digest(sent.encode(), secret.encode()):
            return False
        return not trusted or peer in trusted
    return peer in trusted


def proxy_identity(
    headers: Mapping[bytes, bytes],
    peer: str,
    header: str,
    trusted: frozenset[str],
    admins: frozenset[str],
    secret: str = "",
) -> Identity | None:
    """The person a trusted reverse proxy names in ``header``, or ``None``.

    Believed only from the proxy (:func:`_from_the_proxy`: its ``secret``, its ``trusted``
    peer addresses); the name must be an account's name (2-40 of ``a-z0-9._-``), and is an
    admin when ``admins`` has it.

    Raises:
        AccessDeniedError: The trusted proxy names someone no account could be (403).
    """
    if not header or not _from_the_proxy(headers, peer, trusted, secret):
        return None
    named = _header(headers, header.lower()).lower()
    if not named:
        return None
    try:
        check_name(named)
    except AccountError as exc:
        raise AccessDeniedError(
            f"the proxy's {header} does not name a person: {exc}", 403
        ) from None
    return Identity(named, "admin" if named in admins else "member", "proxy")


def _by_key(presented: str, token: str, accounts: Accounts | None) -> Identity:
    """The caller a key names: the server's token, or an account's API key."""
    if hmac.compare_digest(presented.encode(), token.encode()):
        return Identity(OPERATOR, "admin", "key")
    account = accounts.by_key(presented) if accounts is not None else None
    if account is not None:
        return Identity(account.name, account.role, "key")
    raise AccessDeniedError(
        "the server token or API key sent (X-Api-Key or Authorization) is wrong"
    )


def cookie_names(token: str, accounts: Accounts | None, secure: bool | None) -> tuple[str, ...]:
    """The session cookie's name on this server: under HTTPS, plain, or either (``None``)."""
    database = accounts.database.target if accounts is not None else ""
    kinds = (True, False) if secure is None else (secure,)
    return tuple(cookie_name(token, database, kind) for kind in kinds)


def _proxied(
    headers: Mapping[bytes, bytes],
    method: str,
    token: str,
    proxied: Identity,
    session: tuple[str, Session | None],
) -> Identity:
    """The proxy's person, with the CSRF token of their browser's proxy session if it has one."""
    session_id, found = session
    own = found is not None and found.kind == "proxy" and found.name == proxied.user
    csrf = csrf_token(token, session_id) if own else ""
    _check_browser(headers, method, csrf)
    return Identity(
        proxied.user, proxied.role, "proxy", csrf=csrf, session=session_id if own else ""
    )


def _by_session(
    headers: Mapping[bytes, bytes],
    method: str,
    token: str,
    accounts: Accounts | None,
    session: tuple[str, Session | None],
) -> Identity:
    """The person a live session of the operator or of an account signs in."""
    session_id, found = session
    if found is None or found.kind == "proxy":
        raise AccessDeniedError(
            "the sign-in has ended, expired or is not this server's: sign in again (open the "
            "address `make serve` printed, or use the sign-in form)"
        )
    csrf = csrf_token(token, session_id)
    _check_browser(headers, method, csrf)
    if found.kind == "operator":
        return Identity(OPERATOR, "admin", "session", csrf=csrf, session=session_id)
    account = accounts.get(found.name) if accounts is not None else None
    if account is None:
        raise AccessDeniedError("that sign-in's account no longer exists: sign in again")
    return Identity(account.name, account.role, "session", csrf=csrf, session=session_id)


def identify(
    headers: Mapping[bytes, bytes],
    method: str,
    token: str,
    *,
    session_seconds: float,
    accounts: Accounts | None = None,
    proxied: Identity | None = None,
    secure: bool | None = None,
) -> Identity:
    """Who sent a request with ``headers`` (lower-case names), or why it is refused.

    Blocking: a session or an API key is looked up in the threads database.

    Args:
        headers: The request's headers.
        method: Its HTTP method; ``WEBSOCKET`` for a WebSocket's opening.
        token: The server's token.
        session_seconds: How long a session lasts.
        accounts: The team's accounts, whose API keys are let in too (a removed account's are
            not); their database keeps the sessions (none without it).
        proxied: The person a trusted reverse proxy signed in (:func:`proxy_identity`): let
            in as a session is, a browser's changes carrying its proxy session's CSRF token;
            refused (403) when the operator removed the account of that name.
        secure: Whether the request came over HTTPS (the cookie's name then starts with
            ``__Host-``); ``None``: not known, either name is read.

    Raises:
        AccessDeniedError: No credential (401), a wrong one (401), or a cookie sent from
            another site or without the CSRF token where one is needed (403).
    """
    presented = _presented_key(headers)
    if presented is not None:
        return _by_key(presented, token, accounts)
    session_id = session_cookie(headers, cookie_names(token, accounts, secure)) or ""
    sessions = Sessions(accounts.database, token, session_seconds) if accounts is not None else None
    found = sessions.find(session_id) if sessions is not None and session_id else None
    if proxied is not None:
        if accounts is not None and accounts.standing(proxied.user) == "removed":
            # the operator removed the account of this name: the proxy vouches for the
            # person, the operator decides who may use crag
            raise AccessDeniedError(f"the account {proxied.user} was removed", 403)
        return _proxied(headers, method, token, proxied, (session_id, found))
    if not session_id:
        raise AccessDeniedError(
            "sign in first: open the address `make serve` printed (it holds the server's "
            "token), or send the token as X-Api-Key (crag server-token prints it)"
        )
    return _by_session(headers, method, token, accounts, (session_id, found))
