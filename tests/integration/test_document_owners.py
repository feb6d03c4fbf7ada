"""A served run changes only its own caller's documents, whatever ``ingest_run_replace`` says.

Real Chroma on disk (hash embedder: what is checked is who may write, not retrieval). Each
member's run is a served writer with its owner (:func:`crag.vectorstore.sources.served_writer`),
as the served ``ingest`` graph makes it; ``"all"`` is the widest the operator can allow, so a
refusal here is the owner check's, not the setting's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_chroma import Chroma

from crag.vectorstore.configured_store import inline_document
from crag.vectorstore.ingest import QUIET, IngestOptions, ingest_documents, ingest_paths
from crag.vectorstore.sources import served_writer
from crag.vectorstore.store import open_store
from tests.hash_embeddings import HashEmbeddings

pytestmark = pytest.mark.integration

DIARY = "Alice's diary: the spare key is under the blue flowerpot."
SOMEONE_ELSES = "already stored by someone else; a run may change only its caller's own"


@pytest.fixture
def store(tmp_path: Path) -> Chroma:
    return open_store(tmp_path / "store", "owners", HashEmbeddings(), create=True)


def metadata_of(store: Chroma, source: str) -> list[dict[str, Any]]:
    found = store.get(where={"source": source}, include=["metadatas"])["metadatas"]
    assert found, f"{source} is not stored"
    return [dict(meta) for meta in found]


def test_a_members_run_neither_replaces_nor_relabels_another_members_document(
    store: Chroma,
) -> None:
    alice, bob = served_writer("all", owner="alice"), served_writer("all", owner="bob")
    diary = inline_document(DIARY, source="diary")
    first = ingest_documents([diary], store, IngestOptions(writer=alice, progress=False))
    assert first.added == ["diary"]

    changed = inline_document("Bob's diary now: nothing under the flowerpot.", source="diary")
    report = ingest_documents([changed], store, IngestOptions(writer=bob, progress=False))
    assert (report.added, report.replaced) == ([], [])
    assert report.failed == [("diary", f"diary: {SOMEONE_ELSES}")]
    relabel = ingest_documents(
        [diary], store, IngestOptions(writer=bob, tags=["bobs"], progress=False)
    )
    assert relabel.relabelled == [] and relabel.chunks_added == 0
    for meta in metadata_of(store, "diary"):
        assert (meta.get("owner"), meta.get("private"), meta.get("tags")) == ("alice", True, None)
    assert store.get(where={"source": "diary"})["documents"] == [DIARY]
    # Alice's own run still may (the operator allows "all").
    mine = ingest_documents(
        [diary], store, IngestOptions(writer=alice, tags=["mine"], progress=False)
    )
    assert mine.relabelled == ["diary"]


def test_no_members_run_takes_a_shared_document_private_and_no_shared_run_a_members(
    store: Chroma,
) -> None:
    """Taking a shared document private would hide it from everyone else; the other way round
    would show a member's document to everyone."""
    shared = inline_document("The canteen opens at noon.", source="notes:canteen")
    assert ingest_documents([shared], store, QUIET).added == ["notes:canteen"]
    bob = served_writer("all", owner="bob")
    same = ingest_documents([shared], store, IngestOptions(writer=bob, progress=False))
    assert same.relabelled == [] and same.replaced == []
    assert all("owner" not in meta for meta in metadata_of(store, "notes:canteen"))

    diary = inline_document(DIARY, source="diary")
    ingest_documents(
        [diary], store, IngestOptions(writer=served_writer("all", owner="alice"), progress=False)
    )
    admin = served_writer("all")  # an admin's run: it stores shared documents
    changed = inline_document("Everyone may read this diary now.", source="diary")
    report = ingest_documents([changed], store, IngestOptions(writer=admin, progress=False))
    assert report.failed == [("diary", f"diary: {SOMEONE_ELSES}")]
    published = ingest_documents([diary], store, IngestOptions(writer=admin, progress=False))
    assert published.relabelled == []
    assert {meta.get("owner") for meta in metadata_of(store, "diary")} == {"alice"}


def test_a_members_run_removes_no_line_of_another_members_file(
    store: Chroma, tmp_path: Path
) -> None:
    lines = tmp_path / "plans.jsonl"
    rows = [{"text": "Alice plans a trip to Oslo."}, {"text": "Alice plans a dinner."}]
    lines.write_text("".join(json.dumps(row) + "\n" for row in rows))
    alice = served_writer("all", owner="alice")
    assert len(ingest_paths([lines], store, IngestOptions(writer=alice, progress=False)).added) == 2
    lines.write_text(json.dumps(rows[0]) + "\n")

    report = ingest_paths(
        [lines], store, IngestOptions(writer=served_writer("all", owner="bob"), progress=False)
    )
    assert report.removed == []
    second = f"{lines}#line2"
    assert dict(report.failed)[second] == (
        f"{second}: no longer in {lines}, but stored by someone else; a run may remove only "
        "its caller's own documents"
    )
    assert metadata_of(store, second)[0]["owner"] == "alice"
