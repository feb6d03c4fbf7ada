"""Record what a graph run asked its generator, so another reader can answer the same prompts.

``crag-bench eval --record-prompts`` attaches a :class:`PromptRecorder` to each run and keeps every
chat-model call in the row: the node that made it and its messages. ``crag-bench eval-reader``
(:mod:`crag_bench.reader_swap`) then asks another generator the very same prompts: the
knowledge each pipeline chose is held fixed and only the reader changes. That is how a reader
too slow for these CPUs (a 1.5B model) is measured on a GPU machine that lacks the store, the
evaluator and the simulated web.

``crag-bench eval --prompts-only`` records the prompts without generating any answer
(:class:`PromptsOnlyChatModel` answers every call with an empty reply), for a capture run
whose answers will come from the other reader anyway.
"""

from __future__ import annotations

import threading
from typing import Any, TypedDict
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class RecordedMessage(TypedDict):
    """One message of a recorded prompt."""

    role: str
    """``system``, ``human`` or ``ai`` (LangChain's message types)."""
    content: str


class RecordedCall(TypedDict):
    """One chat-model call of a run."""

    node: str | None
    """The graph node that made the call (``generate``, ``answer_closed_book``, ...)."""
    messages: list[RecordedMessage]


_MESSAGE_TYPES: dict[str, type[BaseMessage]] = {
    "system": SystemMessage,
    "human": HumanMessage,
    "ai": AIMessage,
}


def messages_of(call: RecordedCall) -> list[BaseMessage]:
    """The recorded call's messages as LangChain messages again.

    Raises:
        ValueError: A message has a role other than system, human or ai.
    """
    messages: list[BaseMessage] = []
    for message in call["messages"]:
        kind = _MESSAGE_TYPES.get(message["role"])
        if kind is None:
            raise ValueError(f"recorded message has an unknown role {message['role']!r}")
        messages.append(kind(content=message["content"]))
    return messages


class PromptRecorder(BaseCallbackHandler):
    """Keeps every chat-model prompt of the runs it is attached to, in call order.

    Pass a fresh one in ``config={"callbacks": [...]}`` per run and read :attr:`calls` after.
    The callback fires before LangChain's LLM cache is consulted, so a cached answer is
    recorded too.
    """

    def __init__(self) -> None:
        """Start with no calls."""
        super().__init__()
        self._lock = threading.Lock()
        self.calls: list[RecordedCall] = []

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Record the prompt(s) of one call."""
        node = (metadata or {}).get("langgraph_node")
        with self._lock:
            for prompt in messages:
                self.calls.append(
                    {
                        "node": str(node) if node is not None else None,
                        "messages": [{"role": m.type, "content": m.text} for m in prompt],
                    }
                )


class PromptsOnlyChatModel(BaseChatModel):
    """A generator that writes nothing: every call gets an empty reply at once.

    Only for ``crag-bench eval --prompts-only``, whose runs exist to record the prompts a pipeline
    sends; their answers are never scored.
    """

    @property
    def _llm_type(self) -> str:
        return "crag-prompts-only"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=""))])
