"""Logistic regression by Newton's method, for the embedding evaluator's score maps.

``bench/scripts/fit_embedding_calibration.py`` (the passage map) and
``bench/scripts/fit_strip_calibration.py`` (the strip map) fit their constants with
:func:`fit_logistic`.
"""

from __future__ import annotations

import numpy as np


def fit_logistic(
    x: np.ndarray,
    t: np.ndarray,
    *,
    l2: float = 0.0,
    damping: float = 0.0,
    iterations: int = 100,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Weights ``(features..., intercept)`` of ``P(t=1 | x) = sigmoid(w x + b)``.

    Args:
        x: One row of features per example.
        t: The 0/1 targets.
        l2: Weight of the L2 penalty on every weight, the intercept included (0: maximum
            likelihood).
        damping: Added to the Hessian's diagonal only, so that it stays invertible; it slows
            the steps but does not move the optimum.
        iterations: Most Newton steps; it stops earlier once a step is below 1e-10.
        weights: One weight per example (default 1 each): a weighted likelihood, e.g. to
            give both classes the same total weight.
    """
    design = np.hstack([x, np.ones((len(x), 1))])
    sample = np.ones(len(x)) if weights is None else np.asarray(weights, dtype=float)
    w = np.zeros(design.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(design @ w)))
        grad = design.T @ (sample * (p - t)) + l2 * w
        curvature = sample * p * (1 - p)
        hess = design.T @ (design * curvature[:, None]) + (l2 + damping) * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w
