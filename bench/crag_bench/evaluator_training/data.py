"""Pairs to model inputs: validation, tokenisation, loss weights, epoch order, padding.

Both back ends see a pair exactly as their evaluator will at inference time:

* ``cross-encoder``: the tokenizer's sentence-pair encoding of (question, passage), cut
  ``longest_first`` to ``max_length`` tokens, as ``sentence_transformers.CrossEncoder`` does;
* ``t5``: ``template.format(question=..., passage=...)`` without special tokens, cut to
  ``max_length - 1`` tokens, then one end-of-sequence token, as
  :class:`crag.evaluator.t5.T5Evaluator` does (its classification head reads the hidden state at
  that token).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch

from crag_bench.evaluator_training.errors import TrainingError
from crag_bench.pairs import LabelledPair

Kind = Literal["cross-encoder", "t5"]
"""Which evaluator back end to train."""

KINDS: tuple[Kind, ...] = ("cross-encoder", "t5")
"""Valid values of :data:`Kind`."""

Features = dict[str, list[int]]
"""One encoded pair: ``input_ids``, ``attention_mask`` and, for BERT, ``token_type_ids``."""


def check_pairs(pairs: Sequence[LabelledPair]) -> tuple[int, int]:
    """Return ``(positives, negatives)`` after checking the pairs can train a regressor.

    Raises:
        TrainingError: No pairs, a label other than +1/-1, or only one of the two labels.
    """
    if not pairs:
        raise TrainingError("no training pairs: pass at least one positive and one negative")
    bad = [i for i, pair in enumerate(pairs) if pair.label not in (1, -1)]
    if bad:
        first = pairs[bad[0]]
        raise TrainingError(
            f"{len(bad)} pair(s) have a label other than +1 or -1 (pair {bad[0]}, "
            f"question {first.question_id!r}: label {first.label!r})"
        )
    positives = sum(1 for pair in pairs if pair.label == 1)
    negatives = len(pairs) - positives
    if positives == 0 or negatives == 0:
        only = "positive (+1)" if negatives == 0 else "negative (-1)"
        raise TrainingError(
            f"all {len(pairs)} pairs are {only}: a regression evaluator needs both labels"
        )
    return positives, negatives


def pairs_digest(pairs: Sequence[LabelledPair]) -> str:
    """SHA-256 of the pairs' questions, passages and labels, in order."""
    digest = hashlib.sha256()
    for pair in pairs:
        for part in (pair.question, pair.passage, str(pair.label)):
            data = part.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
    return digest.hexdigest()


def loss_weights(labels: Sequence[int], balance: bool) -> list[float]:
    """Per-pair loss weights; with ``balance`` both classes carry half of the total weight.

    A positive weighs ``n / (2 * positives)`` and a negative ``n / (2 * negatives)``, so the
    weights average 1 and the weighted mean squared error is the mean of the two per-class
    errors. Without balancing, FanOutQA's ~1:9 positives to negatives pull the regression
    (whose optimum is E[label | pair]) towards -0.8 on every pair it is unsure about, and 0 no
    longer separates "more likely from the gold page" from "less likely". Balanced, the target
    is E[label] under equal class priors, so 0 stays the decision point; the graph's thresholds
    are calibrated on held-out pairs afterwards anyway.
    """
    if not balance:
        return [1.0] * len(labels)
    positives = sum(1 for label in labels if label == 1)
    negatives = len(labels) - positives
    total = len(labels)
    pos_weight = total / (2 * positives) if positives else 0.0
    neg_weight = total / (2 * negatives) if negatives else 0.0
    return [pos_weight if label == 1 else neg_weight for label in labels]


def epoch_order(
    size: int,
    seed: int,
    epoch: int,
    lengths: Sequence[int] | None = None,
    batch_size: int = 1,
) -> list[int]:
    """The shuffled order of pair indices for ``epoch``: a function of the seed and epoch only.

    Resuming a run therefore replays the same order without saving it. With ``lengths``
    (``group_by_length``), the shuffled order is cut into windows of 50 batches, each window
    sorted by length into batches of similar pairs, and the full batches shuffled; a short
    last batch stays last, so every step but the last trains ``batch_size`` pairs.
    """
    rng = np.random.default_rng([seed, epoch])
    order = [int(i) for i in rng.permutation(size)]
    if lengths is None:
        return order
    window = 50 * batch_size
    batches: list[list[int]] = []
    for start in range(0, size, window):
        part = sorted(order[start : start + window], key=lambda i: lengths[i], reverse=True)
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    short = [b for b in batches if len(b) < batch_size]
    full = [b for b in batches if len(b) == batch_size]
    shuffled = [full[int(i)] for i in rng.permutation(len(full))]
    return [i for batch in [*shuffled, *short] for i in batch]


def encode_cross_encoder(
    tokenizer: Any, pairs: Sequence[LabelledPair], max_length: int
) -> list[Features]:
    """Sentence-pair encodings of (question, passage), cut ``longest_first``."""
    encoded = tokenizer(
        [pair.question for pair in pairs],
        [pair.passage for pair in pairs],
        truncation="longest_first",
        max_length=max_length,
        verbose=False,
    )
    keys = [key for key in ("input_ids", "token_type_ids", "attention_mask") if key in encoded]
    return [{key: [int(t) for t in encoded[key][i]] for key in keys} for i in range(len(pairs))]


def encode_t5(
    tokenizer: Any,
    pairs: Sequence[LabelledPair],
    max_length: int,
    template: str,
    eos_id: int,
) -> list[Features]:
    """Template-formatted inputs ending in exactly one end-of-sequence token, like T5Evaluator."""
    texts = [template.format(question=pair.question, passage=pair.passage) for pair in pairs]
    encoded = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    features: list[Features] = []
    for ids in encoded:
        body = [int(i) for i in ids if i != eos_id][: max_length - 1]
        input_ids = [*body, eos_id]
        features.append({"input_ids": input_ids, "attention_mask": [1] * len(input_ids)})
    return features


def pad_batch(features: Sequence[Features], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad one batch to its longest member (dynamic padding) as long tensors.

    ``input_ids`` is padded with ``pad_id``; every other field (attention mask, token types)
    with 0.
    """
    width = max(len(item["input_ids"]) for item in features)
    batch: dict[str, torch.Tensor] = {}
    for key in features[0]:
        fill = pad_id if key == "input_ids" else 0
        tensor = torch.full((len(features), width), fill, dtype=torch.long)
        for row, item in enumerate(features):
            values = item[key]
            tensor[row, : len(values)] = torch.tensor(values, dtype=torch.long)
        batch[key] = tensor
    return batch
