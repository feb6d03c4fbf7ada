"""The offline default evaluator: calibrated cosine similarity of sentence embeddings.

A zero-shot stand-in for the paper's fine-tuned T5. It embeds the question and the passages
with the shared sentence embedder (the one the vector store uses, so no second model is
loaded), takes the cosine similarity ``c`` of the question and each passage and ``h``, 1 when
the question names the passage's heading (its document title) and 0 otherwise, and reports

    z = slope * c + heading_weight * h + intercept
    score = tanh(z / 2) = 2 * sigmoid(z) - 1.

``sigmoid(z)`` is a logistic regression of P(the passage is from the page that answers the
question), so the score is the expected label for labels +1/-1: the quantity the paper's T5
regression head estimates, which keeps the paper's thresholds meaningful. Both features are
computed per pair, as the paper scores every pair on its own. The coefficients are fitted on
FanOutQA ``train`` questions over the bundled corpus by ``scripts/fit_embedding_calibration.py``.

Knowledge strips (single sentences, web paragraphs: :func:`evaluator.base.score_strips`) get a
calibration of their own, ``z = strip_slope * c + strip_heading_weight * h +
strip_overlap_weight * o + strip_intercept``, where ``o`` is the share of the question's content
words the strip holds (:func:`knowledge.lexical.question_overlap`). It estimates P(the strip
states the answer), fitted on the strips of retrieved passages for the open-domain ``dev``
questions by ``scripts/fit_strip_calibration.py``. Why a second map: the passage map's heading
weight lifts every sentence of a passage whose title the question names, answer or not, and on
sentences cosine similarity alone misses the answer more often than with the question's words
(a strip stating the answer among the five best, first 200 questions of each dev set, the map
fitted on the other set: nq-dev 0.385 with the passage map, 0.470 with this one; trivia-dev
0.380 and 0.500).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from langchain_core.embeddings import Embeddings

from evaluator.base import EvaluatorError, scorable_indices
from graph.cancellation import raise_if_cancelled
from knowledge.lexical import heading_named, question_overlap

logger = logging.getLogger(__name__)

DEFAULT_SLOPE: float = 14.2955
"""Logistic slope on cosine similarity, fitted by ``scripts/fit_embedding_calibration.py``."""

DEFAULT_HEADING_WEIGHT: float = 4.2272
"""Logistic weight of "the question names the passage heading", fitted by the same script."""

DEFAULT_INTERCEPT: float = -10.7814
"""Logistic intercept, fitted by ``scripts/fit_embedding_calibration.py``."""

DEFAULT_STRIP_SLOPE: float = 8.1634
"""Logistic slope on cosine similarity for strips (``scripts/fit_strip_calibration.py``)."""

DEFAULT_STRIP_HEADING_WEIGHT: float = -0.4386
"""Logistic weight of "the question names the strip's heading", fitted by the same script."""

DEFAULT_STRIP_OVERLAP_WEIGHT: float = 1.5044
"""Logistic weight of the question's content words found in the strip, fitted by the same
script."""

DEFAULT_STRIP_INTERCEPT: float = -7.3584
"""Logistic intercept for strips, fitted by the same script."""

CHUNK_SIZE = 16
"""Passages embedded per call: a cancelled run stops after the chunk in progress (well under a
second of MiniLM work on a CPU)."""


def cosine_to_score(
    cos: float, slope: float = DEFAULT_SLOPE, intercept: float = DEFAULT_INTERCEPT
) -> float:
    """Map a cosine similarity to a score in [-1, 1].

    Args:
        cos: Cosine similarity of question and passage embeddings.
        slope: Logistic slope (positive: more similar scores higher).
        intercept: Logistic intercept.

    Returns:
        ``tanh((slope * cos + intercept) / 2)``, i.e. ``2 * sigmoid(slope * cos + intercept) - 1``.
    """
    return math.tanh((slope * cos + intercept) / 2.0)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    unit: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


@dataclass(frozen=True)
class StripCalibration:
    """The logistic map from a strip's features to P(the strip states the answer)."""

    slope: float = DEFAULT_STRIP_SLOPE
    heading_weight: float = DEFAULT_STRIP_HEADING_WEIGHT
    overlap_weight: float = DEFAULT_STRIP_OVERLAP_WEIGHT
    intercept: float = DEFAULT_STRIP_INTERCEPT

    def __post_init__(self) -> None:
        values = (self.slope, self.heading_weight, self.overlap_weight, self.intercept)
        if not all(math.isfinite(v) for v in values):
            raise EvaluatorError(f"strip calibration values must be finite, got {values}")


