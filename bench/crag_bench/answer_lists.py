"""Parsing shared by the question-file readers: JSON Lines records and answer lists.

:mod:`crag_bench.questions` (PopQA-style files) and :mod:`crag_bench.dpr_sets` (the DPR
open-domain sets) read the same kinds of records; each reports problems with its own error
type, so the functions here take a ``fail`` callback that builds the error to raise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

Fail = Callable[[str], Exception]
"""Builds the error to raise from a problem in a few words (the place already known)."""

LineFail = Callable[[str, str], Exception]
"""Builds the error to raise from a place (``"line N"``) and a problem."""


def json_lines(text: str, fail: LineFail) -> Iterator[tuple[str, Any]]:
    """``("line N", value)`` for each non-blank line of JSON Lines text, numbered from 1.

    Raises:
        Exception: ``fail("line N", "invalid JSON (...)")`` for a line that is not JSON.
    """
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(where, f"invalid JSON ({exc.msg})") from exc
        yield where, value


def string_list(value: Any, name: str, fail: Fail) -> list[str]:
    """``value`` if it is a list of strings.

    Raises:
        Exception: ``fail(f"{name} must be a list of strings")`` otherwise.
    """
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise fail(f"{name} must be a list of strings")
    return value


def distinct_nonblank(values: Iterable[str]) -> tuple[str, ...]:
    """The values stripped, blank ones dropped, each kept once in its first place."""
    return tuple(dict.fromkeys(value.strip() for value in values if value.strip()))
