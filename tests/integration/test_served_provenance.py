"""A passage a served run stored is cited as such, not as if it were the operator's.

The operator ingests one document, a run of the served ``ingest`` graph another, into a real
Chroma store on disk (hash embedder); ``crag ask`` runs the app's graph on that store, with the
scripted evaluator and generator of the unit tests (what is checked is the citation, not the
models).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crag.app.cli.commands import main
from crag.graph.ingest_graph import build_ingest_graph
from crag.nodes.ingest_state import IngestInput
from crag.settings.context import IngestContext
from crag.settings.deployment import deployment_with
from crag.vectorstore.configured_store import inline_document
from crag.vectorstore.ingest import QUIET, ingest_documents
from crag.vectorstore.store import open_store
from tests.fakes import FakeComponents, scripted_chat
from tests.hash_embeddings import HashEmbeddings

pytestmark = pytest.mark.integration

COLLECTION = "provenance"
QUESTION = "Who painted the Mona Lisa?"
OPERATORS = "Mona Lisa\nThe Mona Lisa is a portrait painted by Leonardo da Vinci."
SERVED = "Louvre notes\nThe Louvre keeps the Mona Lisa behind glass; Leonardo painted it."


@pytest.fixture
def store_with_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import crag.vectorstore.embeddings

    monkeypatch.setattr(
        crag.vectorstore.embeddings, "locked_embeddings", lambda name: HashEmbeddings()
    )
    for name in ("CRAG_INGEST_ROOT", "CRAG_INGEST_RUN_REPLACE", "CRAG_SERVE_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "store"
    store = open_store(path, COLLECTION, HashEmbeddings(), create=True)
    ingest_documents([inline_document(OPERATORS, source="mona.md")], store, QUIET)
    graph = build_ingest_graph(
        deployment=deployment_with(store_path=str(path), collection=COLLECTION)
    )
    payload: IngestInput = {"documents": [{"text": SERVED, "source": "notes"}]}
    out = graph.invoke(payload, context=IngestContext(chunk_size=1000))
    assert out["added"] == ["notes"]
    return path


@pytest.mark.usefixtures("fake_app")
def test_crag_ask_marks_the_passages_a_served_run_stored(
    store_with_both: Path, fake_components: FakeComponents, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_components.store = open_store(store_with_both, COLLECTION, HashEmbeddings(), create=False)
    fake_components.scorer.keyword_scores = {"Leonardo": 0.9}
    fake_components.chat = scripted_chat(answer="Leonardo da Vinci.")
    assert main(["ask", "-q", "--set", "strip_margin=0", QUESTION]) == 0
    sources = capsys.readouterr().out.split("Sources:\n")[1].splitlines()
    assert sorted(line.split("] ", 1)[1] for line in sources) == [
        "Louvre notes — notes#0 (added by a served run)",
        "Mona Lisa — mona.md#0",  # the operator's: no note
    ]

    assert main(["ask", "--json", "--set", "strip_margin=0", QUESTION]) == 0
    out = json.loads(capsys.readouterr().out)
    writers = {k["source"]: k.get("writer") for k in out["knowledge"]}
    assert writers == {"mona.md": None, "notes": "served"}
    passages = {d["source"]: d.get("writer") for d in out["documents"]}
    assert passages == {"mona.md": None, "notes": "served"}
