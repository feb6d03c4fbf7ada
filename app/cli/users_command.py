"""``crag users``: the operator makes and removes a team's accounts and their API keys.

The accounts live in the threads database (``CRAG_THREADS_DB`` or ``--threads-db``; the
default ``.crag/threads.sqlite``, or a ``postgresql://`` one), which ``make serve`` reads when
run from the same folder (or with the same setting).
An API key is printed once, on standard output; nothing else is.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from crag.app.web.accounts import AccountError, Accounts, Role

__all__ = ["add_users_command"]


def _accounts(args: argparse.Namespace) -> Accounts:
    from crag.app.threads import configured_threads_db

    return Accounts(args.threads_db or configured_threads_db())


def _password(args: argparse.Namespace) -> str:
    """The new account's password: a line of standard input, or asked twice at a terminal."""
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    if not sys.stdin.isatty():
        raise AccountError("no terminal to ask the password at: send it with --password-stdin")
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise AccountError("the two passwords differ")
    return first


def _err(message: str) -> None:
    print(message, file=sys.stderr)  # noqa: T201


def cmd_users_add(args: argparse.Namespace) -> int:
    """Make an account and print its first API key."""
    role: Role = "admin" if args.admin else "member"
    with _accounts(args) as accounts:
        key = accounts.add(args.name, _password(args), role, reuse_name=args.reuse_name)
        _err(f"crag users: made {args.name} ({role}) in {accounts.database.describe()}")
    print(key)  # noqa: T201
    return 0


def cmd_users_key(args: argparse.Namespace) -> int:
    """Print a new API key of an account."""
    with _accounts(args) as accounts:
        print(accounts.new_key(args.name))  # noqa: T201
    return 0


def cmd_users_revoke(args: argparse.Namespace) -> int:
    """Remove every API key of an account."""
    with _accounts(args) as accounts:
        removed = accounts.revoke_keys(args.name)
    _err(f"crag users: removed {removed} key(s) of {args.name}")
    return 0


def cmd_users_remove(args: argparse.Namespace) -> int:
    """Remove an account and its keys."""
    with _accounts(args) as accounts:
        accounts.remove(args.name)
    _err(f"crag users: removed {args.name}")
    return 0


def cmd_users_password(args: argparse.Namespace) -> int:
    """Give an account a new password; its sessions end."""
    with _accounts(args) as accounts:
        accounts.set_password(args.name, _password(args))
    _err(f"crag users: {args.name} has a new password; their sessions have ended")
    return 0


def cmd_users_role(args: argparse.Namespace) -> int:
    """Make an account an admin or a member."""
    with _accounts(args) as accounts:
        accounts.set_role(args.name, args.role)
    _err(f"crag users: {args.name} is now {'an admin' if args.role == 'admin' else 'a member'}")
    return 0


def cmd_users_link(args: argparse.Namespace) -> int:
    """Bind a person of the OpenID Connect provider (issuer, subject) to an account."""
    from crag.app.web.provider_identities import ProviderIdentities, ProviderUser

    with _accounts(args) as accounts:
        ProviderIdentities(accounts).link(args.name, ProviderUser(args.issuer, args.subject))
    _err(f"crag users: {args.subject!r} of {args.issuer} now signs in as {args.name}")
    return 0


def cmd_users_list(args: argparse.Namespace) -> int:
    """One line per account: name, role, number of keys."""
    with _accounts(args) as accounts:
        for account in accounts.all():
            print(f"{account.name}\t{account.role}\t{account.keys} key(s)")  # noqa: T201
    return 0


def add_users_command(sub: Any) -> None:
    """``crag users add|list|key|revoke-keys|remove|password|role|link``."""
    users = sub.add_parser(
        "users",
        help="the team's accounts on the LangGraph server (docs/security.md)",
        description="Make and remove the accounts that may sign in to the LangGraph server "
        "(make serve) and their API keys. Kept in the threads database.",
    )
    actions = users.add_subparsers(dest="action", required=True)

    def action(name: str, func: Any, help_text: str, *, named: bool = True) -> Any:
        parser = actions.add_parser(name, help=help_text)
        if named:
            parser.add_argument("name", help="the account's name")
        parser.add_argument("--threads-db", help="the threads database (default: CRAG_THREADS_DB)")
        parser.set_defaults(func=func)
        return parser

    add = action("add", cmd_users_add, "make an account; prints its API key once")
    add.add_argument("--admin", action="store_true", help="may see and manage everything")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    add.add_argument(
        "--reuse-name",
        action="store_true",
        help="a removed account's name: the new account gets what was theirs (threads...)",
    )
    action("list", cmd_users_list, "the accounts", named=False)
    action("key", cmd_users_key, "print a new API key of an account")
    action("revoke-keys", cmd_users_revoke, "remove every API key of an account")
    action("remove", cmd_users_remove, "remove an account and its keys")
    password = action("password", cmd_users_password, "a new password (ends the sessions)")
    password.add_argument("--password-stdin", action="store_true", help="read it from stdin")
    role = action("role", cmd_users_role, "make an account an admin or a member")
    role.add_argument("role", choices=("admin", "member"), help="the account's new role")
    link = action(
        "link",
        cmd_users_link,
        "let a person of the OpenID Connect provider sign in as an account (or back in, "
        "after the account was removed)",
    )
    link.add_argument("--issuer", required=True, help="the provider's issuer (CRAG_OIDC_ISSUER)")
    link.add_argument("--subject", required=True, help="the person's sub claim at the provider")
