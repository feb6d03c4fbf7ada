"""People the team's OpenID Connect provider vouches for, bound to accounts by (issuer, subject).

A provider's user is known by what the provider vouches for: its issuer and the ID token's
``sub``, stable and unique per provider. Never by a name (``preferred_username``, ``email``):
people often choose those, so a name says nothing about whose account it is.

* The first sign-in of an (issuer, subject) makes a **new member account** for it, named after
  the claim ``oidc_name_claim`` when that name is free and was never bound to another provider
  user, else that name with a number (``alice-2``). The name is a label: a provider user never
  enters an account it was not made for (a password account, another provider user's).
* Later sign-ins find the account by (issuer, subject) and change nothing of it: roles are the
  operator's (``crag users role NAME admin``), never a sign-in's.
* An account the operator removed **stays removed**: the binding keeps the account's creation
  time, so neither the provider user's next sign-in nor an account made again under the same
  name (``crag users add``) lets it back in, until the operator links it on purpose
  (:meth:`ProviderIdentities.link`, ``crag users link NAME --issuer ISS --subject SUB``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from crag.app.web.account_store import Cursor
from crag.app.web.accounts import NO_PASSWORD, Account, AccountError, Accounts, check_name

__all__ = ["ProviderIdentities", "ProviderUser", "RemovedAccountError", "label_name"]

_OTHER_CHARS = re.compile(r"[^a-z0-9._-]+")
_MAX_BASE_CHARS = 36
"""Room for a number after the label (``-99``) within an account name's 40 characters."""
_MAX_NUMBER = 99
_ATTEMPTS = 3
"""Transactions tried when two first sign-ins race for one name or one identity."""


class RemovedAccountError(AccountError):
    """A provider user whose account the operator removed."""


@dataclass(frozen=True)
class ProviderUser:
    """Who the provider vouches for: its issuer and subject, and the name the user goes by."""

    issuer: str
    subject: str
    label: str = ""


def label_name(label: str) -> str:
    """An account name made from a provider's name claim (``"ALICE "`` → ``alice``).

    Characters an account name may not hold become ``-``; a label that still names no account
    (empty, reserved, not starting with a letter) becomes ``user``.
    """
    base = _OTHER_CHARS.sub("-", label.strip().lower()).strip("-._")[:_MAX_BASE_CHARS]
    try:
        return check_name(base)
    except AccountError:
        return "user"


class ProviderIdentities:
    """The bindings of provider users to accounts, in the accounts' database."""

    def __init__(self, accounts: Accounts) -> None:
        self.accounts = accounts
        self.database = accounts.database

    def sign_in(self, user: ProviderUser) -> Account:
        """The account of ``user``: its own, or a new member account on its first sign-in.

        Raises:
            RemovedAccountError: The operator removed the account bound to ``user``.
            AccountError: The accounts' database cannot be used.
        """
        if not user.issuer or not user.subject:
            raise AccountError("the provider's ID token names no issuer or subject")
        for attempt in range(_ATTEMPTS):
            try:
                with self.accounts.transaction(create=True) as db:
                    return self._bound(db, user) or self._new_account(db, user)
            except self.database.integrity_errors():
                if attempt == _ATTEMPTS - 1:
                    raise AccountError("the sign-in raced another one; try again") from None
        raise AssertionError("unreachable")

    def _bound(self, db: Cursor, user: ProviderUser) -> Account | None:
        """The account bound to ``user``, ``None`` if none is, or a refusal if it was removed."""
        row = db.execute(
            "SELECT name, account_created FROM crag_provider_identities "
            "WHERE issuer = ? AND subject = ?",
            (user.issuer, user.subject),
        ).fetchone()
        if row is None:
            return None
        account = db.execute(
            "SELECT name, role, created FROM crag_accounts WHERE name = ?", (row[0],)
        ).fetchone()
        if account is None or float(account[2]) != float(row[1]):
            raise RemovedAccountError(
                "the operator removed this account: ask them to let you in again"
            )
        return Account(account[0], account[1])

    def _new_account(self, db: Cursor, user: ProviderUser) -> Account:
        """A new member account for ``user``, under the first free name its label gives."""
        name = self._free_name(db, label_name(user.label))
        created = time.time()
        db.execute(
            "INSERT INTO crag_accounts VALUES (?, ?, ?, ?)",
            (name, "member", NO_PASSWORD, created),
        )
        db.execute(
            "INSERT INTO crag_provider_identities VALUES (?, ?, ?, ?, ?)",
            (user.issuer, user.subject, name, created, created),
        )
        return Account(name, "member")

    @staticmethod
    def _free_name(db: Cursor, base: str) -> str:
        """``base``, or ``base-2``...: a name no account has, had, or any binding ever had."""
        for number in range(1, _MAX_NUMBER + 1):
            name = base if number == 1 else f"{base}-{number}"
            taken = db.execute(
                "SELECT 1 FROM crag_accounts WHERE name = ? UNION ALL "
                "SELECT 1 FROM crag_retired_names WHERE name = ? UNION ALL "
                "SELECT 1 FROM crag_provider_identities WHERE name = ?",
                (name, name, name),
            ).fetchone()
            if taken is None:
                return name
        raise AccountError(f"every account name from {base!r} to {base}-{_MAX_NUMBER} is taken")

    def link(self, name: str, user: ProviderUser) -> None:
        """Bind ``user`` to the account ``name``, on the operator's word (replacing a binding).

        Raises:
            AccountError: There is no account ``name``.
        """
        with self.accounts.transaction() as db:
            row = db.execute("SELECT created FROM crag_accounts WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise AccountError(f"there is no account named {name[:60]!r}")
            db.execute(
                "DELETE FROM crag_provider_identities WHERE issuer = ? AND subject = ?",
                (user.issuer, user.subject),
            )
            db.execute(
                "INSERT INTO crag_provider_identities VALUES (?, ?, ?, ?, ?)",
                (user.issuer, user.subject, name, row[0], time.time()),
            )

    def bound_to(self, name: str) -> list[ProviderUser]:
        """The provider users bound to the account ``name`` (for ``crag users list``)."""
        with self.accounts.transaction() as db:
            rows = db.execute(
                "SELECT issuer, subject FROM crag_provider_identities WHERE name = ? "
                "ORDER BY issuer, subject",
                (name,),
            ).fetchall()
        return [ProviderUser(issuer, subject) for issuer, subject in rows]
