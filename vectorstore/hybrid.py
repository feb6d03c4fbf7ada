"""The one search entry point: dense, lexical (BM25) or hybrid retrieval from the store.

``dense`` asks Chroma for the nearest vectors (their vectors go to the memo, see
:mod:`crag.vectorstore.vector_memo`); ``lexical`` ranks chunks by BM25
(:mod:`crag.vectorstore.lexical_store`); ``hybrid`` fuses the two rankings of the
:func:`candidates` best chunks each by reciprocal rank fusion (:func:`fuse`) and keeps the
``k`` best. Lexical-only hits carry no stored vector: the embedding evaluator embeds them.

A ``where`` filter (a Chroma metadata filter) applies to both sides, and so does the one that
leaves out documents whose write is pending (:func:`~crag.vectorstore.pending.hide_unfinished`).
A store view that filters per query (the benchmark's, ``query_filter(query)``) is honoured by
both sides too. A store that cannot be searched lexically (a Chroma server, a stand-in) is
searched densely, with a warning once per store.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, Literal, get_args

from langchain_core.documents import Document

from crag.vectorstore.lexical_store import fetch_documents, lexical_available, lexical_ids
from crag.vectorstore.pending import hide_unfinished
from crag.vectorstore.vector_memo import VectorMemo, similarity_search_remembering

logger = logging.getLogger(__name__)

RetrievalMode = Literal["dense", "lexical", "hybrid"]
RETRIEVAL_MODES: tuple[str, ...] = get_args(RetrievalMode)

RRF_K = 60
"""Reciprocal rank fusion's constant (Cormack et al., 2009): a chunk at rank r adds 1/(60+r)."""
MIN_CANDIDATES = 20
MAX_CANDIDATES = 200

_warned: set[int] = set()
_warned_guard = threading.Lock()


def candidates(k: int) -> int:
    """Chunks each side ranks for a hybrid search of ``k``: ``max(2k, 20)``, at most 200."""
    return max(k, min(max(2 * k, MIN_CANDIDATES), MAX_CANDIDATES))


def fuse(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion of ``rankings`` (ids, best first): fused ids, best first.

    Each id scores the sum over the rankings holding it of ``1 / (k + rank)``, rank from 1.
    Ties go to the id with the better rank, then to the earlier ranking.
    """
    scores: dict[str, float] = {}
    order: dict[str, tuple[int, int]] = {}
    for which, ranking in enumerate(rankings):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            order[item] = min(order.get(item, (rank, which)), (rank, which))
    return sorted(scores, key=lambda item: (-scores[item], order[item]))


def _combined(*filters: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Chroma filter that lets through what every given filter does."""
    given = [f for f in filters if f]
    if not given:
        return None
    return given[0] if len(given) == 1 else {"$and": given}


def _dense(
    store: Any, query: str, k: int, memo: VectorMemo, where: dict[str, Any] | None
) -> list[Document]:
    """Chroma's top ``k`` (vectors to ``memo``), filtered by ``where``."""
    if where is None:
        return similarity_search_remembering(store, query, k, memo)
    search = getattr(store, "similarity_search_with_vectors", None)
    if not callable(search):
        documents: list[Document] = store.similarity_search(query, k=k, filter=where)
        return documents
    pairs = search(query, k=k, filter=where)
    memo.remember([d.page_content for d, _ in pairs], [vector for _, vector in pairs])
    return [document for document, _ in pairs]


def _key(document: Document) -> str:
    """The chunk id of a document (source and chunk for a store that gives none)."""
    if document.id:
        return str(document.id)
    return f"{document.metadata.get('source')}#{document.metadata.get('chunk')}"


def _hybrid(
    store: Any,
    query: str,
    k: int,
    memo: VectorMemo,
    wheres: tuple[dict[str, Any] | None, dict[str, Any] | None],
) -> list[Document]:
    """The ``k`` best of dense and lexical candidates by reciprocal rank fusion.

    ``wheres``: the filters of the dense search and of the lexical one.
    """
    wanted = candidates(k)
    dense = _dense(store, query, wanted, memo, wheres[0])
    by_key = {_key(document): document for document in dense}
    lexical = lexical_ids(store, query, wanted, wheres[1])
    fused = fuse([list(by_key), lexical])[:k]
    fetched = fetch_documents(store, [key for key in fused if key not in by_key])
    by_key.update((_key(document), document) for document in fetched)
    return [by_key[key] for key in fused if key in by_key]


def _falls_back(store: Any, mode: str) -> bool:
    """Whether a ``mode`` search of ``store`` must be dense (warned once per store)."""
    if mode == "dense" or lexical_available(store):
        return False
    with _warned_guard:
        first = id(store) not in _warned
        _warned.add(id(store))
    if first:
        logger.warning(
            "%s retrieval needs the lexical index, which only a store on disk has: "
            "searching densely instead",
            mode,
        )
    return True


def search(
    store: Any,
    query: str,
    k: int,
    *,
    mode: str = "dense",
    memo: VectorMemo,
    where: dict[str, Any] | None = None,
) -> list[Document]:
    """The ``k`` chunks of ``store`` best for ``query``, best first, as documents.

    Args:
        store: The vector store (LangChain's Chroma, or a view of it).
        query: The query text.
        k: How many chunks (fewer when fewer match).
        mode: ``dense``, ``lexical`` or ``hybrid`` (see the module).
        memo: Where the stored vectors of dense hits go.
        where: A Chroma metadata filter on the chunks searched.

    Raises:
        ValueError: An unknown ``mode``.
        StoreError: The store cannot be read.
    """
    if mode not in RETRIEVAL_MODES:
        raise ValueError(f"unknown retrieval mode {mode!r}; one of {', '.join(RETRIEVAL_MODES)}")
    if k <= 0:
        return []
    # never the chunks of a document whose write is pending (crag.vectorstore.pending)
    where = _combined(where, hide_unfinished(store))
    if _falls_back(store, mode):
        mode = "dense"
    if mode == "dense":
        return _dense(store, query, k, memo, where)
    # a view's own filter reaches the dense search through the view; the lexical one, here
    view = getattr(store, "query_filter", None)
    both = _combined(where, view(query) if callable(view) else None)
    if mode == "lexical":
        return fetch_documents(store, lexical_ids(store, query, k, both))
    return _hybrid(store, query, k, memo, (where, both))
