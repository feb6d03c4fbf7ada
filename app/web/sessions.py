"""The chat page's sessions: kept in the threads database, so that they can end.

A session is a random id (32 bytes, URL-safe) that the browser keeps in the session cookie
(:func:`cookie_name`); the database keeps only its SHA-256 (table ``crag_sessions`` of
:mod:`crag.app.web.account_store`), with whom it signs in and when it began. A session ends

* at sign-out (``DELETE /chat/api/session``: :meth:`Sessions.end`);
* when its account is removed (``ON DELETE CASCADE``), its keys are revoked or its password
  changes (:func:`end_account_sessions`): an account made again under the same name starts
  with none;
* ``server_session_hours`` after it began;
* when the server's token changes (each row names the server it was made by, a tag derived
  from the token: :meth:`Sessions.find` looks up its own server's only).

Three kinds: the operator's (signed in with the token; no account), an account's (a password
or the team's provider), and a proxy's (a person the trusted reverse proxy names: the session
only gives their browser a CSRF token of its own; the proxy's header still signs them in).

Every call here is blocking database I/O: the gate calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from crag.app.web.account_store import AccountDatabase, Cursor

__all__ = [
    "COOKIE_PREFIX",
    "Kind",
    "Session",
    "Sessions",
    "cookie_name",
    "end_account_sessions",
    "server_tag",
]

COOKIE_PREFIX = "crag_session"
"""The start of the session cookie's name; the rest is the server's own (:func:`cookie_name`)."""
SECURE_PREFIX = "__Host-"
"""Under HTTPS: a cookie only this host set, over HTTPS, for every path (no ``Domain``)."""
Kind = Literal["operator", "account", "proxy"]


def _derived(token: str, purpose: str) -> str:
    """A value for ``purpose`` derived from the server's token (never the token itself)."""
    return hmac.new(token.encode(), f"crag {purpose}".encode(), hashlib.sha256).hexdigest()


def server_tag(token: str) -> str:
    """What names this server's sessions in the table: a new token ends every session."""
    return _derived(token, "sessions")[:32]


def cookie_name(token: str, database: str, secure: bool) -> str:
    """The session cookie's name on the server with ``token`` and threads ``database``.

    Browsers send a cookie of 127.0.0.1 to every port of it: a name of its own keeps two crag
    servers on one host from overwriting each other's cookie (replicas sharing a token and a
    database share it, as they share the sessions). ``__Host-`` under HTTPS.
    """
    suffix = _derived(token, f"cookie name {database}")[:12]
    return f"{SECURE_PREFIX if secure else ''}{COOKIE_PREFIX}_{suffix}"


def _id_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    """Whom a live session signs in."""

    name: str
    kind: Kind


def end_account_sessions(db: Cursor, name: str) -> int:
    """End every session of the account ``name`` within the transaction ``db``; how many."""
    ended: int = db.execute(
        "DELETE FROM crag_sessions WHERE account = ? AND kind = 'account'", (name,)
    ).rowcount
    return ended


class Sessions:
    """The sessions of one server (its token) in one threads database."""

    def __init__(self, database: AccountDatabase, token: str, seconds: float) -> None:
        self.database = database
        self.server = server_tag(token)
        self.seconds = seconds

    def start(self, name: str, kind: Kind) -> str:
        """A new session for ``name``: its id, for the cookie (the table keeps its hash).

        Sessions over their time, anyone's, are forgotten on the way.

        Raises:
            AccountStoreError: The database cannot be used.
            sqlite3.IntegrityError, psycopg.IntegrityError: ``kind`` is ``account`` and
                there is no account ``name`` (it was just removed).
        """
        session_id = secrets.token_urlsafe(32)
        now = time.time()
        with self.database.transaction() as db:
            db.execute("DELETE FROM crag_sessions WHERE created <= ?", (now - self.seconds,))
            db.execute(
                "INSERT INTO crag_sessions VALUES (?, ?, ?, ?, ?, ?)",
                (
                    _id_hash(session_id),
                    self.server,
                    name,
                    kind,
                    name if kind == "account" else None,
                    now,
                ),
            )
        return session_id

    def find(self, session_id: str) -> Session | None:
        """The live session ``session_id`` names, or ``None`` (ended, expired, another's)."""
        if not session_id or not self.database.exists():
            return None
        with self.database.transaction() as db:
            row = db.execute(
                "SELECT name, kind FROM crag_sessions "
                "WHERE id_hash = ? AND server = ? AND created > ?",
                (_id_hash(session_id), self.server, time.time() - self.seconds),
            ).fetchone()
        return Session(row[0], row[1]) if row else None

    def end(self, session_id: str) -> bool:
        """End the session ``session_id``; whether there was one."""
        if not session_id or not self.database.exists():
            return False
        with self.database.transaction() as db:
            ended = db.execute(
                "DELETE FROM crag_sessions WHERE id_hash = ? AND server = ?",
                (_id_hash(session_id), self.server),
            ).rowcount
        return bool(ended)
