"""crag on a real OpenAI-compatible model server: ``transformers serve`` on 127.0.0.1.

The server serves the shipped SmolLM2 folder (float32, CPU). Every LLM role goes through it:
the generator (answers and streamed tokens), the contextualizer, the rewriter, the ``llm``
evaluator and the ``crag-tutorial`` grader; and the failures a real server produces: a wrong
model name, a server killed mid-answer, a timeout, a refused connection. What no real server
does on demand (429 with Retry-After, a reply that is not JSON, ...) is in
tests/unit/test_endpoint_failures.py, against a fake.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from crag.app.cli.commands import main
from crag.app.wiring import DefaultComponents
from crag.generator.endpoint import EndpointChatModel
from crag.generator.endpoint_config import EndpointConfig, EndpointError
from crag.graph.builder import build_graph
from crag.settings.context import Context
from crag.settings.deployment import DeploymentSettings, deployment_with
from crag.settings.method import MethodConfig
from crag_bench.dev_server import free_port, stop_process_group
from tests.integration_support import build_small_store
from tests.model_server import ModelServer, smollm2_folder, transformers_serve
from tests.server_support import langgraph_server
from tests.websearch_server import WebsearchServer

pytestmark = pytest.mark.integration

MONA = "Who painted the Mona Lisa?"

GREEDY_PROMPTS = (
    [HumanMessage("Which planet is known as the Red Planet?")],
    [HumanMessage("Name three primary colours.")],
    [SystemMessage("Answer in one word."), HumanMessage("What is the capital of France?")],
    [HumanMessage("Complete: The quick brown fox")],
)
"""Prompts whose greedy answers through the server must equal the in-process ones."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    with transformers_serve(tmp_path_factory.mktemp("model_server")) as running:
        yield running


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small_store(tmp_path_factory.mktemp("model_server_store") / "chroma", others=20)


@pytest.fixture(scope="module")
def down() -> Iterator[WebsearchServer]:
    with WebsearchServer() as search:
        search.search_status = 503
        yield search


@pytest.fixture(scope="module", autouse=True)
def no_search_backoff() -> Iterator[None]:
    """The down search's 503 is retried at once in this process: the retry fails as the first
    try did, and a second's wait before it only made every web search a second longer."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("crag.websearch.retry.SEARCH_BACKOFF", 0.0)
        yield


@pytest.fixture
def on_server(server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> ModelServer:
    """The environment of an operator who points crag at the server (generator=endpoint)."""
    for name, value in server.env(CRAG_GENERATOR="endpoint").items():
        monkeypatch.setenv(name, value)
    return server


INCORRECT = MethodConfig(force_action="incorrect", rewrite_for_search=True)
"""The method of the runs that must rewrite the question and search the web."""


def deployment(store: Path, down: WebsearchServer, **values: Any) -> DeploymentSettings:
    """The operator's settings (the environment as it is now) over the small store, web down."""
    return deployment_with(
        store_path=str(store),
        search_provider="searxng",
        search_url=down.url,
        allowed_hosts="127.0.0.1",
        **values,
    )


def requests_seen(server: ModelServer) -> int:
    """Chat completions the server has answered so far (its access log's lines)."""
    return server.log.read_text(encoding="utf-8").count("POST /v1/chat/completions")


# -- the README's command -----------------------------------------------------------------------


