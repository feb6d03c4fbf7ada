"""Build a tiny, randomly initialised T5 evaluator checkpoint, offline, in about a second.

The checkpoint has the layout of a real one (``config.json``, ``model.safetensors``,
``tokenizer.json``, ``tokenizer_config.json``), so it loads through the same code as users'
checkpoints: ``T5Evaluator(str(path))`` or ``load_evaluator("t5", model=str(path))``.
Its scores are random but deterministic, and mostly inside (-1, 1).

Usage in tests::

    from tests.tiny_t5 import build_tiny_t5

    path = build_tiny_t5(tmp_path_factory.mktemp("tiny_t5"))

or from the shell: ``python tests/tiny_t5.py OUT_DIR``.
"""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path
from typing import Any

CORPUS = (
    "Who painted the Mona Lisa?",
    "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci.",
    "Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide "
    "to make sugar and release oxygen.",
    "Paris is the capital and largest city of France, on the river Seine.",
    "The quick brown fox jumps over the lazy dog.",
    "In 1969 Neil Armstrong became the first person to walk on the Moon.",
    "What is the population of Tokyo? How tall is Mount Everest? When did the war end?",
    "Corrective retrieval augmented generation grades retrieved documents before answering.",
)
"""Sentences the tiny tokenizer's vocabulary is trained on."""


def _train_vocab(vocab_size: int) -> list[tuple[str, float]]:
    """Train a tiny Unigram vocabulary with T5's special ids: <pad>=0, </s>=1, <unk>=2."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "</s>", "<unk>"],
        unk_token="<unk>",
        initial_alphabet=list(string.ascii_letters + string.digits + string.punctuation),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(CORPUS) * 4, trainer)
    vocab = json.loads(tokenizer.to_str())["model"]["vocab"]
    return [(str(piece), float(score)) for piece, score in vocab]


def build_tiny_t5(
    path: Path, *, num_labels: int = 1, seed: int = 0, head_scale: float = 0.5
) -> Path:
    """Save a tiny ``T5ForSequenceClassification`` and its tokenizer in ``path``.

    Args:
        path: Output directory (created if missing).
        num_labels: Outputs of the head; the evaluator accepts only 1 (regression).
        seed: Seed for the random weights.
        head_scale: Factor on the output layer's initial weights, to keep logits in (-1, 1).

    Returns:
        ``path``.
    """
    import torch
    from transformers import T5Config, T5ForSequenceClassification, T5Tokenizer

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = T5Tokenizer(vocab=_train_vocab(200), extra_ids=0)
    # Settings PreTrainedConfig takes as **kwargs, which T5Config's typed signature leaves out.
    extra: dict[str, Any] = {
        "num_labels": num_labels,
        "decoder_start_token_id": tokenizer.pad_token_id,
    }
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        dropout_rate=0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **extra,
    )
    torch.manual_seed(seed)
    model = T5ForSequenceClassification(config)
    with torch.no_grad():
        model.classification_head.out_proj.weight.mul_(head_scale)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/tiny_t5.py OUT_DIR")
    print(build_tiny_t5(Path(sys.argv[1])))
