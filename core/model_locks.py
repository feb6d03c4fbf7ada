"""One lock per shared model, process-wide: concurrent runs call each model one at a time.

Every model is loaded once per process and shared by all runs (the LangGraph server runs
several at once, each node on a worker thread). Whoever calls a shared model holds its lock,
taken with :func:`crag.core.cancellation.holding` so that a cancelled run stops waiting for it.
"""

from __future__ import annotations

import threading

_model_locks: dict[str, threading.Lock] = {}
_model_locks_guard = threading.Lock()


def model_lock(key: str) -> threading.Lock:
    """The process-wide lock serialising calls to the model ``key`` (created on first use).

    Keys: ``"embedder:NAME"`` for a sentence embedder (the store's and the ``embedding``
    evaluator's), ``"evaluator:NAME:MODEL"`` for the other evaluators.
    """
    with _model_locks_guard:
        lock = _model_locks.get(key)
        if lock is None:
            lock = _model_locks[key] = threading.Lock()
        return lock
