"""One question of ``crag eval``'s file: its text, its answers, and a feedback line's verdict."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["EvalQuestion"]


@dataclass(frozen=True)
class EvalQuestion:
    """One line of the questions file."""

    line: int
    question: str
    answers: list[str]
    """Empty when the line has none: it is judged by its verdict only."""
    verdict: str | None = None
    """A feedback line's verdict on crag's answer then (``good`` or ``bad``)."""
    recorded_answer: str | None = None
    """A feedback line's answer, the one the verdict is on."""

    @property
    def key(self) -> str:
        """The question's id in ``rows.jsonl``: its line and a digest of its text."""
        digest = hashlib.sha256(self.question.encode("utf-8")).hexdigest()[:12]
        return f"{self.line}:{digest}"
