"""Cooperative cancellation of a run's model work.

The nodes are sync functions. Under ``ainvoke``/``astream`` (and on the LangGraph server, which
runs graphs with ``astream``) each runs on a worker thread; cancelling the run cancels the
asyncio task awaiting that thread, but the thread itself cannot be interrupted and would go on
scoring or generating while holding a shared model's lock, so the next run would wait for it.

Instead, every node that calls a model is added to a graph with :func:`cancellable_node`: its
async path runs the sync node on a worker thread with a fresh :class:`CancelToken` in a
``ContextVar`` and cancels the token when the awaiting task is cancelled. The model code checks
the token where it can stop cleanly: evaluators between batches (:func:`raise_if_cancelled`),
the local generator at every token (a stopping criterion) and, where it reads a prompt under
``crag.generator.step_decoding.stop_when_cancelled`` (the step decoder of batched generation),
before each layer of the model, since a long prompt is read in one forward pass of several
seconds; lock waits while polling (:func:`holding`). A cancelled node raises
:class:`RunCancelledError` in its thread, which releases the model's lock on the way out;
nobody awaits that result any more.

The sync path (``invoke``/``stream``) is unchanged: no token is set unless a caller opens a
:func:`cancellation_scope` (``crag ask`` does, and cancels it on Ctrl-C so that a parallel
branch on a worker thread stops too).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from langgraph._internal._runnable import RunnableCallable

LOCK_POLL_SECONDS = 0.05
"""How often a thread waiting for a model's lock looks at its run's cancellation token."""


class RunCancelledError(BaseException):
    """The run this work belongs to was cancelled.

    A ``BaseException`` (like ``asyncio.CancelledError`` and ``KeyboardInterrupt``), so that a
    node's ``except Exception`` fallback does not turn a cancellation into a degraded answer.
    """


class CancelToken:
    """A cancellation flag shared by an awaiting task and the thread doing the work.

    A token made inside another one (a node inside a cancellable CLI run) is also cancelled
    when its parent is.
    """

    def __init__(self, parent: CancelToken | None = None) -> None:
        """Create an uncancelled token, optionally tied to ``parent``."""
        self._event = threading.Event()
        self._parent = parent

    def cancel(self) -> None:
        """Ask the work to stop at its next check (safe from any thread, never blocks long)."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether this token or one of its parents was cancelled."""
        token: CancelToken | None = self
        while token is not None:
            if token._event.is_set():
                return True
            token = token._parent
        return False

    def raise_if_cancelled(self) -> None:
        """Raise :class:`RunCancelledError` when the token was cancelled."""
        if self.cancelled:
            raise RunCancelledError("the run was cancelled")


_current: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar(
    "crag_cancel_token", default=None
)


def current_token() -> CancelToken | None:
    """The token of the run this thread works for, or None outside a cancellable run."""
    return _current.get()


def raise_if_cancelled() -> None:
    """Raise :class:`RunCancelledError` when the current run was cancelled; else do nothing."""
    token = _current.get()
    if token is not None:
        token.raise_if_cancelled()


@contextmanager
def cancellation_scope() -> Iterator[CancelToken]:
    """Run the block with a new token (a child of the current one); yields it for cancelling."""
    token = CancelToken(parent=_current.get())
    reset = _current.set(token)
    try:
        yield token
    finally:
        _current.reset(reset)


@contextmanager
def holding(lock: threading.Lock) -> Iterator[None]:
    """Hold ``lock`` for the block; while waiting for it, give up if the run is cancelled.

    Outside a cancellable run this is ``with lock:``.

    Raises:
        RunCancelledError: The run was cancelled before the lock was acquired.
    """
    token = _current.get()
    if token is None:
        with lock:
            yield
        return
    while not lock.acquire(timeout=LOCK_POLL_SECONDS):
        token.raise_if_cancelled()
    try:
        token.raise_if_cancelled()
        yield
    finally:
        lock.release()


def cancellable_node(func: Callable[..., Any]) -> RunnableCallable:
    """Wrap a sync node so that cancelling an async run stops its work early.

    The sync path calls ``func`` as LangGraph would. The async path runs ``func`` on the
    event loop's default executor (as LangGraph does for sync nodes, context copied) with a
    fresh :class:`CancelToken`, and cancels the token when the awaiting task is cancelled.
    LangGraph passes both paths the same arguments (``runtime`` and the like), read from
    ``func``'s signature.
    """

    @functools.wraps(func)
    async def run_in_thread(*args: Any, **kwargs: Any) -> Any:
        token = CancelToken(parent=_current.get())
        context = contextvars.copy_context()
        context.run(_current.set, token)
        call = functools.partial(context.run, func, *args, **kwargs)
        try:
            return await asyncio.get_running_loop().run_in_executor(None, call)
        except asyncio.CancelledError:
            token.cancel()
            raise

    return RunnableCallable(func, run_in_thread, name=func.__name__, trace=False)
