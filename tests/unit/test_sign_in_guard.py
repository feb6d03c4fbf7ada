"""The sign-in's guards (:mod:`crag.app.web.sign_in_guard`): counted guesses, bounded hashing.

The throttle is checked in this process and in the shared database, a SQLite file and a real
PostgreSQL (``pgserver``, the dev extra: missing, these tests fail), with two throttles on one
database standing for two replicas. Password checks run on a pool of their own: the gate's
answer when it is full is checked through the gate itself (Starlette's test client).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from crag.app.web.account_store import AccountDatabase
from crag.app.web.accounts import MAX_PASSWORD_CHARS, AccountError, Accounts
from crag.app.web.gate import SIGN_IN_REFUSED, Gate, GateConfig
from crag.app.web.sign_in_guard import (
    BUSY,
    PasswordChecks,
    SignInBusyError,
    SignInThrottle,
)

PASSWORD = "correct horse battery"
TOKEN = "t" * 40
BASE = "http://127.0.0.1:8123"


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[AccountDatabase]]:
    """Two handles on one accounts' database (two replicas), or none (counted in process)."""
    if request.param == "memory":
        yield []
        return
    if request.param == "sqlite":
        target = str(tmp_path / "threads.sqlite")
    else:
        import pgserver  # noqa: F401  (missing: the test fails, it does not skip)
        import psycopg_pool  # noqa: F401

        target = request.getfixturevalue("postgres_uri")
    made = [AccountDatabase(target), AccountDatabase(target)]
    try:
        yield made
    finally:
        with made[0].transaction() as db:
            db.execute("DELETE FROM crag_sign_in_failures")
        for database in made:
            database.close()


def _throttles(databases: list[AccountDatabase], **options: Any) -> list[SignInThrottle]:
    """Two replicas' throttles on ``databases``, or one in-process throttle twice."""
    if not databases:
        return [SignInThrottle(**options)] * 2
    return [SignInThrottle(database=database, **options) for database in databases]


def test_parallel_guesses_are_counted_before_any_is_checked(
    databases: list[AccountDatabase],
) -> None:
    """20 at once, half through each replica: only the free ones get to be checked."""
    throttles = _throttles(databases, free=5, first_delay=60)
    start = threading.Barrier(20)

    def guess(index: int) -> bool:
        start.wait()
        return throttles[index % 2].reserve("alice", f"10.0.0.{index}").allowed

    with ThreadPoolExecutor(20) as pool:
        allowed = list(pool.map(guess, range(20)))
    assert allowed.count(True) == 5
    # The refused ones were not counted: the wait is the first one's, not a longer one.
    refused = throttles[1].reserve("alice", "10.0.0.99")
    assert not refused.allowed and 59 < refused.wait <= 60


def test_the_wait_doubles_with_each_failure_up_to_its_cap(
    databases: list[AccountDatabase],
) -> None:
    now = [1_000.0]
    limits = {"free": 2, "first_delay": 10.0, "max_delay": 35.0, "seconds": 3_600.0}
    throttle = _throttles(databases, **limits, clock=lambda: now[0])[0]
    assert [throttle.delay(n) for n in range(7)] == [0, 0, 10, 20, 35, 35, 35]
    assert throttle.reserve("bob", "10.0.0.1").allowed
    assert throttle.reserve("bob", "10.0.0.2").allowed
    waits = []
    for expected in (10, 20, 35, 35):
        early = throttle.reserve("bob", "10.0.0.3")
        waits.append(early.wait)
        now[0] += expected
        assert throttle.reserve("bob", "10.0.0.3").allowed  # the owner, after the wait
    assert waits == [10, 20, 35, 35]


def test_a_success_forgets_the_accounts_failures_but_not_the_addresses(
    databases: list[AccountDatabase],
) -> None:
    """Signing in to one's own account between guesses buys no more guesses at others'."""
    now = [1_000.0]
    throttle = _throttles(databases, free=2, first_delay=10.0, clock=lambda: now[0])[0]
    assert throttle.reserve("x1", "10.0.0.7").allowed
    assert throttle.reserve("x2", "10.0.0.7").allowed
    assert not throttle.reserve("mine", "10.0.0.7").allowed  # the address waits
    now[0] += 10
    mine = throttle.reserve("mine", "10.0.0.7")
    assert mine.allowed
    throttle.succeeded(mine)
    assert throttle.reserve("x3", "10.0.0.7").allowed
    assert throttle.reserve("x4", "10.0.0.7").wait == 20  # three failures: the wait doubled
    # The account's own failures (its successful attempt's included) are gone.
    assert throttle.reserve("mine", "10.0.1.1").allowed
    assert throttle.reserve("mine", "10.0.1.2").allowed
    assert not throttle.reserve("mine", "10.0.1.3").allowed


