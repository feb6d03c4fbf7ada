"""End to end through ``langgraph dev``: the graphs served over HTTP with real components.

A small Chroma store is built in a temporary directory with the real embedder (the bundled
"Mona Lisa" summary plus 40 unrelated ones), one LangGraph dev server is started for the module
on a free port with a temporary config that serves the graphs declared in the repository's
``langgraph.json`` (``crag``, ``rag``, ``crag-tutorial`` and ``ingest``) and its middleware
(``http``), and the LangGraph SDK talks to it: assistants,
the drawn graph, the context schemas (the per-run settings, nothing else), runs (answerable,
unanswerable with web search down, invalid input of every kind, chat ``messages`` input and a
follow-up made standalone), the trust boundary (every method parameter and deployment setting
refused by the server's middleware, :mod:`crag.app.web.http`, with a 422 naming it, before a run is
created; per-run settings honoured), node-by-node streaming (updates, generator tokens, progress
events), a follow-up question on the same thread, the ingestion graph, and a small load test.
The real SmolLM2 generator answers; web search goes to a local SearxNG stand-in that answers
HTTP 500, so it fails fast. The server's deployment settings (store, generator, search
endpoint, allow-list, ingest root) are its environment, as an operator would set them; the
method is the operator's default (no ``CRAG_<NAME>`` of a method parameter is set).

The dev server runs with blockbuster on (``langgraph dev`` without ``--allow-blocking``): a
blocking call on the server's event loop would fail the run, so every successful run here also
shows that the nodes (and their model calls) run off the loop.

Nothing is written inside the repository: the server runs in a temporary directory (its
``.langgraph_api`` persistence folder lands there) and the repository's ``.env`` is not read,
so a developer's local settings cannot change what is tested.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import langgraph_sdk
import langgraph_sdk.errors as sdk_errors
import pytest

from crag.settings.context import Context, IngestContext
from crag.settings.deployment import IngestDeployment, StoreDeployment
from crag.settings.method import operator_method
from crag.settings.run_settings import RunSettings
from crag.settings.setting_kinds import DEPLOYMENT_NAMES, METHOD_NAMES, other_kind_error
from crag_bench.dev_server import REPO, DevServer
from crag_bench.mona_lisa_store import MONA_LISA
from tests.server_support import (
    build_server_store,
    langgraph_server,
    served_environment,
)
from tests.websearch_server import WebsearchServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

GRAPH_ID = "crag"
INGEST_ID = "ingest"
QUESTION_GRAPHS = (GRAPH_ID, "rag", "crag-tutorial")
NODES = {
    "contextualize",
    "retrieve",
    "grade",
    "decide_action",
    "refine",
    "rewrite_query",
    "web_search",
    "decide_answer",
    "generate",
    "abstain",
}
RUN_TIMEOUT = 180.0
MONA_QUESTION = "Who painted the Mona Lisa?"
NITROGEN_QUESTION = "What is the boiling point of liquid nitrogen in kelvin?"


def _upper_threshold() -> float:
    """The served graph's Correct threshold: the operator's method and evaluator (defaults)."""
    return RunSettings.combine(Context(), operator_method()).action_thresholds()[0]


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Chroma store with the Mona Lisa summary and 40 unrelated ones, real embeddings."""
    return build_server_store(tmp_path_factory.mktemp("store") / "chroma")


@pytest.fixture(scope="module")
def search_server() -> Iterator[WebsearchServer]:
    """A SearxNG stand-in that answers every search with HTTP 500."""
    with WebsearchServer() as server:
        server.search_status = 500
        yield server


@pytest.fixture(scope="module")
def ingest_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The only directory the server may ingest files from (``CRAG_INGEST_ROOT``)."""
    return tmp_path_factory.mktemp("ingest_root")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    store_path: Path,
    search_server: WebsearchServer,
    ingest_root: Path,
) -> Iterator[DevServer]:
    """``langgraph dev`` on a free port, serving the repository's graphs; stopped afterwards."""
    env = served_environment(store_path, search_server.url, ingest_root)
    with langgraph_server(tmp_path_factory.mktemp("langgraph_dev"), env) as started:
        yield started


@pytest.fixture(scope="module")
def server_url(server: DevServer) -> str:
    return server.url


@pytest.fixture(scope="module")
def client(server: DevServer) -> Any:
    """A synchronous LangGraph SDK client for the server, signed in with its token."""
    return langgraph_sdk.get_sync_client(url=server.url, api_key=server.token, timeout=RUN_TIMEOUT)


@pytest.fixture(scope="module")
def assistant_id(client: Any) -> str:
    assistants = client.assistants.search(graph_id=GRAPH_ID)
    assert assistants, f"no assistant for graph {GRAPH_ID!r}"
    return str(assistants[0]["assistant_id"])


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


