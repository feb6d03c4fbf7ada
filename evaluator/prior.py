"""The embedding prior of the trained cross-encoder: a logistic map its output is added to.

The shipped evaluator is a cross-encoder trained on top of a prior: the logistic map of the
embedding evaluator (cosine of the MiniLM embeddings, "the question names the heading", the
share of the question's words in the text; :func:`crag.evaluator.embedding.pair_features`), refitted
on the training pairs. The cross-encoder reads question and text together and learns what the
map misses; its output is a correction to the map's logit:

    z = map(features) + cross_encoder(question, text)
    score = tanh(z / 2) = 2 * sigmoid(z) - 1

Starting from the map, a cross-encoder trained on a few thousand positives ranks at least as
the map does instead of worse: trained alone from the bi-encoder MiniLM, the same cross-encoder
ranked gold passages below the retriever's own order (README, "The retrieval evaluator").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from crag.evaluator.base import EvaluatorError
from crag.evaluator.embedding import pair_features


@dataclass(frozen=True)
class PriorMap:
    """``z = slope * cosine + heading_weight * named + overlap_weight * overlap + intercept``."""

    slope: float
    heading_weight: float
    overlap_weight: float
    intercept: float

    def __post_init__(self) -> None:
        values = (self.slope, self.heading_weight, self.overlap_weight, self.intercept)
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
            raise EvaluatorError(f"prior map values must be finite numbers, got {values}")

    def logits(self, question: str, texts: Sequence[str], cosines: np.ndarray) -> np.ndarray:
        """The map's logit of each text."""
        weights = np.asarray([self.slope, self.heading_weight, self.overlap_weight])
        logits: np.ndarray = pair_features(question, texts, cosines) @ weights + self.intercept
        return logits

    def to_dict(self) -> dict[str, float]:
        """The map as plain numbers (for ``crag_evaluator.json``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PriorMap:
        """Read :meth:`to_dict` output.

        Raises:
            EvaluatorError: A value is missing or not a finite number.
        """
        try:
            return cls(
                float(data["slope"]),
                float(data["heading_weight"]),
                float(data["overlap_weight"]),
                float(data["intercept"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EvaluatorError(f"bad prior map {dict(data)!r}: {exc}") from exc
