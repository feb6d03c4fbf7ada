"""Feedback from Python (:func:`crag.app.api.record_feedback`) and ``crag feedback export``.

The thread's runs are real runs of the CRAG graph (the fakes' store, evaluator and chat), kept
in a SQLite threads file; the feedback goes into the same file, and the export reads it back
as JSON Lines: the question, the expected answer, the verdict and the run's record.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from crag.app.api import FeedbackError, persistent_graph, record_feedback, thread_config
from crag.app.cli.commands import main
from crag.settings.deployment import deployment_settings
from crag.settings.method import operator_method
from tests.fakes import (
    mona_lisa_app_components,
)

MONA = "Who painted the Mona Lisa?"
NITROGEN = "What is the boiling point of liquid nitrogen?"


@pytest.fixture
def components(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Mona Lisa questions are Correct; anything else is Incorrect and web search is down."""
    return mona_lisa_app_components(monkeypatch)


def test_feedback_records_the_run_as_it_was(tmp_path: Path, components: Any) -> None:
    db = tmp_path / "threads.sqlite"
    with persistent_graph(db, components=components) as graph:
        graph.invoke({"question": MONA}, thread_config("t1"))
        saved = record_feedback(
            graph, "t1", "good", expected="Leonardo da Vinci", better="crag", target=db
        )
    record = saved.record
    assert saved.owner == "operator" and saved.thread_id == "t1" and saved.verdict == "good"
    assert record["question"] == MONA and record["answer"] == "Leonardo da Vinci."
    assert record["action"] == "correct" and record["origins"] == ["internal"]
    assert record["decision"]["max_score"] == pytest.approx(0.9)
    assert any(p["score"] == pytest.approx(0.9) for p in record["documents"])
    assert all("Leonardo" in k["text"] for k in record["knowledge"])
    settings = deployment_settings()
    upper, lower = operator_method().thresholds_for(settings.evaluator, settings.evaluator_model)
    assert record["thresholds"] == {"upper": upper, "lower": lower}
    assert record["generator"] == settings.generator
    assert record["evaluator"] == settings.evaluator


def test_feedback_names_an_earlier_run_by_its_id_and_replaces_itself(
    tmp_path: Path, components: Any
) -> None:
    db = tmp_path / "threads.sqlite"
    with persistent_graph(db, components=components) as graph:
        graph.invoke({"question": MONA}, thread_config("t1"))
        first = record_feedback(graph, "t1", "good", target=db)
        graph.invoke({"question": NITROGEN}, thread_config("t1"))
        latest = record_feedback(graph, "t1", "bad", comment="no answer", target=db)
        earlier = record_feedback(graph, "t1", "bad", run_id=first.run_id, target=db)
    assert latest.record["question"] == NITROGEN and latest.record["action"] == "incorrect"
    assert latest.run_id != first.run_id
    assert earlier.id == first.id and earlier.verdict == "bad"  # replaced, not added
    assert earlier.record["question"] == MONA


def test_feedback_on_a_thread_without_a_finished_run_is_refused(
    tmp_path: Path, components: Any
) -> None:
    db = tmp_path / "threads.sqlite"
    with persistent_graph(db, components=components) as graph:
        with pytest.raises(FeedbackError) as unknown:
            record_feedback(graph, "never-run", "good", target=db)
        graph.invoke({"question": MONA}, thread_config("t1"))
        with pytest.raises(FeedbackError) as no_run:
            record_feedback(graph, "t1", "good", run_id="no-such-run", target=db)
        with pytest.raises(FeedbackError) as verdict:
            record_feedback(graph, "t1", "fine", target=db)
    assert "the thread 'never-run' has no finished run" in str(unknown.value)
    assert "has no finished run 'no-such-run'" in str(no_run.value)
    assert "verdict must be 'good' or 'bad'" in str(verdict.value)


def test_export_writes_one_private_json_line_per_record(
    tmp_path: Path, components: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "threads.sqlite"
    with persistent_graph(db, components=components) as graph:
        graph.invoke({"question": MONA}, thread_config("t1"))
        record_feedback(graph, "t1", "good", expected="Leonardo da Vinci", target=db)
        graph.invoke({"question": NITROGEN}, thread_config("t2"))
        record_feedback(graph, "t2", "bad", target=db)
    out = tmp_path / "feedback.jsonl"
    out.write_text("old contents\n")
    out.chmod(0o644)
    assert main(["feedback", "export", "--threads-db", str(db), "--output", str(out)]) == 0
    assert "wrote 2 record(s)" in capsys.readouterr().err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(line["question"], line["verdict"]) for line in lines] == [
        (MONA, "good"),
        (NITROGEN, "bad"),
    ]
    assert lines[0]["expected"] == "Leonardo da Vinci" and "expected" not in lines[1]
    assert lines[0]["record"]["answer"] == "Leonardo da Vinci." and lines[0]["owner"] == "operator"
    assert main(["feedback", "export", "--threads-db", str(db)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["question"] for line in printed] == [MONA, NITROGEN]


def test_export_of_a_database_that_is_not_there_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "threads.sqlite"
    assert main(["feedback", "export", "--threads-db", str(missing)]) == 2
    error = capsys.readouterr().err
    assert "there is no feedback yet: the threads database" in error
    assert not missing.exists()
