"""Fit the embedding evaluator's cosine-to-score map on FanOutQA ``train`` questions.

Pairs follow the paper's recipe: for each leaf question whose gold Wikipedia page is in the
store, the gold page's passages are positives (+1) and the retrieved top-k passages from other
pages are negatives (-1). A one-feature logistic regression P(+1 | cosine) is fitted by Newton's
method; the evaluator reports 2 P - 1, the expected label. Only ``train`` ids are used to fit;
the same figures are printed for ``dev`` as a check.

Usage: .venv/bin/python scripts/fit_embedding_calibration.py [--store .crag/chroma] [--k 10]
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from evaluation.fanoutqa import leaf_questions, load_split
from vectorstore.embeddings import load_embeddings
from vectorstore.store import open_store


def pairs_for(ids: list[str], store: Any, embeddings: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Cosine similarities and +1/-1 labels for every (leaf question, passage) pair."""
    cosines: list[float] = []
    labels: list[int] = []
    for leaf in leaf_questions(ids):
        gold_source = f"wikipedia:{leaf.gold_title}"
        gold = store.get(where={"source": gold_source}, include=["documents"])
        if not gold["ids"]:
            continue
        hits = store.similarity_search(leaf.question, k=k)
        negatives = [d.page_content for d in hits if d.metadata.get("source") != gold_source]
        texts = list(gold["documents"]) + negatives
        q = np.asarray(embeddings.embed_query(leaf.question))
        p = np.asarray(embeddings.embed_documents(texts))
        cos = p @ q / (np.linalg.norm(p, axis=1) * np.linalg.norm(q))
        cosines.extend(cos.tolist())
        labels.extend([1] * len(gold["ids"]) + [-1] * len(negatives))
    return np.asarray(cosines), np.asarray(labels)


def fit_logistic(x: np.ndarray, y: np.ndarray, iterations: int = 50) -> tuple[float, float]:
    """Maximum-likelihood slope and intercept of P(y=+1 | x) = sigmoid(a x + b)."""
    t = (y > 0).astype(float)
    design = np.stack([x, np.ones_like(x)], axis=1)
    w = np.zeros(2)
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(design @ w)))
        grad = design.T @ (p - t)
        hess = design.T @ (design * (p * (1 - p))[:, None]) + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC by the rank-sum formula."""
    order = scores.argsort()
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def summary(x: np.ndarray, y: np.ndarray, a: float, b: float) -> dict[str, Any]:
    """Pair accuracy at score 0, AUC, and how often positives/negatives pass 0.59 and -0.99."""
    s = np.tanh((a * x + b) / 2)
    return {
        "pairs": len(x),
        "positives": int((y > 0).sum()),
        "auc": round(auc(x, y), 4),
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
    a, b = fit_logistic(x_train, y_train)
    x_dev, y_dev = pairs_for(split["dev"], store, embeddings, args.k)
    print(
        json.dumps(
            {
                "slope": round(a, 4),
                "intercept": round(b, 4),
                "cosine_at_score_0": round(-b / a, 4),
                "cosine_at_score_0.59": round((2 * math.atanh(0.59) - b) / a, 4),
                "train": summary(x_train, y_train, a, b),
                "dev": summary(x_dev, y_dev, a, b),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
