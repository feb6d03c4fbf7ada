"""Splitting a multi-set eval run back into its question sets."""

import json
from pathlib import Path

import pytest

from crag_bench.per_set import POOLED, markdown, per_set_figures, question_set, read_rows


def _row(qid: str, experiment: str, correct: bool, **extra: object) -> dict[str, object]:
    return {
        "experiment": experiment,
        "id": qid,
        "correct": correct,
        "answer_in_knowledge": correct,
        "counted": True,
        **extra,
    }


def test_question_set_is_the_id_before_its_number() -> None:
    assert question_set("nq-test-39") == "nq-test"
    assert question_set("curated-test-1") == "curated-test"
    assert question_set("5a8b57f25542995d1e6f1371") == "other"
    assert question_set("nq-test-x") == "other"


def test_per_set_figures_split_pool_and_compare() -> None:
    rows = [
        _row("nq-test-1", "crag", True),
        _row("nq-test-1", "rag", False),
        _row("nq-test-2", "crag", True, abstained=False),
        _row("nq-test-2", "rag", True),
        _row("wq-test-1", "crag", False, abstained=True),
        _row("wq-test-1", "rag", True),
        _row("wq-test-1", "crag-gold-removed", True, gold_removed=True),
        _row("wq-test-1", "rag-gold-removed", False, gold_removed=True),
        _row("wq-test-2", "crag-gold-removed", False, gold_removed=False),
        _row("wq-test-2", "rag-gold-removed", True, gold_removed=False),
    ]
    figures = per_set_figures(rows, resamples=200)
    assert set(figures) == {"nq-test", "wq-test", POOLED}
    nq = figures["nq-test"]
    assert nq["experiments"]["crag"] == {
        "questions": 2,
        "accuracy": 1.0,
        "knowledge_recall": 1.0,
        "abstained": 0,
        "no_answer_replies": 0,
        "no_answer_with_answer_in_knowledge": 0,
    }
    [crag_rag] = nq["comparisons"]
    assert (crag_rag["a"], crag_rag["b"], crag_rag["questions"]) == ("crag", "rag", 2)
    assert crag_rag["accuracy"]["difference"] == pytest.approx(0.5)
    wq = figures["wq-test"]
    assert wq["experiments"]["crag"]["abstained"] == 1
    gold_removed = [c for c in wq["comparisons"] if c["a"] == "crag-gold-removed"]
    assert [(c["scope"], c["questions"]) for c in gold_removed] == [("all", 2), ("removed", 1)]
    removed = gold_removed[1:]
    assert removed[0]["accuracy"]["difference"] == pytest.approx(1.0)
    pooled = figures[POOLED]["experiments"]["rag"]
    assert (pooled["questions"], pooled["accuracy"]) == (3, 2 / 3)
    text = markdown(figures)
    assert "### nq-test" in text and "| crag - rag | all | 2 | +0.500" in text


def test_no_answer_replies_are_counted_apart_from_abstentions() -> None:
    rows = [
        _row("nq-dev-1", "rag", False, answer="The given knowledge does not contain the answer."),
        _row("nq-dev-2", "rag", False, answer="the given knowledge does not contain the answer"),
        _row("nq-dev-3", "rag", True, answer="Paris"),
        _row("nq-dev-1", "crag", False, answer="I could not find the answer.", abstained=True),
    ]
    rows[0]["answer_in_knowledge"] = True
    run = per_set_figures(rows, resamples=10)
    figures = run["nq-dev"]["experiments"]
    assert (figures["rag"]["no_answer_replies"], figures["rag"]["abstained"]) == (2, 0)
    assert figures["rag"]["no_answer_with_answer_in_knowledge"] == 1
    assert (figures["crag"]["no_answer_replies"], figures["crag"]["abstained"]) == (0, 1)
    assert "| rag | 3 | 0.333 | 0.667 | 0 | 2 (1) |" in markdown(run)


def test_one_set_is_not_pooled_again() -> None:
    figures = per_set_figures([_row("nq-dev-1", "crag", True)], resamples=10)
    assert list(figures) == ["nq-dev"] and figures["nq-dev"]["comparisons"] == []


def test_read_rows_keeps_counted_rows_and_refuses_bad_files(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text(
        json.dumps(_row("nq-test-1", "crag", True))
        + "\n"
        + json.dumps(_row("nq-test-2", "crag", True, counted=False))
        + "\n",
        encoding="utf-8",
    )
    assert [r["id"] for r in read_rows(tmp_path)] == ["nq-test-1"]
    with pytest.raises(ValueError, match="cannot read"):
        read_rows(tmp_path / "missing")
    (tmp_path / "rows.jsonl").write_text("{broken\n", encoding="utf-8")
    with pytest.raises(ValueError, match="cannot read"):
        read_rows(tmp_path)
    (tmp_path / "rows.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="no counted rows"):
        read_rows(tmp_path)


def test_figures_split_by_crags_action_beside_rag_on_the_same_questions() -> None:
    rows = [
        _row("nq-dev-1", "crag", True, action="correct"),
        _row("nq-dev-1", "rag", True),
        _row("nq-dev-2", "crag", False, action="ambiguous", abstained=True),
        _row("nq-dev-2", "rag", True),
        _row("nq-dev-3", "crag", True, action="ambiguous"),
        _row("nq-dev-3", "rag", False),
        _row("nq-dev-4", "crag", True, action="ambiguous"),
        _row("nq-dev-4", "rag", False),
    ]
    actions = per_set_figures(rows, resamples=10)["nq-dev"]["actions"]
    assert list(actions) == ["crag"]
    split = actions["crag"]
    assert [split[a]["questions"] for a in ("correct", "ambiguous", "incorrect")] == [1, 3, 0]
    assert split["ambiguous"]["share"] == pytest.approx(0.75)
    assert split["ambiguous"]["crag"]["accuracy"] == pytest.approx(2 / 3)
    assert split["ambiguous"]["rag"]["accuracy"] == pytest.approx(1 / 3)
    assert split["ambiguous"]["crag"]["abstained"] == 1
    assert split["incorrect"]["crag"] is None and split["incorrect"]["rag"] is None
    text = markdown(per_set_figures(rows, resamples=10))
    assert "| crag | ambiguous | 3 (75.0%) | 0.667 / 0.333 | 0.667 / 0.333 | 1 |" in text
    assert "| crag | incorrect | 0 (0.0%) |  /  |  /  |  |" in text


def test_each_knowledge_form_is_split_by_action_beside_its_own_rag() -> None:
    rows = [
        _row("nq-dev-1", "rag", False),
        _row("nq-dev-1", "crag-passages", True, action="ambiguous"),
        _row("nq-dev-1", "crag-strips", False, action="ambiguous"),
        _row("nq-dev-1", "rag-gold-removed", False, gold_removed=True),
        _row("nq-dev-1", "crag-gold-removed-passages", True, action="incorrect"),
    ]
    actions = per_set_figures(rows, resamples=10)["nq-dev"]["actions"]
    assert list(actions) == ["crag-strips", "crag-passages", "crag-gold-removed-passages"]
    assert actions["crag-passages"]["ambiguous"]["crag"]["accuracy"] == 1.0
    assert actions["crag-strips"]["ambiguous"]["crag"]["accuracy"] == 0.0
    assert actions["crag-gold-removed-passages"]["incorrect"]["rag"]["accuracy"] == 0.0


def test_no_action_table_without_actions() -> None:
    figures = per_set_figures([_row("nq-dev-1", "rag", True)], resamples=10)
    assert figures["nq-dev"]["actions"] == {}
    assert "| action |" not in markdown(figures)
