"""Logistic regression for the embedding evaluator's score maps, with scikit-learn.

``bench/scripts/fit_embedding_calibration.py`` (the passage map) and
``bench/scripts/fit_strip_calibration.py`` (the strip map) fit their constants with
:func:`fit_logistic`. The intercept is fitted as a weight of a constant feature, so that the L2
penalty weighs on it too, as it did when the shipped maps were fitted (scikit-learn's own
intercept goes unpenalised).
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression


def fit_logistic(
    x: np.ndarray,
    t: np.ndarray,
    *,
    l2: float = 0.0,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Weights ``(features..., intercept)`` of ``P(t=1 | x) = sigmoid(w x + b)``.

    Minimises the (weighted) log loss summed over the examples plus ``l2 / 2`` times the
    squared norm of every weight, the intercept included.

    Args:
        x: One row of features per example.
        t: The 0/1 targets.
        l2: Weight of the L2 penalty (0: maximum likelihood).
        weights: One weight per example (default 1 each): a weighted likelihood, e.g. to
            give both classes the same total weight.
    """
    design = np.hstack([x, np.ones((len(x), 1))])
    model = LogisticRegression(
        C=np.inf if l2 == 0 else 1.0 / l2,
        fit_intercept=False,
        solver="newton-cholesky",
        tol=1e-12,
        max_iter=200,
    )
    model.fit(design, np.asarray(t).astype(int), sample_weight=weights)
    return np.asarray(model.coef_[0], dtype=float)