def test_drawn_graph_has_every_node(client: Any, assistant_id: str) -> None:
    drawn = client.assistants.get_graph(assistant_id)
    node_ids = {node["id"] for node in drawn["nodes"]}
    assert node_ids == NODES | {"__start__", "__end__"}
    edges = {(e["source"], e["target"], bool(e.get("conditional"))) for e in drawn["edges"]}
    assert ("decide_action", "refine", True) in edges
    assert ("decide_action", "rewrite_query", True) in edges
    assert ("web_search", "decide_answer", False) in edges
    assert ("decide_answer", "generate", True) in edges
    assert ("decide_answer", "abstain", True) in edges


def test_context_schema_shows_the_defaults(client: Any, assistant_id: str) -> None:
    schemas = client.assistants.get_schemas(assistant_id)
    properties = schemas["context_schema"]["properties"]
    expected = {"top_k": 10, "web_search": True, "web_results": 5, "max_new_tokens": 128}
    for name, default in expected.items():
        assert properties[name]["default"] == default, name
        assert properties[name]["description"], f"{name} has no description"
    assert "passages to retrieve" in properties["top_k"]["description"]
    assert (properties["top_k"]["minimum"], properties["top_k"]["maximum"]) == (1, 100)
    assert "Search the web" in properties["web_search"]["description"]
    assert properties["retrieval"]["enum"] == ["dense", "lexical", "hybrid"]
    assert properties["search_safesearch"]["enum"] == ["on", "moderate", "off"]
    # Neither the method's parameters nor the deployment settings are shown, even read-only.
    assert not set(properties) & (METHOD_NAMES | DEPLOYMENT_NAMES)
    assert not any("readOnly" in spec for spec in properties.values())
    assert set(schemas["input_schema"]["properties"]) == {"question", "messages"}


@pytest.mark.parametrize("graph_id", [*QUESTION_GRAPHS, INGEST_ID])
def test_each_served_context_schema_is_exactly_the_per_run_settings(
    client: Any, graph_id: str
) -> None:
    served = client.assistants.search(graph_id=graph_id)
    assert [a["graph_id"] for a in served] == [graph_id]
    schema = client.assistants.get_schemas(served[0]["assistant_id"])["context_schema"]
    per_run = IngestContext.setting_names() if graph_id == INGEST_ID else Context.setting_names()
    assert set(schema["properties"]) == per_run
    assert len(per_run) == (2 if graph_id == INGEST_ID else 13)


def test_answerable_question_is_answered_from_the_store(
    client: Any, search_server: WebsearchServer
) -> None:
    # The default thresholds; the search settings are the server's (its environment).
    searches_before = len(search_server.search_queries())
    context: dict[str, Any] = {}
    out = _run(client, "Who painted the Mona Lisa?", context)
    assert out["action"] == "correct", out
    assert "Leonardo" in out["answer"], out["answer"]
    documents = out["documents"]
    assert documents and all(isinstance(d["score"], float) for d in documents)
    best = max(documents, key=lambda d: d["score"])
    assert best["source"] == MONA_LISA
    assert best["score"] > _upper_threshold()
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
    out = _run(client, question, {})
    assert out["action"] in {"incorrect", "ambiguous"}, out
    assert any("web search unavailable" in note for note in out["notes"]), out["notes"]
    assert any("HTTP 500" in note for note in out["notes"]), out["notes"]
    assert not [k for k in out["knowledge"] if k["origin"] == "external"]
    assert isinstance(out["answer"], str)
    # The server's search settings reached the graph: the stand-in SearxNG was asked.
    assert len(search_server.search_queries()) > searches_before


def test_empty_question_fails_and_the_server_carries_on(
    client: Any, server_url: str, search_server: WebsearchServer
) -> None:
    thread = client.threads.create()
    out = client.runs.wait(
        thread["thread_id"],
        GRAPH_ID,
        input={"question": "   "},
        context={},
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
        context={},
    )
    assert again["answer"].strip()
    assert again["documents"]


# -- both graphs, the schemas -------------------------------------------------------------------


def test_every_graph_is_served(client: Any) -> None:
    graphs = {a["graph_id"] for a in client.assistants.search(limit=20)}
    assert graphs == {GRAPH_ID, INGEST_ID, "rag", "crag-tutorial"}
    ingest = client.assistants.search(graph_id=INGEST_ID)[0]
    drawn = client.assistants.get_graph(ingest["assistant_id"])
    assert {node["id"] for node in drawn["nodes"]} == {"__start__", "ingest", "__end__"}
    schemas = client.assistants.get_schemas(ingest["assistant_id"])
    assert set(schemas["input_schema"]["properties"]) == {"paths", "documents", "tags"}
    assert {"added", "skipped", "replaced", "failed", "chunks"} <= set(
        schemas["output_schema"]["properties"]
    )
    for name, spec in schemas["context_schema"]["properties"].items():
        assert spec.get("description"), f"ingest setting {name} has no description"


