"""Sign-in through a real OpenID Connect provider on loopback, end to end in a browser.

``oidc-provider-mock`` (a real provider: discovery, authorization with a form, the token
endpoint, signed ID tokens, JWKS) runs in a thread on 127.0.0.1; ``langgraph dev`` serves crag
with ``CRAG_OIDC_ISSUER`` pointing at it. Headless Chromium opens the chat page, follows "Sign
in with your organisation", signs in at the provider as one of its people (the form takes the
``sub``; each person's claims are set below) and lands on the page signed in, or on the sign-in
page saying why not.

The provider's people are known by (issuer, subject), never by the name they go by: a provider
user whose ``preferred_username`` names a password account (``alice``, the admin ``carol``),
the same name in capitals, or a name ``CRAG_TEAM_ADMINS`` lists, gets a member account of its
own and changes nothing of the others. An account the operator removed stays removed, also
when an account of the same name is made again, until the operator links it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import langgraph_api  # noqa: F401 - the server extra: missing, the test fails (never skips)
import oidc_provider_mock
import pytest

from crag.app.web.accounts import Account, Accounts
from crag.app.web.provider_identities import ProviderIdentities, ProviderUser
from crag_bench.dev_server import DevServer
from tests.browser_support import chromium_missing
from tests.server_support import langgraph_server

if chromium_missing():
    pytest.fail(str(chromium_missing()), pytrace=False)

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]


PASSWORD = "a password of twelve or more"
PEOPLE = {
    # sub: preferred_username
    "dana": "dana",
    "erin": "erin",
    "mallory": "alice",
    "shouting": "ALICE ",
    "carol-at-provider": "carol",
    "frank": "frank",
}


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    people = [
        oidc_provider_mock.User(sub=sub, claims={"preferred_username": name})
        for sub, name in PEOPLE.items()
    ]
    with oidc_provider_mock.run_server_in_thread(user_claims=people) as running:
        yield f"http://localhost:{running.server_port}"


@pytest.fixture(scope="module")
def threads_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The threads database, with the password accounts alice (a member) and carol (an admin)."""
    path = tmp_path_factory.mktemp("threads") / "threads.sqlite"
    with Accounts(path) as accounts:
        accounts.add("alice", PASSWORD)
        accounts.add("carol", PASSWORD, "admin")
    return path


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


def _signed_in_as(chromium: Any, server: DevServer, sub: str) -> str:
    """Sign in at the provider as ``sub``: the name the page says, or the refusal's text."""
    context, page = _sign_in_at_the_provider(chromium, server, sub)
    try:
        page.wait_for_selector("body[data-ready='true'], [role='alert']", timeout=60_000)
        if page.locator("#signed-in").count():
            return str(page.locator("#signed-in").inner_text()).removeprefix("Signed in as ")
        return "refused: " + str(page.locator("[role='alert']").inner_text())
    finally:
        context.close()


def test_a_person_signs_in_through_the_provider_and_gets_a_member_account(
    server: DevServer, chromium: Any, threads_db: Path
) -> None:
    assert _signed_in_as(chromium, server, "erin") == "erin"
    account = Accounts(threads_db).get("erin")
    assert account is not None and account.role == "member"
    # No password opens an account the provider made.
    assert Accounts(threads_db).check_password("erin", "") is None
    # The second sign-in finds the same account.
    assert _signed_in_as(chromium, server, "erin") == "erin"


@pytest.mark.parametrize(
    ("sub", "taken"), [("mallory", "alice"), ("shouting", "alice"), ("carol-at-provider", "carol")]
)
def test_a_provider_name_never_enters_an_account_of_that_name(
    server: DevServer, chromium: Any, threads_db: Path, sub: str, taken: str
) -> None:
    name = _signed_in_as(chromium, server, sub)
    assert name != taken and name.startswith(f"{taken}-"), name
    accounts = Accounts(threads_db)
    assert accounts.get(name) == Account(name, "member")
    # The password account keeps its role and its password.
    kept = accounts.get(taken)
    assert kept is not None and kept.role == ("admin" if taken == "carol" else "member")
    assert accounts.check_password(taken, PASSWORD) is not None


def test_a_name_the_operator_made_admin_gives_a_provider_user_nothing(
    server: DevServer, chromium: Any, threads_db: Path
) -> None:
    """``CRAG_TEAM_ADMINS=dana`` does not make the provider's dana an admin: roles are the
    operator's, set with ``crag users role``, and a sign-in never changes them."""
    assert _signed_in_as(chromium, server, "dana") == "dana"
    accounts = Accounts(threads_db)
    assert accounts.get("dana") == Account("dana", "member")
    accounts.set_role("dana", "admin")
    assert _signed_in_as(chromium, server, "dana") == "dana"
    made = accounts.get("dana")
    assert made is not None and made.role == "admin"


def test_an_account_the_operator_removed_stays_removed_until_linked(
    server: DevServer, chromium: Any, threads_db: Path, provider: str
) -> None:
    assert _signed_in_as(chromium, server, "frank") == "frank"
    accounts = Accounts(threads_db)
    accounts.remove("frank")
    refused = _signed_in_as(chromium, server, "frank")
    assert refused.startswith("refused: ") and "removed" in refused, refused
    assert accounts.get("frank") is None
    # An account made again under the name is not the provider user's either.
    accounts.add("frank", PASSWORD, reuse_name=True)
    assert _signed_in_as(chromium, server, "frank").startswith("refused: ")
    # The operator links them on purpose: then they sign in as that account.
    ProviderIdentities(accounts).link("frank", ProviderUser(provider, "frank"))
    assert _signed_in_as(chromium, server, "frank") == "frank"


def test_denying_at_the_provider_leaves_the_browser_signed_out(
    server: DevServer, chromium: Any
) -> None:
    context, page = _sign_in_at_the_provider(chromium, server, "deny")
    try:
        page.wait_for_selector("text=did not succeed", timeout=30_000)
        assert not [c for c in context.cookies() if c["name"].startswith("crag_session")]
    finally:
        context.close()
