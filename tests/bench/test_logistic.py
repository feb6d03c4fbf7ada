"""The logistic fit behind the embedding evaluator's score maps (``crag_bench.logistic``)."""

import numpy as np

from crag_bench.logistic import fit_logistic


def _data(n: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """Features and 0/1 targets drawn from the model with weights (2, -1) and intercept 0.5."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 2))
    p = 1.0 / (1.0 + np.exp(-(x @ np.array([2.0, -1.0]) + 0.5)))
    return x, (rng.random(n) < p).astype(float)


def _gradient(x: np.ndarray, t: np.ndarray, w: np.ndarray, l2: float) -> np.ndarray:
    design = np.hstack([x, np.ones((len(x), 1))])
    p = 1.0 / (1.0 + np.exp(-(design @ w)))
    return np.asarray(design.T @ (p - t) + l2 * w)


def test_maximum_likelihood_recovers_the_generating_weights() -> None:
    x, t = _data()
    w = fit_logistic(x, t)
    assert w.shape == (3,)
    assert np.allclose(w, [2.0, -1.0, 0.5], atol=0.15)
    assert np.abs(_gradient(x, t, w, 0.0)).max() < 1e-6


def test_l2_penalty_is_minimised_and_shrinks_the_weights() -> None:
    x, t = _data()
    plain = fit_logistic(x, t)
    penalised = fit_logistic(x, t, l2=100.0)
    assert np.abs(_gradient(x, t, penalised, 100.0)).max() < 1e-6
    assert np.linalg.norm(penalised) < np.linalg.norm(plain)
