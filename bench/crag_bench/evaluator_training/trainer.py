"""Fine-tune a retrieval evaluator on labelled pairs: the paper's regression recipe.

Yan et al. (2024) train their evaluator as a one-logit regression onto labels +1 (the passage
is from the question's gold page) and -1 (it is not) with a mean-squared-error loss. This is a
plain PyTorch loop for that recipe: AdamW, linear warmup then linear decay, gradient clipping,
shuffled minibatches padded to their longest member, optional class balancing, and resumable
checkpoints that reproduce an uninterrupted run.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from crag_bench.evaluator_training.backends import (
    Backend,
    export_model,
    load_backend,
    resolve_base_model,
)
from crag_bench.evaluator_training.checkpoints import (
    TrainerState,
    find_checkpoint,
    load_optimizer_state,
    read_state,
    remove_checkpoint,
    remove_stale,
    restore_rng,
)
from crag_bench.evaluator_training.data import (
    Features,
    Kind,
    check_pairs,
    encode_cross_encoder,
    encode_t5,
    loss_weights,
    pairs_digest,
)
from crag_bench.evaluator_training.errors import TrainingError
from crag_bench.evaluator_training.listwise import fit_correction, question_groups
from crag_bench.evaluator_training.loop import RunPlan, TrainingLoop
from crag_bench.evaluator_training.options import TrainingOptions
from crag_bench.evaluator_training.trainable import (
    add_lora,
    count_parameters,
    freeze,
    load_adapter,
    merge_lora,
)
from crag_bench.pairs import LabelledPair

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    """What a :func:`train_evaluator` call did.

    Attributes:
        out_dir: The output folder (trained model, ``crag_evaluator.json``, ``checkpoint/``).
        steps: Optimizer steps done in the whole run (resumed steps included).
        epochs: Epochs finished.
        final_loss: Mean step loss of the last finished epoch (of the steps so far if none
            finished; NaN if no step ran).
        seconds: Wall time of this call.
        resumed_from_step: Step the run resumed from; ``None`` when it started afresh.
        finished: Whether all epochs ran and the model was written (``False`` after
            :attr:`TrainingOptions.stop_after`).
        epoch_losses: Mean step loss of every finished epoch.
        trainable_parameters: Weights the run trained (LoRA: the adapters and head).
    """

    out_dir: Path
    steps: int
    epochs: int
    final_loss: float
    seconds: float
    resumed_from_step: int | None
    finished: bool
    epoch_losses: tuple[float, ...]
    trainable_parameters: int = 0


def _linear_schedule(step: int, *, warmup: int, total: int) -> float:
    """Learning-rate factor: linear rise over ``warmup`` steps, then linear decay to 0."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return max(0.0, (total - step) / max(1, total - warmup))


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def _deterministic(enabled: bool) -> Iterator[None]:
    """Ask torch for deterministic kernels for the duration (warn where there are none)."""
    if not enabled:
        yield
        return
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn)


def _encode(backend: Backend, pairs: Sequence[LabelledPair], max_length: int) -> list[Features]:
    if backend.kind == "t5":
        assert backend.eos_id is not None and backend.template is not None
        return encode_t5(backend.tokenizer, pairs, max_length, backend.template, backend.eos_id)
    return encode_cross_encoder(backend.tokenizer, pairs, max_length)


def _param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only; biases and norm weights (1-D) are not decayed."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


def _resume_state(
    out_dir: Path, settings: dict[str, Any]
) -> tuple[Path, TrainerState] | tuple[None, None]:
    checkpoint = find_checkpoint(out_dir)
    if checkpoint is None:
        return None, None
    state = read_state(checkpoint)
    if state.settings != settings:
        changed = sorted(
            key
            for key in settings.keys() | state.settings.keys()
            if settings.get(key) != state.settings.get(key)
        )
        raise TrainingError(
            f"the checkpoint in {checkpoint} is of a run with other settings ({', '.join(changed)} "
            "differ), so resuming would not reproduce it; pass resume=False to start over, or "
            "use another out_dir"
        )
    return checkpoint, state


