"""Progress events that nodes emit on LangGraph's ``custom`` stream.

Every event is a flat JSON object naming the node and the event, e.g.
``{"node": "grade", "event": "scored", "passages": 10, "best": 0.83}``. Callers see them with
``stream_mode="custom"`` (``graph.stream``, ``graph.astream``, the server's ``runs.stream``);
``crag ask`` prints them on stderr. Outside a streamed run they go nowhere.
"""

from __future__ import annotations

import logging
from typing import Any

from langgraph.config import get_stream_writer

logger = logging.getLogger(__name__)

ProgressEvent = dict[str, Any]
"""One progress event: ``node``, ``event`` and the event's own fields."""


def emit(runtime: Any, node: str, event: str, **fields: Any) -> None:
    """Send one progress event for ``node`` to the run's ``custom`` stream.

    Uses ``runtime.stream_writer`` (LangGraph's writer for the current run; a no-op when the
    run is not streamed with ``"custom"``). A node called directly with a stand-in runtime that
    has no writer falls back to :func:`langgraph.config.get_stream_writer`, and outside any run
    the event is only logged. A failing writer never fails the node.
    """
    payload: ProgressEvent = {"node": node, "event": event, **fields}
    writer = getattr(runtime, "stream_writer", None)
    if writer is None:
        try:
            writer = get_stream_writer()
        except RuntimeError:  # not inside a graph run
            writer = None
    logger.debug("progress %s", payload)
    if writer is None:
        return
    try:
        writer(payload)
    except Exception:  # progress is best effort
        logger.debug("could not emit progress event %s", payload, exc_info=True)
