"""The default components: real models and stores, each loaded once per process.

Concurrent runs (the LangGraph server runs several at once, each node on a worker thread)
share one instance of every model. The generator serialises its own calls
(:class:`crag.generator.local.LocalChatModel` holds a lock) or, with the deployment setting
``generator_batch_size`` above 1 (applied here to a local model; API models ignore it),
decodes the overlapping calls of concurrent runs together (:mod:`crag.generator.batching`). The
evaluator is wrapped here, and the store's embedder by
:func:`crag.vectorstore.embeddings.locked_embeddings`, so that their model calls are serialised
too, one lock per model (:mod:`crag.core.model_locks`): the ``embedding`` evaluator and the store
share the sentence embedder, so they share its lock.
A cancelled run stops waiting for a lock (:func:`crag.core.cancellation.holding`), and its model
work stops at the next batch or token, which releases the lock within about a second.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from crag.core.cancellation import holding
from crag.core.model_locks import model_lock
from crag.settings.run_settings import RunSettings

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.vectorstores import VectorStore

    from crag.evaluator.base import RetrievalEvaluator
    from crag.generator.endpoint_config import EndpointConfig
    from crag.generator.prepare import Preparation
    from crag.websearch.base import SearchProvider

logger = logging.getLogger(__name__)

StoreKey = tuple[str, str, str, bool, int, str, int, bool]


class GeneratorPreload(threading.Thread):
    """The thread of :meth:`DefaultComponents.preload_chat_model`; :meth:`stop` ends its work."""

    def __init__(self, load: Callable[[], None], preparation: Preparation) -> None:
        """Run ``load``, which may run ``preparation`` (a child process) first."""
        super().__init__(target=load, name="crag-generator-preload")
        self.preparation = preparation

    def stop(self) -> None:
        """End a preparation of the generator no run will wait for (the run failed)."""
        self.preparation.stop()


class LockedEvaluator:
    """A retrieval evaluator whose ``score`` calls hold a lock (other attributes pass through)."""

    def __init__(self, inner: RetrievalEvaluator, lock: threading.Lock) -> None:
        """Wrap ``inner``; ``lock`` is shared with every other user of the same model."""
        self.inner = inner
        self.lock = lock
        self.name = inner.name

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Score the passages, one call at a time."""
        with holding(self.lock):
            return self.inner.score(question, passages)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def name_is_llm(settings: RunSettings) -> bool:
    """Whether the run's evaluator is the ``llm`` one (whose model may be a server's)."""
    return settings.deployment.evaluator.strip().lower() == "llm"


def on_endpoint(evaluator: RetrievalEvaluator) -> bool:
    """Whether ``evaluator`` asks a model server (no process-wide lock: its in-flight limit)."""
    from crag.generator.endpoint import EndpointChatModel

    return isinstance(getattr(evaluator, "chat_model", None), EndpointChatModel)


def store_key(settings: RunSettings) -> StoreKey:
    """The settings that identify one opened store (the collection: the one the run searches).

    A store on disk is known by its resolved path: ``store_path`` may be relative, and the warm
    server (``crag serve``) runs each client's command in the client's directory, so the same
    ``--store st`` names another store for each directory.
    """
    path = settings.deployment.store_path
    if not settings.deployment.chroma_host.strip():
        path = os.path.realpath(os.path.expanduser(path))
    return (
        path,
        settings.searched_collection(),
        settings.deployment.embedder,
        settings.deployment.default_corpus,
        settings.deployment.default_corpus_limit,
        settings.deployment.chroma_host,
        settings.deployment.chroma_port,
        settings.deployment.chroma_ssl,
    )


