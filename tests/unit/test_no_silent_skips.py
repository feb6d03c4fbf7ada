"""No test of the product skips for want of a package: a broken install fails, never passes.

``pytest.importorskip`` turns a missing package into skipped tests, so an install without the
server extra would pass CI with the security tests gone. Every test module of the product
imports what it needs; only the research package's optional trainers (``peft``) may be missing.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MAY_SKIP = {"bench/test_training_variants.py"}
"""Research-only tests of an optional trainer (peft), not installed by ``make test``."""


def test_no_test_module_skips_when_a_package_is_missing() -> None:
    skipping = sorted(
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if path != Path(__file__).resolve()
        and "importorskip" in path.read_text(encoding="utf-8")
        and str(path.relative_to(TESTS)) not in MAY_SKIP
    )
    assert skipping == []
