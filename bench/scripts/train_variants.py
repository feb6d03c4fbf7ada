"""Train several cross-encoder variants on mined pairs and compare them on the held-apart splits.

Each variant is one ``train_evaluator`` run (the recipe of ``crag-bench evaluator train``) from the
same base model and pairs, with other options: full fine-tuning, the top layers only, LoRA
adapters, frozen embeddings, epochs, learning rate, how many negatives the questions without a
positive keep. Every trained model then scores the ``select`` split (model selection) and the
``measure`` split (the bundled dev questions' first half) of ``crag-bench evaluator mine``, and the
script prints, per variant: training time, trained and stored parameters, and the ranking
figures of :mod:`crag_bench.ranking_figures` (pair AUC, best passage gold, strip recall@5).

Runs on a GPU when there is one (the figures are the same recipe's; times are the GPU's).

Usage:
    .venv/bin/python bench/scripts/train_variants.py --pairs PAIRS_DIR --fanoutqa PAIRS.jsonl \
        --out runs/variants [--variants full,top2,lora16] [--base-model DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import types
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

try:
    import langgraph._internal._runnable  # noqa: F401 - the evaluators' cancellation uses it
except ImportError:  # a bare GPU machine: training needs none of it
    stub = types.ModuleType("langgraph._internal._runnable")
    stub.RunnableCallable = object  # type: ignore[attr-defined]
    for name in ("langgraph", "langgraph._internal"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["langgraph._internal._runnable"] = stub

import torch

from crag_bench.evaluator_training.options import TrainingOptions
from crag_bench.evaluator_training.trainer import train_evaluator
from crag_bench.pair_mining import MinedPair, read_mined, thin_negatives
from crag_bench.pairs import LabelledPair, read_pairs
from crag_bench.ranking_figures import gold_documents, ranking_figures, retriever_scores

logger = logging.getLogger("train_variants")

VARIANTS: dict[str, dict[str, Any]] = {
    "full": {},
    "full-frozen-emb": {"freeze_embeddings": True},
    "top2": {"train_layers": 2},
    "lora16": {"lora_rank": 16, "learning_rate": 2e-4},
    "full-frozen-emb-lr5e-5": {"freeze_embeddings": True, "learning_rate": 5e-5},
    "full-frozen-emb-2ep": {"freeze_embeddings": True, "epochs": 2},
    "full-frozen-emb-2ep-lr5e-5": {"freeze_embeddings": True, "epochs": 2, "learning_rate": 5e-5},
    "full-frozen-emb-3neg": {"freeze_embeddings": True, "negatives": 3},
    "full-frozen-emb-3ep-lr5e-5": {"freeze_embeddings": True, "epochs": 3, "learning_rate": 5e-5},
    "top2-2ep-lr1e-4": {"train_layers": 2, "epochs": 2, "learning_rate": 1e-4},
    "lora16-2ep": {"lora_rank": 16, "learning_rate": 2e-4, "epochs": 2},
    "full-frozen-emb-unbalanced": {"freeze_embeddings": True, "balance": False},
}


def score_folder(folder: Path, pairs: list[MinedPair], device: torch.device) -> list[float]:
    """Raw regression outputs of a trained cross-encoder folder for every pair, clamped."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).to(device).eval()
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i].passage))
    scores = [0.0] * len(pairs)
    batch = 512 if device.type == "cuda" else 64
    with torch.inference_mode():
        for start in range(0, len(order), batch):
            part = order[start : start + batch]
            encoded = tokenizer(
                [pairs[i].question for i in part],
                [pairs[i].passage for i in part],
                truncation="longest_first",
                max_length=256,
                padding=True,
                return_tensors="pt",
            ).to(device)
            values = model(**encoded).logits[:, 0].float().clamp(-1, 1).tolist()
            for i, value in zip(part, values, strict=True):
                scores[i] = value
    return scores


def _stored_parameters(folder: Path, base: Path) -> int:
    """Parameters that differ from the base model (what a delta file must store)."""
    from safetensors.torch import load_file

    trained = load_file(str(folder / "model.safetensors"))
    reference = {
        k.removeprefix("bert."): v for k, v in load_file(str(base / "model.safetensors")).items()
    }
    count = 0
    for key, value in trained.items():
        ref = reference.get(key.removeprefix("bert."))
        if ref is None or ref.shape != value.shape or not torch.equal(ref.to(value.dtype), value):
            count += value.numel()
    return count


def run_variant(
    name: str,
    spec: dict[str, Any],
    data: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Train one variant and measure it."""
    spec = dict(spec)
    negatives = int(spec.pop("negatives", args.negatives))
    train = data["fanoutqa"] + [
        LabelledPair(p.question_id, p.question, p.passage, p.label, p.source, p.rank)
        for p in thin_negatives(data["train"], negatives)
    ]
    options = replace(
        TrainingOptions(
            base_model=args.base_model,
            progress=False,
            resume=False,
            keep_checkpoint=False,
            checkpoint_every=10**9,
            group_by_length=True,
            batch_size=args.batch_size,
        ),
        **spec,
    )
    out = args.out / name
    started = time.perf_counter()
    result = train_evaluator("cross-encoder", train, out, options)
    seconds = time.perf_counter() - started
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    figures = {}
    for split in ("select", "measure"):
        pairs = data[split]
        scores = score_folder(out, pairs, device)
        gold = data["gold"] if split == "measure" else None
        figures[split] = asdict(ranking_figures(pairs, scores, gold))
    report = {
        "variant": name,
        "options": {k: v for k, v in asdict(options).items() if k not in ("progress",)},
        "negatives_without_positive": negatives,
        "train_pairs": len(train),
        "train_positives": sum(1 for p in train if p.label == 1),
        "train_seconds": round(seconds, 1),
        "final_loss": result.final_loss,
        "trained_parameters": result.trainable_parameters,
        "stored_parameters": _stored_parameters(out, Path(args.base_model)),
        "figures": figures,
    }
    logger.info("%s", json.dumps(report))
    return report


def main() -> None:
    """Train and measure the variants named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pairs", type=Path, required=True, help="crag-bench evaluator mine folder"
    )
    parser.add_argument(
        "--fanoutqa", type=Path, help="crag-bench evaluator pairs --split train file"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base-model", required=True, help="the MiniLM folder")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--negatives", type=int, default=1, help="per question without positive")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--limit", type=int, default=0, help="first N pairs of each split (tests)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    def mined(split: str) -> list[MinedPair]:
        pairs = read_mined(args.pairs / f"{split}.jsonl")
        return pairs[: args.limit] if args.limit else pairs

    data: dict[str, Any] = {
        "train": mined("train"),
        "select": mined("select"),
        "measure": mined("measure"),
        "fanoutqa": read_pairs([args.fanoutqa]) if args.fanoutqa else [],
        "gold": gold_documents(),
    }
    baseline = {
        split: asdict(
            ranking_figures(
                data[split],
                retriever_scores(data[split]),
                data["gold"] if split == "measure" else None,
            )
        )
        for split in ("select", "measure")
    }
    reports: list[dict[str, Any]] = [{"variant": "retriever order", "figures": baseline}]
    logger.info("%s", json.dumps(reports[0]))
    for name in args.variants.split(","):
        reports.append(run_variant(name, VARIANTS[name], data, args))
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "variants.json").write_text(json.dumps(reports, indent=2) + "\n")


if __name__ == "__main__":
    main()
