"""The optimisation loop of :func:`crag_bench.evaluator_training.trainer.train_evaluator`.

:class:`RunPlan` holds a run's checked settings and the step counts they give;
:class:`TrainingLoop` runs the optimizer steps from wherever the run's :class:`TrainerState`
stands, keeping that state (losses, position) and the checkpoints up to date.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from crag.evaluator.t5 import DEFAULT_TEMPLATE
from crag_bench.evaluator_training.backends import Backend
from crag_bench.evaluator_training.checkpoints import TrainerState, save_checkpoint
from crag_bench.evaluator_training.data import Features, Kind, epoch_order, pad_batch
from crag_bench.evaluator_training.errors import TrainingError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    """A run's checked settings (learning rate defaulted) and the step counts they give."""

    kind: Kind
    source: str
    out_dir: Path
    pair_count: int
    pairs_sha256: str
    epochs: int
    batch_size: int
    learning_rate: float
    max_length: int
    seed: int
    balance: bool
    warmup_ratio: float
    weight_decay: float
    max_grad_norm: float
    checkpoint_every: int
    stop_after: int | None
    train_layers: int | None = None
    freeze_embeddings: bool = False
    lora_rank: int = 0
    group_by_length: bool = False
    prior: bool = False
    loss: str = "mse"
    units: int = 0
    """What a step draws from: pairs (``mse``), or questions (``listwise``); 0: the pairs."""

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per pass over the pairs (the last batch may be short)."""
        return math.ceil((self.units or self.pair_count) / self.batch_size)

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the whole run."""
        return self.epochs * self.steps_per_epoch

    @property
    def warmup_steps(self) -> int:
        """Steps with a rising learning rate."""
        return int(self.warmup_ratio * self.total_steps)

    @property
    def settings(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed (it would not reproduce the run else)."""
        return {
            "kind": self.kind,
            "base_model": self.source,
            "pairs": self.pair_count,
            "pairs_sha256": self.pairs_sha256,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "max_length": self.max_length,
            "seed": self.seed,
            "balance": self.balance,
            "warmup_ratio": self.warmup_ratio,
            "weight_decay": self.weight_decay,
            "max_grad_norm": self.max_grad_norm,
            "template": DEFAULT_TEMPLATE if self.kind == "t5" else None,
            "train_layers": self.train_layers,
            "freeze_embeddings": self.freeze_embeddings,
            "lora_rank": self.lora_rank,
            "group_by_length": self.group_by_length,
            "prior": self.prior,
            "loss": self.loss,
        }


@dataclass
class TrainingLoop:
    """The model, its optimizer and the encoded pairs of one run, and where the run is."""

    plan: RunPlan
    backend: Backend
    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    features: list[Features]
    targets: torch.Tensor
    weights: torch.Tensor
    device: torch.device
    state: TrainerState
    trainable_parameters: int = 0
    offsets: torch.Tensor | None = None
    """Each pair's prior logit (``prior`` runs), added to the model's output."""
    prior_map: dict[str, float] | None = None
    """The fitted prior map (``prior`` runs), for the exported metadata."""
    groups: list[list[int]] | None = None
    """``listwise`` runs: the pair positions of each question (a step draws questions)."""

    def raw_outputs(self, chunk: list[int]) -> torch.Tensor:
        """The model's outputs for the pairs at ``chunk`` (one padded batch)."""
        padded = pad_batch([self.features[i] for i in chunk], self.backend.pad_id)
        batch = {key: value.to(self.device) for key, value in padded.items()}
        outputs: torch.Tensor = self.model(**batch).logits[:, 0].float()
        return outputs

    def _loss(self, chunk: list[int]) -> torch.Tensor:
        """The step's loss: weighted MSE on ``chunk``'s pairs, or listwise on its questions."""
        if self.groups is not None:
            from crag_bench.evaluator_training.listwise import listwise_loss

            return listwise_loss(self, [self.groups[g] for g in chunk])
        scores = self.raw_outputs(chunk)
        if self.offsets is not None:
            scores = torch.tanh((scores + self.offsets[chunk].to(self.device)) / 2)
        errors = (scores - self.targets[chunk].to(self.device)) ** 2
        return (self.weights[chunk].to(self.device) * errors).mean()

    def step(self, chunk: list[int]) -> float:
        """One optimizer step on the pairs (or questions) at ``chunk``; the step's loss."""
        loss = self._loss(chunk)
        value = float(loss.detach())
        if not math.isfinite(value):
            raise TrainingError(
                f"the training loss became {value} at step {self.state.step + 1}; lower the "
                f"learning rate (now {self.plan.learning_rate:g})"
            )
        torch.autograd.backward(loss)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.plan.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return value

    def record(self, value: float, epoch: int) -> None:
        """Count a finished step of ``epoch`` with its loss; close the epoch at its end."""
        state, plan = self.state, self.plan
        state.step += 1
        state.epoch_loss_sum += value
        state.epoch_loss_steps += 1
        state.epoch, position = divmod(state.step, plan.steps_per_epoch)
        state.position = min(position * plan.batch_size, plan.units or plan.pair_count)
        if position == 0:
            mean = state.epoch_loss_sum / state.epoch_loss_steps
            state.epoch_losses.append(mean)
            state.epoch_loss_sum, state.epoch_loss_steps = 0.0, 0
            logger.info("epoch %d/%d: mean loss %.4f", epoch + 1, plan.epochs, mean)

    def checkpoint_due(self, stopped: bool) -> bool:
        """Whether to save now: every ``checkpoint_every`` steps, at the end, or on a stop."""
        step = self.state.step
        return step % self.plan.checkpoint_every == 0 or step == self.plan.total_steps or stopped

    def run(self, progress: bool) -> None:
        """Step until the run is done or ``stop_after`` steps are, saving checkpoints."""
        plan, state = self.plan, self.state
        order: list[int] = []
        order_epoch = -1
        with tqdm(
            total=plan.total_steps,
            initial=state.step,
            desc=f"train {plan.kind}",
            unit="step",
            file=sys.stderr,
            disable=not progress,
            dynamic_ncols=True,
        ) as bar:
            while state.step < plan.total_steps:
                epoch, index = divmod(state.step, plan.steps_per_epoch)
                if epoch != order_epoch:
                    lengths = (
                        [len(f["input_ids"]) for f in self.features]
                        if plan.group_by_length and self.groups is None
                        else None
                    )
                    units = plan.units or plan.pair_count
                    order = epoch_order(units, plan.seed, epoch, lengths, plan.batch_size)
                    order_epoch = epoch
                value = self.step(order[index * plan.batch_size : (index + 1) * plan.batch_size])
                self.record(value, epoch)
                bar.update(1)
                bar.set_postfix(loss=f"{value:.4f}", epoch=epoch + 1)
                stopped = plan.stop_after is not None and state.step >= plan.stop_after
                if self.checkpoint_due(stopped):
                    save_checkpoint(
                        plan.out_dir, self.backend, self.optimizer, self.scheduler, state
                    )
                if stopped and state.step < plan.total_steps:
                    logger.info(
                        "stopping at step %d of %d (stop_after)", state.step, plan.total_steps
                    )
                    break
