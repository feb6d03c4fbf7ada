"""make test's file order (tests/file_order.py): the longest unit files go ahead of the
integration files, everything else keeps its place."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.file_order import LONGEST_UNIT_FILES, TESTS, long_unit_files_before_integration


@dataclass
class _Item:
    """What the ordering reads of a pytest item: its file."""

    path: Path


def _items(*paths: str) -> list[pytest.Item]:
    return [cast(Any, _Item(TESTS / path)) for path in paths]


def test_the_long_unit_files_move_ahead_of_the_integration_files() -> None:
    items = _items(
        "cluster/test_cluster.py",
        "bench/test_eval_cli.py",
        "integration/test_server.py",
        "integration/test_server.py",
        "unit/test_ablations.py",
        "unit/test_threads_postgres.py",
        "unit/test_threads_postgres.py",
        "unit/test_websearch.py",
        "unit/test_accounts.py",
    )
    long_unit_files_before_integration(items)
    assert [item.path.relative_to(TESTS).as_posix() for item in items] == [
        "cluster/test_cluster.py",
        "bench/test_eval_cli.py",
        "unit/test_threads_postgres.py",
        "unit/test_threads_postgres.py",
        "unit/test_accounts.py",
        "integration/test_server.py",
        "integration/test_server.py",
        "unit/test_ablations.py",
        "unit/test_websearch.py",
    ]


def test_unit_files_alone_start_with_the_long_ones() -> None:
    items = _items("unit/test_ablations.py", "unit/test_namespace.py")
    long_unit_files_before_integration(items)
    assert [item.path.name for item in items] == ["test_namespace.py", "test_ablations.py"]


def test_every_named_file_exists() -> None:
    """A renamed file would silently fall back to its alphabetical place."""
    missing = sorted(name for name in LONGEST_UNIT_FILES if not (TESTS / "unit" / name).is_file())
    assert missing == []
