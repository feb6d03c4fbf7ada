"""``crag eval FILE`` on a small real store: the real CRAG and RAG graphs, the shipped models.

One evaluation is stopped by SIGTERM after its first rows (a real ``crag`` process) and run
again with the same ``--output``: it resumes, and its figures are checked against its rows.
Another answers through a real model server (``transformers serve``) that is killed mid-run,
and resumes once the server is back.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crag.app.cli.commands import main
from crag.knowledge.evaluation_stats import mcnemar_exact, wilson_interval
from crag_bench.dev_server import free_port, stop_process_group
from tests.integration_support import build_small_store
from tests.model_server import ModelServer, transformers_serve
from tests.websearch_server import LOOPBACK_HOSTS, WebsearchServer

pytestmark = pytest.mark.integration

QUESTIONS: list[dict[str, Any]] = [
    {"question": "Who painted the Mona Lisa?", "answers": ["Leonardo da Vinci"]},
    {"question": "In which city is the Louvre museum?", "possible_answers": ["Paris"]},
    {"question": "Who painted The School of Athens?", "answers": ["Raphael"]},
    {  # a line of `crag feedback export` with an expected answer: judged by it
        "question": "Who won the 1966 FIFA World Cup?",
        "verdict": "bad",
        "expected": "England",
        "record": {"answer": "Brazil."},
    },
    {  # a feedback line without one: judged by its verdict only
        "question": "What is the capital of Australia?",
        "verdict": "good",
        "record": {"answer": "Canberra."},
    },
]
WITH_ANSWERS = 4
SYSTEMS = ("crag", "rag")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small_store(tmp_path_factory.mktemp("eval") / "chroma", others=20)


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("eval_questions") / "questions.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return path


@pytest.fixture(scope="module")
def search_down() -> Iterator[WebsearchServer]:
    with WebsearchServer() as down:
        down.search_status = 503
        yield down


@pytest.fixture(scope="module", autouse=True)
def no_search_backoff() -> Iterator[None]:
    """The down search's 503 is retried at once in this process: the retry fails as the first
    try did, and a second's wait before it only made every web search a second longer."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("crag.websearch.retry.SEARCH_BACKOFF", 0.0)
        yield


def _options(store: Path, down: WebsearchServer) -> list[str]:
    """The eval's settings: three passages a question (nothing here counts them; ten made every
    RAG prompt about three times as long for the generator to read)."""
    return [
        "--store",
        str(store),
        *("--set", "max_new_tokens=24", "--set", "top_k=3", "--set", "search_provider=searxng"),
        *("--set", f"search_url={down.url}", "--set", f"allowed_hosts={LOOPBACK_HOSTS}"),
    ]