def test_every_setting_has_a_description(client: Any, assistant_id: str) -> None:
    properties = client.assistants.get_schemas(assistant_id)["context_schema"]["properties"]
    assert {"scope_tags", "scope_folder", "scope_file_types", "search_collection"} <= set(
        properties
    )
    assert "absolute path" in properties["scope_folder"]["description"]
    for name, spec in properties.items():
        assert spec.get("description"), f"setting {name} has no description"


def test_drawn_graph_has_the_three_branches(client: Any, assistant_id: str) -> None:
    drawn = client.assistants.get_graph(assistant_id)
    edges = {(e["source"], e["target"]): bool(e.get("conditional")) for e in drawn["edges"]}
    # Correct -> refine, Incorrect -> rewrite_query, Ambiguous -> both: two conditional edges
    # out of decide_action; both paths join at decide_answer, whose two conditional edges lead
    # to generate or abstain.
    conditional = sorted(
        (src, target) for (src, target), cond in edges.items() if cond and src != "__start__"
    )
    assert conditional == [
        ("decide_action", "refine"),
        ("decide_action", "rewrite_query"),
        ("decide_answer", "abstain"),
        ("decide_answer", "generate"),
    ]
    # Chat runs start at contextualize, single questions at retrieve.
    assert edges.get(("__start__", "contextualize")) is True
    assert edges.get(("__start__", "retrieve")) is True
    for edge in [
        ("contextualize", "retrieve"),
        ("retrieve", "grade"),
        ("grade", "decide_action"),
        ("refine", "decide_answer"),
        ("rewrite_query", "web_search"),
        ("web_search", "decide_answer"),
        ("generate", "__end__"),
        ("abstain", "__end__"),
    ]:
        assert edges.get(edge) is False, edge


# -- streaming ----------------------------------------------------------------------------------


def test_run_streams_node_updates_tokens_and_progress(
    client: Any, search_server: WebsearchServer
) -> None:
    thread = client.threads.create()
    parts = list(
        client.runs.stream(
            thread["thread_id"],
            GRAPH_ID,
            input={"question": MONA_QUESTION},
            context={},
            stream_mode=["updates", "custom", "messages-tuple"],
        )
    )
    events = [part.event for part in parts]
    assert "error" not in events, [p.data for p in parts if p.event == "error"]
    # Node by node, in order: the Correct branch.
    updated = [node for p in parts if p.event == "updates" for node in p.data]
    assert updated == ["retrieve", "grade", "decide_action", "refine", "decide_answer", "generate"]
    # Progress events from the nodes (custom stream).
    progress = [p.data for p in parts if p.event == "custom"]
    scored = next(e for e in progress if e["node"] == "grade" and e["event"] == "scored")
    assert scored["passages"] == 10 and scored["best"] > _upper_threshold()
    assert [e["event"] for e in progress if e["node"] == "decide_action"] == ["decided"]
    assert any(e["node"] == "refine" and e["event"] == "filtered" for e in progress)
    # Generator tokens, as they were produced (messages stream), add up to the answer.
    tokens = [
        p.data[0]["content"]
        for p in parts
        if p.event == "messages" and p.data[1].get("langgraph_node") == "generate"
    ]
    answer = next(
        p.data["generate"]["answer"] for p in parts if p.event == "updates" and "generate" in p.data
    )
    assert len([t for t in tokens if t]) > 3, tokens
    assert "".join(tokens).strip() == answer
    assert "Leonardo" in answer
    # Tokens arrive before the node's update: streamed while generating.
    first_token = next(i for i, p in enumerate(parts) if p.event == "messages")
    generate_update = next(
        i for i, p in enumerate(parts) if p.event == "updates" and "generate" in p.data
    )
    assert first_token < generate_update


# -- threads ------------------------------------------------------------------------------------


def test_follow_up_on_a_thread_resets_the_run_fields(
    client: Any, search_server: WebsearchServer
) -> None:
    thread_id = client.threads.create()["thread_id"]
    context: dict[str, Any] = {}
    first = client.runs.wait(
        thread_id, GRAPH_ID, input={"question": NITROGEN_QUESTION}, context=context
    )
    assert first["action"] in {"incorrect", "ambiguous"}
    assert any("web search unavailable" in n for n in first["notes"])
    state = client.threads.get_state(thread_id)["values"]
    assert state["search_query"], "the first run searched the web"

    second = client.runs.wait(
        thread_id, GRAPH_ID, input={"question": MONA_QUESTION}, context=context
    )
    assert second["action"] == "correct"
    assert "Leonardo" in second["answer"]
    # Nothing of the first run leaks into the second: notes, web query and knowledge are reset.
    assert second["notes"] == []
    assert all(k["origin"] == "internal" for k in second["knowledge"])
    state = client.threads.get_state(thread_id)["values"]
    assert state["question"] == MONA_QUESTION
    assert state["search_query"] == ""
    assert state["external_knowledge"] == []
    runs = client.runs.list(thread_id)
    assert [r["status"] for r in runs] == ["success", "success"]
    # The thread keeps the conversation: both runs' final states are in its history.
    finished = [
        s["values"]["question"]
        for s in client.threads.get_history(thread_id, limit=50)
        if not s["next"] and s["values"].get("answer")
    ]
    assert finished == [MONA_QUESTION, NITROGEN_QUESTION]


