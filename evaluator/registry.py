"""Evaluator back ends by name, loaded once per process.

Grading, knowledge refinement and web-result selection all ask for the evaluator here, so a
model loads once and they share it. Each back end's module (torch, transformers,
sentence-transformers, the chat model) is imported only when that back end is asked for.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crag.evaluator.base import EvaluatorError, RetrievalEvaluator

if TYPE_CHECKING:
    from crag.generator.endpoint_config import EndpointConfig

logger = logging.getLogger(__name__)

BACKENDS: tuple[str, ...] = ("embedding", "t5", "cross-encoder", "llm")
"""Valid evaluator names: the offline embedding default, the paper's T5, a cross-encoder and
an LLM asked the paper's few-shot yes/no question."""

DEFAULT_EMBEDDINGS = "all-MiniLM-L6-v2"
"""The shared embedder the ``"embedding"`` back end uses by default."""

DEFAULT_LLM = "smollm2"
"""The generator spec the ``"llm"`` back end uses when ``model`` is empty."""

_CHECKPOINT_BACKENDS = ("t5", "cross-encoder")


def _checkpoint(name: str, model: str) -> str:
    """The checkpoint of a model-backed evaluator: an absolute path if it exists, else as given.

    The cross-encoder without a checkpoint is the shipped one (:mod:`crag.evaluator.shipped`),
    built in the cache on first use.
    """
    checkpoint = model.strip()
    if not checkpoint and name == "cross-encoder":
        from crag.evaluator.shipped import shipped_folder

        return str(shipped_folder())
    if not checkpoint:
        example = " (e.g. cross-encoder/ms-marco-MiniLM-L6-v2)" if name == "cross-encoder" else ""
        raise EvaluatorError(
            f"the {name} evaluator needs evaluator_model: a checkpoint path or hub id{example}"
        )
    path = Path(checkpoint).expanduser()
    return str(path.resolve()) if path.exists() else checkpoint


def load_evaluator(
    name: str,
    *,
    model: str = "",
    batch_size: int = 32,
    embeddings_name: str = DEFAULT_EMBEDDINGS,
    int8: bool = False,
    endpoint: EndpointConfig | None = None,
) -> RetrievalEvaluator:
    """Return the evaluator ``name``, loading it on first use.

    Calls with the same (normalised) arguments return the same instance.

    Args:
        name: One of :data:`BACKENDS` (case-insensitive).
        model: For ``"t5"`` and ``"cross-encoder"``: checkpoint directory or hub id
            (required). For ``"llm"``: a generator spec for
            :func:`crag.generator.factory.load_chat_model` (``"smollm2"``, ``"local:/path"``,
            ``"provider:model"``; empty means :data:`DEFAULT_LLM`). Ignored by ``"embedding"``.
        batch_size: For ``"t5"`` and ``"cross-encoder"``: pairs per forward pass. Ignored by
            the others.
        embeddings_name: For ``"embedding"`` and a ``"cross-encoder"`` trained on the
            embedding prior: the embedder name or path, as the vector store takes it. Ignored
            by the others.
        int8: For ``"t5"`` and ``"cross-encoder"``: quantise the model's Linear layers to int8
            on the CPU (faster; scores drift slightly; refused on CUDA). An int8 and a float
            evaluator of the same checkpoint are cached apart. Ignored by ``"embedding"`` and
            ``"llm"``.
        endpoint: For ``"llm"`` with an ``endpoint`` spec: the model server (default: the
            deployment settings, ``CRAG_LLM_*``). Ignored by the others.

    Returns:
        The evaluator.

    Raises:
        EvaluatorError: Unknown name, missing checkpoint, a model that fails to load, or
            ``int8`` on a GPU.
    """
    key = name.strip().lower()
    if key not in BACKENDS:
        raise EvaluatorError(f"unknown evaluator {name!r}; valid evaluators: {', '.join(BACKENDS)}")
    if key in _CHECKPOINT_BACKENDS:
        # a cross-encoder trained on the embedding prior reads the store's embedder too
        embedder = embeddings_name if key == "cross-encoder" else ""
        return _load_cached(key, _checkpoint(key, model), batch_size, embedder, int8)
    if key == "llm":
        spec = model.strip() or DEFAULT_LLM
        return _load_cached(key, spec, 0, "", False, _endpoint_of(spec, endpoint))
    return _load_cached(key, "", 0, embeddings_name, False)


