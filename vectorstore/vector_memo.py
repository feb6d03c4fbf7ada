"""Passage vectors the store returned with a search, reused by the embedding evaluator.

Why: the ``embedding`` evaluator scores a retrieved passage by the cosine of its vector and the
question's, made by the same shared embedder the store was built with, so the vector it would
compute for a retrieved passage is the one the store already holds. Retrieval asks Chroma for
the vectors with the passages (:func:`similarity_search_remembering`) and puts them here;
grading then embeds none of the retrieved passages, only the question. Embedding the ten
passages was about half of the embedder's time in ``crag-bench eval``'s main comparison, and the
embedder shares the CPU with the generator. Strips and web paragraphs are not in the store and
are embedded as before.

Keyed by the exact text, one memo per embedder name: a text's vector under one embedder does
not change, so an entry never goes stale (a changed document is a different text). The one
assumption is the store's own: that it was filled with the embedder it is opened with (a
store built with another model of the same dimension already retrieves nonsense).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import cachetools
import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

MAX_ENTRIES = 4096
"""Vectors kept per embedder (about 1.5 KB each for MiniLM's 384 floats): a run grades what it
retrieved a moment before, so this covers hundreds of runs at once."""


class VectorMemo:
    """A bounded, thread-safe map from a text to its vector; least recently used out first."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        """Keep up to ``max_entries`` vectors (0: keep none).

        Raises:
            ValueError: ``max_entries`` is negative.
        """
        if max_entries < 0:
            raise ValueError(f"max_entries must not be negative, got {max_entries}")
        self.max_entries = max_entries
        self._vectors: cachetools.LRUCache[str, np.ndarray] = cachetools.LRUCache(max_entries)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)

    def remember(self, texts: Sequence[str], vectors: Sequence[Any]) -> None:
        """Keep the vector of each text (float32 copies).

        A ``None``, empty or not finite vector is not kept.

        Raises:
            ValueError: ``texts`` and ``vectors`` differ in length.
        """
        if len(texts) != len(vectors):
            raise ValueError(f"{len(texts)} texts but {len(vectors)} vectors")
        if not self.max_entries:
            return
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                if vector is None:
                    continue
                array = np.array(vector, dtype=np.float32).reshape(-1)
                if not array.size or not np.isfinite(array).all():
                    continue
                self._vectors[text] = array

    def recall(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The kept vector of each text, or ``None`` where none is kept."""
        with self._lock:
            return [self._vectors.get(text) for text in texts]

    def clear(self) -> None:
        """Forget every vector."""
        with self._lock:
            self._vectors.clear()


_memos: dict[str, VectorMemo] = {}
_memos_guard = threading.Lock()


def vector_memo(embedder: str) -> VectorMemo:
    """The process-wide memo of the embedder named ``embedder`` (created on first use)."""
    with _memos_guard:
        memo = _memos.get(embedder)
        if memo is None:
            memo = _memos[embedder] = VectorMemo()
        return memo


class RememberingEmbeddings(Embeddings):
    """An embedder that answers the texts its memo holds from the memo, embedding the rest."""

    def __init__(self, inner: Embeddings, memo: VectorMemo) -> None:
        """Wrap ``inner``; ``memo`` holds vectors ``inner`` would give (see the module)."""
        self.inner = inner
        self.memo = memo

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Vectors of ``texts``, in order; only those the memo lacks are embedded (in one call).

        Raises:
            ValueError: The embedder returned the wrong number of vectors.
        """
        found = self.memo.recall(texts)
        missing = [i for i, vector in enumerate(found) if vector is None]
        embedded = self.inner.embed_documents([texts[i] for i in missing]) if missing else []
        if len(embedded) != len(missing):
            raise ValueError(f"embedder returned {len(embedded)} vectors for {len(missing)} texts")
        vectors: list[list[float]] = [[] if v is None else v.tolist() for v in found]
        for index, vector in zip(missing, embedded, strict=True):
            vectors[index] = list(vector)
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """The question's vector (never from the memo: queries are embedded as queries)."""
        return self.inner.embed_query(text)


def similarity_search_remembering(
    store: Any, query: str, k: int, memo: VectorMemo
) -> list[Document]:
    """The store's top ``k`` for ``query``; their vectors, where the store gives them, to ``memo``.

    A store without ``similarity_search_with_vectors`` (LangChain's Chroma has it) is searched
    with ``similarity_search`` and nothing is remembered; so is a passage given without a
    vector.
    """
    search = getattr(store, "similarity_search_with_vectors", None)
    if not callable(search):
        documents: list[Document] = store.similarity_search(query, k=k)
        return documents
    pairs = search(query, k=k)
    documents = [document for document, _ in pairs]
    memo.remember([d.page_content for d in documents], [vector for _, vector in pairs])
    return documents
