"""Per-node wall-clock time of graph runs, from LangChain callbacks.

LangGraph runs each node as a chain whose run name is the node's name and whose metadata
carries ``langgraph_node``; the timer records the time between that chain's start and end.
Nodes of parallel branches overlap, so their times add up to more than the run's wall time.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

STAGES: dict[str, str] = {
    "retrieve": "retrieve",
    "grade": "grade",
    "decide_action": "grade",
    "refine": "refine",
    "pass_passages": "refine",
    "rewrite_query": "rewrite",
    "transform_query": "rewrite",
    "web_search": "search",
    "decide_answer": "generate",
    "generate": "generate",
    "abstain": "generate",
}
"""Graph node → reported stage (the action trigger counts with grading; RAG's hand-over of
passages with refinement, which it replaces; the answer-or-abstain decision and the abstention
with generation, the answer step they stand for)."""

STAGE_ORDER: tuple[str, ...] = ("retrieve", "grade", "refine", "rewrite", "search", "generate")
"""The stages, in the order a run passes them."""


class StageTimer(BaseCallbackHandler):
    """Sums the seconds spent in each graph node of the runs it is attached to.

    Pass it in ``config={"callbacks": [timer]}``; read :attr:`node_seconds` or
    :meth:`stage_seconds` afterwards, and :meth:`reset` between runs.
    """

    def __init__(self) -> None:
        """Start with no timings."""
        super().__init__()
        self._lock = threading.Lock()
        self._open: dict[UUID, tuple[str, float]] = {}
        self.node_seconds: defaultdict[str, float] = defaultdict(float)

    def reset(self) -> None:
        """Forget every timing."""
        with self._lock:
            self._open.clear()
            self.node_seconds.clear()

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Open a timing when a chain is a graph node."""
        name = kwargs.get("name")
        if name and metadata and metadata.get("langgraph_node") == name:
            with self._lock:
                self._open[run_id] = (str(name), time.perf_counter())

    def _close(self, run_id: UUID) -> None:
        ended = time.perf_counter()
        with self._lock:
            opened = self._open.pop(run_id, None)
            if opened is not None:
                self.node_seconds[opened[0]] += ended - opened[1]

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the node's timing."""
        self._close(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Close the node's timing (a failed node still took its time)."""
        self._close(run_id)

    def stage_seconds(self) -> dict[str, float]:
        """Seconds per reported stage (see :data:`STAGES`); unknown nodes count as ``other``."""
        stages: defaultdict[str, float] = defaultdict(float)
        with self._lock:
            for node, seconds in self.node_seconds.items():
                stages[STAGES.get(node, "other")] += seconds
        return dict(stages)
