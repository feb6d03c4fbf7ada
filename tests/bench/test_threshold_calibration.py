"""Threshold calibration: replaying the action trigger on a ``thresholds`` run's rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag_bench.threshold_calibration import (
    candidate_thresholds,
    evaluate,
    grid,
    load_cases,
)

# question id -> (passage scores, {action: answered right under that action forced})
QUESTIONS: dict[str, tuple[list[float], dict[str, bool]]] = {
    # a confident retrieval that only refinement answers
    "q1": ([0.9, 0.2], {"correct": True, "ambiguous": False, "incorrect": False}),
    # a middling retrieval that needs both sources
    "q2": ([0.1, -0.5], {"correct": False, "ambiguous": True, "incorrect": False}),
    # a hopeless retrieval the web answers alone
    "q3": ([-0.95, -0.97], {"correct": False, "ambiguous": False, "incorrect": True}),
    # nothing retrieved: the trigger says Incorrect whatever the thresholds
    "q4": ([], {"correct": False, "ambiguous": False, "incorrect": True}),
}


def _row(experiment: str, qid: str, scores: list[float], correct: bool) -> dict[str, object]:
    return {
        "experiment": experiment,
        "id": qid,
        "correct": correct,
        "answer_in_knowledge": correct,
        "scores": scores,
        "counted": True,
    }


def _write_run(path: Path, with_scores: bool = True) -> Path:
    rows = []
    for qid, (scores, outcome) in QUESTIONS.items():
        rows.append(_row("crag", qid, scores, outcome["ambiguous"]))
        for action, right in outcome.items():
            rows.append(_row(f"crag-only-{action}", qid, scores, right))
    # an uncounted row (outside the gold-removed share) must be ignored
    rows.append({**_row("crag", "q1", [-0.99], False), "counted": False})
    if not with_scores:
        for row in rows:
            row.pop("scores")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_load_cases_reads_best_score_and_each_forced_outcome(tmp_path: Path) -> None:
    cases = {c.id: c for c in load_cases(_write_run(tmp_path / "rows.jsonl"))}
    assert set(cases) == {"q1", "q2", "q3", "q4"}
    assert cases["q1"].best == pytest.approx(0.9)
    assert cases["q4"].best is None
    assert cases["q2"].correct == {"correct": False, "ambiguous": True, "incorrect": False}
    assert not any(c.gold_removed_setting for c in cases.values())


def test_evaluate_replays_the_trigger(tmp_path: Path) -> None:
    cases = load_cases(_write_run(tmp_path / "rows.jsonl"))
    # upper 0.5 / lower -0.9: q1 correct, q2 ambiguous, q3 and q4 incorrect: all four right
    outcome = evaluate(cases, upper=0.5, lower=-0.9)
    assert outcome.actions == {"correct": 1, "ambiguous": 1, "incorrect": 2}
    assert outcome.accuracy == pytest.approx(1.0)
    # everything ambiguous (but q4, which has no passages): only q2 and q4 right
    outcome = evaluate(cases, upper=1.0, lower=-1.0)
    assert outcome.actions == {"correct": 0, "ambiguous": 3, "incorrect": 1}
    assert outcome.accuracy == pytest.approx(0.5)


def test_grid_puts_a_pair_that_routes_every_case_right_first(tmp_path: Path) -> None:
    cases = load_cases(_write_run(tmp_path / "rows.jsonl"))
    best = grid(cases)[0]
    assert best.accuracy == pytest.approx(1.0)
    assert 0.1 <= best.upper < 0.9
    assert -0.95 < best.lower <= 0.1
    assert candidate_thresholds(cases)[0] == -1.0


def test_rows_without_scores_or_forced_runs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no passage scores"):
        load_cases(_write_run(tmp_path / "old.jsonl", with_scores=False))
    partial = tmp_path / "partial.jsonl"
    partial.write_text(json.dumps(_row("crag", "q1", [0.5], True)) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="--experiments thresholds"):
        load_cases(partial)


def test_the_calibration_script_refuses_test_set_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runpy
    import sys

    from crag_bench.held_out import HeldOutError

    run = _write_run(tmp_path / "rows.jsonl")
    text = run.read_text(encoding="utf-8").replace('"q3"', '"nq-test-17"')
    run.write_text(text, encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["calibrate_thresholds.py", str(run)])
    script = Path(__file__).resolve().parents[2] / "bench" / "scripts" / "calibrate_thresholds.py"
    with pytest.raises(HeldOutError, match="test set"):
        runpy.run_path(str(script), run_name="__main__")
