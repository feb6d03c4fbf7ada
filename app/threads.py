"""Where conversation threads are checkpointed: a SQLite file, or a PostgreSQL database.

SQLite is the zero-setup default (``.crag/threads.sqlite``). A team that serves several users,
or restarts crag, points the deployment setting ``CRAG_THREADS_DB`` (or ``--threads-db``) at
PostgreSQL instead, the database LangGraph's own server keeps threads in: any value that starts
with ``postgresql://`` or ``postgres://`` is a connection string, anything else a SQLite path.
The PostgreSQL savers need the ``postgres`` extra (``langgraph-checkpoint-postgres``).

PostgreSQL connections come from a pool that checks each connection before lending it, so a
database that went away and came back serves the next run without reopening the graph; while
it is away, a run fails within :data:`CONNECT_TIMEOUT_S` with :class:`ThreadsDatabaseError` (one
line, the password left out; the pool's own warnings per reconnection attempt are dropped) and
can be retried.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag.app.postgres_outage import Outage, fail_fast_pools, quiet_pool_warnings, writing
from crag.settings.deployment import DEFAULT_THREADS_PATH, deployment_settings
from crag.vectorstore.shared_database import POSTGRES_SCHEMES, THREADS_DB_ENV, describe_database

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = [
    "DEFAULT_THREADS_PATH",
    "THREADS_DB_ENV",
    "ThreadsDatabaseError",
    "async_checkpointer",
    "checkpointer",
    "configured_threads_db",
    "describe_threads_db",
    "is_postgres",
    "private_sqlite_file",
]

POOL_SIZE = 4
"""Most PostgreSQL connections one process holds (runs on threads of one graph share them)."""

CONNECT_TIMEOUT_S = 5
"""How long a run waits for a PostgreSQL connection (a free one from the pool, or a new one:
libpq's ``connect_timeout`` unless the URL sets its own) before it fails with a clear error."""


class ThreadsDatabaseError(RuntimeError):
    """The threads database cannot be reached or used (the message says which and why)."""


def configured_threads_db() -> str:
    """The threads database the operator names (setting ``threads_db``), or the default file.

    Raises:
        InvalidSettingError: a deployment variable holds a value of the wrong type.
    """
    named = deployment_settings().threads_db.get_secret_value().strip()
    return named or DEFAULT_THREADS_PATH


def is_postgres(target: str | Path) -> bool:
    """Whether ``target`` is a PostgreSQL connection string rather than a SQLite path."""
    return str(target).strip().lower().startswith(POSTGRES_SCHEMES)


def describe_threads_db(target: str | Path) -> str:
    """``target`` for messages: a SQLite path as given, a PostgreSQL URL without its password."""
    if not is_postgres(target):
        return str(target)
    return describe_database(str(target))


def private_sqlite_file(path: str | Path) -> Path:
    """``path``, its folder made, the file made (or kept) readable by this user alone (0600).

    It holds the accounts' password hashes. SQLite gives its ``-wal``, ``-shm`` and journal
    files the database file's mode, so they are private too.
    """
    db = Path(path).expanduser()
    db.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with contextlib.suppress(OSError):  # another user's file, or not a regular file
        if db.is_file() and db.stat().st_mode & 0o077:
            db.chmod(0o600)
    return db


def _sqlite_file(path: str | Path) -> str:
    return str(private_sqlite_file(path))


def _unreachable(target: str | Path, exc: BaseException) -> ThreadsDatabaseError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ThreadsDatabaseError(
        f"the threads database ({describe_threads_db(target)}) cannot be used: {reason}; "
        "retry when it is reachable"
    )


def _postgres_modules() -> Any:
    try:
        import psycopg_pool
        from langgraph.checkpoint.postgres import PostgresSaver  # noqa: F401
    except ImportError as exc:
        raise ThreadsDatabaseError(
            "PostgreSQL threads need the postgres extra: pip install 'crag[postgres]'"
        ) from exc
    return psycopg_pool


def _connection_kwargs() -> dict[str, Any]:
    """What LangGraph's savers need of each connection (as their ``from_conn_string`` sets)."""
    from psycopg.rows import dict_row

    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}


def _connect_timeout(url: str) -> dict[str, Any]:
    """The connection option ``connect_timeout``, unless ``url`` sets its own.

    libpq has none by default: a host that drops packets hangs a connection attempt for minutes.
    """
    from psycopg.conninfo import conninfo_to_dict

    try:
        if conninfo_to_dict(url).get("connect_timeout"):
            return {}
    except Exception:  # noqa: BLE001 - a malformed URL is reported when it is used
        return {}
    return {"connect_timeout": CONNECT_TIMEOUT_S}


def _lost_connection_errors() -> tuple[type[BaseException], ...]:
    import psycopg
    import psycopg_pool

    return (psycopg.OperationalError, psycopg_pool.PoolTimeout)


