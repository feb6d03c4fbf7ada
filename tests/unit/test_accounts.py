"""A team's accounts (:mod:`crag.app.web.accounts`), ``crag users`` and the gate's password sign-in.

Accounts live in a SQLite file of the test's folder, and in a real PostgreSQL (``pgserver``,
PostgreSQL in a wheel, on its Unix socket) for every test that takes the ``accounts`` fixture;
passwords are hashed with argon2id and API keys kept as their SHA-256. The gate
(:mod:`crag.app.web.gate`) lets an account in by its API key or by a session from the sign-in
form, slows and locks failed sign-ins, and refuses a removed account's key and session.
"""

from __future__ import annotations

import time
from pathlib import Path

import pwdlib  # noqa: F401 - missing, the test fails: it never skips
import pytest
import starlette  # noqa: F401 - missing, the test fails: it never skips
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from crag.app.cli.commands import main
from crag.app.web.accounts import KEY_PREFIX, AccountError, Accounts, SignInThrottle
from crag.app.web.credentials import SESSION_COOKIE
from crag.app.web.gate import IDENTITY_KEY, Gate, GateConfig

TOKEN = "k" * 40
PASSWORD = "correct horse battery"
BASE = "http://127.0.0.1:8123"


def test_an_account_gets_a_hashed_password_and_a_key_shown_once(accounts: Accounts) -> None:
    key = accounts.add("alice", PASSWORD)
    assert key.startswith(KEY_PREFIX) and len(key) > 40
    assert accounts.by_key(key) == accounts.get("alice")
    assert accounts.check_password("alice", PASSWORD) is not None
    assert accounts.check_password("alice", PASSWORD + "x") is None
    assert accounts.check_password("nobody", PASSWORD) is None
    with accounts.database.transaction() as db:
        stored = db.execute("SELECT password_hash FROM crag_accounts").fetchone()[0]
        keys = [row[0] for row in db.execute("SELECT key_hash FROM crag_api_keys").fetchall()]
    assert stored.startswith("$argon2id$") and PASSWORD not in stored
    assert key not in keys and len(keys) == 1


def test_names_passwords_and_duplicates_are_checked(accounts: Accounts) -> None:
    for name in ("Bob", "a", "operator", "x" * 41, "名前", "b c"):
        with pytest.raises(AccountError):
            accounts.add(name, PASSWORD)
    with pytest.raises(AccountError, match="at least 12"):
        accounts.add("bob", "short")
    accounts.add("bob", PASSWORD)
    with pytest.raises(AccountError, match="already an account named 'bob'"):
        accounts.add("bob", PASSWORD)


def test_keys_are_added_revoked_and_removed_with_the_account(accounts: Accounts) -> None:
    first = accounts.add("carol", PASSWORD, "admin")
    second = accounts.new_key("carol")
    assert accounts.by_key(second) is not None and accounts.get("carol").role == "admin"  # type: ignore[union-attr]
    assert accounts.revoke_keys("carol") == 2
    assert accounts.by_key(first) is None and accounts.by_key(second) is None
    third = accounts.new_key("carol")
    accounts.remove("carol")
    assert accounts.by_key(third) is None and accounts.get("carol") is None
    with pytest.raises(AccountError, match="no account named"):
        accounts.new_key("carol")


def test_failed_sign_ins_slow_the_account_down_for_a_while() -> None:
    now = [1000.0]
    throttle = SignInThrottle(free=3, first_delay=10, max_delay=60, clock=lambda: now[0])
    assert all(throttle.reserve("dave", f"10.0.0.{n}").allowed for n in range(3))
    refused = throttle.reserve("dave", "10.0.0.9")
    assert not refused.allowed and refused.wait == 10  # whatever the address
    assert throttle.reserve("erin", "10.0.0.9").allowed
    now[0] += 10
    owner = throttle.reserve("dave", "10.0.0.9")
    assert owner.allowed  # the wait is over: a slow-down, not a shut door
    throttle.succeeded(owner)
    assert throttle.reserve("dave", "10.0.0.8").allowed


