"""The crag command line, in-process, against a small real store and a local search server."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from crag.app.cli.commands import main
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


def without_store(args: list[str]) -> list[str]:
    """``args`` less ``--store PATH``."""
    at = args.index("--store")
    return args[:at] + args[at + 2 :]


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
    err = capsys.readouterr().err
    assert "unknown setting 'bogus'" in err
    # The valid names, by kind: each of the three kinds lists its own.
    listed = err.split("per-run: ")[1].replace("; method: ", "|").replace("; deployment: ", "|")
    per_run, method, deployment = (set(names.strip().split(", ")) for names in listed.split("|"))
    assert {"top_k", "web_search"} <= per_run and "strips_kept" not in per_run
    assert {"strips_kept", "force_action"} <= method and "top_k" not in method
    assert {"store_path", "generator"} <= deployment and "strips_kept" not in deployment


def test_set_routes_each_setting_to_its_kind(
    store: Path,
    down: WebsearchServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--set`` of a per-run setting, a parameter of the method and a deployment setting: each
    reaches the nodes (retrieve reads top_k, refine strips_kept, the store store_path)."""
    missing = store.parent / "missing"
    monkeypatch.setenv("CRAG_STORE_PATH", str(missing))  # the operator's store: none there
    monkeypatch.setenv("CRAG_DEFAULT_CORPUS", "false")
    kinds = ["--set", "strips_kept=1", "--set", "top_k=3"]
    question = ["--json", "Who painted the Mona Lisa?"]
    args = ask_args(store, down, *kinds, "--set", f"store_path={store}", *question)
    assert main(without_store(args)) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert len(out["documents"]) == 3  # top_k, per-run
    assert "[retrieve] 3 passages" in captured.err
    assert "[refine] kept 1 strips" in captured.err  # strips_kept, the method's
    assert out["action"] == "correct" and "Leonardo" in out["answer"]  # from the store named

    # Without the deployment setting, the run reads the operator's store: there is none.
    assert main(without_store(ask_args(store, down, *kinds, *question))) == 2
    assert f"no vector store at '{missing}'" in capsys.readouterr().err


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
