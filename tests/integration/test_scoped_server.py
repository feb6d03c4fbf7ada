"""Scoped search through ``langgraph dev``: a served run scoped to one tag sees only its passages.

The operator ingests two sets of files about the same festival into the store the server reads,
one tagged ``a`` and one tagged ``b``, and a second collection ``archive``. One dev server
(real embedder and SmolLM2, web search down) serves the graphs; its operator lets runs read
``archive`` too (``CRAG_READABLE_COLLECTIONS``). A run scoped to tag ``a`` retrieves, keeps and
cites passages of ``a``'s files only; a run naming a collection the operator does not allow
fails with a setting error naming the readable ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import langgraph_api  # noqa: F401 - missing, the test fails: it never skips
import langgraph_sdk
import pytest

from tests.server_support import langgraph_server
from tests.websearch_server import WebsearchServer

pytestmark = [pytest.mark.server, pytest.mark.timeout(300)]

QUESTION = "When is the Zorblax lantern festival held?"
TAG_A = {
    "festival.md": "The Zorblax lantern festival is held every March in the town of Quellingen.",
    "lanterns.txt": "At the Zorblax festival thousands of paper lanterns rise over Lake Ober.",
}
TAG_B = {
    "rumours.md": "Some say the Zorblax lantern festival is held in October, after the harvest.",
    "tickets.txt": "Tickets for the Zorblax lantern festival are sold at the Quellingen station.",
}
ARCHIVE = "The first Zorblax lantern festival, in 1911, had only forty lanterns."


def _write(root: Path, files: dict[str, str]) -> set[str]:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text + "\n")
    return {str((root / name).absolute()) for name in files}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The store: files tagged ``a`` and ``b`` in ``crag``, one document in ``archive``."""
    from crag.vectorstore.configured_store import inline_document
    from crag.vectorstore.embeddings import load_embeddings
    from crag.vectorstore.ingest import QUIET, IngestOptions, ingest_documents, ingest_paths
    from crag.vectorstore.store import open_store

    root = tmp_path_factory.mktemp("scoped")
    files_a = _write(root / "docs" / "a", TAG_A)
    files_b = _write(root / "docs" / "b", TAG_B)
    embeddings = load_embeddings()
    store = open_store(root / "chroma", "crag", embeddings, create=True)
    assert ingest_paths([root / "docs" / "a"], store, IngestOptions(progress=False, tags=["a"])).ok
    assert ingest_paths([root / "docs" / "b"], store, IngestOptions(progress=False, tags=["b"])).ok
    unscoped = {d.metadata["source"] for d in store.similarity_search(QUESTION, k=4)}
    assert unscoped == files_a | files_b, "without a scope the question finds both sets"
    archive = open_store(root / "chroma", "archive", embeddings, create=True)
    doc = inline_document(ARCHIVE, source="notes:first-festival")
    assert ingest_documents([doc], archive, QUIET).ok
    return {
        "store": root / "chroma",
        # what a served run shows: the files' names under the server's ingest_root
        "a": {"shared:" + Path(path).relative_to(root).as_posix() for path in files_a},
        "b": {"shared:" + Path(path).relative_to(root).as_posix() for path in files_b},
    }


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, sources: dict[str, Any]) -> Iterator[Any]:
    """A dev server over that store (web search answering HTTP 500) and an SDK client."""
    with WebsearchServer() as search:
        search.search_status = 500
        env = {
            "CRAG_STORE_PATH": str(sources["store"]),
            "CRAG_COLLECTION": "crag",
            "CRAG_READABLE_COLLECTIONS": "archive",
            "CRAG_DEFAULT_CORPUS": "false",
            "CRAG_GENERATOR": "smollm2",
            "CRAG_SEARCH_PROVIDER": "searxng",
            "CRAG_SEARCH_URL": search.url,
            "CRAG_ALLOWED_HOSTS": "127.0.0.1",
            "CRAG_INGEST_ROOT": str(sources["store"].parent),
        }
        with langgraph_server(tmp_path_factory.mktemp("langgraph_dev"), env) as server:
            yield langgraph_sdk.get_sync_client(url=server.url, api_key=server.token, timeout=180.0)


def _run(client: Any, context: dict[str, Any], **kwargs: Any) -> Any:
    thread = client.threads.create()
    return client.runs.wait(
        thread["thread_id"], "crag", input={"question": QUESTION}, context=context, **kwargs
    )


def test_a_run_scoped_to_one_tag_sees_only_its_passages(
    client: Any, sources: dict[str, Any]
) -> None:
    out = _run(client, {"scope_tags": ["a"], "top_k": 10})
    assert "__error__" not in out, out
    retrieved = {d["source"] for d in out["documents"]}
    assert retrieved == sources["a"], retrieved
    internal = [k for k in out["knowledge"] if k["origin"] == "internal"]
    assert internal, out
    assert {k["source"] for k in internal} <= sources["a"]
    cited = {out["knowledge"][n - 1]["source"] for n in out["citations"]}
    assert cited <= sources["a"], out
    nothing = _run(client, {"scope_tags": ["c"]})
    assert nothing["documents"] == []
    assert "no stored passage matches the scope (tags c)" in nothing["notes"]


def test_a_run_reads_only_the_collections_the_operator_allows(client: Any) -> None:
    archive = _run(client, {"search_collection": "archive", "top_k": 3})
    assert [d["source"] for d in archive["documents"]] == ["notes:first-festival"], archive
    refused = _run(client, {"search_collection": "secret"}, raise_error=False)
    assert refused.get("__error__", {}).get("error") == "InvalidSettingError", refused
    assert refused["__error__"]["message"] == (
        "setting search_collection: collection 'secret' is not readable on this server; "
        "readable: crag, archive"
    )


def test_a_run_with_a_relative_scope_folder_is_refused_with_one_line(
    client: Any, sources: dict[str, Any]
) -> None:
    """A served run cannot know the caller's working directory: only an absolute folder counts.

    A relative folder used to be resolved against the server's own directory with a blocking
    ``os.getcwd`` in the event loop, and the run failed with ``BlockingError``.
    """
    for folder in ("docs/a", "~/docs", "."):
        refused = _run(client, {"scope_folder": folder}, raise_error=False)
        assert refused.get("__error__", {}).get("error") == "InvalidSettingError", refused
        assert refused["__error__"]["message"] == (
            f"setting scope_folder: a served run must name an absolute folder, not {folder!r}: "
            "the server cannot know which directory it is relative to"
        )
    folder_a = str(sources["store"].parent / "docs" / "a")
    scoped = _run(client, {"scope_folder": folder_a, "top_k": 10})
    assert {d["source"] for d in scoped["documents"]} == sources["a"], scoped
    # the folder by its name, as a served run shows its files: never the server's path
    named = _run(client, {"scope_folder": "shared:docs/a/", "top_k": 10})
    assert {d["source"] for d in named["documents"]} == sources["a"], named
    assert str(sources["store"].parent) not in json.dumps(named)
    outside = _run(client, {"scope_folder": "shared:../docs"}, raise_error=False)
    assert outside["__error__"]["message"] == (
        "setting scope_folder: 'shared:../docs' names no folder of this server's (upload:... "
        "names one in its upload folder, shared:... one under its ingest_root)"
    ), outside