def test_failed_sign_ins_are_counted_in_the_shared_database(accounts: Accounts) -> None:
    """Two servers on one database (two throttles): each sees the other's failures."""
    from crag.app.web.account_store import AccountDatabase

    one = SignInThrottle(free=3, first_delay=60, database=accounts.database)
    other_database = AccountDatabase(accounts.database.target)
    other = SignInThrottle(free=3, first_delay=60, database=other_database)
    try:
        attempts = [
            throttle.reserve("dave", f"10.0.0.{n}") for n, throttle in enumerate((one, other, one))
        ]
        assert all(attempt.allowed for attempt in attempts)
        assert not one.reserve("dave", "10.0.0.9").allowed
        assert not other.reserve("dave", "10.0.0.9").allowed
        assert other.reserve("erin", "10.0.0.9").allowed
        other.succeeded(attempts[-1])
        assert one.reserve("dave", "10.0.0.8").allowed
        gone = SignInThrottle(free=1, first_delay=60, seconds=0.01, database=accounts.database)
        assert gone.reserve("fred", "10.0.1.1").allowed
        time.sleep(0.05)
        # a failure older than the window counts no more
        assert gone.reserve("fred", "10.0.1.2").allowed
    finally:
        other_database.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_crag_users_makes_lists_and_removes_accounts(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    database = (
        str(tmp_path / "t.sqlite") if kind == "sqlite" else request.getfixturevalue("postgres_uri")
    )
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(PASSWORD + "\n"))
    assert (
        main(["users", "add", "frank", "--admin", "--password-stdin", "--threads-db", database])
        == 0
    )
    key = capsys.readouterr().out.strip()
    with Accounts(database) as accounts:
        assert accounts.by_key(key) is not None
    assert main(["users", "list", "--threads-db", database]) == 0
    assert capsys.readouterr().out == "frank\tadmin\t1 key(s)\n"
    assert main(["users", "remove", "frank", "--threads-db", database]) == 0
    assert main(["users", "remove", "frank", "--threads-db", database]) == 2
    assert "no account named 'frank'" in capsys.readouterr().err


# -- through the gate ---------------------------------------------------------------------------


def _client(accounts: Accounts, throttle: SignInThrottle | None = None) -> TestClient:
    async def whoami(request: Request) -> JSONResponse:
        identity = request.scope[IDENTITY_KEY]
        return JSONResponse({"user": identity.user, "role": identity.role})

    config = GateConfig(token=TOKEN, accounts=accounts, throttle=throttle or SignInThrottle())
    app = Starlette(
        routes=[Route("/threads", whoami, methods=["GET"]), Route("/chat/", whoami)],
        middleware=[Middleware(Gate, config=config)],
    )
    return TestClient(app, base_url=BASE)


def _has_session(client: TestClient) -> bool:
    """Whether the client holds a session cookie (its name is each server's own)."""
    return any(name.startswith(SESSION_COOKIE) for name in client.cookies)


def test_an_account_signs_in_with_its_key_or_its_password(accounts: Accounts) -> None:
    key = accounts.add("grace", PASSWORD)
    client = _client(accounts)
    assert client.get("/threads", headers={"x-api-key": key}).json() == {
        "user": "grace",
        "role": "member",
    }
    answer = client.post(
        "/chat/signin",
        data={"name": "grace", "password": PASSWORD},
        headers={"origin": BASE},
        follow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/chat/"
    assert _has_session(client)
    assert client.get("/threads").json()["user"] == "grace"
    accounts.remove("grace")
    assert client.get("/threads").status_code == 401  # the session ends with the account
    assert client.get("/threads", headers={"x-api-key": key}).status_code == 401


def test_a_wrong_password_a_foreign_form_and_a_locked_account_get_nothing(
    accounts: Accounts,
) -> None:
    accounts.add("heidi", PASSWORD)
    client = _client(accounts, SignInThrottle(free=2, first_delay=60))
    wrong = client.post("/chat/signin", data={"name": "heidi", "password": "nope"})
    assert wrong.status_code == 401 and "do not match" in wrong.text
    assert not _has_session(client)
    foreign = client.post(
        "/chat/signin",
        data={"name": "heidi", "password": PASSWORD},
        headers={"origin": "http://127.0.0.1:9999"},
    )
    assert foreign.status_code == 403
    client.post("/chat/signin", data={"name": "heidi", "password": "nope again"})
    locked = client.post("/chat/signin", data={"name": "heidi", "password": PASSWORD})
    assert locked.status_code == 401 and not _has_session(client)
    assert locked.text == wrong.text  # too soon after failures: no telling the password right
