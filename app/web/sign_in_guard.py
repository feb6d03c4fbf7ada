"""A password sign-in that holds under attack: counted guesses, a growing wait, bounded hashing.

Two guards stand between ``POST /chat/signin`` (:mod:`crag.app.web.gate`) and the password's
argon2 check:

* :class:`SignInThrottle` counts failed sign-ins per account name and per client address. An
  attempt is *reserved* (written as a failure) before its password is checked, in one atomic
  step with reading the count, so N parallel guesses count as N before any is checked. The
  first :data:`FREE_FAILURES` failures cost nothing; after them each further attempt for that
  name or address must come at least a wait after the last failure, a wait that doubles with
  each failure from :data:`FIRST_DELAY_SECONDS` up to :data:`MAX_DELAY_SECONDS`. An attempt
  that comes too soon is refused unchecked and is not counted, so the owner who waits out the
  slow-down gets in: a slow-down, not a shut door. Failures are forgotten after
  :data:`FORGET_SECONDS`; a success forgets the account's failures (not the address's: signing
  in to one's own account does not buy more guesses at another's). The counts live in the
  accounts' database when one is given (every replica sharing one PostgreSQL counts the same
  failures: a transaction holding an advisory lock per name and address; SQLite's
  ``BEGIN IMMEDIATE``), else in this process.
* :class:`PasswordChecks` runs the hashing on a pool of its own, :data:`HASHING_WORKERS`
  threads with at most :data:`HASHING_WAITING` checks waiting: beyond that a sign-in is
  answered at once (:class:`SignInBusyError`) rather than queued, and the threads that serve
  every other request (``asyncio.to_thread``: the gate's ``identify()``) never wait behind
  argon2.

A wrong password, a refused attempt and an unknown name get the same answer from the gate;
nothing here tells them apart to the caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from crag.app.web.account_store import AccountDatabase, Cursor

__all__ = [
    "FIRST_DELAY_SECONDS",
    "FORGET_SECONDS",
    "FREE_FAILURES",
    "HASHING_WAITING",
    "HASHING_WORKERS",
    "MAX_DELAY_SECONDS",
    "Attempt",
    "PasswordChecks",
    "SignInBusyError",
    "SignInThrottle",
    "shared_password_checks",
]

FREE_FAILURES = 5
"""Failures (per name, per address) before any attempt has to wait."""
FIRST_DELAY_SECONDS = 2.0
"""The wait after the last failure once :data:`FREE_FAILURES` are reached; it doubles after."""
MAX_DELAY_SECONDS = 120.0
"""The longest wait between two attempts, however many failures."""
FORGET_SECONDS = 900.0
"""How long a failure counts."""
HASHING_WORKERS = 2
HASHING_WAITING = 6
BUSY = "Too many sign-ins at once: try again in a moment."
_MAX_DOUBLINGS = 30
_SWEEP_AT = 1024

T = TypeVar("T")


class SignInBusyError(RuntimeError):
    """The password checks' pool and its queue are full: the sign-in is not attempted."""


@dataclass(frozen=True)
class Attempt:
    """One sign-in attempt, reserved or refused.

    ``wait`` is 0 for a reserved attempt (counted as a failure until :meth:`SignInThrottle.
    succeeded` or :meth:`SignInThrottle.release`); above 0 the attempt was refused unchecked
    and nothing was counted: the seconds until one may be made.
    """

    keys: tuple[str, ...]
    at: float
    wait: float = 0.0

    @property
    def allowed(self) -> bool:
        """Whether the password may be checked."""
        return self.wait <= 0


def _keys(name: str, address: str) -> tuple[str, ...]:
    """The counters an attempt counts in: its account name's and its client address's.

    An account's name never holds ``:`` (:func:`crag.app.web.accounts.check_name`), so the
    prefixes keep the two apart.
    """
    return (f"account:{name[:60]}", f"address:{address[:60] or '?'}")


