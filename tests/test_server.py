"""End to end through ``langgraph dev``: the graph served over HTTP with real components.

A small Chroma store is built in a temporary directory with the real embedder (the bundled
"Mona Lisa" summary plus 40 unrelated ones), a LangGraph dev server is started on a free port
with a temporary config that serves the graph declared in the repository's ``langgraph.json``,
and the LangGraph SDK talks to it: assistants, the drawn graph, the context schema and three
runs (answerable, unanswerable with web search down, invalid). The real SmolLM2 generator
answers; web search goes to a local SearxNG stand-in that answers HTTP 500, so it fails fast.

Nothing is written inside the repository: the server runs in a temporary directory (its
``.langgraph_api`` persistence folder lands there) and the repository's ``.env`` is not read,
so a developer's local settings cannot change what is tested.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.websearch_server import WebsearchServer

pytest.importorskip("langgraph_api", reason="the server extra (langgraph-cli[inmem]) is missing")
langgraph_sdk = pytest.importorskip("langgraph_sdk")

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[1]
GRAPH_ID = "crag"
NODES = {"retrieve", "grade", "decide_action", "refine", "rewrite_query", "web_search", "generate"}
MONA_LISA = "wikipedia:Mona Lisa"
OTHER_DOCUMENTS = 40
# Other summaries mentioning these are left out, so that the store holds exactly one passage
# about the painting (the 135M generator is easily led astray by another painter) and nothing
# about nitrogen (the unanswerable question must stay unanswerable).
OFF_TOPIC_WORDS = ("paint", "leonardo", "nitrogen")
STARTUP_TIMEOUT = 60.0
RUN_TIMEOUT = 180.0
OFFLINE_ENV = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "1",
    "LANGSMITH_TRACING": "false",
    "ANONYMIZED_TELEMETRY": "False",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
}


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Chroma store with the Mona Lisa summary and 40 unrelated ones, real embeddings."""
    from vectorstore.corpus import load_corpus
    from vectorstore.embeddings import load_embeddings
    from vectorstore.ingest import ingest_documents
    from vectorstore.store import open_store

    docs = load_corpus()
    mona = [d for d in docs if d.source == MONA_LISA]
    assert len(mona) == 1, "the bundled corpus has no Mona Lisa summary"
    unrelated = [
        d
        for d in docs
        if d.source != MONA_LISA and not any(w in d.text.lower() for w in OFF_TOPIC_WORDS)
    ]
    others = unrelated[:: len(unrelated) // OTHER_DOCUMENTS][:OTHER_DOCUMENTS]
    path = tmp_path_factory.mktemp("store") / "chroma"
    store = open_store(str(path), "crag", load_embeddings(), create=True)
    report = ingest_documents(mona + others, store, progress=False)
    assert report.ok, report.failed
    assert len(report.added) == OTHER_DOCUMENTS + 1
    return path


@pytest.fixture(scope="module")
def search_server() -> Iterator[WebsearchServer]:
    """A SearxNG stand-in that answers every search with HTTP 500."""
    with WebsearchServer() as server:
        server.search_status = 500
        yield server


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _served_graphs() -> dict[str, str]:
    """The repository's ``langgraph.json`` graphs, their file paths made absolute."""
    config = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    graphs: dict[str, str] = {}
    for name, spec in config["graphs"].items():
        file, _, attr = str(spec).rpartition(":")
        graphs[name] = f"{(REPO / file).resolve()}:{attr}"
    return graphs


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it does not exit in time."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def _log_tail(log: Path, chars: int = 6000) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError as exc:
        return f"(no server output: {exc})"


@pytest.fixture(scope="module")
def server_url(
    tmp_path_factory: pytest.TempPathFactory, store_path: Path, search_server: WebsearchServer
) -> Iterator[str]:
    """``langgraph dev`` on a free port, serving the repository's graph; stopped afterwards."""
    cli = Path(sys.executable).with_name("langgraph")
    if not cli.is_file():
        pytest.fail(f"the LangGraph CLI is not installed next to {sys.executable}")
    workdir = tmp_path_factory.mktemp("langgraph_dev")
    config = {
        "dependencies": [str(REPO)],
        "graphs": _served_graphs(),
        # A mapping rather than the repository's .env file: these are the only settings.
        "env": {
            "CRAG_STORE_PATH": str(store_path),
            "CRAG_COLLECTION": "crag",
            "CRAG_GENERATOR": "smollm2",
            "CRAG_SEARCH_URL": search_server.url,
        },
    }
    config_file = workdir / "langgraph.json"
    config_file.write_text(json.dumps(config, indent=2), encoding="utf-8")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "server.log"
    env = {**os.environ, **OFFLINE_ENV}
    command = [
        str(cli), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
        "--port", str(port), "--config", str(config_file),
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"langgraph dev exited with {process.returncode} before answering /ok:\n"
                    f"{_log_tail(log)}"
                )
            try:
                if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"langgraph dev did not answer {url}/ok within {STARTUP_TIMEOUT:.0f} s:\n"
                    f"{_log_tail(log)}"
                )
            time.sleep(0.25)
        yield url
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def client(server_url: str) -> Any:
    """A synchronous LangGraph SDK client for the server."""
    return langgraph_sdk.get_sync_client(url=server_url, api_key=None, timeout=RUN_TIMEOUT)


