"""Provider users bound to accounts by (issuer, subject), on SQLite and on a real PostgreSQL.

The names a provider user goes by are labels: they never lead into another account, a taken
one gets a number, a removed account stays removed, and racing first sign-ins of one person
make one account.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from crag.app.web.accounts import Account, AccountError, Accounts
from crag.app.web.provider_identities import (
    ProviderIdentities,
    ProviderUser,
    RemovedAccountError,
    label_name,
)

ISSUER = "https://id.example.org"
PASSWORD = "correct horse battery"


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("alice", "alice"),
        ("ALICE ", "alice"),
        ("Dana Scully", "dana-scully"),
        ("alice@example.org", "alice-example.org"),
        ("\u0430lice", "lice"),  # a Cyrillic a is no letter of an account name
        ("operator", "user"),
        ("", "user"),
        ("7", "user"),
    ],
)
def test_a_label_becomes_an_account_name(label: str, name: str) -> None:
    assert label_name(label) == name


def test_a_provider_user_gets_an_account_of_its_own_and_keeps_it(accounts: Accounts) -> None:
    identities = ProviderIdentities(accounts)
    first = identities.sign_in(ProviderUser(ISSUER, "sub-1", "erin"))
    assert first == Account("erin", "member")
    assert identities.sign_in(ProviderUser(ISSUER, "sub-1", "someone else now")) == first
    assert accounts.check_password("erin", "") is None


def test_a_name_of_an_existing_account_is_never_entered(accounts: Accounts) -> None:
    accounts.add("alice", PASSWORD)
    accounts.add("carol", PASSWORD, "admin")
    identities = ProviderIdentities(accounts)
    assert identities.sign_in(ProviderUser(ISSUER, "mallory", "alice")).name == "alice-2"
    assert identities.sign_in(ProviderUser(ISSUER, "shouting", "ALICE ")).name == "alice-3"
    assert identities.sign_in(ProviderUser(ISSUER, "c", "carol")) == Account("carol-2", "member")
    assert accounts.get("carol") == Account("carol", "admin")
    # The same subject at another issuer is another person.
    assert identities.sign_in(ProviderUser("https://other.example", "c", "carol")).name == (
        "carol-3"
    )


def test_roles_are_the_operators_and_a_sign_in_changes_none(accounts: Accounts) -> None:
    identities = ProviderIdentities(accounts)
    identities.sign_in(ProviderUser(ISSUER, "d", "dana"))
    accounts.set_role("dana", "admin")
    assert identities.sign_in(ProviderUser(ISSUER, "d", "dana")) == Account("dana", "admin")
    with pytest.raises(AccountError, match="no account named"):
        accounts.set_role("nobody", "admin")


def test_a_removed_account_stays_removed_until_the_operator_links_it(accounts: Accounts) -> None:
    identities = ProviderIdentities(accounts)
    frank = ProviderUser(ISSUER, "f", "frank")
    identities.sign_in(frank)
    accounts.remove("frank")
    with pytest.raises(RemovedAccountError, match="removed"):
        identities.sign_in(frank)
    assert accounts.get("frank") is None
    accounts.add("frank", PASSWORD, reuse_name=True)  # made again: not the provider user's
    with pytest.raises(RemovedAccountError):
        identities.sign_in(frank)
    # Nor does another provider user labelled frank get the name.
    assert identities.sign_in(ProviderUser(ISSUER, "g", "frank")).name == "frank-2"
    identities.link("frank", frank)
    assert identities.sign_in(frank) == Account("frank", "member")
    assert identities.bound_to("frank") == [ProviderUser(ISSUER, "f")]
    with pytest.raises(AccountError, match="no account named"):
        identities.link("nobody", frank)


def test_racing_first_sign_ins_of_one_person_make_one_account(accounts: Accounts) -> None:
    identities = ProviderIdentities(accounts)
    accounts.add("zed", PASSWORD)  # the database exists before the race
    results: list[Account | Exception] = []

    def sign_in() -> None:
        try:
            results.append(identities.sign_in(ProviderUser(ISSUER, "same", "hana")))
        except AccountError as exc:  # a loser of every retry says so: never a second account
            results.append(exc)

    threads = [threading.Thread(target=sign_in) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {r.name for r in results if isinstance(r, Account)} == {"hana"}
    assert [a.name for a in accounts.all()] == ["hana", "zed"]


def test_an_identity_without_issuer_or_subject_is_refused(accounts: Accounts) -> None:
    with pytest.raises(AccountError, match="no issuer or subject"):
        ProviderIdentities(accounts).sign_in(ProviderUser(ISSUER, "", "x"))


def test_crag_users_role_and_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crag.app.cli.commands import main

    database = str(tmp_path / "t.sqlite")
    with Accounts(database) as accounts:
        accounts.add("ivan", PASSWORD)
    assert main(["users", "role", "ivan", "admin", "--threads-db", database]) == 0
    assert "ivan is now an admin" in capsys.readouterr().err
    link = ["users", "link", "ivan", "--issuer", ISSUER, "--subject", "s-9"]
    assert main([*link, "--threads-db", database]) == 0
    with Accounts(database) as accounts:
        assert accounts.get("ivan") == Account("ivan", "admin")
        signed_in = ProviderIdentities(accounts).sign_in(ProviderUser(ISSUER, "s-9", "other"))
        assert signed_in == Account("ivan", "admin")
    assert main(["users", "role", "nobody", "member", "--threads-db", database]) == 2
    assert "no account named 'nobody'" in capsys.readouterr().err


def test_a_removed_accounts_name_is_made_again_only_on_purpose(accounts: Accounts) -> None:
    """What was alice's under her name (threads, documents) would be the new alice's."""
    accounts.add("alice", PASSWORD)
    accounts.remove("alice")
    with pytest.raises(AccountError, match="was a removed account's"):
        accounts.add("alice", PASSWORD)
    # Nor does the provider hand the name out.
    alice = ProviderIdentities(accounts).sign_in(ProviderUser(ISSUER, "a", "alice"))
    assert alice.name == "alice-2"
    accounts.add("alice", PASSWORD, reuse_name=True)
    assert accounts.get("alice") == Account("alice", "member")
