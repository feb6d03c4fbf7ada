"""A team's accounts: names, roles, password hashes and API keys, in the threads database.

The operator creates accounts (``crag users add NAME``); nobody signs up. Each account has a
role, ``member`` or ``admin``, a password hashed with argon2id (``pwdlib``, the server extra),
and API keys: random secrets shown once and kept as their SHA-256 (a key has 256 bits of
entropy, so a fast hash is enough; a password does not, so it gets argon2). The accounts live
in two tables of the threads database (``CRAG_THREADS_DB``: ``.crag/threads.sqlite`` by
default, which ``make serve`` and ``crag`` share when run from the same folder, or a
PostgreSQL database that several servers share: :mod:`crag.app.web.account_store`).

Failed sign-ins are slowed per account and per client address, and password checks run on a
small pool of their own (:mod:`crag.app.web.sign_in_guard`, whose :class:`SignInThrottle` is
imported here too). A password has at most :data:`MAX_PASSWORD_CHARS` characters: a longer
one is refused before it is hashed.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from crag.app.web.account_store import AccountDatabase, AccountStoreError, Cursor
from crag.app.web.sessions import end_account_sessions
from crag.app.web.sign_in_guard import SignInThrottle

if TYPE_CHECKING:
    from pwdlib import PasswordHash

__all__ = [
    "KEY_PREFIX",
    "Account",
    "AccountError",
    "Accounts",
    "Role",
    "SignInThrottle",
    "check_name",
]

Role = Literal["admin", "member"]
"""An account's role (docs/security.md): an ``admin`` sees and changes everything, a ``member``
only their own threads, runs and documents. The one definition: credentials imports it."""
KEY_PREFIX = "crag_"
"""API keys start with this, so a key pasted somewhere is recognisable (and revocable)."""
MIN_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 1_024
"""The longest password: a longer one is refused before argon2 spends time and memory on it."""
NO_PASSWORD = "!"
"""The password hash of an account made by the identity provider: no password opens it."""
_NAME = re.compile(r"[a-z][a-z0-9._-]{1,39}")
_RESERVED = frozenset({"operator", "admin", "root", "system"})


class AccountError(ValueError):
    """An account that cannot be made, found or changed: one sentence."""


@dataclass(frozen=True)
class Account:
    """One person's account."""

    name: str
    role: Role
    keys: int = 0


