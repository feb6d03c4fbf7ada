"""Requests to a model server, on one event loop, each cancellable at any moment.

The graph's nodes are sync functions on worker threads; a cancelled run cancels the token of
its thread (:mod:`crag.core.cancellation`), but a thread blocked in a socket read cannot be
interrupted, and a server reading a long prompt sends nothing for seconds. So every request
runs as a task on one event loop on a daemon thread, and the calling thread waits for it,
looking at its run's token every :data:`POLL_SECONDS`: a cancelled run cancels the task, which
closes the HTTP connection (a server such as vLLM or llama.cpp then stops generating), and the
caller raises :class:`~crag.core.cancellation.RunCancelledError` at once.

On that loop each request also takes a slot of its server's in-flight limit
(``llm_max_concurrency``), is retried when the server says "not now" (after its
``Retry-After``), and is bounded as a whole by ``llm_timeout`` (retries and waits included;
a stream to its last item, however fast the server sends). A stream runs at most
:data:`HANDOVER_ITEMS` items ahead of its reader, so a server faster than the reader waits
instead of filling memory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

from crag.core.cancellation import RunCancelledError, current_token
from crag.generator.endpoint_config import EndpointConfig, EndpointError
from crag.generator.endpoint_errors import describe, malformed, retry_delay

logger = logging.getLogger(__name__)

T = TypeVar("T")

POLL_SECONDS = 0.05
"""How often a waiting caller looks at its run's cancellation token."""

HANDOVER_ITEMS = 64
"""Items of a stream received but not yet taken by its reader, at most."""

HANDOVER_WAIT_SECONDS = 0.005
"""How long a stream waits for its reader to make room before trying again."""

_END: Any = object()
"""What ``anext`` returns at a stream's end."""


class _Loop:
    """One event loop on a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: dict[tuple[str, int], asyncio.Semaphore] = {}

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (started now if it is not)."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="crag-model-server", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coroutine`` on the loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop())

    def slots(self, config: EndpointConfig) -> asyncio.Semaphore:
        """The in-flight limit of ``config``'s server (called on the loop only)."""
        key = (config.base_url, config.max_concurrency)
        semaphore = self._slots.get(key)
        if semaphore is None:
            semaphore = self._slots[key] = asyncio.Semaphore(config.max_concurrency)
        return semaphore


_LOOP = _Loop()


def _cancelled() -> RunCancelledError:
    return RunCancelledError("the run was cancelled while waiting for the model server")


