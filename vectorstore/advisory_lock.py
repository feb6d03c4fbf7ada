"""A lock that holds across processes and machines: a PostgreSQL session-level advisory lock.

Each lock is named by a string (``crag.thread-run:<thread id>``, ``crag.store-write:<store>``),
hashed to PostgreSQL's 64-bit advisory lock key. The holder keeps a connection of its own open
for as long as it holds the lock: when the holder ends, or its process is killed (its
connection closes), PostgreSQL frees the lock and the next waiter goes on. A waiter logs one
line, then waits as long as the holder holds it.

The connection is made for the lock alone (not lent from a pool: a waiter may wait minutes), in
autocommit mode, with the session's timeouts that would end a long wait or an idle holder
switched off and TCP keepalives on, so that a holder on a machine that vanished without
closing its connection loses the lock within about a minute rather than hours. It must reach
PostgreSQL directly or through a pooler in session mode: a pooler in transaction mode hands
the session to others and the lock means nothing.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from crag.vectorstore.shared_database import describe_database

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10
"""How long making the lock's connection may take (unless the URL sets ``connect_timeout``)."""

_SESSION = """SELECT set_config(s.name, v.value, false)
FROM (VALUES ('statement_timeout', '0'), ('lock_timeout', '0'), ('idle_session_timeout', '0'),
             ('idle_in_transaction_session_timeout', '0'), ('tcp_keepalives_idle', '30'),
             ('tcp_keepalives_interval', '10'), ('tcp_keepalives_count', '3'))
     AS v(name, value)
JOIN pg_settings AS s ON s.name = v.name"""
"""The session's settings, those this server knows (``idle_session_timeout``: PostgreSQL 14+)."""


class SharedLockError(RuntimeError):
    """The shared database cannot be used for a lock: one line, no password."""


def lock_key(name: str) -> int:
    """The signed 64-bit advisory lock key of ``name`` (the first 8 bytes of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big", signed=True)


def _failure(url: str, exc: BaseException) -> SharedLockError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return SharedLockError(
        f"the shared database ({describe_database(url)}) cannot hold crag's lock: {reason}"
    )


def _connect_options(url: str) -> dict[str, Any]:
    from psycopg.conninfo import conninfo_to_dict

    options: dict[str, Any] = {"autocommit": True, "application_name": "crag-lock"}
    try:
        if not conninfo_to_dict(url).get("connect_timeout"):
            options["connect_timeout"] = CONNECT_TIMEOUT_S
    except Exception:  # noqa: BLE001 - a malformed URL fails in connect, reported there
        options["connect_timeout"] = CONNECT_TIMEOUT_S
    return options


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise SharedLockError(
            "locks in a shared PostgreSQL need the postgres extra: pip install 'crag[postgres]'"
        ) from exc
    return psycopg


@contextmanager
def advisory_lock(url: str, name: str, waiting: str) -> Iterator[None]:
    """Hold the advisory lock ``name`` in the database at ``url``, waiting for its holder.

    ``waiting`` is logged (once) when another session holds it.

    Raises:
        SharedLockError: The database cannot be reached or used.
    """
    psycopg = _psycopg()
    key = lock_key(name)
    try:
        connection = psycopg.connect(url, **_connect_options(url))
    except psycopg.Error as exc:
        raise _failure(url, exc) from None
    try:
        try:
            connection.execute(_SESSION)
            taken = connection.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            if not taken[0]:
                logger.info("%s", waiting)
                connection.execute("SELECT pg_advisory_lock(%s)", (key,))
        except psycopg.Error as exc:
            raise _failure(url, exc) from None
        try:
            yield
        finally:
            try:
                connection.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error:
                logger.debug("the lock's connection was lost: PostgreSQL freed the lock")
    finally:
        connection.close()


@asynccontextmanager
async def async_advisory_lock(url: str, name: str, waiting: str) -> AsyncIterator[None]:
    """:func:`advisory_lock` for a coroutine: the wait leaves the event loop free.

    A task cancelled while waiting closes the connection, which withdraws its request.
    """
    psycopg = _psycopg()
    key = lock_key(name)
    try:
        connection = await psycopg.AsyncConnection.connect(url, **_connect_options(url))
    except psycopg.Error as exc:
        raise _failure(url, exc) from None
    try:
        try:
            await connection.execute(_SESSION)
            cursor = await connection.execute("SELECT pg_try_advisory_lock(%s)", (key,))
            taken = await cursor.fetchone()
            if not taken[0]:
                logger.info("%s", waiting)
                await connection.execute("SELECT pg_advisory_lock(%s)", (key,))
        except psycopg.Error as exc:
            raise _failure(url, exc) from None
        try:
            yield
        finally:
            try:
                await connection.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except psycopg.Error:
                logger.debug("the lock's connection was lost: PostgreSQL freed the lock")
    finally:
        await connection.close()
