"""Sessions that end, and a proxy mode that trusts only the proxy, against a real server.

One ``langgraph dev`` serves crag as ``make serve`` starts it, with two accounts and the proxy
mode on (``CRAG_PROXY_USER_HEADER=X-Forwarded-User`` with ``CRAG_PROXY_SECRET``), and a second
one beside it on another port. Requests are made as a browser's (its cookie, its CSRF token) or
as any local program would make them (curl-like, from 127.0.0.1). The accounts are changed with
the ``crag users`` command itself.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path

import httpx
import pytest

from crag.app.web.accounts import Accounts
from crag_bench.dev_server import DevServer
from tests.server_support import langgraph_server

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

PASSWORD = "correct horse battery"
NEW_PASSWORD = "another horse, battery staple"
PROXY_SECRET = "the proxy's shared secret, 36 chars"
CSRF = "x-crag-csrf"


@pytest.fixture(scope="module")
def threads_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("threads") / "threads.sqlite"


def _env(tmp_path_factory: pytest.TempPathFactory, threads_db: Path) -> dict[str, str]:
    return {
        "CRAG_STORE_PATH": str(tmp_path_factory.mktemp("store") / "chroma"),
        "CRAG_DEFAULT_CORPUS": "false",
        "CRAG_THREADS_DB": str(threads_db),
        "CRAG_PROXY_USER_HEADER": "X-Forwarded-User",
        "CRAG_PROXY_SECRET": PROXY_SECRET,
        "CRAG_TEAM_ADMINS": "carol",
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, threads_db: Path) -> Iterator[DevServer]:
    accounts = Accounts(threads_db)
    for name in ("alice", "bob"):
        accounts.add(name, PASSWORD)
    workdir = tmp_path_factory.mktemp("langgraph_dev")
    with langgraph_server(workdir, _env(tmp_path_factory, threads_db)) as started:
        yield started


def _crag_users(*args: str, stdin: str = "") -> None:
    """``crag users ARGS`` as the operator runs it; fails the test if it fails."""
    cli = Path(sys.executable).with_name("crag")
    done = subprocess.run(
        [str(cli), "users", *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def _cookie(response: httpx.Response) -> tuple[str, str]:
    """The session cookie a sign-in set: its name and value."""
    assert response.status_code == 303, response.text
    morsel = next(iter(SimpleCookie(response.headers["set-cookie"]).values()))
    return morsel.key, morsel.value


def _sign_in(server: DevServer, name: str, password: str) -> tuple[str, str]:
    """The session cookie of ``name``, signed in with the page's form."""
    answer = httpx.post(
        f"{server.url}/chat/signin",
        data={"name": name, "password": password},
        headers={"origin": server.url},
        timeout=60,
    )
    return _cookie(answer)


def _operator_cookie(server: DevServer) -> tuple[str, str]:
    """The operator's session cookie, the token posted as the sign-in form posts it."""
    answer = httpx.post(
        f"{server.url}/chat/token",
        data={"token": server.token},
        headers={"origin": server.url},
        timeout=60,
    )
    return _cookie(answer)


def _whoami(server: DevServer, cookie: tuple[str, str]) -> httpx.Response:
    return httpx.get(
        f"{server.url}/chat/api/session", headers={"cookie": f"{cookie[0]}={cookie[1]}"}
    )


def test_signing_out_ends_the_session_the_old_cookie_is_refused(server: DevServer) -> None:
    for cookie in (_operator_cookie(server), _sign_in(server, "bob", PASSWORD)):
        seen = _whoami(server, cookie)
        assert seen.status_code == 200, seen.text
        out = httpx.delete(
            f"{server.url}/chat/api/session",
            headers={"cookie": f"{cookie[0]}={cookie[1]}", CSRF: seen.json()["csrf"]},
        )
        assert out.status_code == 200, out.text
        assert "max-age=0" in out.headers["set-cookie"].lower()
        refused = _whoami(server, cookie)  # a copy kept past the sign-out
        assert refused.status_code == 401, refused.text


