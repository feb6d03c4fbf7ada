"""Retrieved passages' stored vectors are reused by the embedding evaluator, not embedded again.

The memo itself (bounded, least recently used out first, nothing but finite vectors kept); the
embedder that answers from it; and the path users run: a Chroma store on disk searched by the
retrieve node, then the grade node with the embedding evaluator, which must embed none of the
retrieved passages and score them as it does when it embeds them. The evaluation's filtered
store view must keep filtering when it hands out vectors.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langgraph.runtime import Runtime

from crag.evaluator.embedding import EmbeddingEvaluator
from crag.nodes.grade import grade
from crag.nodes.retrieve import retrieve
from crag.settings.deployment import deployment_with
from crag.settings.run_settings import RunSettings
from crag.vectorstore.store import close_stores, open_store
from crag.vectorstore.vector_memo import (
    RememberingEmbeddings,
    VectorMemo,
    similarity_search_remembering,
    vector_memo,
)
from crag_bench.eval_components import SourceFilter, SourceFilteringStore
from tests.fakes import MONA_LISA, PHOTOSYNTHESIS, FakeComponents, StaticStore, scripted_chat
from tests.hash_embeddings import HashEmbeddings

LOUVRE = "The Louvre is the world's most visited art museum, in Paris."


def test_the_memo_keeps_finite_vectors_and_drops_the_least_recently_used() -> None:
    memo = VectorMemo(max_entries=2)
    memo.remember(["a", "b"], [[1.0, 0.0], np.array([0.0, 1.0])])
    assert [v.tolist() if v is not None else None for v in memo.recall(["b", "a", "c"])] == [
        [0.0, 1.0],
        [1.0, 0.0],
        None,
    ]
    memo.remember(["c"], [[0.5, 0.5]])  # "b" was used before "a": "b" goes
    assert memo.recall(["b"]) == [None] and len(memo) == 2
    memo.remember(["d", "e", "f"], [None, [float("nan"), 1.0], []])
    assert memo.recall(["d", "e", "f"]) == [None, None, None]
    with pytest.raises(ValueError, match="2 texts but 1 vectors"):
        memo.remember(["x", "y"], [[1.0]])
    nothing = VectorMemo(max_entries=0)
    nothing.remember(["a"], [[1.0]])
    assert len(nothing) == 0
    with pytest.raises(ValueError, match="negative"):
        VectorMemo(max_entries=-1)
    assert vector_memo("some-embedder") is vector_memo("some-embedder")
    assert vector_memo("some-embedder") is not vector_memo("another-embedder")


def test_only_texts_the_memo_lacks_are_embedded_in_order() -> None:
    inner = HashEmbeddings()
    memo = VectorMemo()
    memo.remember([MONA_LISA], inner.embed_documents([MONA_LISA]))
    inner.calls = inner.documents = 0
    remembering = RememberingEmbeddings(inner, memo)
    vectors = remembering.embed_documents([LOUVRE, MONA_LISA, PHOTOSYNTHESIS])
    assert (inner.calls, inner.documents) == (1, 2)  # one call, for the two it lacked
    expected = HashEmbeddings().embed_documents([LOUVRE, MONA_LISA, PHOTOSYNTHESIS])
    assert np.allclose(vectors, expected, atol=1e-6)
    assert remembering.embed_documents([MONA_LISA]) and inner.calls == 1  # nothing to embed
    assert remembering.embed_query(LOUVRE) == HashEmbeddings().embed_query(LOUVRE)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    """A Chroma store on disk holding three passages from three sources."""
    chroma = open_store(tmp_path / "chroma", "crag", HashEmbeddings(), create=True)
    chroma.add_texts(
        [MONA_LISA, LOUVRE, PHOTOSYNTHESIS],
        metadatas=[{"source": s, "chunk": 0} for s in ("mona", "louvre", "plants")],
        ids=["mona", "louvre", "plants"],
    )
    yield chroma
    close_stores()


def test_retrieved_passages_are_graded_without_embedding_them(store: Any) -> None:
    question = "Who painted the Mona Lisa in the Louvre?"
    context = RunSettings(
        top_k=2, deployment=deployment_with(embedder="hash-embeddings-for-this-test")
    )
    memo = vector_memo(context.deployment.embedder)
    memo.clear()
    counting = HashEmbeddings()
    evaluator = EmbeddingEvaluator(RememberingEmbeddings(counting, memo))
    components = FakeComponents(store=store, scorer=evaluator, chat=scripted_chat())
    runtime = Runtime(context=context)
    retrieved = retrieve({"question": question}, runtime, components)
    graded = grade({"question": question, "documents": retrieved["documents"]}, runtime, components)
    texts = [d["text"] for d in retrieved["documents"]]
    assert len(texts) == 2 and len(memo) == 2
    assert counting.documents == 0, "the retrieved passages' vectors came from the store"
    alone = EmbeddingEvaluator(HashEmbeddings()).score(question, texts)
    assert [d["score"] for d in graded["documents"]] == pytest.approx(alone, abs=1e-4)
    memo.clear()


def test_a_store_without_vectors_is_searched_as_before() -> None:
    memo = VectorMemo()
    documents = [Document(MONA_LISA, metadata={"source": "mona"})]
    assert similarity_search_remembering(StaticStore(documents), "who", 1, memo) == documents
    assert len(memo) == 0
    view = SourceFilteringStore(StaticStore(documents), {})
    assert view.similarity_search_with_vectors("who", k=1) == [(documents[0], None)]
    assert similarity_search_remembering(view, "who", 1, memo) == documents and len(memo) == 0


def test_the_evaluation_view_keeps_hiding_sources_when_it_hands_out_vectors(store: Any) -> None:
    question = "Who painted the Mona Lisa in the Louvre?"
    view = SourceFilteringStore(store, {question: SourceFilter.hide(["mona"])})
    pairs = view.similarity_search_with_vectors(question, k=3)
    assert [d.metadata["source"] for d, _ in pairs] == ["louvre", "plants"]
    assert all(np.allclose(v, HashEmbeddings().embed_query(d.page_content)) for d, v in pairs)
    only = SourceFilteringStore(store, {question: SourceFilter.restrict(["plants"])})
    assert [d.metadata["source"] for d, _ in only.similarity_search_with_vectors(question)] == [
        "plants"
    ]
