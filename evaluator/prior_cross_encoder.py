"""The trained evaluator: a cross-encoder that corrects the embedding prior.

A checkpoint trained with ``crag-bench evaluator train --prior`` (the shipped one is,
:mod:`crag.evaluator.shipped`) records its prior map in ``crag_evaluator.json``. Scoring a text then
takes the embedding features of the pair (the MiniLM cosine, from the store's own vectors for
retrieved passages; the heading and the question's words), the prior map's logit of them, and
the cross-encoder's raw output for the pair read together:

    score = tanh((prior_logit + cross_encoder_output) / 2)

A checkpoint trained with the listwise loss records a ``correction`` too (its output ranks but
has no scale of its own; :mod:`crag_bench.evaluator_training.listwise`), and the sum is then
``prior_weight * prior_logit + weight * cross_encoder_output + bias``.

Passages, strips and web paragraphs are all scored this way, on one scale, so anything that is
ranked together or compared with one threshold is comparable (:mod:`crag.evaluator.prior`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from crag.evaluator.base import BatchedEvaluator, BatchScorer, EvaluatorError
from crag.evaluator.cross_encoder import CrossEncoderEvaluator
from crag.evaluator.embedding import _unit_rows
from crag.evaluator.prior import PriorMap

logger = logging.getLogger(__name__)


class PriorCrossEncoderEvaluator(BatchedEvaluator):
    """Prior map plus cross-encoder correction; see the module docstring.

    Attributes:
        name: ``"cross-encoder"``.
        cross_encoder: The loaded cross-encoder (raw outputs are read).
        embeddings: The embedder of the prior's cosine (the store's, shared).
        prior: The prior map.
        batch_size: Pairs per cross-encoder forward pass.
    """

    def __init__(
        self,
        cross_encoder: CrossEncoderEvaluator,
        embeddings: Embeddings,
        prior: PriorMap,
        correction: tuple[float, float, float] = (1.0, 1.0, 0.0),
    ) -> None:
        """Combine a loaded cross-encoder, the embedder and the checkpoint's prior map.

        ``correction``: ``(prior_weight, weight, bias)`` of the sum (see the module).
        """
        self.name: str = "cross-encoder"
        self.cross_encoder = cross_encoder
        self.embeddings = embeddings
        self.prior = prior
        self.batch_size = cross_encoder.batch_size
        self.model_name_or_path = cross_encoder.model_name_or_path
        self.int8 = cross_encoder.int8
        self.correction = correction

    def __repr__(self) -> str:
        return f"PriorCrossEncoderEvaluator({self.cross_encoder!r}, prior={self.prior})"

    def _batch_scorer(
        self, question: str, passages: Sequence[str], indices: list[int]
    ) -> BatchScorer:
        """Embed the question once; each batch embeds its texts and runs the cross-encoder."""
        query = np.asarray(self.embeddings.embed_query(question), dtype=np.float64)
        if query.ndim != 1:
            raise EvaluatorError(f"embedder returned a vector of shape {query.shape}")
        query = _unit_rows(query)

        def score(batch: list[int]) -> list[float]:
            texts = [passages[i] for i in batch]
            vectors = self.embeddings.embed_documents(texts)
            docs = np.asarray([list(v) for v in vectors], dtype=np.float64)
            if docs.shape != (len(texts), query.shape[0]):
                raise EvaluatorError(
                    f"embedder returned vectors of shape {docs.shape} for {len(texts)} texts"
                )
            cosines = np.clip(_unit_rows(docs) @ query, -1.0, 1.0)
            prior = self.prior.logits(question, texts, cosines)
            raw = np.asarray(self.cross_encoder.raw_outputs(question, texts), dtype=np.float64)
            prior_weight, weight, bias = self.correction
            z = prior_weight * prior + weight * raw + bias
            values: list[float] = np.tanh(z / 2.0).tolist()
            return values

        return BatchScorer(score, sizes=[len(passages[i]) for i in indices])


def prior_of(metadata: dict[str, Any] | None) -> PriorMap | None:
    """The prior map a checkpoint's ``crag_evaluator.json`` records, or None."""
    if not metadata or metadata.get("prior") is None:
        return None
    data = metadata["prior"]
    if not isinstance(data, dict):
        raise EvaluatorError(f"crag_evaluator.json has a prior that is not an object: {data!r}")
    return PriorMap.from_dict(data)


def correction_of(metadata: dict[str, Any] | None) -> tuple[float, float, float]:
    """The ``(prior_weight, weight, bias)`` a checkpoint records; ``(1, 1, 0)`` if none."""
    data = (metadata or {}).get("correction")
    if data is None:
        return (1.0, 1.0, 0.0)
    try:
        values = (float(data["prior_weight"]), float(data["weight"]), float(data["bias"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise EvaluatorError(f"bad correction {data!r} in crag_evaluator.json: {exc}") from exc
    if not all(np.isfinite(values)):
        raise EvaluatorError(f"bad correction {data!r} in crag_evaluator.json")
    return values
