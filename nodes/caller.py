"""Who started a served run: the identity LangGraph's authentication gave the request.

The LangGraph server puts the caller of a run in its config (``langgraph_auth_user_id`` and
``langgraph_auth_permissions``: :mod:`crag.app.web.server_auth` sets them, after the same values
sent by the caller are overwritten, and the server's middleware refuses a run that names
them). :func:`run_caller` reads them inside a node.

Fail closed: a run of a *served* graph (:mod:`crag.app.served_graphs`, what ``langgraph.json``
names: its config carries :data:`SERVED_KEY`, which the served graph sets itself on every run)
that carries no caller is refused (:class:`NoCallerError`): no path through a server acts as
the operator for want of an identity. Only the operator's own entry points, the CLI and plain
Python (the graphs of :mod:`crag.app.graphs`), run without a caller, and see and write the
shared store as the operator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ADMIN_PERMISSION", "AUTH_KEYS", "SERVED_KEY", "Caller", "NoCallerError", "run_caller"]

ADMIN_PERMISSION = "admin"
"""The permission of the operator and the team's admins: they see and manage everything."""
AUTH_KEYS = ("langgraph_auth_user", "langgraph_auth_user_id", "langgraph_auth_permissions")
"""The config keys the server fills with the caller; no caller may send them."""
SERVED_KEY = "crag_served_run"
"""The config key that marks a run of a served graph: set by the graph itself, never trusted
absent (a caller who sends it false is overridden)."""


class NoCallerError(PermissionError):
    """A served run that carries no caller identity: it gets nothing."""

    def __init__(self) -> None:
        super().__init__(
            "this served run carries no caller identity, so it may read and write nothing: a "
            "server's runs act for the person who started them (only the CLI and Python act "
            "as the operator)"
        )


@dataclass(frozen=True)
class Caller:
    """The person a served run answers to."""

    user: str
    admin: bool

    @property
    def member(self) -> str | None:
        """The member's name, whose own documents are private to them; ``None`` for an admin."""
        return None if self.admin else self.user


def run_caller() -> Caller | None:
    """The caller of the run being executed; ``None`` for the operator's own (CLI, Python) runs.

    langgraph-api gives the caller's identity and permissions under their own keys; other
    servers of the same API (Aegra) give only the user object, ``langgraph_auth_user``, which
    langgraph-api sets too: it is read when the two keys are absent, so that a served run
    never counts as the operator's for want of them.

    Raises:
        NoCallerError: A served graph's run that carries no caller (see the module).
    """
    from langgraph.config import get_config

    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # not inside a run
        return None
    user = configurable.get("langgraph_auth_user_id")
    permissions = configurable.get("langgraph_auth_permissions") or ()
    if not isinstance(user, str) or not user:
        user, permissions = _user_object(configurable.get("langgraph_auth_user"))
    if not user:
        if configurable.get(SERVED_KEY) is not None:
            raise NoCallerError
        return None
    return Caller(user, ADMIN_PERMISSION in permissions)


def _user_object(user: object) -> tuple[str, Sequence[str]]:
    """The identity and permissions of a server's user object (or its dict); empty if none."""
    if isinstance(user, Mapping):
        identity, permissions = user.get("identity"), user.get("permissions")
    else:
        identity, permissions = getattr(user, "identity", None), getattr(user, "permissions", None)
    if not isinstance(identity, str) or not identity:
        return "", ()
    return identity, [str(p) for p in permissions or ()]
