"""LangGraph's own authentication for the served API: who the caller is, and what is theirs.

``langgraph.json`` names :data:`auth` (``"auth": {"path": "crag.app.web.server_auth:auth",
"disable_studio_auth": true}``: a request saying ``x-auth-scheme: langsmith`` is not let in as
the Studio user). langgraph-api runs :func:`authenticate` on every request to its API (threads,
runs, crons, assistants, the store, MCP, A2A, event streams, WebSockets included), after the
outermost :class:`crag.app.web.gate.Gate` has already refused strangers and identified the caller:
the identity the gate left in the request's scope is taken as it is (no second look-up); a
request that reached the API some other way is identified from the same credential
(:func:`crag.app.web.credentials.identify`).

Ownership is deny by default: every handler below answers, none is missing, so no request goes
unfiltered. What a caller creates (a thread, a run, a cron, an assistant) is stamped
``metadata.owner`` with their identity, and every read, search, update and delete of threads,
runs and crons is filtered to ``{"owner": identity}``: a caller sees and changes only their
own, and another's thread is a 404. The operator (the ``admin`` permission: whoever holds the
server's token) sees and changes everything. The served graphs' assistants are everyone's to
read; only the operator creates, changes or deletes assistants. Store items live under a
namespace whose first part is the caller's identity.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from langgraph_sdk import Auth

from crag.app.web.credentials import AccessDeniedError, Identity, identify
from crag.app.web.gate import IDENTITY_KEY, gate_config
from crag.nodes.caller import ADMIN_PERMISSION

__all__ = ["ADMIN_PERMISSION", "auth"]

auth = Auth()
"""What ``langgraph.json``'s ``auth.path`` names."""


_NO_SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "client": None}
"""The request a server that gives no scope stands for: one that may change things, so that a
session still needs its CSRF token, from no address a trusted proxy could have."""


def _as_bytes(text: bytes | str) -> bytes:
    return text if isinstance(text, bytes) else text.encode("latin-1", "replace")


@auth.authenticate
async def authenticate(
    headers: Mapping[bytes, bytes] | Mapping[str, str], scope: dict[str, Any] | None = None
) -> Auth.types.MinimalUserDict:
    """The caller's identity: the server's token, an account's API key, or a session.

    langgraph-api gives the headers as bytes and the request's scope; another server of the
    same API (Aegra) gives only the headers, as text: that request is identified the same way,
    as one that may change things (:data:`_NO_SCOPE`).
    """
    scope = scope if scope is not None else _NO_SCOPE
    known = scope.get(IDENTITY_KEY)
    if isinstance(known, Identity):  # the gate, in front, identified the caller already
        return _user(known)
    config = gate_config()
    method = str(scope.get("method", "GET")) if scope.get("type") == "http" else "WEBSOCKET"
    lower = {_as_bytes(name).lower(): _as_bytes(value) for name, value in headers.items()}
    try:
        identity = await asyncio.to_thread(
            identify,
            lower,
            method,
            config.token,
            session_seconds=config.session_seconds,
            accounts=config.accounts,
            proxied=config.proxied(lower, scope),
        )
    except AccessDeniedError as denied:
        raise Auth.exceptions.HTTPException(status_code=denied.status, detail=str(denied)) from None
    return _user(identity)


def _user(identity: Identity) -> Auth.types.MinimalUserDict:
    """The user LangGraph records for ``identity``: the admin permission for admins."""
    return {
        "identity": identity.user,
        "display_name": identity.user,
        "is_authenticated": True,
        "permissions": [ADMIN_PERMISSION] if identity.is_admin else [],
    }


def _is_admin(ctx: Auth.types.AuthContext) -> bool:
    return ADMIN_PERMISSION in ctx.permissions


def _stamp_owner(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Record the caller as the owner of what ``value`` creates."""
    if not isinstance(value, dict):
        return
    metadata = value.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
        value["metadata"] = metadata
    metadata["owner"] = ctx.user.identity


@auth.on
async def owned(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType | None:
    """Threads, runs and crons: stamped with their owner; only the owner's are seen."""
    if ctx.action in {"create", "create_run"}:
        _stamp_owner(ctx, value)
    elif ctx.action == "update":
        _keep_owner(ctx, value)
    if _is_admin(ctx):
        return None
    return {"owner": ctx.user.identity}


def _keep_owner(ctx: Auth.types.AuthContext, value: Any) -> None:
    """An update never moves a thread to another owner.

    A member's update names themselves; an admin's ``owner`` is dropped (the thread keeps the
    one it has).
    """
    metadata = value.get("metadata") if isinstance(value, dict) else None
    if not isinstance(metadata, dict) or "owner" not in metadata:
        return
    if _is_admin(ctx):
        del metadata["owner"]
    else:
        metadata["owner"] = ctx.user.identity


@auth.on.assistants
async def assistants(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType | None:
    """The served graphs' assistants: everyone reads them, only the operator changes them."""
    if ctx.action in {"read", "search"}:
        return None
    if not _is_admin(ctx):
        raise Auth.exceptions.HTTPException(
            status_code=403, detail="only the server's operator may change its assistants"
        )
    if ctx.action == "create":
        _stamp_owner(ctx, value)
    return None


@auth.on.store
async def store(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType | None:
    """Store items: a caller's namespace starts with their identity; the operator's: any."""
    if _is_admin(ctx):
        return None
    namespace = tuple(value.get("namespace") or ()) if isinstance(value, dict) else ()
    if not namespace or namespace[0] != ctx.user.identity:
        raise Auth.exceptions.HTTPException(
            status_code=403,
            detail=f"this caller's store items live under the namespace "
            f"({ctx.user.identity!r}, ...)",
        )
    return None