def _lock_id(key: str) -> int:
    """A PostgreSQL advisory lock's number (a signed 64-bit integer) for ``key``."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)


class SignInThrottle:
    """Failed sign-ins per account name and per client address (see the module)."""

    def __init__(
        self,
        free: int = FREE_FAILURES,
        first_delay: float = FIRST_DELAY_SECONDS,
        max_delay: float = MAX_DELAY_SECONDS,
        seconds: float = FORGET_SECONDS,
        database: AccountDatabase | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.free, self.first_delay, self.max_delay = free, first_delay, max_delay
        self.seconds = seconds
        self.database = database
        self._clock = clock
        self._seen: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self._sweep_at = _SWEEP_AT

    def delay(self, failures: int) -> float:
        """How long after the last of ``failures`` the next attempt has to wait."""
        if failures < self.free:
            return 0.0
        doublings = min(failures - self.free, _MAX_DOUBLINGS)
        return float(min(self.first_delay * 2**doublings, self.max_delay))

    def _wait(self, failures: int, last: float, now: float) -> float:
        delay = self.delay(failures)
        return max(0.0, last + delay - now) if delay > 0 else 0.0

    def reserve(self, name: str, address: str) -> Attempt:
        """Count an attempt of ``name`` from ``address`` as a failure before it is checked.

        Reading the counts and writing the attempt are one atomic step. An attempt that comes
        before its wait is over is refused (``wait`` above 0) and not counted.
        """
        keys = _keys(name, address)
        if self.database is not None:
            with self.database.transaction() as db:
                return self._reserve_in(db, keys)
        with self._lock:
            now = self._clock()
            self._forget_old(now, keys if len(self._seen) < self._sweep_at else list(self._seen))
            recent = [self._seen.get(key, []) for key in keys]
            wait = max(self._wait(len(times), max(times, default=0.0), now) for times in recent)
            if wait > 0:
                return Attempt(keys, now, wait)
            for key in keys:
                self._seen.setdefault(key, []).append(now)
        return Attempt(keys, now)

    def _reserve_in(self, db: Cursor, keys: tuple[str, ...]) -> Attempt:
        """:meth:`reserve` in one transaction of the shared database."""
        self._lock_keys(db, keys)
        now = self._clock()  # read under the locks: no attempt is recorded after it
        db.execute("DELETE FROM crag_sign_in_failures WHERE at <= ?", (now - self.seconds,))
        waits = []
        for key in keys:
            count, last = db.execute(
                "SELECT COUNT(*), MAX(at) FROM crag_sign_in_failures WHERE name = ?", (key,)
            ).fetchone()
            waits.append(self._wait(int(count), float(last or 0.0), now))
        if max(waits) > 0:
            return Attempt(keys, now, max(waits))
        for key in keys:
            db.execute("INSERT INTO crag_sign_in_failures VALUES (?, ?)", (key, now))
        return Attempt(keys, now)

    def _lock_keys(self, db: Cursor, keys: Iterable[str]) -> None:
        """Hold the counters of ``keys`` until the transaction ends.

        PostgreSQL: an advisory lock per counter, taken in one order (no deadlock between two
        attempts); SQLite: the database's write lock, taken before the counts are read.
        """
        assert self.database is not None
        if not self.database.postgres:
            db.execute("BEGIN IMMEDIATE")
            return
        for lock in sorted({_lock_id(key) for key in keys}):
            db.execute("SELECT pg_advisory_xact_lock(?)", (lock,))

    def _forget_old(self, now: float, keys: Iterable[str]) -> None:
        """Drop the failures of ``keys`` older than :attr:`seconds` (the caller holds the lock).

        Every counter is swept once there are :attr:`_sweep_at` of them, so that a flood of
        made-up names does not keep this process's memory.
        """
        for key in keys:
            times = [t for t in self._seen.get(key, []) if now - t < self.seconds]
            if times:
                self._seen[key] = times
            else:
                self._seen.pop(key, None)
        self._sweep_at = max(_SWEEP_AT, 2 * len(self._seen))

    def succeeded(self, attempt: Attempt) -> None:
        """The password was right: forget the account's failures and this attempt's own."""
        account, *others = attempt.keys
        self._forget(attempt, [account], others)

    def release(self, attempt: Attempt) -> None:
        """The password was not checked after all: the attempt counts no more."""
        self._forget(attempt, [], list(attempt.keys))

    def _forget(self, attempt: Attempt, every: list[str], own: list[str]) -> None:
        """Forget all failures of the ``every`` counters, and ``attempt``'s of the ``own``."""
        if self.database is not None:
            with self.database.transaction() as db:
                for key in every:
                    db.execute("DELETE FROM crag_sign_in_failures WHERE name = ?", (key,))
                for key in own:
                    db.execute(
                        "DELETE FROM crag_sign_in_failures WHERE name = ? AND at = ?",
                        (key, attempt.at),
                    )
            return
        with self._lock:
            for key in every:
                self._seen.pop(key, None)
            for key in own:
                times = self._seen.get(key, [])
                if attempt.at in times:
                    times.remove(attempt.at)


class PasswordChecks:
    """Password hashing on a small pool of its own, with a bounded queue (see the module)."""

    def __init__(self, workers: int = HASHING_WORKERS, waiting: int = HASHING_WAITING) -> None:
        self.workers, self.waiting = workers, waiting
        self._slots = threading.BoundedSemaphore(workers + waiting)
        self._executor: ThreadPoolExecutor | None = None
        self._start_lock = threading.Lock()

    def _pool(self) -> ThreadPoolExecutor:
        with self._start_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.workers, thread_name_prefix="crag-password"
                )
            return self._executor

    async def run(self, check: Callable[..., T], *args: object) -> T:
        """``check(*args)`` on the pool.

        A running check keeps its place until it ends, even if its caller stops waiting (a
        client that leaves does not free a thread that is still hashing); a queued one whose
        caller leaves is dropped.

        Raises:
            SignInBusyError: All workers are hashing and the queue is full.
        """
        if not self._slots.acquire(blocking=False):
            raise SignInBusyError(BUSY)
        try:
            future: Future[T] = self._pool().submit(check, *args)
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _: self._slots.release())
        return await asyncio.wrap_future(future)


_SHARED = PasswordChecks()


def shared_password_checks() -> PasswordChecks:
    """The process's one pool of password checks: the bound holds for all its gates together."""
    return _SHARED