def test_readme_command_answers_through_the_server(
    on_server: ModelServer, store: Path, down: WebsearchServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # README "Use your own model": CRAG_LLM_BASE_URL, CRAG_LLM_MODEL, CRAG_GENERATOR=endpoint,
    # then `crag ask` (here on a small store, the web search down).
    before = requests_seen(on_server)
    code = main(
        [
            "ask", "--store", str(store), "--set", "search_provider=searxng",
            "--set", f"search_url={down.url}", "--set", "allowed_hosts=127.0.0.1", MONA,
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "Leonardo" in out
    assert requests_seen(on_server) == before + 1


# -- every LLM role -----------------------------------------------------------------------------


def test_tokens_stream_from_the_server_as_they_arrive(
    on_server: ModelServer, store: Path, down: WebsearchServer
) -> None:
    graph = build_graph(DefaultComponents(), deployment=deployment(store, down))
    chunks: list[str] = []
    stream: Any = graph.stream({"question": MONA}, context=Context(), stream_mode="messages")
    for message, metadata in stream:
        if metadata.get("langgraph_node") == "generate" and message.text:
            chunks.append(message.text)
    assert len(chunks) >= 3, chunks
    assert "Leonardo" in "".join(chunks)


def test_the_contextualizer_runs_on_the_server(
    on_server: ModelServer, store: Path, down: WebsearchServer
) -> None:
    graph = build_graph(
        DefaultComponents(), checkpointer=InMemorySaver(), deployment=deployment(store, down)
    )
    thread: RunnableConfig = {"configurable": {"thread_id": "follow-up"}}
    graph.invoke({"question": MONA}, thread)
    before = requests_seen(on_server)
    out = graph.invoke({"question": "Where is it displayed?"}, thread)
    assert out["standalone_question"] != "Where is it displayed?"
    assert not any("contextualizer failed" in note for note in out.get("notes", []))
    assert requests_seen(on_server) >= before + 2  # the contextualizer, then the generator


def test_the_rewriter_runs_on_the_server(
    on_server: ModelServer, store: Path, down: WebsearchServer
) -> None:
    graph = build_graph(DefaultComponents(), method=INCORRECT, deployment=deployment(store, down))
    before = requests_seen(on_server)
    updates = list(graph.stream({"question": MONA}, stream_mode="updates"))
    rewrite = next(u["rewrite_query"] for u in updates if "rewrite_query" in u)
    assert rewrite["search_query"] and rewrite["search_query"] != MONA
    assert not any("rewriter failed" in note for note in rewrite.get("notes", []))
    assert requests_seen(on_server) >= before + 1


def test_the_llm_evaluator_and_the_tutorial_grader_run_on_the_server(
    server: ModelServer, store: Path, down: WebsearchServer
) -> None:
    from crag.evaluator.registry import load_evaluator
    from crag.graph.baselines import build_tutorial_graph

    endpoint = EndpointConfig(server.base_url, server.model)
    evaluator = load_evaluator("llm", model="endpoint", endpoint=endpoint)
    before = requests_seen(server)
    scores = evaluator.score(MONA, ["The Mona Lisa was painted by Leonardo da Vinci.", "Cats."])
    assert len(scores) == 2 and all(score in (-1.0, 0.0, 1.0) for score in scores)
    assert requests_seen(server) == before + 2

    graph = build_tutorial_graph(
        DefaultComponents(endpoint=endpoint),
        deployment=deployment(store, down, generator="endpoint"),
    )
    before = requests_seen(server)
    out = graph.invoke({"question": MONA}, context=Context(top_k=2))
    assert len(out["documents"]) == 2
    assert all(d["score"] in (-1.0, 0.0, 1.0) for d in out["documents"])
    assert requests_seen(server) >= before + 2  # one grading prompt per passage


def test_greedy_answers_equal_the_in_process_ones(server: ModelServer) -> None:
    from crag.generator.local import LocalChatModel

    local = LocalChatModel(
        model_path=smollm2_folder(), dtype="float32", max_new_tokens=32, no_repeat_ngram_size=0
    )
    remote = EndpointChatModel.for_endpoint(
        EndpointConfig(server.base_url, server.model), max_new_tokens=32
    )
    for prompt in GREEDY_PROMPTS:
        assert remote.invoke(prompt).text.strip() == local.invoke(prompt).text.strip(), prompt


# -- what a real server does wrong ----------------------------------------------------------------


def test_a_wrong_model_name_is_one_line(
    on_server: ModelServer,
    store: Path,
    down: WebsearchServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CRAG_GENERATOR", "endpoint:no-such-model")
    code = main(["ask", "--store", str(store), "--set", f"search_url={down.url}", MONA])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("crag: error: the model server ")
    assert on_server.base_url in err[-1] and "has no model 'no-such-model'" in err[-1]


def test_a_refused_connection_is_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = EndpointChatModel.for_endpoint(EndpointConfig(url, "m", max_retries=0))
    with pytest.raises(EndpointError, match="refused the connection") as caught:
        model.invoke(MONA)
    assert caught.value.kind == "unreachable" and url in str(caught.value)


def test_a_tiny_timeout_is_one_line(server: ModelServer) -> None:
    config = EndpointConfig(server.base_url, server.model, timeout=0.05)
    model = EndpointChatModel.for_endpoint(config, max_new_tokens=64)
    with pytest.raises(EndpointError, match=r"did not answer within 0.05 s \(CRAG_LLM_TIMEOUT\)"):
        model.invoke("Write a poem about the sea.")


def test_a_server_killed_mid_answer(tmp_path: Path, server: ModelServer) -> None:
    with transformers_serve(tmp_path) as doomed:
        config = EndpointConfig(doomed.base_url, doomed.model, max_retries=0)
        model = EndpointChatModel.for_endpoint(config, max_new_tokens=400)
        received: list[str] = []
        with pytest.raises(EndpointError) as caught:
            for chunk in model.stream("Tell me a very long story about a dragon."):
                received.append(chunk.text)
                if sum(1 for text in received if text) == 2:
                    # SIGTERM, then SIGKILL a second later: on SIGTERM the server lets the
                    # answer it streams run on (400 tokens), so waiting for it to end is the
                    # default 15 s before the SIGKILL that closes the connection either way.
                    stop_process_group(doomed.process, timeout=1.0)
    assert caught.value.kind == "disconnected", caught.value
    assert "closed the connection mid-answer" in str(caught.value)
    # the other server, and crag with it, go on serving
    other = EndpointChatModel.for_endpoint(EndpointConfig(server.base_url, server.model), 8)
    assert other.invoke("Say yes.").text


# -- the served graph ---------------------------------------------------------------------------


def test_the_served_graph_answers_eight_runs_at_once_through_the_server(
    tmp_path: Path, server: ModelServer, store: Path, down: WebsearchServer
) -> None:
    from crag_bench.server_bench import abench

    env = {
        "CRAG_STORE_PATH": str(store),
        "CRAG_SEARCH_PROVIDER": "searxng",
        "CRAG_SEARCH_URL": down.url,
        "CRAG_ALLOWED_HOSTS": "127.0.0.1",
        "CRAG_LLM_MAX_CONCURRENCY": "4",
        **server.env(CRAG_GENERATOR="endpoint"),
    }
    before = requests_seen(server)
    with langgraph_server(tmp_path / "langgraph", env) as served:
        report = asyncio.run(
            abench(
                served.url,
                runs=8,
                questions=[MONA],
                context={},
                timeout=300,
                api_key=served.token,
            )
        )
    assert report.failures == [], report.lines()
    assert len(report.concurrent) == 8
    answers = [run.answer for run in report.concurrent]
    assert all("Leonardo" in (answer or "") for answer in answers), answers
    assert requests_seen(server) >= before + 9  # the sequential run and the eight at once
    assert "CRAG_LLM_API_KEY" not in os.environ  # nothing here needed a key


# -- failing roles degrade, and the run says so ----------------------------------------------------


def test_a_failing_llm_evaluator_falls_back_to_the_embedding_one(
    on_server: ModelServer, store: Path, down: WebsearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAG_EVALUATOR", "llm")
    monkeypatch.setenv("CRAG_EVALUATOR_MODEL", "endpoint:no-such-model")
    graph = build_graph(DefaultComponents(), deployment=deployment(store, down))
    out = graph.invoke({"question": MONA})
    failed = [note for note in out["notes"] if "the llm evaluator failed" in note]
    assert failed and "scored with the embedding evaluator instead" in failed[0]
    assert "has no model 'no-such-model'" in failed[0]
    assert out["action"] == "correct"  # by the embedding evaluator's thresholds
    assert all(d["score"] is not None for d in out["documents"])
    assert "Leonardo" in out["answer"]


def test_a_failing_rewriter_and_contextualizer_leave_a_note(
    on_server: ModelServer, store: Path, down: WebsearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRAG_REWRITER", "endpoint:no-such-model")
    monkeypatch.setenv("CRAG_CONTEXTUALIZER", "endpoint:no-such-model")
    # One conversation: its first turn under the operator's method, the second rewriting.
    memory, served = InMemorySaver(), deployment(store, down)
    thread: RunnableConfig = {"configurable": {"thread_id": "failing-roles"}}
    first = build_graph(DefaultComponents(), checkpointer=memory, deployment=served)
    first.invoke({"question": MONA}, thread)
    rewriting = build_graph(
        DefaultComponents(), checkpointer=memory, method=INCORRECT, deployment=served
    )
    out = rewriting.invoke({"question": "Where is it displayed?"}, thread)
    notes = " | ".join(out["notes"])
    assert "the contextualizer failed (the model server" in notes
    assert "the rewriter failed: the model server" in notes
    assert "has no model 'no-such-model'" in notes
    assert out["standalone_question"] != "Where is it displayed?"  # the key-word fallback