def _rows(directory: Path) -> list[dict[str, Any]]:
    path = directory / "rows.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _terminated_after_first_rows(command: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    """Run ``crag`` in its own process; SIGTERM it once the first question's rows are written."""
    crag = Path(sys.executable).with_name("crag")
    env = {**os.environ, "CRAG_SERVE_AUTOSTART": "0", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [str(crag), *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(_rows(out)) < len(SYSTEMS) and process.poll() is None:
            assert time.monotonic() < deadline, "no rows after 300 s"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        stop_process_group(process)
    return subprocess.CompletedProcess(
        process.args, process.returncode, stdout.decode(), stderr.decode()
    )


@pytest.fixture(scope="module")
def evaluation(
    store: Path,
    questions: Path,
    search_down: WebsearchServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """A run stopped by SIGTERM after its first question, then resumed to its end."""
    out = tmp_path_factory.mktemp("eval_out") / "run"
    command = ["eval", str(questions), "--output", str(out), *_options(store, search_down)]
    stopped = _terminated_after_first_rows(command, out)
    before = _rows(out)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(command)
    return {
        "out": out,
        "stopped": stopped,
        "rows_before": before,
        "code": code,
        "stdout": stdout.getvalue(),
        "stderr": stderr.getvalue(),
        "rows": _rows(out),
        "results": json.loads((out / "results.json").read_text()),
    }


def test_a_terminated_run_keeps_its_rows_and_says_where_it_stopped(
    evaluation: dict[str, Any],
) -> None:
    stopped = evaluation["stopped"]
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    assert "crag eval: stopped at question" in stopped.stderr
    assert f"rows done are kept in {evaluation['out'] / 'rows.jsonl'}" in stopped.stderr
    assert "run the same command again to resume" in stopped.stderr
    before = evaluation["rows_before"]
    assert len(SYSTEMS) <= len(before) < len(QUESTIONS) * len(SYSTEMS)
    assert not (evaluation["out"] / "results.json").exists() or evaluation["code"] == 0


def test_running_again_resumes_without_answering_twice(evaluation: dict[str, Any]) -> None:
    assert evaluation["code"] == 0, evaluation["stderr"][-2000:]
    before, rows = evaluation["rows_before"], evaluation["rows"]
    assert f"resuming: {len(before)} rows already in" in evaluation["stderr"]
    assert rows[: len(before)] == before  # kept as they were, not answered again
    pairs = [(r["key"], r["system"]) for r in rows]
    assert len(pairs) == len(set(pairs)) == len(QUESTIONS) * len(SYSTEMS)


def test_figures_are_those_of_the_rows(evaluation: dict[str, Any]) -> None:
    results, rows = evaluation["results"], evaluation["rows"]
    assert (results["questions"], results["with_answers"], results["verdict_only"]) == (
        len(QUESTIONS),
        WITH_ANSWERS,
        1,
    )
    by_system = {s: {r["line"]: r for r in rows if r["system"] == s} for s in SYSTEMS}
    for system in SYSTEMS:
        judged = [r for r in by_system[system].values() if r["correct"] is not None]
        assert len(judged) == WITH_ANSWERS
        right = sum(r["correct"] for r in judged)
        accuracy = results["systems"][system]["accuracy"]
        assert (accuracy["count"], accuracy["of"]) == (right, WITH_ANSWERS)
        assert accuracy["interval"] == list(wilson_interval(right, WITH_ANSWERS) or ())
        recall = sum(r["answer_in_knowledge"] for r in judged)
        assert results["systems"][system]["knowledge_recall"]["count"] == recall
        assert results["systems"][system]["abstained"] == sum(
            r["abstained"] for r in by_system[system].values()
        )
    crag_only = sum(
        r["correct"] and not by_system["rag"][line]["correct"]
        for line, r in by_system["crag"].items()
        if r["correct"] is not None
    )
    rag_only = sum(
        r["correct"] and not by_system["crag"][line]["correct"]
        for line, r in by_system["rag"].items()
        if r["correct"] is not None
    )
    (comparison,) = results["comparisons"]
    assert (comparison["a"], comparison["b"]) == ("crag", "rag")
    assert comparison["accuracy"]["p_value"] == mcnemar_exact(crag_only, rag_only)
    actions = [r["action"] for r in by_system["crag"].values() if r["correct"] is not None]
    for action, split in results["per_action"].items():
        assert split["questions"] == actions.count(action)
    assert all(r["action"] is None for r in by_system["rag"].values())
    assert results["feedback"]["questions"] == 1 and results["feedback"]["good"] == 1
    assert results["settings"]["store"] and results["settings"]["generator"] == "smollm2"


def test_table_report_and_picture(evaluation: dict[str, Any]) -> None:
    results, out = evaluation["results"], evaluation["out"]
    lines = evaluation["stdout"].splitlines()
    assert lines[0].startswith(f"questions: {len(QUESTIONS)} from ")
    crag_line = next(line for line in lines if line.startswith("crag "))
    accuracy = results["systems"]["crag"]["accuracy"]
    assert f"({accuracy['count']}/{WITH_ANSWERS})" in crag_line
    assert any(line.startswith("crag - rag (4 questions): accuracy") for line in lines)
    assert "judged by feedback only (1 questions without answers): 1 good" in lines[-1]
    report = (out / "report.md").read_text()
    assert "![best passage score" in report and "## Per action" in report
    svg = ET.parse(out / "report.svg").getroot()
    circles = svg.findall(".//{http://www.w3.org/2000/svg}circle")
    scored = [s for s in results["scores"] if s["best_score"] is not None]
    assert len(circles) == len(scored) == len(QUESTIONS)
    colours = {c.get("fill") for c in circles}
    expected = {
        "#2ca02c" if s["correct"] else "#d62728" for s in scored if s["correct"] is not None
    }
    assert expected <= colours and ("#9e9e9e" in colours)  # the verdict-only question: grey
    texts = "".join(svg.itertext())
    assert f"upper threshold {results['settings']['upper_threshold']}" in texts


def test_a_model_server_that_cannot_be_reached_stops_the_run_where_it_was(
    store: Path, questions: Path, search_down: WebsearchServer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("CRAG_LLM_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    monkeypatch.setenv("CRAG_LLM_MODEL", "nothing-listens")
    monkeypatch.setenv("CRAG_LLM_MAX_RETRIES", "0")
    out = tmp_path / "run"
    options = [*_options(store, search_down), "--set", "generator=endpoint"]
    assert main(["eval", str(questions), "--output", str(out), *options]) == 1
    err = capsys.readouterr().err
    assert "crag eval: stopped at question 1 of 5 (line 1 of the file): EndpointError" in err
    kept = len(_rows(out))
    assert kept < len(SYSTEMS)  # the first question's runs that ended before the failure
    assert f"the {kept} rows done are kept in {out / 'rows.jsonl'}" in err
    assert not (out / "results.json").exists()


ANSWERED_BEFORE_THE_KILL = 2
"""Questions the model server answers (on every system) before the test kills it."""


def _kill_once_answered(server: ModelServer, out: Path, evaluated: threading.Event) -> None:
    """Kill ``server`` once :data:`ANSWERED_BEFORE_THE_KILL` questions' rows are written."""
    while len(_rows(out)) < ANSWERED_BEFORE_THE_KILL * len(SYSTEMS) and not evaluated.is_set():
        time.sleep(0.02)
    stop_process_group(server.process)


def _evaluate_until_killed(
    command: list[str], workdir: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int]:
    """``crag eval`` through a model server killed mid-run: the exit code and the server's port."""
    with transformers_serve(workdir) as server:
        for name, value in server.env(CRAG_LLM_MAX_RETRIES="0").items():
            monkeypatch.setenv(name, value)
        evaluated = threading.Event()
        killer = threading.Thread(target=_kill_once_answered, args=(server, out, evaluated))
        killer.start()
        try:
            code = main(command)
        finally:
            evaluated.set()
            killer.join()
    return code, server.port


def test_a_model_server_killed_mid_run_keeps_the_rows_and_the_same_command_resumes(
    store: Path, questions: Path, search_down: WebsearchServer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    out = tmp_path / "run"
    options = [*_options(store, search_down), "--set", "generator=endpoint"]
    command = ["eval", str(questions), "--output", str(out), *options]
    code, port = _evaluate_until_killed(command, tmp_path / "first", out, monkeypatch)
    err = capsys.readouterr().err
    kept = _rows(out)
    stopped = [line for line in err.splitlines() if line.startswith("crag eval: stopped")]
    assert code == 1 and len(stopped) == 1, err[-3000:]
    at = len(kept) // len(SYSTEMS) + 1  # the question the dead server did not answer
    assert at > ANSWERED_BEFORE_THE_KILL and len(kept) < len(QUESTIONS) * len(SYSTEMS)
    assert stopped[0].startswith(
        f"crag eval: stopped at question {at} of {len(QUESTIONS)} (line {at} of the file): "
        "EndpointError: "
    ), stopped[0]
    assert stopped[0].endswith(
        f"; the {len(kept)} rows done are kept in {out / 'rows.jsonl'}; "
        "run the same command again to resume"
    ), stopped[0]
    assert not (out / "results.json").exists()
    # The server comes back at the same address; the same command asks only what is left.
    monkeypatch.setattr("tests.model_server.free_port", lambda: port)
    with transformers_serve(tmp_path / "again") as again:
        assert again.base_url == os.environ["CRAG_LLM_BASE_URL"]
        assert main(command) == 0
    err = capsys.readouterr().err
    assert f"crag eval: resuming: {len(kept)} rows already in" in err
    rows = _rows(out)
    assert rows[: len(kept)] == kept
    asked = [(r["key"], r["system"]) for r in rows[len(kept) :]]
    every = [(r["key"], r["system"]) for r in rows]
    assert len(every) == len(set(every)) == len(QUESTIONS) * len(SYSTEMS)
    assert not set(asked) & {(r["key"], r["system"]) for r in kept}
    assert json.loads((out / "results.json").read_text())["questions"] == len(QUESTIONS)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"question": "Who?"}\n{"question": "Who?", "answers": [\n', "line 2: not valid JSON"),
        ('\n{"question": "Who?", "answers": "x"}\n', 'line 2: "answers" must be a list'),
        ('{"question": "Who?", "verdict": "meh"}\n', 'line 1: "verdict" must be "good" or'),
        ('{"answers": ["x"]}\n', "line 1: empty question"),
        ('["Who?"]\n', "line 1: a JSON object was expected, not list"),
        ("", "holds no questions"),
        ("\n\n", "holds no questions"),
    ],
)
def test_bad_input_names_the_line_and_exits_2(
    content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "questions.jsonl"
    path.write_text(content)
    assert main(["eval", str(path), "--store", str(tmp_path / "unused")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error: ") and message in err, err


def test_without_output_the_rows_go_to_a_new_folder_of_the_evaluations_folder(
    store: Path, questions: Path, search_down: WebsearchServer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Where the quality view looks (``eval_dir``), and the stop says how to resume there."""
    evaluations = tmp_path / "evaluations"
    monkeypatch.setenv("CRAG_EVAL_DIR", str(evaluations))
    monkeypatch.setenv("CRAG_LLM_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    monkeypatch.setenv("CRAG_LLM_MODEL", "nothing-listens")
    monkeypatch.setenv("CRAG_LLM_MAX_RETRIES", "0")
    options = [*_options(store, search_down), "--set", "generator=endpoint"]
    assert main(["eval", str(questions), *options]) == 1
    err = capsys.readouterr().err
    [folder] = list(evaluations.iterdir())
    assert folder.name.startswith(f"{questions.stem}-")
    assert f"crag eval: writing to {folder} (--output DIR to choose)" in err
    assert f"to resume, run the same command with --output {folder}" in err
    assert (folder / "rows.jsonl").exists()


def test_rows_of_other_settings_are_not_resumed(
    store: Path, questions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    row = {"key": "1:x", "system": "crag", "run": {"store": str(store), "top_k": 3}}
    (out / "rows.jsonl").write_text(json.dumps(row) + "\n")
    code = main(["eval", str(questions), "--output", str(out), "--store", str(store)])
    assert code == 2
    err = capsys.readouterr().err
    assert "holds rows answered with" in err and "give another --output" in err
