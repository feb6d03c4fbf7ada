"""The order ``make test``'s workers take the test files in.

pytest-xdist with ``--dist loadfile --no-loadscope-reorder`` hands whole files out in collection
order, so the last file handed out sets the suite's tail. ``tests/unit`` comes last for its many
short files, but a few of its files take 10 to 40 s each (a PostgreSQL started and waited on,
models built by child processes, endpoints timed out): handed out last, one of them ran alone
for about 30 s after the other workers had finished (2026-12-08, four workers on 2 cores). They
are moved ahead of ``tests/integration`` instead, so the short files fill the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

LONGEST_UNIT_FILES = frozenset(
    {
        "test_threads_postgres.py",
        "test_generator_prepare.py",
        "test_endpoint_error_lines.py",
        "test_onnx_engine.py",
        "test_endpoint_bounds.py",
        "test_namespace.py",
        "test_accounts.py",
        "test_endpoint_failures.py",
    }
)
"""The unit files of 14 s and more in a four-worker ``make test`` (2026-12-08)."""


def _is_long_unit_file(item: pytest.Item) -> bool:
    return item.path.parent == TESTS / "unit" and item.path.name in LONGEST_UNIT_FILES


def long_unit_files_before_integration(items: list[pytest.Item]) -> None:
    """Move the items of :data:`LONGEST_UNIT_FILES` ahead of the first ``tests/integration``
    item (or of the first unit item when no integration test was collected), in place; every
    other item keeps its place in the order."""
    moved: list[pytest.Item] = []
    rest: list[pytest.Item] = []
    for item in items:
        (moved if _is_long_unit_file(item) else rest).append(item)
    if not moved:
        return
    at = next(
        (
            i
            for i, item in enumerate(rest)
            if item.path.is_relative_to(TESTS / "integration")
            or item.path.is_relative_to(TESTS / "unit")
        ),
        len(rest),
    )
    items[:] = [*rest[:at], *moved, *rest[at:]]
