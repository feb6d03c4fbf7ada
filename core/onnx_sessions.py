"""onnxruntime sessions' options, shared by every local model crag runs on onnxruntime."""

from __future__ import annotations

from typing import Any


def session_options(threads: int) -> Any:
    """Session options: ``threads`` intra-op threads, one inter-op, every optimization.

    The threads wait passively (no spinning) unless ``OMP_WAIT_POLICY`` is ``ACTIVE``, the rule
    crag applies to torch's threads (:mod:`crag.generator`): with one of 2 cores busy, a reply
    took a median 0.79 s spinning and 0.48 s not; on quiet cores 0.35 s and 0.40 s (six
    generate-node prompts, two rounds, 2026-12-02, load 1.3-1.7; the tokens were the same on
    one thread and two, spinning or not).
    """
    import os

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    spinning = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "ACTIVE"
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return options


def intra_op_threads() -> int:
    """The session's threads: ``OMP_NUM_THREADS`` when set, else 0 (onnxruntime's default).

    onnxruntime's default is one per physical core, the count torch starts with; read without
    importing torch, which a preload on another thread must not do.
    """
    import os

    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else 0
