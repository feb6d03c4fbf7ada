"""Fitting the embedding prior of a cross-encoder run (``TrainingOptions.prior``).

Every training pair gets the features of the embedding evaluator's map (the MiniLM cosine of
question and text, the heading and the question's words; see :mod:`crag.evaluator.prior`), a
logistic map is fitted on them by the paper's labels (weighted like the training loss, so both
use the same class balance), and each pair's prior logit becomes a fixed offset the
cross-encoder's output is added to during training.

The map is fitted on the pairs that look like what it will score: the retrieved passages and
strips (rank known) of the questions that have a positive pair (:func:`fitting_rows`). Fitted
on every training pair it came out with a *negative* cosine weight (the measure split: pair AUC
0.675 against 0.810), because the two kinds of pair that training adds on purpose are skewed
in cosine: gold passages that retrieval missed (positives, low cosine) and the best-ranked
passage of questions without any positive (negatives, high cosine).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from crag.evaluator.embedding import _unit_rows, pair_features
from crag.evaluator.prior import PriorMap
from crag_bench.evaluator_training.errors import TrainingError
from crag_bench.logistic import fit_logistic
from crag_bench.pairs import LabelledPair

logger = logging.getLogger(__name__)

L2 = 1e-2
"""The light L2 penalty of the embedding evaluator's own maps."""


def pair_cosines(pairs: Sequence[LabelledPair], embeddings: Any) -> np.ndarray:
    """The cosine of each pair's question and text under ``embeddings`` (each text once)."""
    questions = sorted({p.question for p in pairs})
    texts = sorted({p.passage for p in pairs})
    logger.info("embedding %d questions and %d texts for the prior", len(questions), len(texts))
    q_vectors = _unit_rows(np.asarray(embeddings.embed_documents(questions), dtype=np.float64))
    t_vectors = _unit_rows(np.asarray(embeddings.embed_documents(texts), dtype=np.float64))
    q_row = {q: i for i, q in enumerate(questions)}
    t_row = {t: i for i, t in enumerate(texts)}
    return np.asarray(
        [float(q_vectors[q_row[p.question]] @ t_vectors[t_row[p.passage]]) for p in pairs]
    )


def pair_feature_rows(pairs: Sequence[LabelledPair], cosines: np.ndarray) -> np.ndarray:
    """The map's feature row of every pair, in order."""
    rows = [
        pair_features(pair.question, [pair.passage], np.asarray([cos]))[0]
        for pair, cos in zip(pairs, cosines, strict=True)
    ]
    return np.asarray(rows, dtype=np.float64)


def fitting_rows(pairs: Sequence[LabelledPair]) -> list[int]:
    """Positions of the pairs the prior is fitted on: retrieved pairs of questions with a positive.

    Raises:
        TrainingError: No such pair has both labels.
    """
    with_positive = {pair.question_id for pair in pairs if pair.label == 1}
    rows = [
        i
        for i, pair in enumerate(pairs)
        if pair.rank is not None and pair.question_id in with_positive
    ]
    if len({pairs[i].label for i in rows}) < 2:
        raise TrainingError(
            "the prior needs retrieved pairs (with a rank) of both labels from questions that "
            "have a positive pair"
        )
    return rows


def fit_prior(features: np.ndarray, labels: Sequence[int], weights: Sequence[float]) -> PriorMap:
    """The logistic map of ``P(label = +1 | features)``, with the training loss's weights.

    Raises:
        TrainingError: The fit did not converge to finite values.
    """
    targets = (np.asarray(labels, dtype=float) + 1.0) / 2.0
    w = fit_logistic(features, targets, l2=L2, weights=np.asarray(weights, dtype=float))
    if not np.all(np.isfinite(w)):
        raise TrainingError(f"the prior map did not converge: {w.tolist()}")
    prior = PriorMap(float(w[0]), float(w[1]), float(w[2]), float(w[3]))
    logger.info("prior map: %s", prior)
    return prior


def prior_offsets(
    prior: PriorMap, pairs: Sequence[LabelledPair], features: np.ndarray
) -> np.ndarray:
    """Each pair's prior logit."""
    weights = np.asarray([prior.slope, prior.heading_weight, prior.overlap_weight])
    offsets: np.ndarray = features @ weights + prior.intercept
    if len(offsets) != len(pairs):
        raise TrainingError("one prior offset per pair expected")
    return offsets