def _endpoint_of(spec: str, endpoint: EndpointConfig | None) -> EndpointConfig | None:
    """The model server an ``endpoint`` spec uses (part of the cache key); else ``None``."""
    from crag.generator.endpoint_config import EndpointConfig
    from crag.settings.setting_checks import ENDPOINT_SPEC

    if spec != ENDPOINT_SPEC and not spec.startswith(ENDPOINT_SPEC + ":"):
        return None
    return endpoint or EndpointConfig.from_settings()


@lru_cache(maxsize=8)
def _load_cached(
    name: str,
    model: str,
    batch_size: int,
    embeddings_name: str,
    int8: bool,
    endpoint: EndpointConfig | None = None,
) -> RetrievalEvaluator:
    """The evaluator ``name`` names (any other name: the embedding one), loaded once."""
    if name == "t5":
        from crag.evaluator.t5 import T5Evaluator

        return T5Evaluator(model, batch_size=batch_size, int8=int8)
    if name == "cross-encoder":
        return _cross_encoder(model, batch_size, embeddings_name, int8)
    if name == "llm":
        return _llm_evaluator(model, endpoint)
    return _embedding_evaluator(embeddings_name)


def _cross_encoder(
    model: str, batch_size: int, embeddings_name: str, int8: bool
) -> RetrievalEvaluator:
    """The cross-encoder, wrapped to correct its embedding prior when its checkpoint has one."""
    from crag.evaluator.cross_encoder import CrossEncoderEvaluator
    from crag.evaluator.prior_cross_encoder import (
        PriorCrossEncoderEvaluator,
        correction_of,
        prior_of,
    )

    cross_encoder = CrossEncoderEvaluator(model, batch_size=batch_size, int8=int8)
    prior = prior_of(cross_encoder.metadata)
    if prior is None:
        return cross_encoder
    logger.info("cross-encoder %s corrects its embedding prior %s", model, prior)
    return PriorCrossEncoderEvaluator(
        cross_encoder,
        _shared_embeddings(embeddings_name),
        prior,
        correction_of(cross_encoder.metadata),
    )


def _llm_evaluator(model: str, endpoint: EndpointConfig | None) -> RetrievalEvaluator:
    """A chat model asked the paper's yes/no question about each passage.

    Raises:
        EvaluatorError: The chat model cannot be loaded.
    """
    from crag.evaluator.llm import LLMEvaluator
    from crag.generator.factory import load_chat_model

    try:
        chat_model = load_chat_model(model, endpoint=endpoint)
    except Exception as exc:
        raise EvaluatorError(
            f"the llm evaluator could not load the chat model {model!r}: {exc}"
        ) from exc
    logger.info("llm evaluator on %s", model)
    return LLMEvaluator(chat_model)


def _embedding_evaluator(embeddings_name: str) -> RetrievalEvaluator:
    """Question-passage cosine similarity of the store's embedder, calibrated (zero-shot)."""
    from crag.evaluator.embedding import DEFAULT_INTERCEPT, DEFAULT_SLOPE, EmbeddingEvaluator

    embeddings = _shared_embeddings(embeddings_name)
    logger.info(
        "embedding evaluator on %s (slope %.4g, intercept %.4g)",
        embeddings_name,
        DEFAULT_SLOPE,
        DEFAULT_INTERCEPT,
    )
    return EmbeddingEvaluator(embeddings, slope=DEFAULT_SLOPE, intercept=DEFAULT_INTERCEPT)


def _shared_embeddings(embeddings_name: str) -> Any:
    """The store's embedder, answering retrieved passages from the store's own vectors.

    Raises:
        EvaluatorError: The embedder does not load.
    """
    from crag.vectorstore.embeddings import EmbedderError, shared_embeddings
    from crag.vectorstore.vector_memo import RememberingEmbeddings, vector_memo

    try:
        # retrieved passages come with the store's vectors: grading does not embed them again
        return RememberingEmbeddings(
            shared_embeddings(embeddings_name), vector_memo(embeddings_name)
        )
    except EmbedderError as exc:
        raise EvaluatorError(f"the evaluator could not load its embedder: {exc}") from exc