def test_messages_input_is_answered_with_an_ai_message_and_its_sources(client: Any) -> None:
    thread_id = client.threads.create()["thread_id"]
    out = client.runs.wait(
        thread_id,
        GRAPH_ID,
        input={"messages": [{"role": "user", "content": MONA_QUESTION}]},
        context={},
    )
    assert out["standalone_question"] == MONA_QUESTION
    human, ai = out["messages"]
    assert human["type"] == "human" and human["content"] == MONA_QUESTION
    assert ai["type"] == "ai" and ai["additional_kwargs"]["answer"] == out["answer"]
    assert ai["content"][0]["text"].startswith(out["answer"])  # then its sources
    assert "Leonardo" in out["answer"]
    assert ai["additional_kwargs"]["action"] == "correct"
    assert MONA_LISA in ai["additional_kwargs"]["sources"]
    assert ai["additional_kwargs"]["question"] == MONA_QUESTION
    # The thread keeps the chat, as Studio's chat view reads it.
    state = client.threads.get_state(thread_id)["values"]
    assert [m["type"] for m in state["messages"]] == ["human", "ai"]


def test_a_message_after_a_failed_question_is_answered_with_citations(client: Any) -> None:
    thread_id = client.threads.create()["thread_id"]
    failed = client.runs.wait(
        thread_id, GRAPH_ID, input={"question": "   "}, context={}, raise_error=False
    )
    assert failed["__error__"]["error"] == "InvalidQuestionError"
    # The failed run's question is still in the thread's state; this run sends only a message.
    out = client.runs.wait(
        thread_id,
        GRAPH_ID,
        input={"messages": [{"role": "user", "content": MONA_QUESTION}]},
        context={},
    )
    assert out["standalone_question"] == MONA_QUESTION
    assert "Leonardo" in out["answer"] and out["abstained"] is False
    ai = out["messages"][-1]
    assert ai["additional_kwargs"]["abstained"] is False
    cited = ai["additional_kwargs"]["citations"]
    assert [c["number"] for c in cited] == out["citations"] and cited
    for citation in cited:
        strip = out["knowledge"][citation["number"] - 1]
        assert (citation["source"], citation["chunk"]) == (strip["source"], strip["chunk"])
    # "Leonardo" is in the Mona Lisa summary only (the store leaves other painters out).
    assert {c["source"] for c in cited} == {MONA_LISA}
    assert cited[0]["title"] == "Mona Lisa"


def test_follow_up_message_becomes_a_standalone_question(client: Any) -> None:
    thread_id = client.threads.create()["thread_id"]
    first = client.runs.wait(
        thread_id,
        GRAPH_ID,
        input={"messages": [{"role": "user", "content": MONA_QUESTION}]},
        context={},
    )
    assert first["action"] == "correct"
    out = client.runs.wait(
        thread_id,
        GRAPH_ID,
        input={"messages": [{"role": "user", "content": "Where is it displayed?"}]},
        context={},
    )
    # The follow-up names the first turn's subject, and retrieval found it with that question.
    assert "Mona Lisa" in out["standalone_question"], out["standalone_question"]
    best = max(out["documents"], key=lambda d: d["score"])
    assert best["source"] == MONA_LISA
    assert [m["type"] for m in out["messages"]] == ["human", "ai", "human", "ai"]
    assert out["messages"][2]["content"] == "Where is it displayed?"
    assert out["messages"][3]["additional_kwargs"]["question"] == out["standalone_question"]


def test_empty_message_is_the_empty_question_error(client: Any) -> None:
    out = client.runs.wait(
        client.threads.create()["thread_id"],
        GRAPH_ID,
        input={"messages": [{"type": "human", "content": "  "}]},
        context={},
        raise_error=False,
    )
    assert out.get("__error__", {}).get("error") == "InvalidQuestionError", out
    assert "the question is empty" in out["__error__"]["message"]


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "settings", "error", "message"),
    [
        ({}, {}, "InvalidQuestionError", "no question given"),
        ({"question": 42}, {}, "InvalidQuestionError", "the question must be a string, not int"),
        (
            {"question": "x" * 100_000},
            {},
            "InvalidQuestionError",
            "the question is 100,000 characters long; the limit is 2,000",
        ),
        (
            {"question": MONA_QUESTION},
            {"top_k": "ten"},
            "InvalidSettingError",
            "setting top_k must be an integer, not 'ten'",
        ),
        (
            {"question": MONA_QUESTION},
            {"retrieval": "fuzzy"},
            "InvalidSettingError",
            "setting retrieval must be one of",
        ),
    ],
    ids=["missing-question", "question-not-text", "question-100kB", "top_k-text", "bad-choice"],
)
def test_bad_input_is_a_clear_run_error(
    client: Any,
    server_url: str,
    search_server: WebsearchServer,
    payload: dict[str, Any],
    settings: dict[str, Any],
    error: str,
    message: str,
) -> None:
    thread_id = client.threads.create()["thread_id"]
    out = client.runs.wait(
        thread_id,
        GRAPH_ID,
        input=payload,
        context=settings,
        raise_error=False,
    )
    assert out.get("__error__", {}).get("error") == error, out
    assert message in out["__error__"]["message"]
    assert [r["status"] for r in client.runs.list(thread_id)] == ["error"]
    assert httpx.get(f"{server_url}/ok", timeout=5).json()["ok"] is True


