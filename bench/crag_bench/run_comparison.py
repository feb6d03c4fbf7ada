"""Compare two experiments of recorded ``crag-bench eval`` runs, question by question.

``crag-bench eval`` compares CRAG with every other experiment of the same run. A change to the
method that cannot be one more experiment (a new evaluator calibration, a code change) is
judged by running the eval before and after it and pairing the two runs' rows here: the same
paired bootstrap interval and McNemar's exact p as the report's, for accuracy and knowledge
recall, over the questions both ran (optionally only those whose gold documents were removed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crag_bench.per_set import read_rows, row_outcomes
from crag_bench.significance import MEASURES, Scope, compare_outcomes, format_p


@dataclass(frozen=True)
class Side:
    """One experiment of one run: ``RUN_DIR:EXPERIMENT`` on the command line."""

    run_dir: Path
    experiment: str

    @classmethod
    def parse(cls, text: str) -> Side:
        """Read ``RUN_DIR:EXPERIMENT`` (the experiment after the last colon).

        Raises:
            ValueError: No experiment is named.
        """
        run_dir, colon, experiment = text.rpartition(":")
        if not colon or not run_dir or not experiment:
            raise ValueError(f"{text!r}: give RUN_DIR:EXPERIMENT, e.g. .crag/eval:crag")
        return cls(Path(run_dir), experiment)

    def __str__(self) -> str:
        return f"{self.run_dir}:{self.experiment}"


def load_outcomes(side: Side, scope: Scope = "all") -> dict[str, dict[str, bool]]:
    """Question id → accuracy and knowledge-recall outcome of one experiment's counted rows.

    Raises:
        ValueError: The run's ``rows.jsonl`` is missing or unreadable, or holds no counted
            row of the experiment (in the scope).
    """
    path = side.run_dir / "rows.jsonl"
    rows = [
        row
        for row in read_rows(side.run_dir)
        if row.get("experiment") == side.experiment and (scope == "all" or row.get("gold_removed"))
    ]
    try:
        outcomes = row_outcomes(rows)
    except KeyError as exc:
        raise ValueError(f"cannot read {path}: a row has no {exc}") from exc
    if not outcomes:
        raise ValueError(f"{path} holds no counted rows of {side.experiment!r} ({scope})")
    return outcomes


def compare_runs(
    a: Side, b: Side, scope: Scope = "all", *, seed: int = 0, resamples: int = 10_000
) -> dict[str, Any]:
    """A minus B over the questions both ran: rates, interval, McNemar p per measure.

    Raises:
        ValueError: A side cannot be read, or the two share no question.
    """
    figures = compare_outcomes(
        load_outcomes(a, scope),
        load_outcomes(b, scope),
        MEASURES,
        seed=seed,
        resamples=resamples,
    )
    if figures is None:
        raise ValueError(f"{a} and {b} share no question ({scope})")
    return {"a": str(a), "b": str(b), "scope": scope, **figures}


def describe(comparison: dict[str, Any]) -> str:
    """The comparison as lines of text, one per measure."""
    lines = [f"{comparison['a']} - {comparison['b']}, {comparison['scope']}, "]
    lines[0] += f"{comparison['questions']} questions"
    for measure in MEASURES:
        rate = comparison[measure]
        lines.append(
            f"  {measure}: {rate['a']:.3f} vs {rate['b']:.3f}, {rate['difference']:+.3f} "
            f"[{rate['low']:+.3f}, {rate['high']:+.3f}], McNemar p "
            f"{format_p(rate['p_value'])} ({rate['a_only']} / {rate['b_only']})"
        )
    return "\n".join(lines)
