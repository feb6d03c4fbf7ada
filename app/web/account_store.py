"""Where a team's accounts are kept: the threads database, a SQLite file or PostgreSQL.

The accounts (:mod:`crag.app.web.accounts`) write plain SQL with ``?`` placeholders;
:class:`AccountDatabase` runs it on the database ``CRAG_THREADS_DB`` names, the same one the
threads are kept in (:mod:`crag.app.threads`): a SQLite file (``.crag/threads.sqlite`` by
default), or a ``postgresql://`` connection string, where several servers share one set of
accounts. PostgreSQL connections come from a small pool opened on first use (``psycopg_pool``,
the ``postgres`` extra), since the server looks an API key up on every request.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from crag.app.threads import describe_threads_db, is_postgres, private_sqlite_file

__all__ = ["AccountDatabase", "AccountStoreError", "Cursor"]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS crag_accounts (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL CHECK (role IN ('admin', 'member')),
    password_hash TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS crag_api_keys (
    key_hash TEXT PRIMARY KEY,
    name TEXT NOT NULL REFERENCES crag_accounts(name) ON DELETE CASCADE,
    created DOUBLE PRECISION NOT NULL
)""",
    # Sessions (crag.app.web.sessions): an account's end with it (ON DELETE CASCADE); the
    # operator's and a proxy's have no account.
    """CREATE TABLE IF NOT EXISTS crag_sessions (
    id_hash TEXT PRIMARY KEY,
    server TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('operator', 'account', 'proxy')),
    account TEXT REFERENCES crag_accounts(name) ON DELETE CASCADE,
    created DOUBLE PRECISION NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS crag_sign_in_failures (
    name TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS crag_retired_names (
    name TEXT PRIMARY KEY,
    retired DOUBLE PRECISION NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS crag_provider_identities (
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    name TEXT NOT NULL,
    account_created DOUBLE PRECISION NOT NULL,
    linked DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (issuer, subject)
)""",
)
"""The tables, in SQL both databases read: accounts, their keys, recent failed sign-ins (every
server sharing the database counts the same failures), the identity provider's people bound to
accounts (:mod:`crag.app.web.provider_identities`)."""

_SCHEMA_LOCK = 0x63726167
"""PostgreSQL advisory lock held while the tables are made: two servers starting at once."""

_POOL_SIZE = 4
_TIMEOUT_S = 10.0


class AccountStoreError(RuntimeError):
    """The accounts' database cannot be used: one sentence, no password."""


class Cursor:
    """One transaction's statements, with ``?`` placeholders whatever the database."""

    def __init__(self, connection: Any, postgres: bool) -> None:
        self._connection = connection
        self._postgres = postgres

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> Any:
        """Run ``sql``; the database's cursor (``fetchone``, ``fetchall``, ``rowcount``)."""
        if self._postgres:
            sql = sql.replace("?", "%s")
        return self._connection.execute(sql, tuple(parameters))


class AccountDatabase:
    """The threads database, as the accounts use it (see the module)."""

    def __init__(self, target: str | Path) -> None:
        self.target = str(target)
        self.postgres = is_postgres(self.target)
        self._ready = False
        self._pool: Any = None
        self._pool_lock = threading.Lock()

    def describe(self) -> str:
        """The database for messages: a path, or a PostgreSQL address without its password."""
        return describe_threads_db(self.target)

    def exists(self) -> bool:
        """Whether there may be accounts: the SQLite file exists; PostgreSQL always may."""
        return self.postgres or Path(self.target).expanduser().is_file()

    def integrity_errors(self) -> tuple[type[BaseException], ...]:
        """What a taken name raises, in either database."""
        if not self.postgres:
            return (sqlite3.IntegrityError,)
        import psycopg

        return (sqlite3.IntegrityError, psycopg.IntegrityError)

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One transaction, committed when the block ends, rolled back if it raises."""
        if self.postgres:
            with self._postgres_transaction() as cursor:
                yield cursor
            return
        path = private_sqlite_file(self.target)
        with closing(sqlite3.connect(path, timeout=_TIMEOUT_S)) as connection:
            connection.execute("PRAGMA foreign_keys = ON")
            with connection:
                cursor = Cursor(connection, postgres=False)
                self._make_tables(cursor)
                yield cursor

    def _make_tables(self, cursor: Cursor) -> None:
        if self._ready:
            return
        if self.postgres:
            cursor.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
        for statement in SCHEMA:
            cursor.execute(statement)
        self._ready = True

    def _opened_pool(self) -> Any:
        with self._pool_lock:
            if self._pool is None:
                try:
                    from psycopg_pool import ConnectionPool
                except ImportError as exc:
                    raise AccountStoreError(
                        "accounts in PostgreSQL need the postgres extra: "
                        "pip install 'crag[postgres]'"
                    ) from exc
                self._pool = ConnectionPool(
                    self.target,
                    min_size=1,
                    max_size=_POOL_SIZE,
                    kwargs={"connect_timeout": int(_TIMEOUT_S)},
                    timeout=_TIMEOUT_S,
                    open=True,
                )
            return self._pool

    @contextmanager
    def _postgres_transaction(self) -> Iterator[Cursor]:
        import psycopg
        import psycopg_pool

        try:
            with self._opened_pool().connection() as connection:
                cursor = Cursor(connection, postgres=True)
                self._make_tables(cursor)
                yield cursor
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AccountStoreError(
                f"the accounts' database ({self.describe()}) cannot be used: {reason}"
            ) from None

    def close(self) -> None:
        """Close the PostgreSQL connections, if any were opened."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
