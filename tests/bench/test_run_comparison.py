"""Pairing two recorded eval runs: figures, scope, and bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crag_bench.run_comparison import Side, compare_runs, describe, load_outcomes

ROOT = Path(__file__).resolve().parents[2]


def _write_run(folder: Path, rows: list[dict[str, object]]) -> Path:
    folder.mkdir()
    lines = [json.dumps(row) for row in rows]
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _row(
    qid: str, experiment: str, correct: bool, recall: bool, **extra: object
) -> dict[str, object]:
    return {
        "experiment": experiment,
        "id": qid,
        "correct": correct,
        "answer_in_knowledge": recall,
        "counted": True,
        "gold_removed": False,
        **extra,
    }


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    before = _write_run(
        tmp_path / "before",
        [
            _row("q1", "crag", False, True),
            _row("q2", "crag", False, False),
            _row("q3", "crag", True, True, gold_removed=True),
            _row("q4", "crag", True, True),
            _row("q1", "rag", True, True),
            _row("q5", "crag", True, True, counted=False),
        ],
    )
    after = _write_run(
        tmp_path / "after",
        [
            _row("q1", "crag", True, True),
            _row("q2", "crag", True, True),
            _row("q3", "crag", False, True, gold_removed=True),
            _row("q4", "crag", True, True),
            _row("q6", "crag", True, True),
        ],
    )
    return before, after


def test_compare_runs_pairs_the_shared_counted_questions(runs: tuple[Path, Path]) -> None:
    before, after = runs
    comparison = compare_runs(Side(after, "crag"), Side(before, "crag"), resamples=200)
    # shared counted questions: q1-q4 (q5 is not counted, q6 only in one run)
    assert comparison["questions"] == 4
    accuracy = comparison["accuracy"]
    assert (accuracy["a"], accuracy["b"]) == (0.75, 0.5)
    assert (accuracy["a_only"], accuracy["b_only"]) == (2, 1)
    assert accuracy["difference"] == pytest.approx(0.25)
    assert accuracy["p_value"] == pytest.approx(1.0)
    assert comparison["knowledge_recall"]["difference"] == pytest.approx(0.25)
    text = describe(comparison)
    assert "4 questions" in text and "accuracy: 0.750 vs 0.500, +0.250" in text


def test_compare_runs_over_the_removed_questions_only(runs: tuple[Path, Path]) -> None:
    before, after = runs
    comparison = compare_runs(Side(after, "crag"), Side(before, "crag"), "removed", resamples=200)
    assert comparison["questions"] == 1
    assert comparison["accuracy"]["difference"] == pytest.approx(-1.0)


def test_bad_input_is_a_clear_error(runs: tuple[Path, Path], tmp_path: Path) -> None:
    before, _ = runs
    with pytest.raises(ValueError, match="RUN_DIR:EXPERIMENT"):
        Side.parse("no-experiment")
    assert Side.parse("C:/runs/a:crag") == Side(Path("C:/runs/a"), "crag")
    with pytest.raises(ValueError, match="cannot read"):
        load_outcomes(Side(tmp_path / "missing", "crag"))
    with pytest.raises(ValueError, match="no counted rows of 'oracle'"):
        load_outcomes(Side(before, "oracle"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "rows.jsonl").write_text("{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot read"):
        load_outcomes(Side(broken, "crag"))
    other = _write_run(tmp_path / "other", [_row("q9", "crag", True, True)])
    with pytest.raises(ValueError, match="share no question"):
        compare_runs(Side(before, "rag"), Side(other, "crag"))


def test_script_prints_the_comparison_and_fails_cleanly(runs: tuple[Path, Path]) -> None:
    before, after = runs
    script = str(ROOT / "bench" / "scripts" / "compare_runs.py")
    done = subprocess.run(
        [sys.executable, script, f"{after}:crag", f"{before}:crag", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert json.loads(done.stdout)["questions"] == 4
    failed = subprocess.run(
        [sys.executable, script, f"{after}:crag", f"{before}:nothing"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert failed.returncode == 2 and "no counted rows of 'nothing'" in failed.stderr