def test_server_keeps_serving_after_bad_input(client: Any, search_server: WebsearchServer) -> None:
    thread_id = client.threads.create()["thread_id"]
    context: dict[str, Any] = {}
    bad = client.runs.wait(
        thread_id, GRAPH_ID, input={"question": 42}, context=context, raise_error=False
    )
    assert "__error__" in bad
    good = client.runs.wait(thread_id, GRAPH_ID, input={"question": MONA_QUESTION}, context=context)
    assert "Leonardo" in good["answer"]
    assert [r["status"] for r in client.runs.list(thread_id)] == ["success", "error"]


# -- the trust boundary -------------------------------------------------------------------------

# What a caller might try: read internal pages, query an internal URL, write a store elsewhere,
# load other models, lift the limits, take the model server's key. Every deployment setting is
# refused, whatever its value and whichever graph the run is for: the server's middleware
# (crag.app.web.http) answers 422 before langgraph-api would drop the setting without a word.
INGEST_ATTEMPTS: dict[str, Any] = {
    "store_path": "/tmp/crag-run-store",
    "collection": "elsewhere",
    "chroma_host": "127.0.0.1",
    "chroma_port": 8001,
    "chroma_ssl": True,
    "embedder": "/tmp/some-embedder",
    "max_document_chars": 10**9,
    "ingest_root": "/",
    "upload_dir": "/",
    "threads_db": "/tmp/crag-run-threads.sqlite",
    "cache_dir": "/tmp/crag-run-cache",
    "ingest_run_replace": "all",
    "ingest_min_chunk_size": 1,
    "ingest_max_chunks": 10**9,
    "max_file_pages": 10**9,
    "max_file_paragraphs": 10**9,
    "max_file_chars": 10**9,
    "max_file_bytes": 10**12,
}
ATTEMPTS: dict[str, Any] = {
    **INGEST_ATTEMPTS,
    "readable_collections": "elsewhere",
    "evaluator": "t5",
    "evaluator_model": "/tmp/some-checkpoint",
    "evaluator_int8": True,
    "evaluator_batch_size": 512,
    "generator": "local:/tmp/some-model",
    "rewriter": "endpoint:some-model",
    "contextualizer": "endpoint:some-model",
    "no_repeat_ngram_size": 0,
    "generator_batch_size": 128,
    "generator_dtype": "bfloat16",
    "generator_engine": "torch",
    "llm_base_url": "http://127.0.0.1:1/v1",
    "llm_model": "some-model",
    "llm_api_key": "sk-someone-elses",
    "llm_timeout": 600.0,
    "llm_max_retries": 100,
    "llm_max_concurrency": 1000,
    "llm_context_length": 10**6,
    "search_provider": "duckduckgo",
    "search_url": "http://127.0.0.1:1/internal",
    "search_backend": "html",
    "search_timeout": 600.0,
    "allowed_hosts": "127.0.0.0/8",
    "default_corpus": True,
    "default_corpus_limit": 5,
    "max_question_chars": 1_000_000,
    "page_timeout": 600.0,
    "max_page_bytes": 10**9,
    "max_redirects": 50,
    "web_cache_ttl": 0.0,
    "max_history_turns": 1000,
    "max_history_chars": 10**7,
    "max_knowledge_chars": 10**7,
    "upload_max_bytes": 10**12,
    "upload_quota_bytes": 10**15,
    "upload_max_files": 10**9,
    "upload_seconds": 10**6,
    "server_hosts": "evil.example",
    "server_origins": "https://evil.example",
    "server_max_request_bytes": 10**12,
    "server_session_hours": 8000,
    "oidc_issuer": "https://evil.example",
    "oidc_client_id": "evil",
    "oidc_client_secret": "evil",
    "server_token": "a token of the caller's own choosing",
    "oidc_name_claim": "sub",
    "team_admins": "mallory",
    "proxy_user_header": "X-Forwarded-User",
    "proxy_secret": "evil",
    "proxy_addresses": "0.0.0.0/0",
    "eval_dir": "/",
}
# What a caller might try on the method: force or remove an action, move the thresholds, keep
# more strips. The method is the operator's (CRAG_<NAME>), the same for every run.
METHOD_ATTEMPTS: dict[str, Any] = {
    "upper_threshold": 0.99,
    "lower_threshold": -0.99,
    "strip_mode": "passage",
    "strip_scoring": "passage-map",
    "strip_size": 3,
    "strips_kept": 2,
    "strip_threshold": 0.5,
    "strip_margin": 0.0,
    "prefer_wikipedia": False,
    "fetch_pages": False,
    "rewrite_for_search": True,
    "select_web_knowledge": False,
    "refine_web_knowledge": True,
    "abstain_without_knowledge": False,
    "abstention_threshold": 0.5,
    "knowledge_form": "passages",
    "ambiguous_knowledge": "both",
    "knowledge_order": "score",
    "number_knowledge": True,
    "force_action": "correct",
    "disable_action": "incorrect",
    "refine_knowledge": False,
    "best_passage_whole": True,
}