@pytest.fixture(scope="module")
def assistant_id(client: Any) -> str:
    assistants = client.assistants.search(graph_id=GRAPH_ID)
    assert assistants, f"no assistant for graph {GRAPH_ID!r}"
    return str(assistants[0]["assistant_id"])


def _web_context(search_server: WebsearchServer, **settings: Any) -> dict[str, Any]:
    return {"search_provider": "searxng", "search_url": search_server.url, **settings}


def _run(client: Any, question: str, context: dict[str, Any], **kwargs: Any) -> Any:
    thread = client.threads.create()
    return client.runs.wait(
        thread["thread_id"], GRAPH_ID, input={"question": question}, context=context, **kwargs
    )


# -- tests ------------------------------------------------------------------------------------


def test_assistant_serves_the_crag_graph(client: Any) -> None:
    assistants = client.assistants.search(graph_id=GRAPH_ID)
    assert [a["graph_id"] for a in assistants] == [GRAPH_ID]
    assert assistants[0]["name"] == GRAPH_ID


def test_drawn_graph_has_the_seven_nodes(client: Any, assistant_id: str) -> None:
    drawn = client.assistants.get_graph(assistant_id)
    node_ids = {node["id"] for node in drawn["nodes"]}
    assert node_ids == NODES | {"__start__", "__end__"}
    edges = {(e["source"], e["target"], bool(e.get("conditional"))) for e in drawn["edges"]}
    assert ("decide_action", "refine", True) in edges
    assert ("decide_action", "rewrite_query", True) in edges
    assert ("web_search", "generate", False) in edges


def test_context_schema_shows_the_paper_defaults(client: Any, assistant_id: str) -> None:
    schemas = client.assistants.get_schemas(assistant_id)
    properties = schemas["context_schema"]["properties"]
    expected = {"top_k": 10, "upper_threshold": 0.59, "lower_threshold": -0.99}
    for name, default in expected.items():
        assert properties[name]["default"] == default, name
        assert properties[name]["description"], f"{name} has no description"
    assert "Passages retrieved" in properties["top_k"]["description"]
    assert "Correct if" in properties["upper_threshold"]["description"]
    assert "Incorrect if" in properties["lower_threshold"]["description"]
    assert properties["search_provider"]["enum"] == ["duckduckgo", "searxng", "tavily"]
    assert set(schemas["input_schema"]["properties"]) == {"question"}


def test_answerable_question_is_answered_from_the_store(
    client: Any, search_server: WebsearchServer
) -> None:
    # The paper's default thresholds; the run's context (search settings) reaches the server.
    searches_before = len(search_server.search_queries())
    context = _web_context(search_server)
    out = _run(client, "Who painted the Mona Lisa?", context)
    assert out["action"] == "correct", out
    assert "Leonardo" in out["answer"], out["answer"]
    documents = out["documents"]
    assert documents and all(isinstance(d["score"], float) for d in documents)
    best = max(documents, key=lambda d: d["score"])
    assert best["source"] == MONA_LISA
    assert best["score"] > 0.59
    assert out["knowledge"]
    assert all(k["origin"] == "internal" and k["source"] for k in out["knowledge"])
    assert MONA_LISA in {k["source"] for k in out["knowledge"]}
    assert out["notes"] == []
    # The Correct branch never searches the web.
    assert len(search_server.search_queries()) == searches_before


def test_unanswerable_question_reports_that_web_search_is_down(
    client: Any, search_server: WebsearchServer
) -> None:
    searches_before = len(search_server.search_queries())
    question = "What is the boiling point of liquid nitrogen in kelvin?"
    out = _run(client, question, _web_context(search_server))
    assert out["action"] in {"incorrect", "ambiguous"}, out
    assert any("web search unavailable" in note for note in out["notes"]), out["notes"]
    assert any("HTTP 500" in note for note in out["notes"]), out["notes"]
    assert not [k for k in out["knowledge"] if k["origin"] == "external"]
    assert isinstance(out["answer"], str)
    # The run's context reached the server's graph: the stand-in SearxNG was asked.
    assert len(search_server.search_queries()) > searches_before


def test_empty_question_fails_and_the_server_carries_on(
    client: Any, server_url: str, search_server: WebsearchServer
) -> None:
    thread = client.threads.create()
    out = client.runs.wait(
        thread["thread_id"],
        GRAPH_ID,
        input={"question": "   "},
        context=_web_context(search_server),
        raise_error=False,
    )
    assert "__error__" in out, out
    assert out["__error__"]["error"] == "InvalidQuestionError"
    assert "the question is empty" in out["__error__"]["message"]
    runs = client.runs.list(thread["thread_id"])
    assert [r["status"] for r in runs] == ["error"]

    assert httpx.get(f"{server_url}/ok", timeout=5).json()["ok"] is True
    # The same thread takes a valid question next.
    again = client.runs.wait(
        thread["thread_id"],
        GRAPH_ID,
        input={"question": "Who painted the Mona Lisa?"},
        context=_web_context(search_server),
    )
    assert again["answer"].strip()
    assert again["documents"]
