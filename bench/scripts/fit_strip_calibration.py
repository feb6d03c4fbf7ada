"""Fit the embedding evaluator's strip calibration on the open-domain ``dev`` questions.

For each question of the dev sets (``nq-dev``, ``trivia-dev``; never a test set) the top-k
passages are retrieved from the bundled store and decomposed into strips exactly as refinement
does (one sentence each, under the passage heading). A strip is positive when it states a gold
answer (the benchmark's whole-token match on the strip's text without its heading) and negative
otherwise. A logistic regression P(positive | features) is fitted by Newton's method on three
per-strip features: cosine similarity to the question, "the question names the heading", and
the share of the question's content words in the strip. The script prints the constants for
``evaluator/embedding.py`` and, per set, how often one of the five best strips states the answer
under the passage map and under the fitted strip map (fitted on the other set, so that figure
is not measured on the questions it was fitted on).

Usage: .venv/bin/python bench/scripts/fit_strip_calibration.py [--store .crag/chroma] [--limit 200]
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import numpy as np

from crag.evaluator.embedding import (
    DEFAULT_HEADING_WEIGHT,
    DEFAULT_OVERLAP_WEIGHT,
    DEFAULT_SLOPE,
    DEFAULT_STRIP_HEADING_WEIGHT,
    DEFAULT_STRIP_INTERCEPT,
    DEFAULT_STRIP_OVERLAP_WEIGHT,
    DEFAULT_STRIP_SLOPE,
    _unit_rows,
    pair_features,
)
from crag.knowledge.strips import decompose
from crag.knowledge.words import heading_of
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.store import open_store, retrieve
from crag_bench.answers import answer_in_text
from crag_bench.datasets import load_dataset
from crag_bench.held_out import refuse_held_out
from crag_bench.logistic import fit_logistic

logger = logging.getLogger("fit_strip_calibration")

DEV_SETS = ("nq-dev", "trivia-dev")
KEPT = 5
CHECK_TOLERANCE = 1e-3
"""How far ``--check`` lets a refitted constant be from the shipped one (printing rounds to 4)."""
L2 = 1e-2
"""The strip map's light L2 penalty (weights and intercept)."""


def strips_of(name: str, limit: int, store: Any, embeddings: Any, k: int) -> list[np.ndarray]:
    """Per question: rows of (cosine, heading named, overlap, label) for its strips."""
    questions = load_dataset(name)[:limit]
    refuse_held_out((q.id for q in questions), "fit")
    cases: list[np.ndarray] = []
    for index, question in enumerate(questions):
        if index % 50 == 0:
            logger.info("%s: %d of %d questions", name, index, len(questions))
        documents = retrieve(store, question.question, k)
        strips = [strip for doc in documents for strip in decompose(doc["text"])]
        if not strips:
            continue
        query = np.asarray(embeddings.embed_query(question.question), dtype=np.float64)
        vectors = np.asarray(embeddings.embed_documents(strips), dtype=np.float64)
        cosines = _unit_rows(vectors) @ _unit_rows(query)
        bodies = [strip.partition("\n")[2] if heading_of(strip) else strip for strip in strips]
        labels = [float(answer_in_text(question.answers, body)) for body in bodies]
        cases.append(np.column_stack([pair_features(question.question, strips, cosines), labels]))
    return cases


def kept_recall(cases: list[np.ndarray], logit: Any) -> float:
    """Share of questions where one of the ``KEPT`` best-scored strips states the answer."""
    hits = 0
    for rows in cases:
        order = np.argsort(-logit(rows[:, :3]), kind="stable")[:KEPT]
        hits += bool(rows[order, 3].any())
    return hits / len(cases) if cases else 0.0


def main() -> None:
    """Fit on both dev sets; report each set under the passage map and a cross-fitted map."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default=".crag/chroma")
    parser.add_argument("--collection", default="crag")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument(
        "--limit", type=int, default=200, help="questions per dev set (the shipped map: 200)"
    )
    parser.add_argument(
        "--check", action="store_true", help="fail unless the fit gives the shipped constants"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    embeddings = load_embeddings()
    store = open_store(args.store, args.collection, embeddings, create=False)
    sets = {name: strips_of(name, args.limit, store, embeddings, args.k) for name in DEV_SETS}

    def passage_map(x: np.ndarray) -> np.ndarray:
        return np.asarray(
            DEFAULT_SLOPE * x[:, 0]
            + DEFAULT_HEADING_WEIGHT * x[:, 1]
            + DEFAULT_OVERLAP_WEIGHT * x[:, 2]
        )

    for name, cases in sets.items():
        others = np.vstack([rows for other, c in sets.items() if other != name for rows in c])
        w = fit_logistic(others[:, :3], others[:, 3], l2=L2)
        logger.info(
            "%s: %d questions; answer among the %d best strips: passage map %.3f, strip map "
            "fitted on the other set %.3f",
            name,
            len(cases),
            KEPT,
            kept_recall(cases, passage_map),
            kept_recall(cases, lambda x, w=w: x @ w[:3] + w[3]),
        )
    every = np.vstack([rows for cases in sets.values() for rows in cases])
    w = fit_logistic(every[:, :3], every[:, 3], l2=L2)
    logger.info("strips: %d, stating an answer: %d", len(every), int(every[:, 3].sum()))
    print(f"DEFAULT_STRIP_SLOPE: float = {w[0]:.4f}")
    print(f"DEFAULT_STRIP_HEADING_WEIGHT: float = {w[1]:.4f}")
    print(f"DEFAULT_STRIP_OVERLAP_WEIGHT: float = {w[2]:.4f}")
    print(f"DEFAULT_STRIP_INTERCEPT: float = {w[3]:.4f}")
    if args.check:
        shipped = np.asarray(
            [
                DEFAULT_STRIP_SLOPE,
                DEFAULT_STRIP_HEADING_WEIGHT,
                DEFAULT_STRIP_OVERLAP_WEIGHT,
                DEFAULT_STRIP_INTERCEPT,
            ]
        )
        if not np.allclose(w, shipped, atol=CHECK_TOLERANCE):
            raise SystemExit(f"the shipped strip map {shipped} is not what this fit gives")
        logger.info("the shipped strip map is reproduced (within %g)", CHECK_TOLERANCE)


if __name__ == "__main__":
    main()