def test_an_attempt_released_unchecked_counts_no_more(databases: list[AccountDatabase]) -> None:
    throttle = _throttles(databases, free=1, first_delay=60)[0]
    attempt = throttle.reserve("carol", "10.0.0.1")
    throttle.release(attempt)
    assert throttle.reserve("carol", "10.0.0.1").allowed
    assert not throttle.reserve("carol", "10.0.0.1").allowed


def test_password_checks_beyond_the_pool_and_its_queue_are_turned_away_at_once() -> None:
    """One worker, one waiting: a third check is refused at once, other threads stay free."""
    checks = PasswordChecks(workers=1, waiting=1)
    release = threading.Event()

    async def scenario() -> None:
        first = asyncio.ensure_future(checks.run(release.wait, 10))
        second = asyncio.ensure_future(checks.run(lambda: "second"))
        await asyncio.sleep(0.05)
        began = time.monotonic()
        with pytest.raises(SignInBusyError, match="Too many sign-ins at once"):
            await checks.run(lambda: "third")
        # What every other request runs (asyncio.to_thread) does not wait behind the checks.
        assert await asyncio.to_thread(lambda: "other") == "other"
        assert time.monotonic() - began < 1.0
        release.set()
        assert await first is True and await second == "second"
        assert await checks.run(lambda: "again") == "again"

    asyncio.run(scenario())


def test_a_check_keeps_its_place_until_it_has_run_even_if_its_caller_leaves() -> None:
    checks = PasswordChecks(workers=1, waiting=0)
    release = threading.Event()

    async def scenario() -> None:
        waiting = asyncio.ensure_future(checks.run(release.wait, 10))
        await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.sleep(0.05)
        with pytest.raises(SignInBusyError):
            await checks.run(lambda: None)  # the thread is still hashing
        release.set()
        for _ in range(100):
            await asyncio.sleep(0.01)
            try:
                assert await checks.run(lambda: "free") == "free"
                return
            except SignInBusyError:
                continue
        pytest.fail("the place of a finished check was never given back")

    asyncio.run(scenario())


def test_a_password_over_the_bound_is_never_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts = Accounts(tmp_path / "threads.sqlite")
    accounts.add("dave", PASSWORD)
    with pytest.raises(AccountError, match="at most 1,024 characters"):
        accounts.add("erin", "p" * (MAX_PASSWORD_CHARS + 1))

    def no_hashing() -> None:
        raise AssertionError("a password over the bound reached argon2")

    monkeypatch.setattr("crag.app.web.accounts._hasher", no_hashing)
    assert accounts.check_password("dave", "p" * (MAX_PASSWORD_CHARS + 1)) is None
    assert accounts.check_password("nobody", "p" * 3_900) is None


# -- through the gate ---------------------------------------------------------------------------


def _client(config: GateConfig) -> TestClient:
    async def whoami(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/chat/", whoami)], middleware=[Middleware(Gate, config=config)])
    return TestClient(app, base_url=BASE)


def test_the_gate_answers_at_once_when_every_check_is_busy(tmp_path: Path) -> None:
    """429 with its own sentence, no wait; the attempt is not counted as a failure."""
    accounts = Accounts(tmp_path / "threads.sqlite")
    accounts.add("frank", PASSWORD)
    checks = PasswordChecks(workers=1, waiting=0)
    throttle = SignInThrottle(free=1, first_delay=60)
    client = _client(
        GateConfig(token=TOKEN, accounts=accounts, throttle=throttle, password_checks=checks)
    )
    release = threading.Event()
    holder = threading.Thread(target=asyncio.run, args=(checks.run(release.wait, 10),))
    holder.start()
    try:
        time.sleep(0.1)
        began = time.monotonic()
        busy = client.post("/chat/signin", data={"name": "frank", "password": PASSWORD})
        assert time.monotonic() - began < 0.9  # no second of waiting, no hashing
    finally:
        release.set()
        holder.join()
    assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
    assert BUSY in busy.text
    signed_in = client.post(
        "/chat/signin", data={"name": "frank", "password": PASSWORD}, follow_redirects=False
    )
    assert signed_in.status_code == 303  # the busy attempt did not count against frank


def test_the_gate_gives_one_answer_to_wrong_unknown_too_soon_and_too_long(
    tmp_path: Path,
) -> None:
    accounts = Accounts(tmp_path / "threads.sqlite")
    accounts.add("grace", PASSWORD)
    throttle = SignInThrottle(free=2, first_delay=60)
    client = _client(GateConfig(token=TOKEN, accounts=accounts, throttle=throttle))
    answers = [
        client.post("/chat/signin", data={"name": "nobody", "password": PASSWORD}),
        client.post("/chat/signin", data={"name": "henry", "password": "p" * 3_900}),
        client.post("/chat/signin", data={"name": "grace", "password": "wrong password!"}),
        client.post("/chat/signin", data={"name": "grace", "password": PASSWORD}),  # too soon
    ]
    assert {(a.status_code, a.text) for a in answers} == {(401, answers[0].text)}
    assert SIGN_IN_REFUSED in answers[0].text
