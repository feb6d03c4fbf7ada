"""The crag command line, in-process, against a small real store and a local search server."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from crag.app.cli import main
from tests.integration_support import build_small_store
from tests.websearch_server import WebsearchServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small_store(tmp_path_factory.mktemp("cli") / "chroma", others=20)


@pytest.fixture(scope="module")
def down() -> Iterator[WebsearchServer]:
    with WebsearchServer() as server:
        server.search_status = 503
        yield server


def ask_args(store: Path, down: WebsearchServer, *extra: str) -> list[str]:
    return [
        "ask",
        "--store",
        str(store),
        "--set",
        "search_provider=searxng",
        "--set",
        f"search_url={down.url}",
        "--set",
        "allowed_hosts=127.0.0.1",
        *extra,
    ]


def test_graph_prints_mermaid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("---") or "graph TD" in out
    for node in (
        "retrieve",
        "grade",
        "decide_action",
        "refine",
        "rewrite_query",
        "web_search",
        "decide_answer",
        "generate",
        "abstain",
    ):
        assert node in out


def test_ask_json_prints_the_output_state(
    store: Path, down: WebsearchServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(ask_args(store, down, "--json", "Who painted the Mona Lisa?")) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert set(out) == {
        "answer",
        "citations",
        "abstained",
        "action",
        "documents",
        "knowledge",
        "notes",
    }
    assert out["action"] == "correct" and "Leonardo" in out["answer"]
    assert "[decide_action] correct" in captured.err
    assert "[grade]" in captured.err and "wikipedia:Mona Lisa#0" in captured.err


def test_ask_streams_progress_then_answer(
    store: Path, down: WebsearchServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(ask_args(store, down, "What is the boiling point of liquid nitrogen in kelvin?")) == 0
    )
    captured = capsys.readouterr()
    assert "[rewrite_query]" in captured.err
    assert "web search unavailable" in captured.err
    assert captured.out.strip()


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ("", "question is empty"),
        ("   ", "question is empty"),
        ("x" * 100_000, "100,000 characters"),
    ],
)
def test_ask_rejects_bad_questions(
    store: Path,
    down: WebsearchServer,
    capsys: pytest.CaptureFixture[str],
    question: str,
    message: str,
) -> None:
    assert main(ask_args(store, down, question)) == 2
    assert message in capsys.readouterr().err


def test_ask_with_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "--store", str(tmp_path / "missing"), "Who?"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crag: error:") and "crag ingest" in err


def test_unknown_setting_lists_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "--set", "bogus=1", "Who?"]) == 2
    assert "unknown setting 'bogus'" in capsys.readouterr().err


def test_ingest_reports_added_skipped_and_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\nAlpha particles are helium nuclei.", encoding="utf-8")
    (docs / "b.txt").write_bytes(b"caf\xe9 au lait")  # Latin-1, not UTF-8
    store = tmp_path / "store"
    assert main(["ingest", "--store", str(store), str(docs)]) == 0
    captured = capsys.readouterr()
    assert "1 added" in captured.out and "1 failed" in captured.out
    assert "b.txt" in captured.err and "UTF-8" in captured.err
    assert main(["ingest", "--store", str(store), str(docs / "a.md")]) == 0
    assert "1 unchanged" in capsys.readouterr().out