def train_evaluator(
    kind: Kind,
    pairs: Sequence[LabelledPair],
    out_dir: Path,
    options: TrainingOptions | None = None,
) -> TrainResult:
    """Fine-tune a one-logit regression evaluator onto the pairs' +1/-1 labels (MSE).

    Every epoch visits the pairs once in a shuffled order that depends only on ``seed`` and
    the epoch; batches are padded to their longest pair. Every ``checkpoint_every`` steps and
    at the end, a resumable checkpoint goes to ``out_dir/checkpoint`` (see
    :mod:`crag_bench.evaluator_training.checkpoints`); with ``resume`` a run continues from it
    at the exact step and ends with the weights an uninterrupted run would have (on the same
    hardware and thread count). At the end the model, tokenizer and ``crag_evaluator.json`` go to
    ``out_dir``: a cross-encoder folder loads with ``sentence_transformers.CrossEncoder``
    (raw regression output), a T5 folder with :class:`crag.evaluator.t5.T5Evaluator`.

    Args:
        kind: ``"cross-encoder"`` or ``"t5"``.
        pairs: Labelled (question, passage) pairs; both labels must occur.
        out_dir: Output folder (created if missing).
        options: How to train (base model, epochs, batch size, learning rate, ...); default
            ``TrainingOptions()``, the recipe's settings.

    Returns:
        What was done; see :class:`TrainResult`.

    Raises:
        TrainingError: Unknown kind, bad options, empty or one-label pairs, T5 without a
            base model, a base model that is missing or does not load, a checkpoint of other
            settings, or a loss that became NaN.
    """
    started = time.perf_counter()
    options = TrainingOptions() if options is None else options
    options.check(kind)
    positives, negatives = check_pairs(pairs)
    plan = _plan(kind, pairs, Path(out_dir), options)
    run_device = _run_device(options.device)
    remove_stale(plan.out_dir)
    checkpoint, state = (
        _resume_state(plan.out_dir, plan.settings) if options.resume else (None, None)
    )
    loop = _prepare_loop(plan, pairs, run_device, checkpoint, state)
    resumed_from = state.step if checkpoint is not None and state is not None else None
    _log_start(plan, positives, negatives, run_device)
    with _deterministic(options.deterministic):
        loop.run(options.progress)
    if loop.state.step >= plan.total_steps:
        _export(loop, positives, options.keep_checkpoint)
    return _result(loop, time.perf_counter() - started, resumed_from)


def _plan(
    kind: Kind, pairs: Sequence[LabelledPair], out_dir: Path, options: TrainingOptions
) -> RunPlan:
    """The run's plan: the base model found, the learning rate defaulted, the pairs' digest."""
    return RunPlan(
        kind=kind,
        source=resolve_base_model(kind, options.base_model),
        out_dir=out_dir,
        pair_count=len(pairs),
        pairs_sha256=pairs_digest(pairs),
        epochs=options.epochs,
        batch_size=options.batch_size,
        learning_rate=options.learning_rate_for(kind),
        max_length=options.max_length,
        seed=options.seed,
        balance=options.balance,
        warmup_ratio=options.warmup_ratio,
        weight_decay=options.weight_decay,
        max_grad_norm=options.max_grad_norm,
        checkpoint_every=options.checkpoint_every,
        stop_after=options.stop_after,
        train_layers=options.train_layers,
        freeze_embeddings=options.freeze_embeddings,
        lora_rank=options.lora_rank,
        group_by_length=options.group_by_length,
        prior=options.prior,
        loss=options.loss,
        units=len(question_groups(pairs)) if options.loss == "listwise" else 0,
    )


def _result(loop: TrainingLoop, seconds: float, resumed_from: int | None) -> TrainResult:
    state = loop.state
    return TrainResult(
        out_dir=loop.plan.out_dir,
        steps=state.step,
        epochs=len(state.epoch_losses),
        final_loss=_final_loss(state),
        seconds=seconds,
        resumed_from_step=resumed_from,
        finished=state.step >= loop.plan.total_steps,
        epoch_losses=tuple(state.epoch_losses),
        trainable_parameters=loop.trainable_parameters,
    )


def _log_start(plan: RunPlan, positives: int, negatives: int, run_device: torch.device) -> None:
    logger.info(
        "training %s evaluator from %s on %d pairs (%d positive, %d negative%s): %d epochs of "
        "%d steps, batch %d, lr %.3g, on %s",
        plan.kind,
        plan.source,
        plan.pair_count,
        positives,
        negatives,
        ", balanced" if plan.balance else "",
        plan.epochs,
        plan.steps_per_epoch,
        plan.batch_size,
        plan.learning_rate,
        run_device,
    )


def _run_device(device: str | None) -> torch.device:
    """The named device, or CUDA when there is one, else the CPU."""
    try:
        return (
            torch.device(device)
            if device
            else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        )
    except RuntimeError as exc:
        raise TrainingError(f"unknown device {device!r}: {exc}") from exc


