"""``crag thresholds``, in-process, on a small real store (the shipped embedder, Chroma on disk)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from crag.app.cli.commands import main
from crag.core.method import operator_method
from crag.knowledge.threshold_fit import Observation, fit_thresholds, pair_outcome
from tests.integration_support import build_small_store
from tests.websearch_server import WebsearchServer

pytestmark = pytest.mark.integration

QUESTIONS = [
    {"question": "Who painted the Mona Lisa?", "answers": ["Leonardo da Vinci"]},
    {"question": "In which city is the Louvre museum?", "possible_answers": ["Paris"]},
    {
        "question": "How do plants turn sunlight into chemical energy?",
        "answers": ["photosynthesis"],
    },
    {"question": "Who painted The School of Athens?", "answers": ["Raphael"]},
    {"question": "What is the boiling point of liquid nitrogen in kelvin?", "answers": ["77"]},
    {"question": "Who won the 1966 FIFA World Cup?", "answers": ["England"]},
    {"question": "What is the capital of Australia?", "answers": ["Canberra"]},
    {"question": "Who wrote the novel Moby-Dick?", "answers": ["Herman Melville"]},
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small_store(tmp_path_factory.mktemp("thresholds") / "chroma", others=20)


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("questions") / "questions.jsonl"
    lines = [json.dumps(item) for item in QUESTIONS]
    path.write_text("\n".join([*lines[:2], "", *lines[2:]]) + "\n")  # a blank line is skipped
    return path


@pytest.fixture(scope="module")
def report(store: Path, questions: Path) -> dict[str, Any]:
    """The ``--json`` report of the questions, retrieving 3 passages each."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["thresholds", str(questions), "--store", str(store), "--top-k", "3", "--json"])
    assert code == 0
    parsed: dict[str, Any] = json.loads(out.getvalue())
    return parsed


def test_printed_thresholds_are_the_fit_of_the_recorded_scores(
    store: Path, questions: Path, report: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert report["questions"] == len(QUESTIONS) and report["top_k"] == 3
    recorded = [Observation(s["best_score"], s["holds_answer"]) for s in report["scores"]]
    assert [s["question"] for s in report["scores"]] == [q["question"] for q in QUESTIONS]
    assert report["holding_answer"] == sum(o.holds_answer for o in recorded) > 0
    current = operator_method().thresholds_for("embedding")
    assert (report["current"]["upper"], report["current"]["lower"]) == current
    fit = fit_thresholds(recorded, correct_precision=0.9, incorrect_miss=0.1, current=current)
    assert (report["upper_threshold"], report["lower_threshold"]) == (fit.upper, fit.lower)
    assert (report["upper_fitted"], report["lower_fitted"]) == (fit.upper_fitted, fit.lower_fitted)
    for name, upper, lower in (("fitted", fit.upper, fit.lower), ("current", *current)):
        outcome = pair_outcome(recorded, upper, lower)
        shown = report[name]
        for action, share in outcome.actions.items():
            assert shown["actions"][action]["questions"] == share.questions
            assert shown["actions"][action]["holding_answer"] == share.holding_answer
        assert shown["answers_discarded"] == outcome.answers_discarded
        assert shown["web_skipped_without_answer"] == outcome.web_skipped_without_answer
    assert report["environment"] == (
        f"CRAG_UPPER_THRESHOLD={fit.upper} CRAG_LOWER_THRESHOLD={fit.lower}"
    )

    # the text report prints the same pair, and the line that sets it last
    assert main(["thresholds", str(questions), "--store", str(store), "--top-k", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == report["environment"]
    assert out[0].startswith(f"questions: {len(QUESTIONS)} from {questions}")
    fitted = report["fitted"]
    assert (
        f"fitted: answers discarded: {fitted['answers_discarded']} questions whose passages "
        "held an answer were sent to Incorrect" in out
    )
    assert (
        f"current: web skipped without the answer: "
        f"{report['current']['web_skipped_without_answer']} Correct questions whose passages "
        "lacked it" in out
    )


def test_recorded_scores_are_those_the_graph_grades(
    store: Path, report: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of the CRAG graph (``crag ask``) grades the same passages with the same scores."""
    with WebsearchServer() as down:
        down.search_status = 503
        args = [
            "ask",
            "--json",
            "-q",
            "--store",
            str(store),
            *("--set", "top_k=3", "--set", "force_action=incorrect"),  # abstains: no generator
            *("--set", "search_provider=searxng", "--set", f"search_url={down.url}"),
            *("--set", "allowed_hosts=127.0.0.1"),
        ]
        for recorded in report["scores"][:2]:
            assert main([*args, recorded["question"]]) == 0
            documents = json.loads(capsys.readouterr().out)["documents"]
            assert max(d["score"] for d in documents) == recorded["best_score"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"question": "Who?", "answers": ["x"]}\n{"question": "Who?", "answers": [\n',
            "line 2: not valid JSON",
        ),
        ('{"question": "Who?"}\n', 'line 1: no answers: "answers" must be'),
        ('\n{"question": "Who?", "answers": []}\n', "line 2: no answers"),
        ('{"question": "Who?", "possible_answers": "x"}\n', "line 1: no answers"),
        ('{"question": "  ", "answers": ["x"]}\n', "line 1: empty question"),
        ('{"answers": ["x"]}\n', "line 1: empty question"),
        ('["Who?", ["x"]]\n', "line 1: a JSON object was expected, not list"),
        (
            '{"question": "' + "x" * 100_000 + '", "answers": ["x"]}\n',
            "line 1: the question is 100,000 characters long",
        ),
        ("\n\n", "holds no questions"),
    ],
)
def test_bad_question_files_are_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "questions.jsonl"
    path.write_text(content)
    assert main(["thresholds", str(path), "--store", str(tmp_path / "no-store")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"crag: error: {path}") or err.startswith(
        f"crag: error: questions file {path}"
    )
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_questions_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.jsonl"
    assert main(["thresholds", str(missing), "--store", str(tmp_path / "no-store")]) == 2
    err = capsys.readouterr().err
    assert err == f"crag: error: questions file {missing} does not exist\n"


def test_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "questions.jsonl"
    path.write_bytes(b'{"question": "Who?", "answers": ["x"]}\n{"question": "\xff"}\n')
    assert main(["thresholds", str(path), "--store", str(tmp_path / "no-store")]) == 2
    assert capsys.readouterr().err == f"crag: error: {path}, line 2: not UTF-8 text\n"


def test_a_share_outside_zero_to_one_is_refused(
    questions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["thresholds", str(questions), "--correct-precision", "1.5"])
    assert exit_info.value.code == 2
    assert "not a share between 0 and 1" in capsys.readouterr().err