def run_cancellable(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the requests' loop and wait for it; a cancelled run cancels it.

    Raises:
        RunCancelledError: The calling run was cancelled (the request is cancelled too).
    """
    token = current_token()
    future = _LOOP.submit(coroutine)
    try:
        while True:
            done, _ = concurrent.futures.wait([future], timeout=POLL_SECONDS)
            if done:
                return future.result()
            if token is not None and token.cancelled:
                raise _cancelled()
    finally:
        if not future.done():
            future.cancel()


def stream_cancellable(open_stream: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
    """Iterate the async stream ``open_stream()`` makes on the loop, from this thread.

    Items are handed over as they arrive. A cancelled run, or a caller that stops iterating,
    cancels the stream (closing its connection).

    Raises:
        RunCancelledError: The calling run was cancelled.
    """
    token = current_token()
    items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=HANDOVER_ITEMS)

    async def pump() -> None:
        try:
            async for item in open_stream():
                await _hand_over(items, ("item", item))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            await _hand_over(items, ("error", exc))
            return
        await _hand_over(items, ("end", None))

    future = _LOOP.submit(pump())
    try:
        while True:
            if token is not None and token.cancelled:  # also while items keep coming
                raise _cancelled()
            try:
                kind, value = items.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if future.done() and items.empty():
                    raise _ended_without_a_word(future) from None
                continue
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        if not future.done():
            future.cancel()


def _ended_without_a_word(future: concurrent.futures.Future[None]) -> BaseException:
    """Why a stream's pump ended without handing over its end (a safeguard: it always should)."""
    if future.cancelled():
        return RuntimeError("the model-server stream was cancelled without a word to its reader")
    return future.exception() or RuntimeError("the model-server stream ended without its end")


async def _hand_over(items: queue.Queue[tuple[str, Any]], entry: tuple[str, Any]) -> None:
    """Put ``entry`` in ``items`` once its reader has made room (never blocking the loop)."""
    while True:
        try:
            items.put_nowait(entry)
            return
        except queue.Full:
            await asyncio.sleep(HANDOVER_WAIT_SECONDS)


def endpoint_error_in(exc: BaseException) -> EndpointError | None:
    """The :class:`EndpointError` that ``exc`` is or wraps; ``None`` if there is none.

    The OpenAI client wraps what its HTTP client raises while reading a whole reply (the
    reply's size cap, :data:`crag.generator.endpoint.MAX_REPLY_BYTES`).
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, EndpointError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


async def request(config: EndpointConfig, attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()`` within ``config``'s limits: an in-flight slot, retries, one deadline.

    Raises:
        EndpointError: The request failed (after the retries the server's answers allow).
    """
    async with _LOOP.slots(config):
        loop = asyncio.get_running_loop()
        start = loop.time()
        tries = 0
        while True:
            tries += 1
            try:
                async with asyncio.timeout_at(start + config.timeout):
                    return await attempt()
            except TimeoutError:
                raise describe(TimeoutError(), config) from None
            except EndpointError:
                raise
            except Exception as exc:  # noqa: BLE001 - every client error becomes one line
                if (reason := endpoint_error_in(exc)) is not None:
                    raise reason from None
                await _wait_to_retry(exc, config, tries, loop.time() - start)


async def _wait_to_retry(
    exc: BaseException, config: EndpointConfig, tries: int, elapsed: float
) -> None:
    """Sleep before the next try, or raise the error when no retry fits in the deadline."""
    delay = retry_delay(exc, tries - 1) if tries <= config.max_retries else None
    if delay is None or elapsed + delay >= config.timeout:
        raise describe(exc, config, tries=tries, waited=elapsed) from None
    logger.info("model server %s: %s; retrying in %.1f s", config.where, type(exc).__name__, delay)
    await asyncio.sleep(delay)


async def stream(
    config: EndpointConfig, open_stream: Callable[[], AsyncIterator[T]]
) -> AsyncIterator[T]:
    """The items of ``open_stream()`` within ``config``'s limits (as :func:`request`).

    A stream is retried only until its first item: what was sent on is never sent twice.

    Raises:
        EndpointError: The request failed, or the server stopped mid-stream.
    """
    async with _LOOP.slots(config):
        deadline = asyncio.get_running_loop().time() + config.timeout
        items, first = await _opened(config, open_stream, deadline)
        yield first
        received = 1
        try:
            async for item in _until(items, deadline):
                yield item
                received += 1
        except TimeoutError:
            raise describe(TimeoutError(), config) from None
        except EndpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - every client error becomes one line
            reason = endpoint_error_in(exc)
            raise (reason or describe(exc, config, tokens=received)) from None
        finally:
            await close_stream(items)


async def _opened(
    config: EndpointConfig, open_stream: Callable[[], AsyncIterator[T]], deadline: float
) -> tuple[AsyncIterator[T], T]:
    """A stream and its first item, retried (as :func:`request`) until that item arrives."""
    loop = asyncio.get_running_loop()
    start = deadline - config.timeout
    tries = 0
    while True:
        tries += 1
        items = open_stream()
        try:
            async with asyncio.timeout_at(deadline):
                return items, await anext(items)
        except StopAsyncIteration:
            raise malformed(config, "an empty stream (no server-sent events)") from None
        except TimeoutError:
            raise describe(TimeoutError(), config) from None
        except EndpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - every client error becomes one line
            await close_stream(items)
            if (reason := endpoint_error_in(exc)) is not None:
                raise reason from None
            await _wait_to_retry(exc, config, tries, loop.time() - start)


async def _until(items: AsyncIterator[T], deadline: float) -> AsyncIterator[T]:
    """The rest of ``items``, each read bounded by ``deadline`` (past it: ``TimeoutError``).

    The deadline bounds each read, never the hand-over of an item: a reader slower than the
    server keeps the stream waiting in :func:`_hand_over`, and a deadline's cancellation there
    would end the stream without a word to its reader.
    """
    loop = asyncio.get_running_loop()
    while True:
        async with asyncio.timeout_at(deadline):
            item = await anext(items, _END)
        if item is _END:
            return
        if loop.time() >= deadline:  # the deadline's cancellation was swallowed
            raise TimeoutError
        yield item


async def close_stream(items: AsyncIterator[Any]) -> None:
    """Close an async generator (its HTTP response with it); nothing else to do if it is not."""
    close = getattr(items, "aclose", None)
    if close is not None:
        try:
            await close()
        except Exception:
            logger.debug("closing a model-server stream failed", exc_info=True)
