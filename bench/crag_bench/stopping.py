"""Stop ``crag-bench eval`` and ``eval-reader`` promptly on Ctrl-C or SIGTERM.

``crag-bench`` runs its commands under :func:`crag.app.cli.commands.run_command`, where SIGTERM
raises ``TerminatedError`` (a ``KeyboardInterrupt``) in the main thread. A thread pool's
``with`` block would then wait for every queued item before the exception got out, so the
command went on for as long as the whole run. :func:`run_each` instead sets a stop flag that
the workers read between items, cancels what has not started, cancels the model work of the
items in flight (their cancellation token, as ``crag ask`` does) and waits for those a few
seconds at most; then the interrupt propagates and the caller writes the rows that are done
(:func:`write_partial_rows`).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from crag.core.cancellation import CancelToken, cancellation_scope

logger = logging.getLogger(__name__)

T = TypeVar("T")

PARTIAL_ROWS = "rows.partial.jsonl"
"""The file of an interrupted run's finished rows, in its output folder (as ``rows.jsonl``)."""

OnStop = Callable[[Sequence[Any], int], None]
"""Called with an interrupted run's finished rows and how many it was to make."""

GRACE_SECONDS = 5.0
"""How long an interrupted pool waits for the items already in flight."""


def run_each(
    work: Callable[[T], None], items: Sequence[T], workers: int, stop: threading.Event
) -> None:
    """Call ``work`` on each item, ``workers`` at a time, until done or interrupted.

    Each worker runs in a copy of the caller's context (so settings held in context
    variables reach it) under one cancellation token. ``work`` may read ``stop`` to end a long
    item early (between its runs).

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM (``TerminatedError``) arrived; the items not
            started were cancelled and the running ones given :data:`GRACE_SECONDS` to finish.
    """
    with cancellation_scope() as token:
        current = contextvars.copy_context()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers))
        futures: list[concurrent.futures.Future[None]] = []
        try:
            for item in items:
                futures.append(pool.submit(current.copy().run, _unless_stopped, work, item, stop))
            for future in futures:
                future.result()
        except KeyboardInterrupt:
            _stop(pool, futures, token, stop)
            raise
        finally:
            pool.shutdown(wait=not stop.is_set())


def _unless_stopped(work: Callable[[T], None], item: T, stop: threading.Event) -> None:
    """``work(item)``, unless the run was stopped before this item started."""
    if not stop.is_set():
        work(item)


def _stop(
    pool: concurrent.futures.ThreadPoolExecutor,
    futures: Iterable[concurrent.futures.Future[None]],
    token: CancelToken,
    stop: threading.Event,
) -> None:
    """Stop the workers: nothing new starts, model work in flight is cancelled, brief wait."""
    stop.set()
    token.cancel()
    pool.shutdown(wait=False, cancel_futures=True)
    running = [f for f in futures if not f.done()]
    if running:
        concurrent.futures.wait(running, timeout=GRACE_SECONDS)


def write_partial_rows(out: Path, rows: Sequence[Any], total: int, what: str) -> None:
    """Write an interrupted run's finished rows to ``out/rows.partial.jsonl``; say where.

    The file holds the rows (dataclasses) as ``rows.jsonl`` would; no report is written, since
    its figures would cover only part of the run.
    """
    out.mkdir(parents=True, exist_ok=True)
    path = out / PARTIAL_ROWS
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(dataclasses.asdict(row), ensure_ascii=False) + "\n")
    logger.warning(
        "%s: stopped after %d of %d rows; the finished ones are in %s", what, len(rows), total, path
    )


def remove_partial_rows(out: Path) -> None:
    """Remove an earlier interrupted run's rows once a run in ``out`` has finished."""
    (out / PARTIAL_ROWS).unlink(missing_ok=True)
