"""Progress events that nodes emit on LangGraph's ``custom`` stream.

Every event is a flat JSON object naming the node and the event, e.g.
``{"node": "grade", "event": "scored", "passages": 10, "best": 0.83}``. Callers see them with
``stream_mode="custom"`` (``graph.stream``, ``graph.astream``, the server's ``runs.stream``);
``crag ask`` prints them on stderr. Outside a streamed run they go nowhere.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from langgraph.types import StreamWriter

logger = logging.getLogger(__name__)

ProgressEvent = dict[str, Any]
"""One progress event: ``node``, ``event`` and the event's own fields."""


class ProgressRuntime(Protocol):
    """What :func:`emit` needs of a node's runtime (a ``langgraph.runtime.Runtime`` has it)."""

    @property
    def stream_writer(self) -> StreamWriter:
        """LangGraph's writer for the run's ``custom`` stream (a no-op when not streamed)."""
        ...


def emit(runtime: ProgressRuntime, node: str, event: str, **fields: Any) -> None:
    """Send one progress event for ``node`` to the run's ``custom`` stream.

    Uses ``runtime.stream_writer``: LangGraph's writer for the current run, a no-op when the
    run is not streamed with ``"custom"`` (and in a ``Runtime`` built outside a run). A failing
    writer never fails the node.
    """
    payload: ProgressEvent = {"node": node, "event": event, **fields}
    logger.debug("progress %s", payload)
    try:
        runtime.stream_writer(payload)
    except Exception:  # progress is best effort
        logger.debug("could not emit progress event %s", payload, exc_info=True)
