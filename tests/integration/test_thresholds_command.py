"""``crag thresholds``, in-process, on a small real store (the shipped embedder, Chroma on disk)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from crag.app.cli.commands import main
from crag.app.feedback_store import FeedbackInput, FeedbackStore, Verdict
from crag.app.web.account_store import AccountDatabase
from crag.knowledge.threshold_fit import Observation, fit_thresholds, pair_outcome
from crag.settings.method import operator_method
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
        ('{"question": "Who?", "possible_answers": "x"}\n', 'line 1: "possible_answers" must be'),
        ('{"question": "Who?", "verdict": "meh"}\n', 'line 1: "verdict" must be "good" or "bad"'),
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


def _json_report(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["thresholds", *args, "--top-k", "3", "--json"]) == 0
    parsed: dict[str, Any] = json.loads(out.getvalue())
    return parsed


def _feedback_export(tmp_path: Path) -> Path:
    """A file of ``crag feedback export``, from feedback stored as the server stores it."""
    database = tmp_path / "threads.sqlite"
    store = FeedbackStore(AccountDatabase(database))
    given: list[tuple[Verdict, str, str, str]] = [  # verdict, expected, question, crag's answer
        ("good", "", "Who painted the Mona Lisa?", "Leonardo da Vinci."),
        ("bad", "Paris", "In which city is the Louvre museum?", "Lyon."),
        ("bad", "", "Who wrote the novel Moby-Dick?", "Mark Twain."),
    ]
    try:
        for number, (verdict, expected, question, answer) in enumerate(given):
            feedback = FeedbackInput(thread_id=f"t{number}", verdict=verdict, expected=expected)
            record = {"question": question, "answer": answer}
            store.save("alice", feedback, f"r{number}", record, per_hour=None)
    finally:
        store.database.close()
    exported = tmp_path / "feedback.jsonl"
    assert main(["feedback", "export", "--threads-db", str(database), "-o", str(exported)]) == 0
    return exported


def test_a_feedback_export_is_fitted_on_the_lines_that_tell_an_answer(
    store: Path, report: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Good: the answer crag gave; an expected answer; bad without one is left out, and said."""
    exported = _feedback_export(tmp_path)
    capsys.readouterr()
    fitted = _json_report(str(exported), "--store", str(store))
    assert fitted["questions"] == 2
    assert fitted["left_out"] == {"bad_without_expected": 1, "good_without_answer": 0}
    assert fitted["answers_from"] == {"good_by_record": 1}
    plain = {s["question"]: s for s in report["scores"]}
    for scored in fitted["scores"]:  # the same passages; the answers of the feedback
        assert scored["best_score"] == plain[scored["question"]]["best_score"]
    held = [s["holds_answer"] for s in fitted["scores"]]
    assert held == [
        plain[q]["holds_answer"]
        for q in ("Who painted the Mona Lisa?", "In which city is the Louvre museum?")
    ]

    assert main(["thresholds", str(exported), "--store", str(store), "--top-k", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"questions: 2 from {exported}")
    assert (
        "left out: 1 feedback line marked bad without an expected answer (it cannot say "
        "whether the passages hold an answer)" in out
    )
    assert out[2].startswith("answers from crag: 1 feedback line marked good without an ")


def test_only_bad_feedback_without_answers_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "feedback.jsonl"
    path.write_text('{"question": "Who?", "verdict": "bad", "record": {"answer": "Bob."}}\n')
    assert main(["thresholds", str(path), "--store", str(tmp_path / "no-store")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"crag: error: questions file {path} holds no question with an answer: 1 feedback line "
        "marked bad without an expected answer was left out\n"
    )


ENV_TEXT = (
    "# the server's settings\r\n"  # a CRLF line: kept as it is
    "HF_HUB_OFFLINE=1\n"
    "export CRAG_UPPER_THRESHOLD=0.59   # the paper's\n"
    "\n"
    "# CRAG_LOWER_THRESHOLD=\n"
    "CRAG_TOP_K=5"  # no end on the last line
)


def test_write_sets_the_fitted_pair_in_the_env_file_and_keeps_the_rest(
    store: Path,
    questions: Path,
    report: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = tmp_path / "server.env"
    env.write_bytes(ENV_TEXT.encode())
    env.chmod(0o640)
    upper, lower = report["upper_threshold"], report["lower_threshold"]
    args = [str(questions), "--store", str(store), "--write", "--env-file", str(env)]
    assert main(["thresholds", *args, "--top-k", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-3:] == [
        f"wrote {env}:",
        f"CRAG_UPPER_THRESHOLD: 0.59 -> {upper}",
        f"CRAG_LOWER_THRESHOLD: unset -> {lower}",
    ]
    assert (
        env.read_bytes()
        == (
            ENV_TEXT.replace(
                "export CRAG_UPPER_THRESHOLD=0.59   # the paper's", f"CRAG_UPPER_THRESHOLD={upper}"
            )
            + f"\nCRAG_LOWER_THRESHOLD={lower}\n"
        ).encode()
    )
    assert stat.S_IMODE(env.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary

    # again, with --json: the same file now holds the pair; the report says so
    written = _json_report(*args, "--store", str(store))["env_file"]
    assert written == {
        "path": str(env),
        "changes": [
            {"variable": "CRAG_UPPER_THRESHOLD", "old": str(upper), "new": str(upper)},
            {"variable": "CRAG_LOWER_THRESHOLD", "old": str(lower), "new": str(lower)},
        ],
    }
    assert env.read_text().count("CRAG_LOWER_THRESHOLD=") == 2  # the comment, and the line


def test_write_to_a_folder_is_one_line(
    questions: Path, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(questions), "--store", str(store), "--top-k", "3"]
    assert main(["thresholds", *args, "--write", "--env-file", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"crag: error: env file {tmp_path} is a directory, not a file\n"
    assert os.listdir(tmp_path) == []


def test_env_file_without_write_is_refused_before_any_work(
    questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / ".env"
    args = [str(questions), "--store", str(tmp_path / "no-store"), "--env-file", str(env)]
    assert main(["thresholds", *args]) == 2
    err = capsys.readouterr().err
    assert err == "crag: error: --env-file names the file --write changes: give --write too\n"
    assert not env.exists()