def check_name(name: str) -> str:
    """``name`` if it may name an account: 2-40 of ``a-z0-9._-``, starting with a letter."""
    if not _NAME.fullmatch(name):
        raise AccountError(
            f"an account's name is 2 to 40 lower-case letters, digits, '.', '_' or '-', "
            f"starting with a letter, not {name[:60]!r}"
        )
    if name in _RESERVED:
        raise AccountError(f"the name {name!r} is reserved: choose another")
    return name


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _password_hash(password: str) -> str:
    """The argon2 hash of a new password, within the bounds a password has."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise AccountError(f"a password has at least {MIN_PASSWORD_CHARS} characters")
    if len(password) > MAX_PASSWORD_CHARS:
        raise AccountError(f"a password has at most {MAX_PASSWORD_CHARS:,} characters")
    return _hasher().hash(password)


def _hasher() -> PasswordHash:
    from pwdlib import PasswordHash

    return PasswordHash.recommended()


class Accounts:
    """The accounts of one threads database (a SQLite file or a PostgreSQL database)."""

    def __init__(self, target: str | Path) -> None:
        self.database = AccountDatabase(target)

    def __enter__(self) -> Accounts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.database.close()

    @contextmanager
    def _connection(self, *, create: bool = False) -> Iterator[Cursor]:
        if not create and not self.database.exists():
            raise AccountError(
                f"there are no accounts yet: the threads database {self.database.describe()} "
                "does not exist (crag users add NAME makes the first)"
            )
        try:
            with self.database.transaction() as cursor:
                yield cursor
        except AccountStoreError as exc:
            raise AccountError(str(exc)) from None

    def add(
        self, name: str, password: str, role: Role = "member", *, reuse_name: bool = False
    ) -> str:
        """Make an account; its first API key (shown once).

        A removed account's name is retired: what was that account's under its name (threads,
        runs, documents) would be the new account's, so it is refused unless ``reuse_name``.

        Raises:
            AccountError: A bad, taken or retired name, or a password under 12 characters.
        """
        check_name(name)
        digest = _password_hash(password)
        with self._connection(create=True) as db:
            retired = db.execute("SELECT 1 FROM crag_retired_names WHERE name = ?", (name,))
            if retired.fetchone() is not None and not reuse_name:
                raise AccountError(
                    f"the name {name!r} was a removed account's, whose threads and documents "
                    "are still under it: choose another name, or reuse it on purpose "
                    "(crag users add --reuse-name) to give them to the new account"
                )
            db.execute("DELETE FROM crag_retired_names WHERE name = ?", (name,))
            try:
                db.execute(
                    "INSERT INTO crag_accounts VALUES (?, ?, ?, ?)",
                    (name, role, digest, time.time()),
                )
            except self.database.integrity_errors():
                raise AccountError(f"there is already an account named {name!r}") from None
            return self._new_key(db, name)

    def set_password(self, name: str, password: str) -> None:
        """Give ``name`` a new password; every session of theirs ends (their keys stay).

        Raises:
            AccountError: No such account, or a password under 12 or over 1,024 characters.
        """
        digest = _password_hash(password)
        with self._connection() as db:
            self._require(db, name)
            db.execute("UPDATE crag_accounts SET password_hash = ? WHERE name = ?", (digest, name))
            end_account_sessions(db, name)

    def transaction(self, *, create: bool = False) -> AbstractContextManager[Cursor]:
        """One transaction on the accounts' database, for the tables kept beside the accounts.

        Raises:
            AccountError: There is no database yet (unless ``create``), or it cannot be used.
        """
        return self._connection(create=create)

    def set_role(self, name: str, role: Role) -> None:
        """Make ``name`` an admin or a member: the operator's decision, never a sign-in's."""
        with self._connection() as db:
            self._require(db, name)
            db.execute("UPDATE crag_accounts SET role = ? WHERE name = ?", (role, name))

    @staticmethod
    def _new_key(db: Cursor, name: str) -> str:
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        db.execute(
            "INSERT INTO crag_api_keys VALUES (?, ?, ?)", (_key_hash(key), name, time.time())
        )
        return key

    def new_key(self, name: str) -> str:
        """Another API key for ``name`` (shown once)."""
        with self._connection() as db:
            self._require(db, name)
            return self._new_key(db, name)

    def revoke_keys(self, name: str) -> int:
        """Remove every API key of ``name``, and end its sessions; how many keys there were."""
        with self._connection() as db:
            self._require(db, name)
            removed: int = db.execute("DELETE FROM crag_api_keys WHERE name = ?", (name,)).rowcount
            end_account_sessions(db, name)
            return removed

    def remove(self, name: str) -> None:
        """Remove the account, its keys and its sessions with it; its name is retired.

        A new account of the same name starts with none of them, and is made only on purpose
        (:meth:`add` with ``reuse_name``).
        """
        with self._connection() as db:
            self._require(db, name)
            end_account_sessions(db, name)  # ON DELETE CASCADE too; said here for clarity
            db.execute("DELETE FROM crag_accounts WHERE name = ?", (name,))
            db.execute("DELETE FROM crag_retired_names WHERE name = ?", (name,))
            db.execute("INSERT INTO crag_retired_names VALUES (?, ?)", (name, time.time()))

    def all(self) -> list[Account]:
        """Every account, by name, with its number of keys."""
        try:
            with self._connection() as db:
                rows = db.execute(
                    "SELECT a.name, a.role, COUNT(k.key_hash) FROM crag_accounts a "
                    "LEFT JOIN crag_api_keys k ON k.name = a.name GROUP BY a.name ORDER BY a.name"
                ).fetchall()
        except AccountError:
            return []
        return [Account(name, role, keys) for name, role, keys in rows]

    def get(self, name: str) -> Account | None:
        """The account ``name``, or ``None``."""
        if not self.database.exists():
            return None
        with self._connection() as db:
            row = db.execute("SELECT name, role FROM crag_accounts WHERE name = ?", (name,))
            found = row.fetchone()
        return Account(found[0], found[1]) if found else None

    def standing(self, name: str) -> Role | Literal["removed"] | None:
        """The role of the account ``name`` now; ``"removed"`` when its name is retired.

        ``None``: no account of this database ever had the name (the operator, a person the
        trusted proxy names). A served run checks its caller with it when it starts.
        """
        if not self.database.exists():
            return None
        with self._connection() as db:
            row = db.execute("SELECT role FROM crag_accounts WHERE name = ?", (name,)).fetchone()
            if row is not None:
                role: Role = row[0]
                return role
            retired = db.execute("SELECT 1 FROM crag_retired_names WHERE name = ?", (name,))
            return "removed" if retired.fetchone() is not None else None

    def by_key(self, key: str) -> Account | None:
        """The account an API key belongs to, or ``None``."""
        if not key.startswith(KEY_PREFIX) or not self.database.exists():
            return None
        with self._connection() as db:
            row = db.execute(
                "SELECT a.name, a.role FROM crag_api_keys k JOIN crag_accounts a "
                "ON a.name = k.name WHERE k.key_hash = ?",
                (_key_hash(key),),
            ).fetchone()
        return Account(row[0], row[1]) if row else None

    def check_password(self, name: str, password: str) -> Account | None:
        """The account if ``password`` is its own, else ``None`` (the same time either way).

        A password over :data:`MAX_PASSWORD_CHARS` is no account's: ``None`` at once, unhashed.
        """
        if len(password) > MAX_PASSWORD_CHARS:
            return None
        row = None
        if self.database.exists() and _NAME.fullmatch(name):
            with self._connection() as db:
                row = db.execute(
                    "SELECT name, role, password_hash FROM crag_accounts WHERE name = ?", (name,)
                ).fetchone()
        hasher = _hasher()
        if row is None or row[2] == NO_PASSWORD:
            hasher.hash(password)  # as slow as a real check: no telling which names exist
            return None
        return Account(row[0], row[1]) if hasher.verify(password, row[2]) else None

    def _require(self, db: Cursor, name: str) -> None:
        if db.execute("SELECT 1 FROM crag_accounts WHERE name = ?", (name,)).fetchone() is None:
            raise AccountError(f"there is no account named {name[:60]!r}")
