"""One document per source, however the source is spelled, at every door.

A served run must not store ``wikipedia:Pelé`` in another Unicode form, ``Mona Lisa`` with a
non-breaking space, or the operator's file under ``root/./op.txt``, ``root//op.txt`` or
``root/../root/op.txt``, beside the operator's document; ``crag ingest`` of one file by two
paths stores it once, and ``crag remove`` by either path removes it. Real files, real Chroma on
disk, the served ``ingest`` graph and the CLI in process; the hash embedder stands in for
MiniLM.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import pytest

from crag.app.cli.commands import main
from crag.graph.ingest_graph import build_ingest_graph
from crag.settings.context import IngestContext
from crag.settings.deployment import deployment_with
from crag.settings.run_settings import IngestSettings
from crag.vectorstore.configured_store import ingest_into_store, inline_document
from crag.vectorstore.ingest_options import QUIET
from crag.vectorstore.sources import normalise_path, normalise_source
from crag.vectorstore.store import open_store
from tests.hash_embeddings import HashEmbeddings

pytestmark = pytest.mark.integration

COLLECTION = "identity"
PELE = "Pelé\nPelé was a Brazilian footballer, widely regarded as one of the greatest."
POISON = "This passage was planted by a caller of the server and is false."


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    import crag.vectorstore.embeddings

    monkeypatch.setattr(
        crag.vectorstore.embeddings, "locked_embeddings", lambda name: HashEmbeddings()
    )
    for name in ("CRAG_INGEST_ROOT", "CRAG_INGEST_RUN_REPLACE", "CRAG_SERVE_SOCKET"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def settings(tmp_path: Path) -> IngestSettings:
    return IngestSettings(
        deployment=deployment_with(store_path=str(tmp_path / "store"), collection=COLLECTION)
    )


def served(payload: Any, settings: IngestSettings) -> dict[str, Any]:
    """A run of the ``ingest`` graph, built as the server builds it, on ``settings``' store."""
    # The test's folder stands for the upload folder: with no ingest root, the only place a
    # served run reads files from.
    deployment = deployment_with(
        store_path=settings.deployment.store_path,
        collection=settings.deployment.collection,
        upload_dir=str(Path(settings.deployment.store_path).parent),
    )
    graph = build_ingest_graph(deployment=deployment)
    return dict(graph.invoke(payload, context=IngestContext(chunk_size=settings.chunk_size)))


def sources(store_path: str | Path) -> set[str]:
    store = open_store(store_path, COLLECTION, HashEmbeddings(), create=False)
    return {str(meta["source"]) for meta in store.get(include=["metadatas"])["metadatas"] or []}


def test_one_spelling_per_source() -> None:
    nfd = unicodedata.normalize("NFD", "wikipedia:Pelé")
    assert nfd != "wikipedia:Pelé" and normalise_source(nfd) == "wikipedia:Pelé"
    for spelling in ("Mona\u00a0Lisa", " Mona  Lisa ", "Mona\u2003Lisa", "Mona \u200bLisa"):
        assert normalise_source(spelling) == "Mona Lisa"
    for spelling in ("/srv/root/./op.txt", "/srv/root//op.txt", "/srv/root/../root/op.txt"):
        assert normalise_source(spelling) == "/srv/root/op.txt"
    assert normalise_source(normalise_source(nfd)) == normalise_source(nfd)


def test_served_look_alikes_of_operator_names_are_the_operators_documents(
    settings: IngestSettings,
) -> None:
    operator = [
        inline_document(PELE, source="wikipedia:Pelé"),
        inline_document("The Mona Lisa hangs in the Louvre.", source="Mona Lisa"),
    ]
    assert len(ingest_into_store([], settings, QUIET, documents=operator).added) == 2
    look_alikes = [unicodedata.normalize("NFD", "wikipedia:Pelé"), "Mona\u00a0Lisa", "Mona  Lisa"]
    out = served({"documents": [{"text": POISON, "source": s} for s in look_alikes]}, settings)
    assert out["added"] == [] and out["chunks"] == 0
    assert {f["source"] for f in out["failed"]} == {"wikipedia:Pelé", "Mona Lisa"}
    assert all("already stored by the operator" in f["error"] for f in out["failed"])
    assert sources(settings.deployment.store_path) == {"wikipedia:Pelé", "Mona Lisa"}


def test_served_path_spellings_of_an_operator_file_are_that_file(
    tmp_path: Path, settings: IngestSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    op = root / "op.txt"
    op.write_text("The operator's notes: the backup runs at midnight.")
    assert ingest_into_store([op], settings, QUIET).added == [str(op)]
    spellings = [f"{root}/./op.txt", f"{root}//op.txt", f"{root}/../root/op.txt"]
    inline = served({"documents": [{"text": POISON, "source": s} for s in spellings]}, settings)
    assert inline["added"] == [] and inline["chunks"] == 0
    assert {f["source"] for f in inline["failed"]} == {str(op)}
    monkeypatch.chdir(tmp_path)
    by_path = served({"paths": ["root/./op.txt", "root//op.txt", "root/../root/op.txt"]}, settings)
    assert by_path["added"] == [] and by_path["skipped"] == [str(op)]
    assert sources(settings.deployment.store_path) == {str(op)}


def test_cli_ingests_one_file_by_two_paths_once_and_removes_it_by_either(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, here = tmp_path / "docs", tmp_path / "B"
    docs.mkdir()
    here.mkdir()
    zorb = docs / "zorb.txt"
    zorb.write_text("Zorb is a sphere of transparent plastic that people roll downhill in.")
    store = str(tmp_path / "store")
    monkeypatch.chdir(here)
    assert normalise_path("../docs/zorb.txt") == str(zorb)
    assert main(["ingest", "--no-server", "--collection", COLLECTION, "--store", store,
                 "../docs/zorb.txt"]) == 0  # fmt: skip
    assert main(["ingest", "--no-server", "--collection", COLLECTION, "--store", store,
                 str(zorb)]) == 0  # fmt: skip
    assert sources(store) == {str(zorb)}
    assert main(["remove", "--collection", COLLECTION, "--store", store, "../docs/zorb.txt"]) == 0
    assert sources(store) == set()
