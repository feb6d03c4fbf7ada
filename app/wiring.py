"""The default components: real models and stores, each loaded once per process."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from graph.context import Context

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.vectorstores import VectorStore

    from evaluator.base import RetrievalEvaluator
    from websearch.base import SearchProvider

logger = logging.getLogger(__name__)


class DefaultComponents:
    """Chroma on disk, the MiniLM embedder, the configured evaluator, generator and search.

    Every loader below is cached on the settings it depends on, so concurrent runs with the
    same settings share one instance of each model; a lock keeps two first runs from loading
    the same model twice.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._stores: dict[tuple[str, str, str, bool, int], VectorStore] = {}

    def vectorstore(self, context: Context) -> VectorStore:
        """Open the store; fill it from the bundled corpus first if allowed and it is empty."""
        from vectorstore.corpus import ensure_default_corpus
        from vectorstore.embeddings import load_embeddings
        from vectorstore.store import StoreError, count, open_store

        key = (
            context.store_path,
            context.collection,
            context.embedder,
            context.default_corpus,
            context.default_corpus_limit,
        )
        with self._lock:
            if key in self._stores:
                return self._stores[key]
            embeddings = load_embeddings(context.embedder)
            store = open_store(
                context.store_path,
                context.collection,
                embeddings,
                create=context.default_corpus,
            )
            if count(store) == 0:
                if not context.default_corpus:
                    raise StoreError(
                        f"the collection {context.collection!r} at {context.store_path} is "
                        "empty: add documents with `crag ingest PATH...`"
                    )
                logger.info("store is empty: ingesting the bundled Wikipedia summaries")
                ensure_default_corpus(store, limit=context.default_corpus_limit)
            self._stores[key] = store
            return store

    def evaluator(self, context: Context) -> RetrievalEvaluator:
        """The evaluator named by ``context.evaluator`` (cached by the registry)."""
        from evaluator.registry import load_evaluator

        with self._lock:
            return load_evaluator(
                context.evaluator,
                model=context.evaluator_model,
                batch_size=context.evaluator_batch_size,
                embeddings_name=context.embedder,
            )

    def chat_model(self, context: Context) -> BaseChatModel:
        """The generator named by ``context.generator`` (cached by the factory)."""
        from generator.factory import load_chat_model

        with self._lock:
            return load_chat_model(context.generator, context.max_new_tokens)

    def search(self, context: Context) -> SearchProvider:
        """The web search provider named by ``context.search_provider``."""
        from websearch.registry import get_search_provider

        return get_search_provider(
            context.search_provider,
            url=context.search_url,
            timeout=context.search_timeout,
            region=context.search_region,
            safesearch=context.search_safesearch,
            backend=context.search_backend,
            only_wikipedia=context.only_wikipedia,
        )
