"""Fit an embedding evaluator passage map on FanOutQA ``train`` questions (the earlier map).

The map that ships is fitted on the open-domain dev sets by ``fit_passage_calibration.py``;
this one (cosine and heading only) is kept to compare with on FanOutQA's questions.

Pairs follow the paper's recipe: for each leaf question whose gold Wikipedia page is in the
store, the gold page's passages are positives (+1) and the retrieved top-k passages from other
pages are negatives (-1). A logistic regression P(+1 | features) is fitted by Newton's method on
two per-pair features: the question-passage cosine, and whether the question names the
passage's heading. The evaluator reports 2 P - 1, the expected label. Only ``train`` ids are
used to fit; the same figures are printed for ``dev`` as a check.

Usage: .venv/bin/python bench/scripts/fit_embedding_calibration.py [--store .crag/chroma] [--k 10]
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from crag.knowledge.words import heading_named
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.store import open_store
from crag_bench.fanoutqa import load_split
from crag_bench.logistic import fit_logistic
from crag_bench.pairs import pairs_from_cases, retrieval_cases


def pairs_for(ids: list[str], store: Any, embeddings: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Features (cosine, heading named) and +1/-1 labels for every (question, passage) pair."""
    rows: list[list[float]] = []
    labels: list[int] = []
    cases = [c for c in retrieval_cases(ids, store, k) if c.gold_passages]
    for case in cases:
        pairs = pairs_from_cases([case])
        q = np.asarray(embeddings.embed_query(case.question.question))
        p = np.asarray(embeddings.embed_documents([pair.passage for pair in pairs]))
        cos = p @ q / (np.linalg.norm(p, axis=1) * np.linalg.norm(q))
        rows += [
            [float(c), heading_named(pair.question, pair.passage)]
            for c, pair in zip(cos, pairs, strict=True)
        ]
        labels += [pair.label for pair in pairs]
    return np.asarray(rows), np.asarray(labels)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by the rank-sum formula."""
    order = scores.argsort()
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def summary(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> dict[str, Any]:
    """Pair accuracy at score 0, AUC, and how often positives/negatives pass 0.59 and -0.99."""
    z = x @ w[:-1] + w[-1]
    s = np.tanh(z / 2)
    return {
        "pairs": len(x),
        "positives": int((y > 0).sum()),
        "auc": round(auc(z, y), 4),
        "accuracy_at_0": round(float(((s > 0) == (y > 0)).mean()), 4),
        "positives_above_0.59": round(float((s[y > 0] > 0.59).mean()), 4),
        "negatives_above_0.59": round(float((s[y < 0] > 0.59).mean()), 4),
        "negatives_below_-0.99": round(float((s[y < 0] < -0.99).mean()), 4),
    }


def main() -> None:
    """Fit on train, report on train and dev, print the constants."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", default=".crag/chroma")
    parser.add_argument("--collection", default="crag")
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    embeddings = load_embeddings()
    store = open_store(args.store, args.collection, embeddings, create=False)
    split = load_split()
    x_train, y_train = pairs_for(split["train"], store, embeddings, args.k)
    w = fit_logistic(x_train, (y_train > 0).astype(float))
    a, h, b = (float(v) for v in w)
    x_dev, y_dev = pairs_for(split["dev"], store, embeddings, args.k)
    report = {
        "DEFAULT_SLOPE": round(a, 4),
        "DEFAULT_HEADING_WEIGHT": round(h, 4),
        "DEFAULT_INTERCEPT": round(b, 4),
        "cosine_at_score_0.59_heading_not_named": round((2 * math.atanh(0.59) - b) / a, 4),
        "cosine_at_score_0.59_heading_named": round((2 * math.atanh(0.59) - b - h) / a, 4),
        "train": summary(x_train, y_train, w),
        "dev": summary(x_dev, y_dev, w),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