def test_an_account_removed_and_made_again_gets_no_old_session_back(
    server: DevServer, threads_db: Path
) -> None:
    old = _sign_in(server, "alice", PASSWORD)
    assert _whoami(server, old).json()["user"] == "alice"
    _crag_users("remove", "alice", "--threads-db", str(threads_db))
    _crag_users(
        "add", "alice", "--admin", "--password-stdin", "--reuse-name",
        "--threads-db", str(threads_db),
        stdin=NEW_PASSWORD + "\n",
    )  # fmt: skip
    assert _whoami(server, old).status_code == 401
    new = _sign_in(server, "alice", NEW_PASSWORD)
    assert _whoami(server, new).json()["role"] == "admin"


def test_revoking_an_accounts_keys_ends_its_sessions(server: DevServer, threads_db: Path) -> None:
    cookie = _sign_in(server, "bob", PASSWORD)
    assert _whoami(server, cookie).status_code == 200
    _crag_users("revoke-keys", "bob", "--threads-db", str(threads_db))
    assert _whoami(server, cookie).status_code == 401


def test_a_new_password_ends_the_accounts_sessions(server: DevServer, threads_db: Path) -> None:
    cookie = _sign_in(server, "bob", PASSWORD)
    assert _whoami(server, cookie).status_code == 200
    _crag_users(
        "password", "bob", "--password-stdin", "--threads-db", str(threads_db),
        stdin=NEW_PASSWORD + "\n",
    )  # fmt: skip
    assert _whoami(server, cookie).status_code == 401
    assert _whoami(server, _sign_in(server, "bob", NEW_PASSWORD)).json()["user"] == "bob"


def test_the_proxy_header_of_a_local_program_is_not_believed(server: DevServer) -> None:
    for headers in (
        {"x-forwarded-user": "carol"},
        {"x-forwarded-user": "carol", "x-crag-proxy-secret": "a guess at the secret"},
    ):
        answer = httpx.get(f"{server.url}/chat/api/session", headers=headers)
        assert answer.status_code == 401, answer.text
        assert "carol" not in answer.text


def test_the_proxy_with_its_secret_signs_a_person_in_with_a_csrf_token_of_their_own(
    server: DevServer,
) -> None:
    proxied = {"x-forwarded-user": "carol", "x-crag-proxy-secret": PROXY_SECRET}
    first = httpx.get(f"{server.url}/chat/api/session", headers=proxied)
    assert first.status_code == 200, first.text
    assert first.json()["user"] == "carol" and first.json()["role"] == "admin"
    second = httpx.get(f"{server.url}/chat/api/session", headers=proxied)
    assert first.json()["csrf"] and second.json()["csrf"] != first.json()["csrf"]
    cookie = next(iter(SimpleCookie(first.headers["set-cookie"]).values()))
    change = {**proxied, "cookie": f"{cookie.key}={cookie.value}"}
    made = httpx.post(
        f"{server.url}/threads", json={}, headers={**change, CSRF: first.json()["csrf"]}
    )
    assert made.status_code == 200, made.text
    wrong = httpx.post(
        f"{server.url}/threads", json={}, headers={**change, CSRF: second.json()["csrf"]}
    )
    assert wrong.status_code == 403, wrong.text


def test_the_sign_in_form_posts_the_token_and_no_log_line_holds_it(server: DevServer) -> None:
    page = httpx.get(f"{server.url}/chat/")
    assert page.status_code == 401
    assert '<form method="post" action="/chat/token">' in page.text
    assert 'method="get"' not in page.text
    name, value = _operator_cookie(server)
    assert _whoami(server, (name, value)).json()["user"] == "operator"
    log = server.log.read_text(encoding="utf-8", errors="replace")
    assert server.token not in log and value not in log


def test_the_cookie_name_is_the_servers_own(
    server: DevServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    name, _ = _operator_cookie(server)
    assert name.startswith("crag_session_")
    other_db = tmp_path_factory.mktemp("other") / "threads.sqlite"
    workdir = tmp_path_factory.mktemp("langgraph_dev_other")
    with langgraph_server(workdir, _env(tmp_path_factory, other_db)) as other:
        other_name, other_value = _operator_cookie(other)
        assert other_name != name
        assert _whoami(server, (name, other_value)).status_code == 401


def test_the_threads_database_is_readable_by_its_owner_only(
    server: DevServer, threads_db: Path
) -> None:
    _operator_cookie(server)  # the server has written to it
    for path in (threads_db, *threads_db.parent.glob(threads_db.name + "-*")):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
