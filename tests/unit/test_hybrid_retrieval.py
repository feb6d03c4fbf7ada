"""Hybrid retrieval: reciprocal rank fusion, the ``retrieval`` setting, fallbacks and views."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langgraph.runtime import Runtime

from crag.documents.loaders import LoadedDocument
from crag.nodes.retrieve import retrieve
from crag.settings.context import Context, InvalidSettingError
from crag.settings.run_settings import RunSettings
from crag.vectorstore.hybrid import candidates, fuse, search
from crag.vectorstore.ingest import QUIET, ingest_documents
from crag.vectorstore.store import close_stores, open_store
from crag.vectorstore.vector_memo import VectorMemo
from crag_bench.eval_components import SourceFilter, SourceFilteringStore
from tests.fakes import FakeComponents, StaticStore, scripted_chat
from tests.hash_embeddings import HashEmbeddings
from tests.process_caches import forget_lexical_indexes

OTTERS = "Sea otters hold hands while they sleep so that they do not drift apart."
WOMBATS = "Wombat droppings are cube-shaped, which keeps them from rolling away."


def test_reciprocal_rank_fusion_orders_by_summed_reciprocal_ranks() -> None:
    dense = ["a", "b", "c", "d"]
    lexical = ["c", "e", "a"]
    # a: 1/61 + 1/63, c: 1/63 + 1/61 (tie: a has rank 1 in the earlier list), b: 1/62,
    # e: 1/62 (tie with b at rank 2: the dense list first), d: 1/64
    assert fuse([dense, lexical]) == ["a", "c", "b", "e", "d"]
    assert fuse([["x"], []]) == ["x"]
    assert fuse([[], []]) == []
    assert fuse([["a", "b"], ["b"]], k=0) == ["b", "a"]  # 1/2 + 1/1 beats 1/1


def test_candidates_are_a_few_times_k_and_bounded() -> None:
    assert [candidates(k) for k in (1, 10, 15, 100)] == [20, 20, 30, 200]


def test_the_setting_is_validated() -> None:
    assert Context(retrieval="hybrid").retrieval == "hybrid"
    assert Context().retrieval == "dense"
    with pytest.raises(InvalidSettingError) as caught:
        Context(retrieval="bogus")  # type: ignore[arg-type]
    assert str(caught.value) == (
        "setting retrieval must be one of 'dense', 'lexical', 'hybrid', not 'bogus'"
    )
    with pytest.raises(ValueError, match="unknown retrieval mode 'bm25'"):
        search(StaticStore([]), "q", 3, mode="bm25", memo=VectorMemo())


def test_a_store_without_a_lexical_index_is_searched_densely(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = StaticStore([Document(page_content=OTTERS, metadata={"source": "s", "chunk": 0})])
    with caplog.at_level(logging.WARNING, logger="crag.vectorstore.hybrid"):
        hits = search(store, "otters", 3, mode="hybrid", memo=VectorMemo())
        search(store, "otters", 3, mode="lexical", memo=VectorMemo())
    assert [d.page_content for d in hits] == [OTTERS]
    assert caplog.text.count("searching densely instead") == 1


@pytest.fixture
def small_store(tmp_path: Path) -> object:
    forget_lexical_indexes()
    store = open_store(tmp_path / "store", "docs", HashEmbeddings(), create=True)
    docs = [
        LoadedDocument(source="mem:otters", text=OTTERS, sha256="o"),
        LoadedDocument(source="mem:wombats", text=WOMBATS, sha256="w"),
    ]
    ingest_documents(docs, store, QUIET)
    yield store
    close_stores()


def test_the_retrieve_node_follows_the_setting(small_store: object) -> None:
    components = FakeComponents(store=small_store, scorer=None, chat=scripted_chat())
    for mode in ("lexical", "hybrid"):
        runtime = Runtime(context=RunSettings(top_k=1, retrieval=mode))
        update = retrieve({"question": "cube-shaped droppings"}, runtime, components)
        documents = update["documents"]
        assert [(d["source"], d["chunk"], d["text"]) for d in documents] == [
            ("mem:wombats", 0, WOMBATS)
        ], mode


def test_a_filtering_view_filters_the_lexical_side_too(small_store: object) -> None:
    question = "why are wombat droppings cube-shaped"
    view = SourceFilteringStore(small_store, {question: SourceFilter.hide(["mem:wombats"])})
    memo = VectorMemo()
    for mode in ("dense", "lexical", "hybrid"):
        hits = search(view, question, 2, mode=mode, memo=memo)
        assert "mem:wombats" not in {d.metadata["source"] for d in hits}, mode
    only = {"source": "mem:otters"}
    hits = search(view, question, 2, mode="hybrid", memo=memo, where=only)
    assert [d.metadata["source"] for d in hits] == ["mem:otters"]
