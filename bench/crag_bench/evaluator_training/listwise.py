"""The listwise loss of a cross-encoder run, and the calibration of its output afterwards.

With the pointwise loss on top of the embedding prior (:mod:`crag.evaluator.prior`) the MiniLM
cross-encoder learned a constant: a shift shared by every pair lowered the loss as much as
anything it could learn about a pair in two epochs (its outputs for four Mona Lisa texts, right
and wrong, were -1.683 to -1.693). The listwise loss has no such way out. Each question's
retrieved pairs compete in one softmax over ``z = prior + output``; the loss is the negative
log of the share the question's positives get:

    loss(q) = logsumexp(z over q's pairs) - logsumexp(z over q's positives)

A shift shared by a question's pairs changes nothing, so only telling them apart pays.

The output is then a ranking score without a scale. :func:`fit_correction` fits
``z = prior_weight * prior + weight * output + bias`` by logistic regression (classes
balanced, as the pointwise runs are) on the training questions' pairs, and the evaluator
reports ``tanh(z / 2)`` (:class:`crag.evaluator.prior_cross_encoder.PriorCrossEncoderEvaluator`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from crag_bench.evaluator_training.data import loss_weights
from crag_bench.evaluator_training.errors import TrainingError
from crag_bench.logistic import fit_logistic
from crag_bench.pairs import LabelledPair

logger = logging.getLogger(__name__)


class TrainingLoop(Protocol):
    """What the listwise loss reads of the training loop (``loop.TrainingLoop``, which calls it).

    A protocol rather than an import: the loop imports this module for its loss.
    """

    targets: torch.Tensor
    device: torch.device
    offsets: torch.Tensor | None
    groups: list[list[int]] | None

    def raw_outputs(self, chunk: list[int]) -> torch.Tensor:
        """The model's raw scores of the pairs at ``chunk``."""
        ...


CALIBRATION_QUESTIONS = 300
"""Questions whose pairs the correction is fitted on (seeded sample)."""


def question_groups(pairs: Sequence[LabelledPair]) -> list[list[int]]:
    """Pair positions per question, for the questions with both a positive and a negative.

    Raises:
        TrainingError: No question has both.
    """
    by_question: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        by_question.setdefault(pair.question_id, []).append(i)
    groups = [rows for rows in by_question.values() if len({pairs[i].label for i in rows}) == 2]
    if not groups:
        raise TrainingError("the listwise loss needs questions with a positive and a negative")
    logger.info(
        "listwise: %d of %d questions have both labels (%d pairs)",
        len(groups),
        len(by_question),
        sum(len(g) for g in groups),
    )
    return groups


def listwise_loss(loop: TrainingLoop, groups: Sequence[list[int]]) -> torch.Tensor:
    """The mean over ``groups`` of each question's listwise loss (one forward pass)."""
    chunk = [i for group in groups for i in group]
    z = loop.raw_outputs(chunk)
    if loop.offsets is not None:
        z = z + loop.offsets[chunk].to(loop.device)
    positive = loop.targets[chunk].to(loop.device) > 0
    losses = []
    start = 0
    for group in groups:
        part = z[start : start + len(group)]
        mask = positive[start : start + len(group)]
        losses.append(torch.logsumexp(part, 0) - torch.logsumexp(part[mask], 0))
        start += len(group)
    return torch.stack(losses).mean()


def fit_correction(loop: TrainingLoop, seed: int) -> dict[str, float]:
    """Logistic weights of the prior logit and the output, on a sample of training questions."""
    assert loop.groups is not None
    rng = np.random.default_rng(seed)
    count = min(CALIBRATION_QUESTIONS, len(loop.groups))
    chosen = sorted(int(g) for g in rng.choice(len(loop.groups), count, replace=False))
    rows = [i for g in chosen for i in loop.groups[g]]
    outputs: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(rows), 64):
            outputs += loop.raw_outputs(rows[start : start + 64]).cpu().tolist()
    prior = loop.offsets[rows].numpy() if loop.offsets is not None else np.zeros(len(rows))
    labels = [int(loop.targets[i]) for i in rows]
    x = np.column_stack([prior, np.asarray(outputs)])
    targets = (np.asarray(labels, dtype=float) + 1.0) / 2.0
    w = fit_logistic(x, targets, l2=1e-2, weights=np.asarray(loss_weights(labels, True)))
    if not np.all(np.isfinite(w)):
        raise TrainingError(f"the output calibration did not converge: {w.tolist()}")
    correction = {"prior_weight": float(w[0]), "weight": float(w[1]), "bias": float(w[2])}
    logger.info("listwise output calibration on %d pairs: %s", len(rows), correction)
    return correction