def _refusal(*names: str) -> str:
    """The server's 422 detail for a request naming ``names``."""
    error = other_kind_error(names)
    assert error is not None, names
    return str(error)


@contextmanager
def _refused(*names: str) -> Iterator[None]:
    """The block fails with the server's 422, whose detail names ``names`` and their kind.

    The SDK raises an ``httpx.HTTPStatusError`` (``runs.wait``) or its subclass
    ``UnprocessableEntityError`` (the other calls); both carry the response.
    """
    with pytest.raises(httpx.HTTPStatusError) as info:
        yield
    response = info.value.response
    assert response.status_code == 422
    assert response.json() == {"detail": _refusal(*names)}
    if isinstance(info.value, sdk_errors.APIStatusError):
        assert info.value.message == _refusal(*names)


def test_the_server_was_started_with_the_repositorys_middleware(server: DevServer) -> None:
    served = json.loads((REPO / "langgraph.json").read_text(encoding="utf-8"))
    assert served["http"]["app"] == "crag.app.web.http:app"
    started = json.loads((server.log.parent / "langgraph.json").read_text(encoding="utf-8"))
    for key in ("http", "auth"):
        assert started.get(key) == served[key], (
            f"crag_bench.dev_server.start_dev_server must copy langgraph.json's {key!r} into "
            "the config it starts the server with"
        )


def test_the_attempts_cover_every_setting_a_run_may_not_set() -> None:
    assert set(ATTEMPTS) == DEPLOYMENT_NAMES
    assert set(INGEST_ATTEMPTS) == set(StoreDeployment.model_fields) | set(
        IngestDeployment.model_fields
    )
    assert set(METHOD_ATTEMPTS) == METHOD_NAMES


@pytest.mark.parametrize(
    ("kind", "name"),
    [("deployment", name) for name in sorted(ATTEMPTS)]
    + [("method", name) for name in sorted(METHOD_ATTEMPTS)],
)
def test_a_run_may_not_set_what_the_operator_sets(client: Any, kind: str, name: str) -> None:
    """A deployment setting or a parameter of the method in a run's context: refused (422)."""
    value = (ATTEMPTS if kind == "deployment" else METHOD_ATTEMPTS)[name]
    thread_id = client.threads.create()["thread_id"]
    with _refused(name):
        client.runs.wait(
            thread_id,
            GRAPH_ID,
            input={"question": MONA_QUESTION},
            context={"top_k": 3, name: value},
        )
    assert client.runs.list(thread_id) == [], "a refused run is never created"
    assert not Path(ATTEMPTS["store_path"]).exists()


def test_a_setting_of_either_kind_is_refused_in_context_and_in_configurable(client: Any) -> None:
    # langgraph-api copies config.configurable into the context when no context is sent.
    ask = {"input": {"question": MONA_QUESTION}}
    for name, value in (("store_path", "/tmp/crag-run-store"), ("force_action", "correct")):
        thread_id = client.threads.create()["thread_id"]
        with _refused(name):
            client.runs.wait(thread_id, GRAPH_ID, **ask, context={name: value})
        with _refused(name):
            client.runs.wait(thread_id, GRAPH_ID, **ask, config={"configurable": {name: value}})
        assert client.runs.list(thread_id) == []
    # Several at once: one refusal, deployment settings first.
    with _refused("allowed_hosts"):
        client.runs.wait(
            None,
            GRAPH_ID,
            **ask,
            config={"configurable": {"allowed_hosts": "127.0.0.0/8", "strips_kept": 2}},
        )
    assert not Path("/tmp/crag-run-store").exists()


