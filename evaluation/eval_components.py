"""The components ``crag eval`` runs the graphs with: the real ones, plus two measuring hooks.

* The store can hide a question's gold document, exactly as if it had been removed from the
  store (a metadata filter on the same search), for the worse-retriever experiment.
* Evaluator scores are cached per (question, passage) so that experiments sharing a step do
  not pay for it twice; scores are deterministic, so results do not change.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel

from evaluator.base import RetrievalEvaluator
from graph.components import Components
from graph.context import Context
from websearch.base import SearchProvider


class GoldRemovingStore:
    """A vector store view that leaves out chosen sources for chosen queries.

    ``similarity_search(query, k)`` for a query in ``removed`` searches the store with the
    filter ``source not in removed[query]``: the top-k of the store without those documents.
    Everything else is delegated to the wrapped store.
    """

    def __init__(self, inner: Any, removed: dict[str, tuple[str, ...]]) -> None:
        """Wrap ``inner``; ``removed`` maps a question to the sources to hide (read live)."""
        self._inner = inner
        self._removed = removed

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The top ``k`` passages, without the query's removed source if it has one."""
        sources = self._removed.get(query)
        if sources:
            kwargs["filter"] = (
                {"source": {"$ne": sources[0]}}
                if len(sources) == 1
                else {"source": {"$nin": list(sources)}}
            )
        result: list[Document] = self._inner.similarity_search(query, k=k, **kwargs)
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
        self._scores: dict[tuple[str, str], float] = {}

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Scores of the passages, computing only those not seen before (in one call)."""
        with self._lock:
            missing = [p for p in dict.fromkeys(passages) if (question, p) not in self._scores]
        if missing:
            scores = self.inner.score(question, missing)
            with self._lock:
                for passage, score in zip(missing, scores, strict=True):
                    self._scores[(question, passage)] = float(score)
        with self._lock:
            return [self._scores[(question, p)] for p in passages]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class EvalComponents:
    """The real components with a gold-removing store view and a score cache."""

    def __init__(self, inner: Components) -> None:
        """Wrap the components the graphs would use otherwise."""
        self.inner = inner
        self.removed: dict[str, tuple[str, ...]] = {}
        """Question → sources hidden from retrieval (set by the runner per run)."""
        self._evaluators: dict[int, CachingEvaluator] = {}
        self._lock = threading.Lock()

    def vectorstore(self, context: Context) -> Any:
        """The store, seen without the current removals."""
        return GoldRemovingStore(self.inner.vectorstore(context), self.removed)

    def evaluator(self, context: Context) -> RetrievalEvaluator:
        """The evaluator, its scores cached."""
        inner = self.inner.evaluator(context)
        with self._lock:
            cached = self._evaluators.get(id(inner))
            if cached is None or cached.inner is not inner:
                cached = self._evaluators[id(inner)] = CachingEvaluator(inner)
            return cached

    def chat_model(self, context: Context) -> BaseChatModel:
        """The generator (its answers are cached by LangChain's LLM cache while eval runs)."""
        return self.inner.chat_model(context)

    def search(self, context: Context) -> SearchProvider:
        """The web search provider (the simulated web during ``crag eval``)."""
        return self.inner.search(context)