class DefaultComponents:
    """Chroma (on disk or a server), the MiniLM embedder, the evaluator, generator and search.

    Every loader below is cached on the settings it depends on, so concurrent runs with the
    same settings share one instance of each model; a lock keeps two first runs from loading
    the same model twice.
    """

    def __init__(self, endpoint: EndpointConfig | None = None) -> None:
        """Components for the settings of each run.

        Args:
            endpoint: The model server of ``endpoint`` specs (generator, rewriter,
                contextualizer, the ``llm`` evaluator's model); default: the deployment
                settings ``CRAG_LLM_*``, read when a model is first asked for.
        """
        self.endpoint = endpoint
        self._lock = threading.RLock()
        self._models_lock = threading.RLock()
        """The generator's own: loading it in the background (:meth:`preload_chat_model`)
        must not hold up the store and the evaluator meanwhile."""
        self._stores: dict[StoreKey, VectorStore] = {}
        self._evaluators: dict[int, LockedEvaluator] = {}
        self._batch_sizes: dict[int, tuple[BaseChatModel, int]] = {}

    def vectorstore(self, settings: RunSettings) -> VectorStore:
        """Open the store the run searches; fill it from the bundled corpus first if allowed.

        The run searches ``collection`` or, with ``search_collection``, another collection the
        operator lets runs read (``readable_collections``): that one is only read, never
        created nor filled with the bundled corpus.
        """
        from crag.vectorstore.corpus import ensure_default_corpus
        from crag.vectorstore.embeddings import locked_embeddings
        from crag.vectorstore.store import StoreError, count, open_store, server_url

        key = store_key(settings)
        name = settings.searched_collection()
        fill = settings.deployment.default_corpus and name == settings.deployment.collection
        with self._lock:
            if key in self._stores:
                return self._stores[key]
            store = open_store(
                settings.deployment.store_path,
                name,
                locked_embeddings(settings.deployment.embedder),
                create=fill,
                host=settings.deployment.chroma_host,
                port=settings.deployment.chroma_port,
                ssl=settings.deployment.chroma_ssl,
            )
            if count(store) == 0:
                if not fill:
                    where = (
                        server_url(
                            settings.deployment.chroma_host,
                            settings.deployment.chroma_port,
                            settings.deployment.chroma_ssl,
                        )
                        if settings.deployment.chroma_host.strip()
                        else settings.deployment.store_path
                    )
                    raise StoreError(
                        f"the collection {name!r} at {where} is empty: add documents with "
                        "`crag ingest PATH...`"
                    )
                logger.info("store is empty: ingesting the bundled Wikipedia summaries")
                ensure_default_corpus(store, limit=settings.deployment.default_corpus_limit)
            self._stores[key] = store
            return store

    def forget_stores(self) -> None:
        """Drop the opened stores, so that the next run opens them again as they are on disk.

        The warm server calls it, between commands, when a store's files changed since it was
        opened (:func:`crag.vectorstore.store.stores_changed_since_opened`).
        """
        with self._lock:
            self._stores.clear()

    def evaluator(self, settings: RunSettings) -> RetrievalEvaluator:
        """The evaluator ``settings.deployment.evaluator`` names (registry-cached), serialised."""
        from crag.evaluator.registry import load_evaluator
        from crag.vectorstore.embeddings import embedder_lock

        with self._lock:
            inner = load_evaluator(
                settings.deployment.evaluator,
                model=settings.deployment.evaluator_model,
                batch_size=settings.deployment.evaluator_batch_size,
                embeddings_name=settings.deployment.embedder,
                int8=settings.deployment.evaluator_int8,
                endpoint=self.endpoint,
            )
            if name_is_llm(settings) and on_endpoint(inner):
                return inner  # a model server's requests are bounded by its in-flight limit
            wrapped = self._evaluators.get(id(inner))
            if wrapped is None or wrapped.inner is not inner:
                name = settings.deployment.evaluator.strip().lower()
                if name == "embedding":
                    lock = embedder_lock(settings.deployment.embedder)
                else:
                    int8 = ":int8" if settings.deployment.evaluator_int8 else ""
                    lock = model_lock(
                        f"evaluator:{name}:{settings.deployment.evaluator_model}{int8}"
                    )
                wrapped = LockedEvaluator(inner, lock)
                self._evaluators[id(inner)] = wrapped
            return wrapped

    def chat_model(self, settings: RunSettings) -> BaseChatModel:
        """The generator named by ``settings.deployment.generator`` (cached by the factory).

        A local model gets ``settings.deployment.generator_batch_size`` (:meth:`apply_batch_size`)
        and ``generator_dtype`` and ``generator_engine``.
        """
        from crag.generator.factory import load_chat_model

        with self._models_lock:
            model = load_chat_model(
                settings.deployment.generator,
                settings.max_new_tokens,
                settings.deployment.no_repeat_ngram_size,
                endpoint=self.endpoint,
                dtype=settings.deployment.generator_dtype,
                engine=settings.deployment.generator_engine,
            )
            self.apply_batch_size(model, settings.deployment.generator_batch_size)
            return model

    def preload_chat_model(self, settings: RunSettings) -> GeneratorPreload | None:
        """Start opening the generator's onnxruntime session on a thread; None: nothing to open.

        ``crag ask`` calls it before its run: the session loads (letting go of the interpreter
        lock) while the run opens the store and loads the embedder, about 0.7 s of a cold
        answer. On an empty cache the thread first makes the local model's converted folder and
        ONNX model in a child process (:mod:`crag.generator.prepare`), while the run retrieves
        and grades. A failure is left to the run, which makes or opens the model again and
        reports it. The caller joins the thread before it exits.
        """
        from crag.generator.factory import preload_engine
        from crag.generator.onnx_decoding import onnxruntime_applies
        from crag.generator.prepare import Preparation, is_prepared

        deployment = settings.deployment
        spec = deployment.generator
        # The CPU is assumed: asking torch for a GPU would import it here, 0.8 s more before a
        # bad question is refused. On a GPU machine the session opened goes unused.
        engine, dtype = deployment.generator_engine, deployment.generator_dtype
        if not onnxruntime_applies(engine, dtype, "cpu"):
            return None  # transformers decodes: a session opened now would go unused

        preparation = Preparation(spec)

        def load() -> None:
            try:
                if is_prepared(spec) is False and not preparation.run():
                    return
                preload_engine(spec, deployment.generator_engine)
            except Exception as exc:  # noqa: BLE001 - the run's own load reports it
                logger.debug("preloading the generator failed (the run retries): %s", exc)

        thread = GeneratorPreload(load, preparation)
        thread.start()
        return thread

    def apply_batch_size(self, model: BaseChatModel, size: int) -> None:
        """Let ``model`` decode up to ``size`` overlapping requests together, if it can.

        Only a size above 1 is applied (1, the default, leaves the model as it is: batching off
        unless its owner turned it on, as ``crag-bench eval --workers`` does), and only once per
        loaded model and size, so that batching set on the model afterwards (``crag-bench eval
        --workers N``) is not undone by the next run. Models without ``enable_batching`` (API
        models) ignore it.
        """
        if size <= 1:
            return
        with self._models_lock:
            applied = self._batch_sizes.get(id(model))
            if applied is not None and applied[0] is model and applied[1] == size:
                return
            enable = getattr(model, "enable_batching", None)
            if callable(enable):
                enable(size)
                logger.info("generator: overlapping requests decoded in batches of up to %d", size)
            self._batch_sizes[id(model)] = (model, size)

    def search(self, settings: RunSettings) -> SearchProvider:
        """The web search provider named by ``settings.deployment.search_provider``."""
        from crag.websearch.registry import SearchSettings, get_search_provider

        return get_search_provider(SearchSettings.from_context(settings))