def _prepare_loop(
    plan: RunPlan,
    pairs: Sequence[LabelledPair],
    run_device: torch.device,
    checkpoint: Path | None,
    state: TrainerState | None,
) -> TrainingLoop:
    """Seed, load and encode, then set up the optimizer: afresh, or as ``checkpoint`` left it."""
    _seed_everything(plan.seed)
    full_checkpoint = checkpoint if checkpoint is not None and not plan.lora_rank else None
    backend = load_backend(plan.kind, str(full_checkpoint) if full_checkpoint else plan.source)
    trainable = _make_trainable(backend, plan, checkpoint)
    features = _encode(backend, pairs, plan.max_length)
    targets = torch.tensor([float(pair.label) for pair in pairs])
    weights = torch.tensor(loss_weights([pair.label for pair in pairs], plan.balance))
    offsets, prior_map = _prior(plan, pairs)
    try:
        model = backend.model.to(run_device)
    except (RuntimeError, AssertionError) as exc:
        raise TrainingError(f"could not move the model to {run_device}: {exc}") from exc
    model.train()
    optimizer = torch.optim.AdamW(_param_groups(model, plan.weight_decay), lr=plan.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, partial(_linear_schedule, warmup=plan.warmup_steps, total=plan.total_steps)
    )
    if checkpoint is not None and state is not None:
        saved = load_optimizer_state(checkpoint)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        restore_rng(saved["rng"])
        logger.info("resuming %s training from %s at step %d", plan.kind, checkpoint, state.step)
    else:
        remove_checkpoint(plan.out_dir)
        state = TrainerState(0, 0, 0, plan.total_steps, plan.settings)
    return TrainingLoop(
        plan,
        backend,
        model,
        optimizer,
        scheduler,
        features,
        targets,
        weights,
        run_device,
        state,
        trainable,
        offsets,
        prior_map,
        question_groups(pairs) if plan.loss == "listwise" else None,
    )


def _prior(
    plan: RunPlan, pairs: Sequence[LabelledPair]
) -> tuple[torch.Tensor | None, dict[str, float] | None]:
    """A ``prior`` run's per-pair prior logits and fitted map; ``(None, None)`` otherwise."""
    if not plan.prior:
        return None, None
    from crag.vectorstore.embeddings import load_embeddings
    from crag_bench.evaluator_training.prior import (
        fit_prior,
        fitting_rows,
        pair_cosines,
        pair_feature_rows,
        prior_offsets,
    )

    features = pair_feature_rows(pairs, pair_cosines(pairs, load_embeddings()))
    rows = fitting_rows(pairs)
    prior = fit_prior(
        features[rows],
        [pairs[i].label for i in rows],
        loss_weights([pairs[i].label for i in rows], plan.balance),
    )
    offsets = prior_offsets(prior, pairs, features)
    return torch.tensor(offsets, dtype=torch.float32), prior.to_dict()


def _make_trainable(backend: Backend, plan: RunPlan, checkpoint: Path | None) -> int:
    """Freeze what the run does not train, or add LoRA adapters (restored from a checkpoint)."""
    if plan.lora_rank:
        backend.model = add_lora(backend.model, plan.lora_rank, plan.seed)
        if checkpoint is not None:
            load_adapter(backend.model, checkpoint)
        trainable, total = count_parameters(backend.model)
    else:
        trainable, total = freeze(
            backend.model,
            train_layers=plan.train_layers,
            freeze_embeddings=plan.freeze_embeddings,
        )
    logger.info("training %d of %d parameters", trainable, total)
    return trainable


def _export(loop: TrainingLoop, positives: int, keep_checkpoint: bool) -> None:
    """Write the trained model and ``crag_evaluator.json`` to the output folder."""
    plan, state = loop.plan, loop.state
    loop.model.eval()
    correction = fit_correction(loop, plan.seed) if loop.groups is not None else None
    if plan.lora_rank:
        loop.backend.model = merge_lora(loop.backend.model)
    export_model(
        loop.backend,
        plan.out_dir,
        {
            "base_model": plan.source,
            "trained_pairs": plan.pair_count,
            "pairs_sha256": plan.pairs_sha256,
            "positives": positives,
            "epochs": plan.epochs,
            "seed": plan.seed,
            "max_length": plan.max_length,
            "balance": plan.balance,
            "learning_rate": plan.learning_rate,
            "batch_size": plan.batch_size,
            "steps": state.step,
            "final_loss": state.epoch_losses[-1] if state.epoch_losses else None,
            "train_layers": plan.train_layers,
            "freeze_embeddings": plan.freeze_embeddings,
            "lora_rank": plan.lora_rank,
            "group_by_length": plan.group_by_length,
            "loss": plan.loss,
            **({"output": "logit", "prior": loop.prior_map} if loop.prior_map else {}),
            **({"output": "logit", "correction": correction} if correction else {}),
        },
    )
    if not keep_checkpoint:
        remove_checkpoint(plan.out_dir)
    logger.info("trained %s evaluator saved to %s", plan.kind, plan.out_dir)


def _final_loss(state: TrainerState) -> float:
    """The last finished epoch's mean loss, else that of the steps so far, else NaN."""
    if state.epoch_losses:
        return state.epoch_losses[-1]
    if state.epoch_loss_steps:
        return state.epoch_loss_sum / state.epoch_loss_steps
    return math.nan
