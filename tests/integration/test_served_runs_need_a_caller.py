"""A served graph's run that carries no caller gets nothing: it never acts as the operator.

The graphs ``langgraph.json`` serves mark every run as served
(:mod:`crag.app.served_graphs`); a served run whose config carries no caller identity is
refused by its first node (:class:`~crag.nodes.caller.NoCallerError`) before any store is
opened or any file read. Before, such a run was taken for the operator's: it searched every
member's private documents and read the whole upload folder. The graphs are loaded here from
the paths ``langgraph.json`` names, as the server loads them, and run over a real store that
holds a private document of the member alice.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from crag.documents.document import LoadedDocument
from crag.nodes.caller import SERVED_KEY, NoCallerError
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.ingest import IngestOptions, ingest_documents
from crag.vectorstore.sources import served_writer
from crag.vectorstore.store import open_store
from tests.integration_support import build_small_store

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
DIARY = "Alice's diary: the vault's combination is 7-31-9, and nobody else may read it."
QUESTION = "What is the vault's combination in Alice's diary?"


def served_graph(name: str) -> Any:
    """The graph ``langgraph.json`` serves as ``name``, imported as the server imports it."""
    path = json.loads((ROOT / "langgraph.json").read_text())["graphs"][name]["path"]
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


@pytest.fixture
def served_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The operator's settings pointing at a store with alice's private diary in it."""
    path = build_small_store(tmp_path / "chroma", others=10)
    store = open_store(path, "crag", load_embeddings(), create=False)
    diary = LoadedDocument(source="member:alice/diary", text=DIARY, sha256="0" * 64)
    report = ingest_documents(
        [diary], store, IngestOptions(progress=False, writer=served_writer("none", "alice"))
    )
    assert not report.failed, report.failed
    uploads = tmp_path / "uploads" / "members" / "alice"
    uploads.mkdir(parents=True)
    (uploads / "secret.md").write_text(
        "# Secret\n\nAlice's upload: the spare key is under the mat.\n"
    )
    monkeypatch.setenv("CRAG_STORE_PATH", str(path))
    monkeypatch.setenv("CRAG_DEFAULT_CORPUS", "false")
    monkeypatch.setenv("CRAG_UPLOAD_DIR", str(tmp_path / "uploads"))
    return path


def _first_updates(graph: Any, state: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The run's node updates up to its retrieval (no model needed past it)."""
    seen: dict[str, Any] = {}
    for update in graph.stream(state, config, stream_mode="updates"):
        seen.update(update)
        if "retrieve" in seen:
            break
    return seen


@pytest.mark.parametrize("name", ["crag", "rag", "crag-tutorial"])
@pytest.mark.parametrize("configurable", [{}, {SERVED_KEY: False}])
def test_a_served_question_without_a_caller_reads_nothing(
    served_store: Path, name: str, configurable: dict[str, Any]
) -> None:
    with pytest.raises(NoCallerError, match="carries no caller identity"):
        _first_updates(
            served_graph(name), {"question": QUESTION}, {"configurable": dict(configurable)}
        )


def test_a_served_chat_turn_without_a_caller_reads_nothing(served_store: Path) -> None:
    turn = {"messages": [{"role": "user", "content": QUESTION}]}
    with pytest.raises(NoCallerError):
        _first_updates(served_graph("crag"), turn, {"configurable": {"thread_id": "t1"}})


def test_a_served_ingest_without_a_caller_reads_no_upload(served_store: Path) -> None:
    with pytest.raises(NoCallerError):
        served_graph("ingest").invoke({"paths": ["upload:members/alice"]})


def test_a_served_run_with_its_caller_searches_what_is_theirs(served_store: Path) -> None:
    def sources(user: str) -> list[str]:
        config = {"configurable": {"langgraph_auth_user_id": user}}
        found = _first_updates(served_graph("crag"), {"question": QUESTION}, config)
        return [passage["text"] for passage in found["retrieve"]["documents"]]

    assert DIARY in sources("alice")
    assert DIARY not in sources("bob")


def test_the_operators_own_graphs_run_without_a_caller(served_store: Path) -> None:
    """The CLI's and Python's graphs (:mod:`crag.app.graphs`) act as the operator."""
    from crag.app.graphs import graph

    found = _first_updates(graph, {"question": QUESTION}, {})
    assert found["retrieve"]["documents"]


def test_a_served_async_run_without_a_caller_reads_nothing(served_store: Path) -> None:
    """``astream``, the servers' way in, is marked too."""
    import asyncio

    with pytest.raises(NoCallerError):
        asyncio.run(served_graph("rag").ainvoke({"question": QUESTION}))
