"""Fixtures shared by the unit tests of the team's accounts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crag.app.web.accounts import Accounts

ACCOUNT_TABLES = (
    "crag_provider_identities",
    "crag_sign_in_failures",
    "crag_retired_names",
    "crag_accounts",  # last: its keys and sessions go with it (ON DELETE CASCADE)
)


@pytest.fixture(params=["sqlite", "postgresql"])
def accounts(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Accounts]:
    """The accounts of a SQLite file, or of a PostgreSQL database emptied afterwards."""
    if request.param == "sqlite":
        yield Accounts(tmp_path / "threads.sqlite")
        return
    made = Accounts(request.getfixturevalue("postgres_uri"))
    try:
        yield made
    finally:
        with made.database.transaction() as db:
            for table in ACCOUNT_TABLES:
                db.execute(f"DELETE FROM {table}")
        made.database.close()
