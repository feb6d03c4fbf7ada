"""Check that the shipped evaluator is what the documented commands make.

Two checks, the second optional (it trains for about 75 minutes on two CPU cores):

1. the pair files (``crag-bench evaluator mine`` and ``crag-bench evaluator pairs --split
   train`` output, in the order training read them) have the digest recorded in
   ``evaluator/weights/crag-evaluator-minilm.json``: mining reproduces the training data;
2. ``--retrain``: ``crag-bench evaluator train`` with the recorded options on those pairs gives
   weights whose scores on the pairs' first questions match the shipped evaluator's (the
   shipped file is float16, and thread counts change float sums: a tolerance, not equality).

Usage:
    .venv/bin/python bench/scripts/check_shipped_evaluator.py pairs/train.jsonl \
        pairs/fanoutqa-train.jsonl [--retrain --out runs/ce-check]
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crag.evaluator.shipped import DELTA_METADATA_FILE
from crag_bench.evaluator_training.data import pairs_digest
from crag_bench.pairs import LabelledPair, read_pairs

logger = logging.getLogger("check_shipped_evaluator")

SCORE_TOLERANCE = 0.05
"""Largest score difference allowed between the shipped and the retrained evaluator."""


def retrain_and_compare(
    pairs: Sequence[LabelledPair], metadata: dict[str, Any], out: Path
) -> float:
    """Train with the recorded options; the largest score difference on 200 pairs."""
    from crag.evaluator.registry import load_evaluator
    from crag_bench.evaluator_training import TrainingOptions, train_evaluator

    options = TrainingOptions(
        epochs=int(metadata["epochs"]),
        batch_size=int(metadata["batch_size"]),
        learning_rate=float(metadata["learning_rate"]),
        max_length=int(metadata["max_length"]),
        seed=int(metadata["seed"]),
        balance=bool(metadata["balance"]),
        train_layers=metadata.get("train_layers"),
        freeze_embeddings=bool(metadata.get("freeze_embeddings")),
        lora_rank=int(metadata.get("lora_rank") or 0),
        prior=metadata.get("prior") is not None,
        group_by_length=bool(metadata.get("group_by_length")),
    )
    train_evaluator("cross-encoder", pairs, out, options)
    shipped = load_evaluator("cross-encoder")
    retrained = load_evaluator("cross-encoder", model=str(out))
    worst = 0.0
    for pair in pairs[:200]:
        a = shipped.score(pair.question, [pair.passage])[0]
        b = retrained.score(pair.question, [pair.passage])[0]
        worst = max(worst, abs(a - b))
    return worst


def main() -> None:
    """Run the checks; exit non-zero on a mismatch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="+", type=Path, help="the training pair files, in order")
    parser.add_argument("--retrain", action="store_true", help="also train and compare scores")
    parser.add_argument("--out", type=Path, default=Path("runs/ce-check"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    metadata = json.loads(DELTA_METADATA_FILE.read_text(encoding="utf-8"))
    pairs = read_pairs(args.pairs)
    digest = pairs_digest(pairs)
    if digest != metadata.get("pairs_sha256"):
        raise SystemExit(
            f"the pairs' digest {digest} is not the shipped evaluator's "
            f"{metadata.get('pairs_sha256')}: mining does not reproduce its training data"
        )
    logger.info("pairs reproduced: %d pairs, sha256 %s", len(pairs), digest)
    if args.retrain:
        worst = retrain_and_compare(pairs, metadata, args.out)
        if worst > SCORE_TOLERANCE:
            raise SystemExit(f"retrained scores differ by up to {worst:.3f}")
        logger.info("retrained: scores within %.3f of the shipped evaluator's", worst)


if __name__ == "__main__":
    main()