def test_every_way_of_starting_runs_is_refused(client: Any) -> None:
    bad = {"search_url": "http://127.0.0.1:1/internal"}
    ask: dict[str, Any] = {"input": {"question": MONA_QUESTION}, "context": bad}
    for graph_id in QUESTION_GRAPHS:
        thread_id = client.threads.create()["thread_id"]
        with _refused("search_url"):
            client.runs.wait(thread_id, graph_id, **ask)
        with _refused("search_url"):
            client.runs.create(thread_id, graph_id, **ask)
        with _refused("search_url"):
            list(client.runs.stream(thread_id, graph_id, **ask))
        with _refused("search_url"):
            client.runs.wait(None, graph_id, **ask)
        assert client.runs.list(thread_id) == [], graph_id
    fine = {"assistant_id": GRAPH_ID, "input": {"question": MONA_QUESTION}}
    with _refused("search_url"):
        client.runs.create_batch([fine, {**fine, "context": bad}])
    with _refused("search_url"):
        client.crons.create(GRAPH_ID, schedule="0 0 * * *", **ask)
    # An assistant's context and configurable apply to every run of it.
    with _refused("search_url"):
        client.assistants.create(GRAPH_ID, context=bad)
    assistant_id = client.assistants.create(GRAPH_ID, context={"top_k": 3})["assistant_id"]
    try:
        with _refused("strip_mode"):
            client.assistants.update(assistant_id, config={"configurable": {"strip_mode": "words"}})
        assert client.assistants.get(assistant_id)["context"] == {"top_k": 3}
    finally:
        client.assistants.delete(assistant_id)


@pytest.mark.parametrize("name", sorted(INGEST_ATTEMPTS))
def test_an_ingestion_run_may_not_set_a_deployment_setting(client: Any, name: str) -> None:
    thread_id = client.threads.create()["thread_id"]
    with _refused(name):
        client.runs.wait(
            thread_id,
            INGEST_ID,
            input={"documents": [{"text": "Otters hold hands.", "source": "notes:otters"}]},
            context={"chunk_size": 500, name: INGEST_ATTEMPTS[name]},
        )
    assert client.runs.list(thread_id) == []
    assert not Path(INGEST_ATTEMPTS["store_path"]).exists()


def test_per_run_settings_reach_the_graph_within_bounds(
    client: Any, search_server: WebsearchServer
) -> None:
    out = _run(client, MONA_QUESTION, {"top_k": 3})
    assert len(out["documents"]) == 3
    assert "Leonardo" in out["answer"]
    # Given as config.configurable (copied into the context), it is honoured the same way.
    thread_id = client.threads.create()["thread_id"]
    out = client.runs.wait(
        thread_id,
        GRAPH_ID,
        input={"question": MONA_QUESTION},
        config={"configurable": {"top_k": 2}},
    )
    assert len(out["documents"]) == 2
    # web_search off: the question the store cannot answer sends nothing to the search engine.
    searches_before = len(search_server.search_queries())
    out = _run(client, NITROGEN_QUESTION, {"web_search": False})
    assert out["action"] in {"incorrect", "ambiguous"}, out
    assert any("web search is off for this run" in note for note in out["notes"]), out["notes"]
    assert len(search_server.search_queries()) == searches_before
    cases: list[tuple[dict[str, Any], str]] = [
        ({"top_k": 101}, "setting top_k must be at most 100, not 101"),
        ({"max_new_tokens": 2000}, "setting max_new_tokens must be at most 1024, not 2000"),
        ({"pages_to_read": -1}, "setting pages_to_read must be at least 0, not -1"),
    ]
    for settings, message in cases:
        out = _run(client, MONA_QUESTION, settings, raise_error=False)
        assert out.get("__error__", {}).get("error") == "InvalidSettingError", out
        assert out["__error__"]["message"] == message


# -- ingestion graph ----------------------------------------------------------------------------

FESTIVAL = (
    "The Zorblax lantern festival is held every March in the mountain town of Quellingen, "
    "where thousands of paper lanterns are released over the lake."
)


def test_ingestion_graph_fills_the_store_the_questions_use(
    client: Any, ingest_root: Path, search_server: WebsearchServer
) -> None:
    notes = ingest_root / "notes.md"
    notes.write_text("# Quellingen\n\nQuellingen is a town on the shore of Lake Ober.\n")
    payload = {  # one file by its path, one by its name under the ingest root
        "paths": [str(notes), "shared:missing.txt"],
        "documents": [{"text": FESTIVAL, "source": "notes:zorblax", "title": "Zorblax festival"}],
    }
    thread_id = client.threads.create()["thread_id"]
    parts = list(
        client.runs.stream(
            thread_id,
            INGEST_ID,
            input=payload,
            stream_mode=["custom", "values"],
        )
    )
    progress = [p.data for p in parts if p.event == "custom"]
    assert progress[0]["event"] == "started"
    assert any(e["event"] == "embedding" and e["done"] == e["total"] > 0 for e in progress)
    assert progress[-1]["event"] == "done"
    report = [p.data for p in parts if p.event == "values"][-1]
    # the report names the server's files, never its folders
    assert sorted(report["added"]) == ["notes:zorblax", "shared:notes.md"]
    assert report["chunks"] == 2
    assert [f["source"] for f in report["failed"]] == ["shared:missing.txt"]
    assert "does not exist" in report["failed"][0]["error"]
    assert str(ingest_root.resolve()) not in json.dumps(report)

    again = client.runs.wait(
        client.threads.create()["thread_id"],
        INGEST_ID,
        input=payload,
    )
    assert sorted(again["skipped"]) == sorted(report["added"])
    assert again["added"] == [] and again["chunks"] == 0

    out = _run(
        client,
        "When is the Zorblax lantern festival held?",
        {},
    )
    assert out["documents"][0]["source"] == "notes:zorblax"
    assert out["action"] == "correct"


