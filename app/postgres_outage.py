"""A PostgreSQL threads database that goes away mid-run: one error, soon, and a quiet log.

LangGraph writes a run's checkpoints in the background (``put``, ``put_writes``) and raises the
first failure only when the run ends, while the run goes on to its next steps. With the database
gone, every later write waited the pool's whole timeout again (the sync saver even queues its
writes behind one lock), so the run failed a minute or two later, after a pool warning per
reconnection attempt. Here:

- a saver records the failure it met (:class:`Outage`); the writes that follow fail at once with
  the same error, from the pool itself (:func:`fail_fast_pools`), so a write already queued
  behind the lock does not wait either, until a query succeeds again;
- reads still try (the next run's first step reads the thread's checkpoint), so a run retried
  once the database is back works at once, and one retried too early waits one timeout;
- the pool's warnings are dropped unless crag logs at debug level (:func:`quiet_pool_warnings`):
  the run's error says it once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

logger = logging.getLogger(__name__)

_WRITING: ContextVar[bool] = ContextVar("crag_threads_writing", default=False)
"""Whether the current call is a checkpoint write (set by the savers' ``put`` methods); seen by
the pool's ``getconn`` in the same thread or task."""


@contextmanager
def writing() -> Iterator[None]:
    """Mark the calls made inside as a checkpoint write."""
    token = _WRITING.set(True)
    try:
        yield
    finally:
        _WRITING.reset(token)


class Outage:
    """The failure a saver's last query met, or ``None`` once a query succeeds again."""

    def __init__(self) -> None:
        self.error: Exception | None = None

    def check_write(self) -> None:
        """Raise the standing failure again when the current call is a write."""
        error = self.error
        if error is not None and _WRITING.get():
            raise type(error)(str(error))


@functools.cache
def fail_fast_pools() -> tuple[type[Any], type[Any]]:
    """The connection pools of psycopg, sync and async, that fail a write at once in an outage.

    Their ``getconn`` raises the standing :class:`Outage` error for a write; give each instance
    its own ``outage``.
    """
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    class FailFastPool(ConnectionPool):
        outage = Outage()

        def getconn(self, timeout: float | None = None) -> Any:
            self.outage.check_write()
            return super().getconn(timeout)

    class AsyncFailFastPool(AsyncConnectionPool):
        outage = Outage()

        async def getconn(self, timeout: float | None = None) -> Any:
            self.outage.check_write()
            return await super().getconn(timeout)

    return FailFastPool, AsyncFailFastPool


class _PoolWarnings(logging.Filter):
    """Drops the pool's warnings (several lines per reconnection attempt) but at debug level."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or logger.isEnabledFor(logging.DEBUG)


@functools.cache
def quiet_pool_warnings() -> None:
    """Drop psycopg's pool warnings unless crag logs at debug level (``crag -vv``)."""
    logging.getLogger("psycopg.pool").addFilter(_PoolWarnings())