@functools.cache
def _reporting_savers() -> tuple[type[Any], type[Any]]:
    """LangGraph's PostgreSQL savers, with a lost database reported as one clear error.

    Every query the savers make goes through their ``_cursor``; a connection that fails there
    (or a pool that has none to lend) becomes :class:`ThreadsDatabaseError`, so a run that
    meets an outage fails with a line that says what to do, wherever the checkpoint is written;
    the writes after it fail at once (:mod:`crag.app.postgres_outage`).
    """
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    class ReportingPostgresSaver(PostgresSaver):
        target = ""
        outage = Outage()

        @contextmanager
        def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
            try:
                with super()._cursor(pipeline=pipeline) as cursor:
                    yield cursor
            except _lost_connection_errors() as exc:
                self.outage.error = _unreachable(self.target, exc)
                raise self.outage.error from exc
            self.outage.error = None

        def put(self, *args: Any, **kwargs: Any) -> Any:
            with writing():
                return super().put(*args, **kwargs)

        def put_writes(self, *args: Any, **kwargs: Any) -> None:
            with writing():
                super().put_writes(*args, **kwargs)

    class ReportingAsyncPostgresSaver(AsyncPostgresSaver):
        target = ""
        outage = Outage()

        @asynccontextmanager
        async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[Any]:
            try:
                async with super()._cursor(pipeline=pipeline) as cursor:
                    yield cursor
            except _lost_connection_errors() as exc:
                self.outage.error = _unreachable(self.target, exc)
                raise self.outage.error from exc
            self.outage.error = None

        async def aput(self, *args: Any, **kwargs: Any) -> Any:
            with writing():
                return await super().aput(*args, **kwargs)

        async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
            with writing():
                await super().aput_writes(*args, **kwargs)

    return ReportingPostgresSaver, ReportingAsyncPostgresSaver


def _pool_options(url: str) -> dict[str, Any]:
    quiet_pool_warnings()
    return {
        "min_size": 1,
        "max_size": POOL_SIZE,
        "kwargs": {**_connection_kwargs(), **_connect_timeout(url)},
        "timeout": CONNECT_TIMEOUT_S,
        # Give up reconnecting in the background after this long (the default, 5 minutes of
        # growing back-off, left a database that came back unused for up to a minute); the
        # next run that needs a connection starts a fresh attempt at once.
        "reconnect_timeout": CONNECT_TIMEOUT_S,
        "open": False,
    }


@contextmanager
def _postgres_saver(url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    import psycopg

    pool_module = _postgres_modules()
    pool_class = fail_fast_pools()[0]
    pool = pool_class(url, check=pool_class.check_connection, **_pool_options(url))
    pool.outage = Outage()
    try:
        try:
            pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            saver = _reporting_savers()[0](pool)
            saver.target, saver.outage = url, pool.outage
            saver.setup()  # creates or migrates LangGraph's tables; idempotent
        except (psycopg.Error, pool_module.PoolTimeout) as exc:
            raise _unreachable(url, exc) from exc
        yield saver
    finally:
        pool.close()


@asynccontextmanager
async def _async_postgres_saver(url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    import psycopg

    pool_module = _postgres_modules()
    pool_class = fail_fast_pools()[1]
    pool = pool_class(url, check=pool_class.check_connection, **_pool_options(url))
    pool.outage = Outage()
    try:
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            saver = _reporting_savers()[1](pool)
            saver.target, saver.outage = url, pool.outage
            await saver.setup()
        except (psycopg.Error, pool_module.PoolTimeout) as exc:
            raise _unreachable(url, exc) from exc
        yield saver
    finally:
        await pool.close()


@contextmanager
def checkpointer(target: str | Path) -> Iterator[BaseCheckpointSaver[Any]]:
    """A checkpointer over ``target``: PostgreSQL for a connection string, else a SQLite file.

    Raises:
        ThreadsDatabaseError: PostgreSQL cannot be reached (at opening, or during a run).
    """
    if is_postgres(target):
        with _postgres_saver(str(target).strip()) as saver:
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(_sqlite_file(target)) as sqlite_saver:
        _set_up_sqlite(sqlite_saver, target)
        yield sqlite_saver


def _not_sqlite(target: str | Path, exc: sqlite3.Error) -> ThreadsDatabaseError:
    """The one line for a threads file SQLite cannot use (not a database, read-only)."""
    return ThreadsDatabaseError(
        f"the threads database {describe_threads_db(target)} cannot be used ({exc}); "
        "move it away or name another with --threads-db or $" + THREADS_DB_ENV
    )


def _set_up_sqlite(saver: Any, target: str | Path) -> None:
    """Make the saver's tables now, so a file that is not SQLite is refused at opening.

    Else the first read or write, deep inside a run, raises ``sqlite3.DatabaseError``.
    """
    try:
        saver.setup()
    except sqlite3.Error as exc:
        raise _not_sqlite(target, exc) from None


@asynccontextmanager
async def async_checkpointer(target: str | Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """Async :func:`checkpointer` (``aiosqlite`` or psycopg's async pool)."""
    if is_postgres(target):
        async with _async_postgres_saver(str(target).strip()) as saver:
            yield saver
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(_sqlite_file(target)) as sqlite_saver:
        try:
            await sqlite_saver.setup()
        except sqlite3.Error as exc:
            raise _not_sqlite(target, exc) from None
        yield sqlite_saver
