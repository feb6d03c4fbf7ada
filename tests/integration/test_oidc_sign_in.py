"""Sign-in through a real OpenID Connect provider on loopback, end to end in a browser.

``oidc-provider-mock`` (a real provider: discovery, authorization with a form, the token
endpoint, signed ID tokens, JWKS) runs in a thread on 127.0.0.1; ``langgraph dev`` serves crag
with ``CRAG_OIDC_ISSUER`` pointing at it. Headless Chromium opens the chat page, follows "Sign
in with your organisation", signs in at the provider as ``dana`` (whose ``preferred_username``
is ``dana``, an admin by ``CRAG_TEAM_ADMINS``) and as ``erin`` (a member), and lands on the
page signed in; their accounts exist afterwards with those roles. Denying at the provider
leaves the browser signed out, with the sign-in page saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crag.app.web.accounts import Accounts
from crag_bench.dev_server import DevServer
from tests.browser_support import browser, chromium_missing
from tests.server_support import langgraph_server

pytest.importorskip("langgraph_api", reason="the server extra (langgraph-cli[inmem]) is missing")
oidc_provider_mock = pytest.importorskip("oidc_provider_mock", reason="the dev extra is missing")
if chromium_missing():
    pytest.fail(str(chromium_missing()), pytrace=False)

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    people = [
        oidc_provider_mock.User(sub=name, claims={"preferred_username": name})
        for name in ("dana", "erin")
    ]
    with oidc_provider_mock.run_server_in_thread(user_claims=people) as running:
        yield f"http://localhost:{running.server_port}"


@pytest.fixture(scope="module")
def threads_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("threads") / "threads.sqlite"


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, provider: str, threads_db: Path
) -> Iterator[DevServer]:
    env = {
        "CRAG_STORE_PATH": str(tmp_path_factory.mktemp("store") / "chroma"),
        "CRAG_DEFAULT_CORPUS": "false",
        "CRAG_THREADS_DB": str(threads_db),
        "CRAG_OIDC_ISSUER": provider,
        "CRAG_OIDC_CLIENT_ID": "crag",
        "CRAG_OIDC_CLIENT_SECRET": "a client secret of crag's",
        "CRAG_TEAM_ADMINS": "dana",
    }
    with langgraph_server(tmp_path_factory.mktemp("langgraph_dev"), env) as started:
        yield started


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with browser() as launched:
        yield launched


def _sign_in_at_the_provider(chromium: Any, server: DevServer, choice: str) -> Any:
    context = chromium.new_context()
    page = context.new_page()
    page.goto(f"{server.url}/chat/")
    page.get_by_text("Sign in with your organisation").click()
    page.wait_for_selector("input[name='sub']", timeout=30_000)
    if choice == "deny":
        page.get_by_role("button", name="Deny").click()
    else:
        page.locator("input[name='sub']").fill(choice)
        page.get_by_role("button", name="Authorize").click()
    return context, page


@pytest.mark.parametrize(("name", "role"), [("dana", "admin"), ("erin", "member")])
def test_a_person_signs_in_through_the_provider_and_gets_an_account(
    server: DevServer, chromium: Any, threads_db: Path, name: str, role: str
) -> None:
    context, page = _sign_in_at_the_provider(chromium, server, name)
    try:
        page.wait_for_selector("body[data-ready='true']", timeout=60_000)
        assert page.locator("#signed-in").inner_text() == f"Signed in as {name}"
        assert page.url == f"{server.url}/chat/"
    finally:
        context.close()
    account = Accounts(threads_db).get(name)
    assert account is not None and account.role == role
    # No password opens an account the provider made.
    assert Accounts(threads_db).check_password(name, "") is None


def test_denying_at_the_provider_leaves_the_browser_signed_out(
    server: DevServer, chromium: Any
) -> None:
    context, page = _sign_in_at_the_provider(chromium, server, "deny")
    try:
        page.wait_for_selector("text=did not succeed", timeout=30_000)
        assert "crag_session" not in {c["name"] for c in context.cookies()}
    finally:
        context.close()
