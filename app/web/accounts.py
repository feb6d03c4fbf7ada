"""A team's accounts: names, roles, password hashes and API keys, in the threads database.

The operator creates accounts (``crag users add NAME``); nobody signs up. Each account has a
role, ``member`` or ``admin``, a password hashed with argon2id (``pwdlib``, the server extra),
and API keys: random secrets shown once and kept as their SHA-256 (a key has 256 bits of
entropy, so a fast hash is enough; a password does not, so it gets argon2). The accounts live
in two tables of the threads database (``CRAG_THREADS_DB``: ``.crag/threads.sqlite`` by
default, which ``make serve`` and ``crag`` share when run from the same folder, or a
PostgreSQL database that several servers share: :mod:`crag.app.web.account_store`).

Failed sign-ins are slowed per account (:class:`SignInThrottle`): after
:data:`FAILURES_BEFORE_LOCK` failures within :data:`LOCK_SECONDS`, the account's sign-in is
refused until that time has passed, whatever password is sent.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from crag.app.web.account_store import AccountDatabase, AccountStoreError, Cursor

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
KEY_PREFIX = "crag_"
"""API keys start with this, so a key pasted somewhere is recognisable (and revocable)."""
MIN_PASSWORD_CHARS = 12
NO_PASSWORD = "!"
"""The password hash of an account made by the identity provider: no password opens it."""
FAILURES_BEFORE_LOCK = 5
LOCK_SECONDS = 300.0
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

    def add(self, name: str, password: str, role: Role = "member") -> str:
        """Make an account; its first API key (shown once).

        Raises:
            AccountError: A bad or taken name, or a password under 12 characters.
        """
        check_name(name)
        if len(password) < MIN_PASSWORD_CHARS:
            raise AccountError(f"a password has at least {MIN_PASSWORD_CHARS} characters")
        digest = _hasher().hash(password)
        with self._connection(create=True) as db:
            try:
                db.execute(
                    "INSERT INTO crag_accounts VALUES (?, ?, ?, ?)",
                    (name, role, digest, time.time()),
                )
            except self.database.integrity_errors():
                raise AccountError(f"there is already an account named {name!r}") from None
            return self._new_key(db, name)

    def ensure(self, name: str, role: Role) -> Account:
        """The account ``name`` of a person the team's identity provider let in.

        Made on their first sign-in, with no password (they sign in through the provider
        only) and ``role``; an existing account's role follows ``role`` (the operator's list
        of admins decides).
        """
        check_name(name)
        with self._connection(create=True) as db:
            db.execute(
                "INSERT INTO crag_accounts VALUES (?, ?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET role = excluded.role",
                (name, role, NO_PASSWORD, time.time()),
            )
        return Account(name, role)

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
        """Remove every API key of ``name``; how many there were."""
        with self._connection() as db:
            self._require(db, name)
            removed: int = db.execute("DELETE FROM crag_api_keys WHERE name = ?", (name,)).rowcount
            return removed

    def remove(self, name: str) -> None:
        """Remove the account, its keys with it (its sessions end at their next request)."""
        with self._connection() as db:
            self._require(db, name)
            db.execute("DELETE FROM crag_accounts WHERE name = ?", (name,))

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
        """The account if ``password`` is its own, else ``None`` (the same time either way)."""
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


class SignInThrottle:
    """Failed sign-ins per account name: locked after too many within a while.

    Counted in the accounts' database when one is given, so that every server sharing it
    (several replicas on one PostgreSQL) counts the same failures; else in this process.
    """

    def __init__(
        self,
        failures: int = FAILURES_BEFORE_LOCK,
        seconds: float = LOCK_SECONDS,
        database: AccountDatabase | None = None,
    ) -> None:
        self.failures, self.seconds = failures, seconds
        self.database = database
        self._seen: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, name: str, now: float) -> list[float]:
        times = [t for t in self._seen.get(name, []) if now - t < self.seconds]
        self._seen[name] = times
        return times

    def locked(self, name: str) -> bool:
        """Whether ``name``'s sign-in is refused for now."""
        if self.database is not None:
            with self.database.transaction() as db:
                row = db.execute(
                    "SELECT COUNT(*) FROM crag_sign_in_failures WHERE name = ? AND at > ?",
                    (name, time.time() - self.seconds),
                ).fetchone()
            return int(row[0]) >= self.failures
        with self._lock:
            return len(self._recent(name, time.monotonic())) >= self.failures

    def failed(self, name: str) -> None:
        """Count a failed sign-in of ``name`` (older failures, anyone's, are forgotten)."""
        if self.database is not None:
            now = time.time()
            with self.database.transaction() as db:
                db.execute("DELETE FROM crag_sign_in_failures WHERE at <= ?", (now - self.seconds,))
                db.execute("INSERT INTO crag_sign_in_failures VALUES (?, ?)", (name, now))
            return
        with self._lock:
            now = time.monotonic()
            self._recent(name, now).append(now)

    def succeeded(self, name: str) -> None:
        """Forget ``name``'s failures."""
        if self.database is not None:
            with self.database.transaction() as db:
                db.execute("DELETE FROM crag_sign_in_failures WHERE name = ?", (name,))
            return
        with self._lock:
            self._seen.pop(name, None)
