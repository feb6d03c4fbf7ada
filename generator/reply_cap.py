"""How to cap one reply's length, whatever the chat model.

The project's own chat models (the local one and the model server's) take ``max_new_tokens``
per call; LangChain's provider models each name the limit differently, so they are left at
the limit they were built with.
"""

from __future__ import annotations

from typing import Any


def reply_cap(model: Any, tokens: int) -> dict[str, Any]:
    """Keyword arguments for ``model.invoke`` that cap its reply at ``tokens`` (or none)."""
    return {"max_new_tokens": tokens} if getattr(model, "takes_max_new_tokens", False) else {}
