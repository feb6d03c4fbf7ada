"""Ranking figures of evaluators on mined pairs: pair AUC, best passage gold, strip recall@5.

Scores the ``measure`` split of ``crag-bench evaluator mine`` (the first half of the bundled dev
sets: never trained on) with each evaluator as the graph uses it (passages with ``score``,
strips with :func:`crag.evaluator.base.score_strips`, one call per question) and prints the figures
of :mod:`crag_bench.ranking_figures`, beside the retriever's own order. ``--split select``
reads the model-selection split instead. Test sets are never read (mining refuses them).

Usage:
    .venv/bin/python bench/scripts/evaluator_ranking.py --pairs PAIRS_DIR \
        [--model cross-encoder=runs/ce] [--model cross-encoder=] [--prior-only runs/ce] [--json]

``--model cross-encoder=`` (empty path) is the shipped evaluator; ``--prior-only PATH`` scores
with a prior-trained checkpoint's prior map alone (the cross-encoder's correction left out).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from crag.evaluator.base import score_strips
from crag.evaluator.registry import load_evaluator
from crag_bench.pair_mining import MinedPair, read_mined
from crag_bench.ranking_figures import (
    best_passages,
    gold_documents,
    ranking_figures,
    retriever_scores,
    score_mined,
    threshold_meaning,
)

logger = logging.getLogger("evaluator_ranking")


class PriorOnly:
    """A prior-trained checkpoint's prior map alone, as an evaluator."""

    def __init__(self, path: str) -> None:
        """Load the checkpoint's evaluator and keep its prior and embedder."""
        evaluator: Any = load_evaluator("cross-encoder", model=path)
        self.name = "prior only"
        self._inner = evaluator

    def score(self, question: str, texts: list[str]) -> list[float]:
        """``tanh(prior / 2)`` of each text."""
        import numpy as np

        from crag.evaluator.embedding import _unit_rows

        embeddings = self._inner.embeddings
        query = _unit_rows(np.asarray(embeddings.embed_query(question), dtype=np.float64))
        docs = _unit_rows(np.asarray(embeddings.embed_documents(texts), dtype=np.float64))
        logits = self._inner.prior.logits(question, texts, docs @ query)
        values: list[float] = np.tanh(logits / 2.0).tolist()
        return values


def figures_of(
    evaluator: Any, pairs: list[MinedPair], gold: dict[str, frozenset[str]] | None
) -> dict[str, Any]:
    """Score passages and strips as the graph does; the figures and the seconds it took."""
    started = time.perf_counter()
    passages = [p for p in pairs if p.unit == "passage" and p.rank is not None]
    strips = [p for p in pairs if p.unit == "strip" and p.rank is not None]
    passage_scores = score_mined(evaluator.score, passages)
    strip_scores = score_mined(lambda q, t: score_strips(evaluator, q, t), strips)
    figures = asdict(ranking_figures(passages + strips, passage_scores + strip_scores, gold))
    best = best_passages(passages, passage_scores, gold)
    figures["thresholds"] = {
        "upper": {
            f"{t:g}": _meaning(best, t, -2.0, "correct")
            for t in (-0.5, -0.3, -0.1, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
        },
        "lower": {
            f"{t:g}": _meaning(best, 2.0, t, "incorrect")
            for t in (-0.99, -0.97, -0.95, -0.9, -0.85, -0.8, -0.7, -0.6, -0.5)
        },
    }
    figures["seconds"] = round(time.perf_counter() - started, 1)
    figures["pairs"] = len(passages) + len(strips)
    return figures


def _meaning(best: list[tuple[float, bool]], upper: float, lower: float, side: str) -> str:
    """One side of the trigger at one threshold: questions, their share, its precision."""
    m = threshold_meaning(best, upper, lower)
    count = m.correct if side == "correct" else m.incorrect
    precision = m.correct_precision if side == "correct" else m.incorrect_precision
    shown = "-" if precision is None else f"{precision:.2f}"
    return f"{count} ({count / max(1, m.questions):.0%}) precision {shown}"


def main() -> None:
    """Print each evaluator's figures on the split."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pairs", type=Path, required=True, help="crag-bench evaluator mine folder"
    )
    parser.add_argument("--split", default="measure", choices=("measure", "select"))
    parser.add_argument(
        "--model", action="append", default=[], metavar="BACKEND=PATH", help="repeatable"
    )
    parser.add_argument("--prior-only", action="append", default=[], metavar="PATH")
    parser.add_argument("--no-embedding", action="store_true", help="skip the embedding one")
    parser.add_argument("--limit", type=int, default=0, help="first N questions")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    pairs = read_mined(args.pairs / f"{args.split}.jsonl")
    if args.limit:
        keep = list(dict.fromkeys(p.question_id for p in pairs))[: args.limit]
        wanted = set(keep)
        pairs = [p for p in pairs if p.question_id in wanted]
    gold = gold_documents() if args.split == "measure" else None
    report: dict[str, Any] = {
        "retriever order": asdict(ranking_figures(pairs, retriever_scores(pairs), gold))
    }
    evaluators: list[tuple[str, Any]] = []
    if not args.no_embedding:
        evaluators.append(("embedding", load_evaluator("embedding")))
    for path in args.prior_only:
        evaluators.append((f"prior only ({path})", PriorOnly(path)))
    for spec in args.model:
        backend, _, path = spec.partition("=")
        label = f"{backend}={path or 'shipped'}"
        evaluators.append((label, load_evaluator(backend, model=path)))
    for label, evaluator in evaluators:
        logger.info("scoring with %s", label)
        report[label] = figures_of(evaluator, pairs, gold)
        logger.info("%s: %s", label, report[label])
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for label, figures in report.items():
        auc = figures["pair_auc"]
        print(
            f"{label:<48} AUC {auc if auc is None else round(auc, 3)}  "
            f"best passage gold {figures['best_passage_gold']:.3f} "
            f"(of {figures['questions_with_gold']})  strip recall@5 "
            f"{figures['strip_recall_at_5']:.3f} (ceiling {figures['strip_ceiling']:.3f})"
        )


if __name__ == "__main__":
    main()
