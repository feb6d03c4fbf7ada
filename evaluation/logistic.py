"""Logistic regression by Newton's method, for the embedding evaluator's score maps.

``scripts/fit_embedding_calibration.py`` (the passage map) and ``scripts/fit_strip_calibration.py``
(the strip map) fit their constants with :func:`fit_logistic`.
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
    """
    design = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(design.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(design @ w)))
        grad = design.T @ (p - t) + l2 * w
        hess = design.T @ (design * (p * (1 - p))[:, None]) + (l2 + damping) * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w
