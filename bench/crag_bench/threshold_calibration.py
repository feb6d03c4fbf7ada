"""Calibrate the action trigger's two thresholds on dev questions, from one eval run.

The action trigger looks only at the best passage score: Correct above the upper threshold,
Incorrect below the lower one, Ambiguous between. An eval run of the ``thresholds`` preset
(``crag-bench eval --experiments thresholds``) answers every question under each action forced
(``crag-only-correct`` / ``-incorrect`` / ``-ambiguous``, and the same with the gold documents
removed for the seeded share), and its rows keep each question's passage scores. Replaying the
trigger on those scores for a pair of thresholds then tells, question by question, which forced
run CRAG would have made, so every pair's accuracy is read off without running the generator
again.

One approximation: refinement decomposes the passages scoring at or above the lower threshold,
so moving the lower threshold also changes which passages Correct and Ambiguous refine. The
forced runs were made with the run's own lower threshold; judge a chosen pair with a fresh run.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

ForcedAction = Literal["correct", "ambiguous", "incorrect"]
ACTIONS: tuple[ForcedAction, ...] = ("correct", "ambiguous", "incorrect")
SETTINGS: dict[bool, str] = {False: "crag", True: "crag-gold-removed"}
"""The natural experiment of each setting (gold kept / gold removed for the seeded share)."""


@dataclass(frozen=True)
class Case:
    """One counted question of one setting: its best passage score and each action's outcome."""

    id: str
    gold_removed_setting: bool
    """From the gold-removed experiments (the question may or may not be in the removed share)."""
    best: float | None
    """Best passage score (None: nothing retrieved, which the trigger treats as Incorrect)."""
    correct: dict[ForcedAction, bool]
    recall: dict[ForcedAction, bool]


@dataclass(frozen=True)
class Outcome:
    """What one pair of thresholds gives over a set of cases."""

    upper: float
    lower: float
    accuracy: float
    recall: float
    actions: dict[ForcedAction, int]


def _forced_name(setting: str, action: ForcedAction) -> str:
    return f"{setting}-only-{action}"


def load_cases(rows_path: Path) -> list[Case]:
    """The cases of a ``thresholds`` run's ``rows.jsonl`` (counted rows only).

    Raises:
        ValueError: The file lacks the forced-action experiments or the passage scores.
    """
    rows: dict[tuple[str, str], dict[str, object]] = {}
    with rows_path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if row.get("counted", True):
                rows[(str(row["experiment"]), str(row["id"]))] = row
    experiments = {name for name, _ in rows}
    cases: list[Case] = []
    for removed, setting in SETTINGS.items():
        needed = {setting, *(_forced_name(setting, a) for a in ACTIONS)}
        if not needed <= experiments:
            if removed:
                continue
            missing = ", ".join(sorted(needed - experiments))
            raise ValueError(
                f"{rows_path} lacks experiments {missing}: run "
                "`crag-bench eval --experiments thresholds`"
            )
        for (name, question_id), row in rows.items():
            if name != setting:
                continue
            if "scores" not in row:
                raise ValueError(f"{rows_path}: rows carry no passage scores (an older eval run)")
            forced = {a: rows.get((_forced_name(setting, a), question_id)) for a in ACTIONS}
            if any(r is None for r in forced.values()):
                continue
            scores = [float(s) for s in row["scores"]]  # type: ignore[attr-defined]
            cases.append(
                Case(
                    id=question_id,
                    gold_removed_setting=removed,
                    best=max(scores) if scores else None,
                    correct={a: bool(r["correct"]) for a, r in forced.items() if r},
                    recall={a: bool(r["answer_in_knowledge"]) for a, r in forced.items() if r},
                )
            )
    return cases


def candidate_thresholds(cases: Iterable[Case]) -> list[float]:
    """Midpoints between neighbouring best scores, plus the ends of the scale."""
    bests = sorted({c.best for c in cases if c.best is not None})
    mids = [round((a + b) / 2, 4) for a, b in itertools.pairwise(bests)]
    return sorted({-1.0, 1.0, *mids})


def evaluate(cases: Sequence[Case], upper: float, lower: float) -> Outcome:
    """Replay the action trigger with ``upper`` and ``lower`` on every case."""
    correct = recall = 0
    actions: dict[ForcedAction, int] = dict.fromkeys(ACTIONS, 0)
    for case in cases:
        action = _action(case.best, upper, lower)
        actions[action] += 1
        correct += case.correct[action]
        recall += case.recall[action]
    total = max(1, len(cases))
    return Outcome(upper, lower, correct / total, recall / total, actions)


def _action(best: float | None, upper: float, lower: float) -> ForcedAction:
    if best is None or best < lower:
        return "incorrect"
    return "correct" if best > upper else "ambiguous"


def grid(cases: Sequence[Case], candidates: Sequence[float] | None = None) -> list[Outcome]:
    """Every ordered pair of candidate thresholds (lower <= upper), best accuracy first.

    Ties go to the higher knowledge recall, then to the pair leaving the most questions
    Ambiguous (the paper's hedge when the evaluator is unsure).
    """
    values = list(candidates if candidates is not None else candidate_thresholds(cases))
    bests = np.array([np.nan if c.best is None else c.best for c in cases])
    outcome = {
        a: (
            np.array([c.correct[a] for c in cases], dtype=float),
            np.array([c.recall[a] for c in cases], dtype=float),
        )
        for a in ACTIONS
    }
    results: list[Outcome] = []
    for lower in values:
        below = np.isnan(bests) | (bests < lower)
        for upper in values:
            if upper < lower:
                continue
            above = ~below & (bests > upper)
            between = ~below & ~above
            masks: dict[ForcedAction, np.ndarray] = {
                "incorrect": below,
                "correct": above,
                "ambiguous": between,
            }
            accuracy = sum(float(outcome[a][0][m].sum()) for a, m in masks.items())
            recall = sum(float(outcome[a][1][m].sum()) for a, m in masks.items())
            total = max(1, len(cases))
            counts: dict[ForcedAction, int] = {a: int(m.sum()) for a, m in masks.items()}
            results.append(Outcome(upper, lower, accuracy / total, recall / total, counts))
    results.sort(key=lambda o: (-o.accuracy, -o.recall, -o.actions["ambiguous"]))
    return results