class EmbeddingEvaluator:
    """Zero-shot evaluator: calibrated question-passage cosine similarity.

    Attributes:
        name: Backend name for logs and reports.
        embeddings: The embedder (shared with the vector store).
        slope: Logistic slope on cosine similarity.
        intercept: Logistic intercept.
    """

    def __init__(
        self,
        embeddings: Embeddings,
        *,
        slope: float = DEFAULT_SLOPE,
        intercept: float = DEFAULT_INTERCEPT,
        heading_weight: float = DEFAULT_HEADING_WEIGHT,
        name: str = "embedding",
        chunk_size: int = CHUNK_SIZE,
        strips: StripCalibration | None = None,
    ) -> None:
        """Wrap an embedder.

        Args:
            embeddings: Any LangChain embedder; its vectors need not be normalised.
            slope: Logistic slope on cosine similarity; must be positive and finite.
            intercept: Logistic intercept; must be finite.
            heading_weight: Logistic weight of the heading feature; must be finite.
            name: Backend name for logs and reports.
            chunk_size: Passages embedded per embedder call; the run's cancellation is checked
                between calls.
            strips: The map for knowledge strips (default: the fitted one).

        Raises:
            EvaluatorError: The slope is not positive, a parameter is not finite, or
                ``chunk_size`` is below 1.
        """
        if chunk_size < 1:
            raise EvaluatorError(f"chunk_size must be at least 1, got {chunk_size}")
        if not math.isfinite(heading_weight):
            raise EvaluatorError(f"heading_weight must be finite, got {heading_weight}")
        if not (math.isfinite(slope) and math.isfinite(intercept)):
            raise EvaluatorError(f"slope and intercept must be finite, got {slope}, {intercept}")
        if slope <= 0:
            raise EvaluatorError(
                f"slope must be positive (higher similarity, higher score): {slope}"
            )
        self.embeddings = embeddings
        self.slope = float(slope)
        self.intercept = float(intercept)
        self.heading_weight = float(heading_weight)
        self.name: str = name
        self.chunk_size = chunk_size
        self.strips = strips or StripCalibration()

    def __repr__(self) -> str:
        return (
            f"EmbeddingEvaluator(slope={self.slope}, intercept={self.intercept}, "
            f"heading_weight={self.heading_weight}, name={self.name!r})"
        )

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """Score each passage by its calibrated cosine similarity to the question.

        The question is embedded once and the non-empty passages in calls of ``chunk_size``,
        longest first (so each call pads little), checking between calls whether the run was
        cancelled; empty or whitespace-only passages score -1.0 and are not embedded.

        Args:
            question: The user question.
            passages: Passages to score.

        Returns:
            One float in [-1, 1] per passage, in order.

        Raises:
            EvaluatorError: ``passages`` is one string, or the embedder returned the wrong
                number or shape of vectors.
            RunCancelledError: The run was cancelled (see :mod:`graph.cancellation`).
        """
        return self._scores(question, passages, strips=False)

    def score_strips(self, question: str, strips: Sequence[str]) -> list[float]:
        """Score knowledge strips with the strip calibration; otherwise as :meth:`score`."""
        return self._scores(question, strips, strips=True)

    def _scores(self, question: str, passages: Sequence[str], *, strips: bool) -> list[float]:
        todo = scorable_indices(passages)
        scores = [-1.0] * len(passages)
        if not todo:
            return scores
        raise_if_cancelled()
        query = np.asarray(self.embeddings.embed_query(question), dtype=np.float64)
        docs = self._embed([passages[i] for i in todo])
        if query.ndim != 1 or docs.shape != (len(todo), query.shape[0]):
            raise EvaluatorError(
                f"embedder returned vectors of shape {docs.shape} for {len(todo)} passages and "
                f"{query.shape} for the question"
            )
        cosines = np.clip(_unit_rows(docs) @ _unit_rows(query), -1.0, 1.0)
        named = np.array([heading_named(question, passages[i]) for i in todo])
        if strips:
            overlap = np.array([question_overlap(question, passages[i]) for i in todo])
            calibration = self.strips
            logits = (
                calibration.slope * cosines
                + calibration.heading_weight * named
                + calibration.overlap_weight * overlap
                + calibration.intercept
            )
        else:
            logits = self.slope * cosines + self.heading_weight * named + self.intercept
        values = np.tanh(logits / 2.0)
        for i, value in zip(todo, values.tolist(), strict=True):
            scores[i] = float(value)
        return scores

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` in chunks, longest first; rows come back in the order given."""
        order = sorted(range(len(texts)), key=lambda k: len(texts[k]), reverse=True)
        rows: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), self.chunk_size):
            raise_if_cancelled()
            chunk = order[start : start + self.chunk_size]
            vectors = self.embeddings.embed_documents([texts[k] for k in chunk])
            if len(vectors) != len(chunk):
                raise EvaluatorError(
                    f"embedder returned {len(vectors)} vectors for {len(chunk)} passages"
                )
            for k, vector in zip(chunk, vectors, strict=True):
                rows[k] = list(vector)
        return np.asarray(rows, dtype=np.float64)
