"""The offline default evaluator: calibrated cosine similarity of sentence embeddings.

A zero-shot stand-in for the paper's fine-tuned T5. It embeds the question and the passages
with the shared sentence embedder (the one the vector store uses, so no second model is
loaded), takes the cosine similarity ``c`` of the question and each passage, ``h``, 1 when
the question names the passage's heading (its document title) and 0 otherwise, and ``o``, the
share of the question's content words the passage holds
(:func:`crag.knowledge.words.question_overlap`), and reports

    z = slope * c + heading_weight * h + overlap_weight * o + intercept
    score = tanh(z / 2) = 2 * sigmoid(z) - 1.

``sigmoid(z)`` is a logistic regression of P(the passage is from the page that answers the
question), so the score is the expected label for labels +1/-1: the quantity the paper's T5
regression head estimates. Every feature is computed per pair, as the paper scores every pair
on its own. The coefficients are fitted, by the paper's recipe (gold-document passages +1,
other retrieved passages -1), on the open-domain ``dev`` questions over the bundled corpus by
``bench/scripts/fit_passage_calibration.py``. An earlier map was fitted on FanOutQA ``train``
(``bench/scripts/fit_embedding_calibration.py``: cosine and heading only, heading weight 4.2); its
questions name the page they ask about, open-domain questions rarely do, and with it the
best-scored passage was from a gold document less often than the retriever's own first (nq-dev
0.43, the retriever 0.57, this map fitted on trivia-dev 0.61; trivia-dev 0.43, 0.62, 0.67).

Knowledge strips (single sentences, web paragraphs: :func:`crag.evaluator.base.score_strips`) get a
calibration of their own, ``z = strip_slope * c + strip_heading_weight * h +
strip_overlap_weight * o + strip_intercept``, where ``o`` is the share of the question's content
words the strip holds (:func:`crag.knowledge.words.question_overlap`). It estimates P(the strip
states the answer), fitted on the strips of retrieved passages for the open-domain ``dev``
questions by ``bench/scripts/fit_strip_calibration.py``. Why a second map: the passage map's heading
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

from crag.evaluator.base import BatchedEvaluator, BatchScorer, EvaluatorError
from crag.knowledge.words import heading_named, question_overlap

logger = logging.getLogger(__name__)

DEFAULT_SLOPE: float = 9.1621
"""Logistic slope on cosine similarity, fitted by ``bench/scripts/fit_passage_calibration.py``."""

DEFAULT_HEADING_WEIGHT: float = -0.1831
"""Logistic weight of "the question names the passage heading", fitted by the same script."""

DEFAULT_OVERLAP_WEIGHT: float = 2.3569
"""Logistic weight of the question's content words found in the passage, fitted by the same
script."""

DEFAULT_INTERCEPT: float = -7.4565
"""Logistic intercept, fitted by ``bench/scripts/fit_passage_calibration.py``."""

DEFAULT_STRIP_SLOPE: float = 8.1634
"""Logistic slope on cosine similarity for strips (``bench/scripts/fit_strip_calibration.py``)."""

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


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    unit: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


def pair_features(question: str, texts: Sequence[str], cosines: np.ndarray) -> np.ndarray:
    """The features of the passage and strip maps, one row per text.

    Per text: its cosine with the question, whether the question names its heading (0/1), and
    the share of the question's content words it holds. The scripts that fit the passage and
    strip maps build their rows with this too, so a map is fitted on the features it is applied
    to.
    """
    return np.column_stack(
        [
            np.asarray(cosines, dtype=float),
            [float(heading_named(question, text)) for text in texts],
            [question_overlap(question, text) for text in texts],
        ]
    )


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


class EmbeddingEvaluator(BatchedEvaluator):
    """Zero-shot evaluator: calibrated question-passage cosine similarity.

    ``score`` embeds the question once and the non-empty passages in calls of ``chunk_size``,
    longest first (so each call pads little), checking between calls whether the run was
    cancelled; an empty or whitespace-only passage scores -1.0 and is not embedded. It raises
    :class:`~crag.evaluator.base.EvaluatorError` when the embedder returns the wrong number or
    shape of vectors.

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
        overlap_weight: float = DEFAULT_OVERLAP_WEIGHT,
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
            overlap_weight: Logistic weight of the question's words in the passage; must be
                finite.
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
        if not (math.isfinite(heading_weight) and math.isfinite(overlap_weight)):
            raise EvaluatorError(
                f"heading_weight and overlap_weight must be finite, got {heading_weight}, "
                f"{overlap_weight}"
            )
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
        self.overlap_weight = float(overlap_weight)
        self.name: str = name
        self.chunk_size = chunk_size
        self.strips = strips or StripCalibration()

    def __repr__(self) -> str:
        return (
            f"EmbeddingEvaluator(slope={self.slope}, intercept={self.intercept}, "
            f"heading_weight={self.heading_weight}, overlap_weight={self.overlap_weight}, "
            f"name={self.name!r})"
        )

    @property
    def batch_size(self) -> int:  # type: ignore[override]
        """Passages embedded per embedder call (``chunk_size``)."""
        return self.chunk_size

    def score_strips(self, question: str, strips: Sequence[str]) -> list[float]:
        """Score knowledge strips with the strip calibration; otherwise as :meth:`score`."""
        return self._score_with(self._strip_scorer, question, strips)

    def _batch_scorer(
        self, question: str, passages: Sequence[str], indices: list[int]
    ) -> BatchScorer:
        return self._scorer(question, passages, indices, strips=False)

    def _strip_scorer(
        self, question: str, strips: Sequence[str], indices: list[int]
    ) -> BatchScorer:
        return self._scorer(question, strips, indices, strips=True)

    def _scorer(
        self, question: str, passages: Sequence[str], indices: list[int], *, strips: bool
    ) -> BatchScorer:
        """Embed the question once; each batch embeds its passages and maps the features."""
        query = np.asarray(self.embeddings.embed_query(question), dtype=np.float64)
        if query.ndim != 1:
            raise EvaluatorError(
                f"embedder returned a vector of shape {query.shape} for the question"
            )
        query = _unit_rows(query)

        def score(batch: list[int]) -> list[float]:
            texts = [passages[i] for i in batch]
            docs = self._embed(texts)
            if docs.shape != (len(batch), query.shape[0]):
                raise EvaluatorError(
                    f"embedder returned vectors of shape {docs.shape} for {len(batch)} passages "
                    f"and {query.shape} for the question"
                )
            cosines = np.clip(_unit_rows(docs) @ query, -1.0, 1.0)
            values: list[float] = np.tanh(
                self._logits(question, texts, cosines, strips) / 2.0
            ).tolist()
            return values

        return BatchScorer(score, sizes=[len(passages[i]) for i in indices])

    def _logits(
        self, question: str, texts: list[str], cosines: np.ndarray, strips: bool
    ) -> np.ndarray:
        """The calibrated logits of ``texts`` (the passage map, or the strip map)."""
        map_ = self.strips if strips else self
        weights = np.asarray([map_.slope, map_.heading_weight, map_.overlap_weight])
        logits: np.ndarray = pair_features(question, texts, cosines) @ weights + map_.intercept
        return logits

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Embed one batch of passages (one embedder call)."""
        vectors = self.embeddings.embed_documents(texts)
        if len(vectors) != len(texts):
            raise EvaluatorError(
                f"embedder returned {len(vectors)} vectors for {len(texts)} passages"
            )
        return np.asarray([list(vector) for vector in vectors], dtype=np.float64)