def _chunks_of(store_path: Path, source: str) -> int:
    """How many chunks of ``source`` the server's store holds (read beside the server)."""
    import chromadb

    reader = chromadb.PersistentClient(path=str(store_path))
    found = reader.get_collection("crag").get(where={"source": source}, include=[])
    return len(found["ids"])


def test_a_cancelled_ingestion_run_stops_its_work_and_leaves_nothing(
    client: Any, store_path: Path
) -> None:
    """``runs.cancel`` stops a served ingestion at its next batch, and its chunks are removed.

    About 3,000 chunks of 200 characters: several batches of embedding, cancelled during the
    first. The next ingestion needs the store's write lock, so it finishes only once the
    cancelled run has let go of the store.
    """
    text = " ".join(f"lanternword{i}" for i in range(50_000))
    thread_id = client.threads.create()["thread_id"]
    run = client.runs.create(
        thread_id,
        INGEST_ID,
        input={"documents": [{"text": text, "source": "notes:cancelled"}]},
        context={"chunk_size": 200, "chunk_overlap": 0},
    )
    for _ in range(600):
        if client.runs.get(thread_id, run["run_id"])["status"] == "running":
            break
        time.sleep(0.05)
    time.sleep(1.0)
    client.runs.cancel(thread_id, run["run_id"], wait=True)
    assert client.runs.get(thread_id, run["run_id"])["status"] == "interrupted"

    started = time.monotonic()
    after = client.runs.wait(
        client.threads.create()["thread_id"],
        INGEST_ID,
        input={"documents": [{"text": FESTIVAL, "source": "notes:after-cancel"}]},
    )
    assert after["added"] == ["notes:after-cancel"], after
    assert time.monotonic() - started < 60, "the cancelled run held the store"
    assert _chunks_of(store_path, "notes:cancelled") == 0
    assert _chunks_of(store_path, "notes:after-cancel") == 1


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "nothing to ingest"),
        ({"paths": "notes.md"}, "paths must be a list of strings"),
        ({"documents": [{"text": ""}]}, "documents[0].text must be a non-empty string"),
        ({"documents": [{"text": "x", "body": "y"}]}, "unknown field(s) body"),
        ({"paths": ["/etc/hostname"]}, "outside"),
    ],
    ids=["empty", "paths-not-list", "empty-text", "unknown-field", "outside-root"],
)
def test_bad_ingestion_input_is_a_clear_run_error(
    client: Any, payload: dict[str, Any], message: str
) -> None:
    out = client.runs.wait(
        client.threads.create()["thread_id"],
        INGEST_ID,
        input=payload,
        raise_error=False,
    )
    assert out.get("__error__", {}).get("error") == "InvalidIngestInputError", out
    assert message in out["__error__"]["message"]


# -- load ---------------------------------------------------------------------------------------


async def _most_runs_running_at_once(server: DevServer, stop: asyncio.Event) -> int:
    """Poll the server until ``stop``: the most runs it had in status ``running`` at once."""
    client = langgraph_sdk.get_client(url=server.url, api_key=server.token)
    most = 0
    while not stop.is_set():
        running = 0
        for thread in await client.threads.search(status="busy", limit=100):
            running += len(await client.runs.list(thread["thread_id"], status="running"))
        most = max(most, running)
        await asyncio.sleep(0.1)
    return most


async def _bench_watching_the_server(server: DevServer, runs: int) -> tuple[Any, int]:
    """:func:`crag_bench.server_bench.abench` on ``server``, and the most runs at once."""
    from crag_bench.server_bench import abench

    stop = asyncio.Event()
    watcher = asyncio.create_task(_most_runs_running_at_once(server, stop))
    try:
        report = await abench(
            server.url,
            runs=runs,
            questions=[MONA_QUESTION],
            context={},
            timeout=240,
            api_key=server.token,
        )
    finally:
        stop.set()
    return report, await watcher


def test_concurrent_runs_answer_like_sequential_ones(
    server: DevServer, search_server: WebsearchServer
) -> None:
    # The server is started as `make serve` starts it (SERVER_JOBS runs at once); plain
    # `langgraph dev` would take the three runs one after another.
    report, most_running = asyncio.run(_bench_watching_the_server(server, runs=3))
    assert most_running >= 2, "the concurrent runs never ran at the same time"
    assert report.failures == [], report.lines()
    assert report.mismatches == [], report.lines()
    assert len(report.concurrent) == 3
    assert report.throughput > 0
    assert report.latency(0.5) <= report.latency(0.95)
    assert all("Leonardo" in (r.answer or "") for r in report.concurrent)
