"""A store whose vector index is cut short fails like any other corrupt store: one line, exit 2.

Chroma keeps a collection's vectors in an HNSW index next to ``chroma.sqlite3`` (a folder per
segment holding ``header.bin``, ``data_level0.bin``, ...). A truncated ``data_level0.bin`` (a
copy cut short, a full disk) used to reach the user as Chroma's ``InternalError`` traceback
with exit code 1, or to return wrong passages without a word.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.embeddings import Embeddings

from crag.app.cli.commands import main
from crag.vectorstore.store import StoreError, close_stores, count, open_store, retrieve
from tests.hash_embeddings import HashEmbeddings

pytestmark = pytest.mark.integration

CHUNKS = 1100
"""More than Chroma's default ``hnsw:sync_threshold`` (1000): the index is written to disk."""

MINILM_DIMENSIONS = 384


class WideHashEmbeddings(Embeddings):
    """Hash embeddings padded to the MiniLM's 384 dimensions, so ``crag ask`` can query them."""

    def __init__(self) -> None:
        self.inner = HashEmbeddings()

    def _widen(self, vector: list[float]) -> list[float]:
        return vector + [0.0] * (MINILM_DIMENSIONS - len(vector))

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._widen(v) for v in self.inner.embed_documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        return self._widen(self.inner.embed_query(text))


def _build(path: Path) -> Path:
    store = open_store(path, "crag", WideHashEmbeddings(), create=True)
    store.add_texts(
        [f"passage {i} about topic {i % 7}" for i in range(CHUNKS)],
        metadatas=[{"source": f"doc{i}", "chunk": 0} for i in range(CHUNKS)],
        ids=[f"doc{i}" for i in range(CHUNKS)],
    )
    close_stores()
    return path


def _index_file(path: Path) -> Path:
    files = list(path.glob("*/data_level0.bin"))
    assert len(files) == 1, files
    return files[0]


def _truncate(path: Path) -> Path:
    data = _index_file(path)
    with data.open("r+b") as handle:
        handle.truncate(data.stat().st_size // 2)
    return path


@pytest.fixture
def damaged(tmp_path: Path) -> Iterator[Path]:
    """A store of 1,100 chunks whose ``data_level0.bin`` lost its second half."""
    path = _truncate(_build(tmp_path / "store"))
    yield path
    close_stores()


def test_an_intact_index_opens_and_answers(tmp_path: Path) -> None:
    path = _build(tmp_path / "store")
    assert _index_file(path).stat().st_size > 0
    store = open_store(path, "crag", WideHashEmbeddings(), create=False)
    assert count(store) == CHUNKS
    (best,) = retrieve(store, "passage 3 about topic 3", 1)
    assert "topic 3" in best["text"]
    close_stores()


@pytest.mark.parametrize("create", [False, True])
def test_a_truncated_index_is_a_store_error_naming_the_store(damaged: Path, create: bool) -> None:
    with pytest.raises(StoreError) as info:
        open_store(damaged, "crag", WideHashEmbeddings(), create=create)
    message = str(info.value)
    assert f"'{damaged}'" in message
    assert "index" in message and "damaged" in message and "data_level0.bin" in message
    assert "crag ingest" in message and "rebuild" in message
    assert "\n" not in message


def test_the_store_opens_again_once_rebuilt(damaged: Path) -> None:
    with pytest.raises(StoreError):
        open_store(damaged, "crag", WideHashEmbeddings(), create=False)
    shutil.rmtree(damaged)
    _build(damaged)
    store = open_store(damaged, "crag", WideHashEmbeddings(), create=False)
    assert count(store) == CHUNKS


def test_crag_ask_on_a_truncated_index_prints_one_line_and_exits_2(
    damaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ask", "-q", "--store", str(damaged), "What is topic 3?"]) == 2
    captured = capsys.readouterr()
    # (the embedder's own loading bar may come first: it is not crag's)
    lines = [line for line in captured.err.splitlines() if line.startswith("crag")]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("crag: error: the vector index of the store at")
    assert str(damaged) in lines[0] and "damaged" in lines[0]
    assert "Traceback" not in captured.err and "InternalError" not in captured.err
    assert captured.out == ""


def test_a_failing_search_is_a_store_error_naming_the_store(tmp_path: Path) -> None:
    path = _build(tmp_path / "store")
    store = open_store(path, "crag", WideHashEmbeddings(), create=False)
    with pytest.raises(StoreError, match=r"cannot search the vector store at .*store'"):
        store.similarity_search_by_vector([1.0, 0.0, 0.0], k=1)  # the wrong dimension
    with pytest.raises(StoreError, match="cannot search"):
        store.similarity_search_with_vectors("passage", k=1, filter={"$bogus": "1"})
    close_stores()
