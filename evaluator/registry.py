"""Evaluator back ends by name, loaded once per process.

Grading, knowledge refinement and web-result selection all ask for the evaluator here, so a
model loads once and they share it. The T5 module (torch, transformers) is imported only when
the ``"t5"`` back end is asked for.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from evaluator.base import EvaluatorError, RetrievalEvaluator

logger = logging.getLogger(__name__)

BACKENDS: tuple[str, ...] = ("embedding", "t5")
"""Valid evaluator names: the offline embedding default and the paper's T5."""

DEFAULT_EMBEDDINGS = "all-MiniLM-L6-v2"
"""The shared embedder the ``"embedding"`` back end uses by default."""


def load_evaluator(
    name: str,
    *,
    model: str = "",
    batch_size: int = 32,
    embeddings_name: str = DEFAULT_EMBEDDINGS,
) -> RetrievalEvaluator:
    """Return the evaluator ``name``, loading it on first use.

    Calls with the same (normalised) arguments return the same instance.

    Args:
        name: One of :data:`BACKENDS` (case-insensitive).
        model: For ``"t5"``: checkpoint directory or hub id. Ignored by ``"embedding"``.
        batch_size: For ``"t5"``: pairs per forward pass. Ignored by ``"embedding"``.
        embeddings_name: For ``"embedding"``: the embedder name or path, as the vector store
            takes it. Ignored by ``"t5"``.

    Returns:
        The evaluator.

    Raises:
        EvaluatorError: Unknown name, missing T5 checkpoint, or a model that fails to load.
    """
    key = name.strip().lower()
    if key not in BACKENDS:
        raise EvaluatorError(f"unknown evaluator {name!r}; valid evaluators: {', '.join(BACKENDS)}")
    if key == "t5":
        checkpoint = model.strip()
        if not checkpoint:
            raise EvaluatorError(
                "the t5 evaluator needs evaluator_model: a checkpoint path or hub id"
            )
        path = Path(checkpoint).expanduser()
        if path.exists():
            checkpoint = str(path.resolve())
        return _load_cached(key, checkpoint, batch_size, "")
    return _load_cached(key, "", 0, embeddings_name)


def clear_evaluator_cache() -> None:
    """Forget loaded evaluators, so the next :func:`load_evaluator` call loads afresh."""
    _load_cached.cache_clear()


@lru_cache(maxsize=8)
def _load_cached(
    name: str, model: str, batch_size: int, embeddings_name: str
) -> RetrievalEvaluator:
    if name == "t5":
        from evaluator.t5 import T5Evaluator

        return T5Evaluator(model, batch_size=batch_size)

    from evaluator.embedding import DEFAULT_INTERCEPT, DEFAULT_SLOPE, EmbeddingEvaluator
    from vectorstore.embeddings import EmbedderError, load_embeddings

    try:
        embeddings = load_embeddings(embeddings_name)
    except EmbedderError as exc:
        raise EvaluatorError(f"the embedding evaluator could not load its embedder: {exc}") from exc
    logger.info(
        "embedding evaluator on %s (slope %.4g, intercept %.4g)",
        embeddings_name,
        DEFAULT_SLOPE,
        DEFAULT_INTERCEPT,
    )
    return EmbeddingEvaluator(embeddings, slope=DEFAULT_SLOPE, intercept=DEFAULT_INTERCEPT)
