"""Which weights of a cross-encoder a run trains: all, the top layers, or LoRA adapters.

Three ways to fine-tune the same encoder, with different costs to train and to store:

* **full** (the default): every weight;
* **top layers** (``train_layers=N``): the top N transformer layers, the pooler and the head;
  the embeddings and lower layers stay the base model's, so only the trained part needs
  storing and the backward pass stops early;
* **LoRA** (``lora_rank=R``, with ``peft``): rank-R adapters on every attention and
  feed-forward projection and the head in full; merged into the weights when the run ends.

``freeze_embeddings`` keeps the embedding layer (for the MiniLM, half of its 22.7M weights, the
vocabulary) as the base model's in the first two modes: the shipped evaluator's weight file
then holds only what differs from the installed MiniLM.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from crag_bench.evaluator_training.errors import TrainingError

logger = logging.getLogger(__name__)

LORA_TARGETS: tuple[str, ...] = ("query", "key", "value", "dense")
"""Module names of BERT-style projections that get LoRA adapters (attention and feed-forward)."""

HEAD_MODULES: tuple[str, ...] = ("classifier",)
"""The sequence-classification head, trained in full under LoRA."""


def _encoder_parts(model: Any) -> tuple[Any, list[Any]]:
    """The model's embedding module and its list of transformer layers (BERT, MPNet, ...)."""
    base = getattr(model, "base_model", None)
    embeddings = getattr(base, "embeddings", None)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if embeddings is None or layers is None:
        raise TrainingError(
            f"cannot find the embeddings and layers of a {type(model).__name__}; train it in "
            "full (no train_layers, freeze_embeddings or lora_rank)"
        )
    return embeddings, list(layers)


def freeze(model: Any, *, train_layers: int | None, freeze_embeddings: bool) -> tuple[int, int]:
    """Set ``requires_grad`` for a top-layers or frozen-embeddings run.

    Returns:
        ``(trainable, total)`` parameter counts.

    Raises:
        TrainingError: The model's layers cannot be found, or ``train_layers`` exceeds them.
    """
    if train_layers is None and not freeze_embeddings:
        return count_parameters(model)
    embeddings, layers = _encoder_parts(model)
    if train_layers is not None and train_layers > len(layers):
        raise TrainingError(f"train_layers is {train_layers}; the model has {len(layers)} layers")
    frozen_layers = layers[: len(layers) - train_layers] if train_layers is not None else []
    frozen: list[Any] = [*frozen_layers]
    if freeze_embeddings or train_layers is not None:
        frozen.append(embeddings)
    for module in frozen:
        for parameter in module.parameters():
            parameter.requires_grad_(False)
    return count_parameters(model)


def add_lora(model: Any, rank: int, seed: int) -> Any:
    """Wrap ``model`` with rank-``rank`` LoRA adapters (``peft``); the head trains in full.

    Raises:
        TrainingError: ``peft`` is not installed.
    """
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        raise TrainingError(
            "lora_rank needs the package 'peft' (pip install 'crag[train]')"
        ) from exc
    torch.manual_seed(seed)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.1,
        target_modules=list(LORA_TARGETS),
        modules_to_save=list(HEAD_MODULES),
    )
    return get_peft_model(model, config)


def merge_lora(model: Any) -> Any:
    """The plain model with the LoRA adapters merged into its weights (others: unchanged)."""
    merge = getattr(model, "merge_and_unload", None)
    return merge() if callable(merge) else model


def load_adapter(model: Any, checkpoint: Path) -> None:
    """Restore a LoRA run's adapters and head from a checkpoint folder (``save_pretrained``).

    Raises:
        TrainingError: The checkpoint holds no adapter weights.
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    file = checkpoint / "adapter_model.safetensors"
    if not file.is_file():
        raise TrainingError(f"checkpoint {checkpoint} holds no LoRA adapter ({file.name})")
    set_peft_model_state_dict(model, load_file(str(file)))


def count_parameters(model: Any) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts."""
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    return trainable, sum(p.numel() for p in params)
