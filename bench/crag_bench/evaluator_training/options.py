"""The options of a training run: :class:`TrainingOptions`, with their checks.

:func:`crag_bench.evaluator_training.trainer.train_evaluator` takes what to train (the kind of
evaluator), on what (the pairs) and where to (the output folder) as arguments, and how to
train as one :class:`TrainingOptions`, whose defaults are the recipe's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crag_bench.evaluator_training.data import KINDS
from crag_bench.evaluator_training.errors import TrainingError

DEFAULT_LEARNING_RATES: dict[str, float] = {"cross-encoder": 2e-5, "t5": 1e-4}
"""Peak learning rates: the usual BERT fine-tuning rate, and AdamW's usual rate for T5."""


@dataclass(frozen=True)
class TrainingOptions:
    """How to fine-tune an evaluator: every setting of a run but the kind, pairs and folder."""

    base_model: str | None = None
    """Model directory or hub id to start from. Default for the cross-encoder: the shipped
    all-MiniLM-L6-v2 (its encoder; the head is new). Required for T5."""
    epochs: int = 1
    """Passes over the pairs."""
    batch_size: int = 16
    """Pairs per optimizer step."""
    learning_rate: float | None = None
    """Peak AdamW learning rate; default 2e-5 (cross-encoder), 1e-4 (T5)."""
    max_length: int = 256
    """Token budget per pair."""
    seed: int = 0
    """Seeds Python, NumPy and torch (head initialisation, dropout) and the shuffling."""
    checkpoint_every: int = 200
    """Steps between checkpoints."""
    resume: bool = True
    """Continue from ``out_dir/checkpoint`` if there is one (it must come from a run with the
    same settings and pairs); otherwise start afresh and replace it."""
    progress: bool = True
    """Show a tqdm progress bar (on stderr, with the loss)."""
    balance: bool = True
    """Weight the loss so positives and negatives count equally (see
    :func:`crag_bench.evaluator_training.data.loss_weights`: keeps 0 the regression's decision
    point despite FanOutQA's ~1:9 imbalance)."""
    warmup_ratio: float = 0.1
    """Fraction of the steps with linearly rising learning rate; it then decays linearly to 0."""
    weight_decay: float = 0.01
    """AdamW weight decay (not on biases and norm weights)."""
    max_grad_norm: float = 1.0
    """Gradient norm clipping threshold."""
    device: str | None = None
    """``"cuda"``, ``"cpu"``, ...; default CUDA when available."""
    deterministic: bool = False
    """Ask torch for deterministic algorithms during the run (for GPUs; CPU runs are
    reproducible at a fixed thread count anyway)."""
    keep_checkpoint: bool = True
    """Keep ``out_dir/checkpoint`` after a finished run (it holds the optimizer state, about
    twice the model's size)."""
    train_layers: int | None = None
    """Cross-encoder only: fine-tune only the top this many transformer layers, the pooler and
    the head (the rest stay the base model's); ``None``: every layer."""
    freeze_embeddings: bool = False
    """Cross-encoder only: keep the token, position and type embeddings as the base model's
    (the shipped evaluator does: its weight file then holds no copy of the vocabulary)."""
    lora_rank: int = 0
    """Cross-encoder only: train LoRA adapters of this rank on every attention and
    feed-forward projection (``peft``), the head in full, the rest frozen; merged into the
    weights when the run ends. 0: no adapters."""
    prior: bool = False
    """Cross-encoder only: train on top of the embedding prior (:mod:`crag.evaluator.prior`): the
    model's output is added to a logistic map of the MiniLM cosine, heading and question words,
    fitted on the same pairs first, and ``tanh`` of the sum is regressed onto the labels."""
    loss: str = "mse"
    """``"mse"``: the paper's regression onto +1/-1 (``batch_size`` pairs a step);
    ``"listwise"`` (cross-encoder only): each question's pairs compete in one softmax, the
    positives against the question's own negatives (``batch_size`` *questions* a step), so the
    model must tell a question's texts apart and cannot lower the loss by a shift shared by all;
    its output is calibrated to a probability afterwards (:mod:`crag_bench.evaluator_training.
    listwise`)."""
    group_by_length: bool = False
    """Batch pairs of similar length (shuffled in windows of 50 batches, sorted by length
    inside each): less padding, the same pairs an epoch, a different step order."""
    stop_after: int | None = None
    """Stop once this many steps are done in total, as if interrupted: the checkpoint is saved,
    the final model is not written (for tests and time-boxed runs)."""

    def learning_rate_for(self, kind: str) -> float:
        """The peak learning rate: ``learning_rate``, else the default of ``kind`` (0 if none)."""
        if self.learning_rate is None:
            return DEFAULT_LEARNING_RATES.get(kind, 0.0)
        return self.learning_rate

    def check(self, kind: str) -> None:
        """Refuse an unknown ``kind`` or an option out of its range.

        Raises:
            TrainingError: The first problem found, named with the option.
        """
        if kind not in KINDS:
            raise TrainingError(f"unknown evaluator kind {kind!r}; valid kinds: {', '.join(KINDS)}")
        if self.epochs < 1:
            raise TrainingError(f"epochs must be at least 1, got {self.epochs}")
        if self.batch_size < 1:
            raise TrainingError(f"batch_size must be at least 1, got {self.batch_size}")
        learning_rate = self.learning_rate_for(kind)
        if not (learning_rate > 0 and math.isfinite(learning_rate)):
            raise TrainingError(f"learning_rate must be a positive number, got {learning_rate}")
        if self.max_length < 8:
            raise TrainingError(f"max_length must be at least 8 tokens, got {self.max_length}")
        if self.checkpoint_every < 1:
            raise TrainingError(f"checkpoint_every must be at least 1, got {self.checkpoint_every}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise TrainingError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        self._check_trainable(kind)
        if self.loss not in ("mse", "listwise"):
            raise TrainingError(f"loss must be 'mse' or 'listwise', got {self.loss!r}")
        if self.loss == "listwise" and not self.prior:
            raise TrainingError("the listwise loss trains a correction of the prior: set prior")
        if self.stop_after is not None and self.stop_after < 1:
            raise TrainingError(f"stop_after must be at least 1, got {self.stop_after}")

    def _check_trainable(self, kind: str) -> None:
        """Refuse the partial-training options where they do not apply or conflict."""
        partial = (
            self.train_layers is not None or self.freeze_embeddings or self.lora_rank or self.prior
        )
        if kind != "cross-encoder" and partial:
            raise TrainingError(
                "train_layers, freeze_embeddings, lora_rank and prior apply to the "
                "cross-encoder only"
            )
        if self.train_layers is not None and self.train_layers < 0:
            raise TrainingError(f"train_layers must be 0 or more, got {self.train_layers}")
        if self.lora_rank < 0:
            raise TrainingError(f"lora_rank must be 0 or more, got {self.lora_rank}")
        if self.lora_rank and self.train_layers is not None:
            raise TrainingError("choose one of lora_rank and train_layers, not both")
