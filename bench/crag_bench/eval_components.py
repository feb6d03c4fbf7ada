"""The components ``crag-bench eval`` runs the graphs with: the real ones, plus measuring hooks.

* The store can hide a question's gold documents, exactly as if they had been removed from the
  store (a metadata filter on the same search), for the worse-retriever experiments; or show
  only them, for the oracle.
* Evaluator scores are cached per (question, passage) so that experiments sharing a step do
  not pay for it twice; scores are deterministic, so results do not change.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel

from crag.evaluator.base import RetrievalEvaluator, score_strips
from crag.nodes.components import Components
from crag.settings.run_settings import RunSettings
from crag.websearch.base import SearchProvider


@dataclass(frozen=True)
class SourceFilter:
    """Which sources one question's searches see: all but ``sources``, or ``sources`` only."""

    sources: tuple[str, ...]
    only: bool = False
    """Search ``sources`` only (else: everything but them)."""

    @classmethod
    def hide(cls, sources: Sequence[str]) -> SourceFilter:
        """Everything but ``sources``."""
        return cls(tuple(sources))

    @classmethod
    def restrict(cls, sources: Sequence[str]) -> SourceFilter:
        """Only ``sources``."""
        return cls(tuple(sources), only=True)

    def where(self) -> dict[str, Any]:
        """The Chroma metadata filter."""
        if self.only:
            return {"source": {"$in": list(self.sources)}}
        if len(self.sources) == 1:
            return {"source": {"$ne": self.sources[0]}}
        return {"source": {"$nin": list(self.sources)}}


class SourceFilteringStore:
    """A vector store view that hides chosen sources, or shows only them, for chosen queries.

    ``similarity_search(query, k)`` for a query in ``filters`` searches the store with that
    filter: the top-k of the store as if it held only the documents the filter lets through.
    Everything else is delegated to the wrapped store.
    """

    def __init__(self, inner: Any, filters: dict[str, SourceFilter]) -> None:
        """Wrap ``inner``; ``filters`` maps a question to its filter (read live)."""
        self._inner = inner
        self._filters = filters

    def query_filter(self, query: str) -> dict[str, Any] | None:
        """The Chroma filter of ``query``'s searches (``None``: it sees everything).

        Lexical retrieval (:mod:`crag.vectorstore.hybrid`) applies it itself.
        """
        source_filter = self._filters.get(query)
        if source_filter is None or not source_filter.sources:
            return None
        return source_filter.where()

    def _filtered(self, query: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with the query's filter added to any filter given."""
        own = self.query_filter(query)
        if own is not None:
            given = kwargs.get("filter")
            kwargs["filter"] = {"$and": [given, own]} if given else own
        return kwargs

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The top ``k`` passages the query's filter lets through (all when it has none)."""
        kwargs = self._filtered(query, kwargs)
        result: list[Document] = self._inner.similarity_search(query, k=k, **kwargs)
        return result

    def similarity_search_with_vectors(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, Any]]:
        """As :meth:`similarity_search`, each passage with its stored vector.

        The vector is ``None`` when the wrapped store does not give vectors.
        """
        search = getattr(self._inner, "similarity_search_with_vectors", None)
        if not callable(search):
            return [(document, None) for document in self.similarity_search(query, k, **kwargs)]
        kwargs = self._filtered(query, kwargs)
        result: list[tuple[Document, Any]] = search(query, k=k, **kwargs)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CachingEvaluator:
    """Remembers the wrapped evaluator's score of each (question, passage) pair."""

    def __init__(self, inner: RetrievalEvaluator) -> None:
        """Wrap an evaluator."""
        self.inner = inner
        self.name = getattr(inner, "name", "evaluator")
        self._lock = threading.Lock()
        self._scores: dict[tuple[str, str, str], float] = {}

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Scores of the passages, computing only those not seen before (in one call)."""
        return self._cached("passage", question, passages)

    def score_strips(self, question: str, strips: Sequence[str]) -> list[float]:
        """Strip scores (:func:`crag.evaluator.base.score_strips`), cached apart from passages."""
        return self._cached("strip", question, strips)

    def _cached(self, kind: str, question: str, texts: Sequence[str]) -> list[float]:
        with self._lock:
            missing = [t for t in dict.fromkeys(texts) if (kind, question, t) not in self._scores]
        if missing:
            if kind == "strip":
                scores = score_strips(self.inner, question, missing)
            else:
                scores = self.inner.score(question, missing)
            with self._lock:
                for text, score in zip(missing, scores, strict=True):
                    self._scores[(kind, question, text)] = float(score)
        with self._lock:
            return [self._scores[(kind, question, t)] for t in texts]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class EvalComponents:
    """The real components with a source-filtering store view and a score cache."""

    def __init__(self, inner: Components, chat_model: BaseChatModel | None = None) -> None:
        """Wrap the components the graphs would use otherwise.

        ``chat_model``: answer with this generator instead of the configured one
        (``crag-bench eval --prompts-only``).
        """
        self.inner = inner
        self._chat_model = chat_model
        self.filters: dict[str, SourceFilter] = {}
        """Question → the sources its retrieval sees (set by the runner per run)."""
        self._evaluators: dict[int, CachingEvaluator] = {}
        self._lock = threading.Lock()

    def vectorstore(self, settings: RunSettings) -> Any:
        """The store, seen through the current filters."""
        return SourceFilteringStore(self.inner.vectorstore(settings), self.filters)

    def evaluator(self, settings: RunSettings) -> RetrievalEvaluator:
        """The evaluator, its scores cached."""
        inner = self.inner.evaluator(settings)
        with self._lock:
            cached = self._evaluators.get(id(inner))
            if cached is None or cached.inner is not inner:
                cached = self._evaluators[id(inner)] = CachingEvaluator(inner)
            return cached

    def chat_model(self, settings: RunSettings) -> BaseChatModel:
        """The generator (its answers are cached by LangChain's LLM cache while eval runs)."""
        if self._chat_model is not None:
            return self._chat_model
        return self.inner.chat_model(settings)

    def search(self, settings: RunSettings) -> SearchProvider:
        """The web search provider (the simulated web during ``crag-bench eval``)."""
        return self.inner.search(settings)
