"""A LangChain chat model over a GGUF file run by llama.cpp (``llama-cpp-python``).

The shipped SmolLM2 GGUF runs as it is stored (4-bit weights), without the transformers
conversion to floats. On two CPU cores that reads prompts several times faster than the
transformers path, which is what a long benchmark spends its time on. ``llama-cpp-python`` has
no wheel on these machines (it compiles llama.cpp on install, a few minutes), so it is an
optional extra: ``pip install -e '.[llamacpp]'``, then ``generator = "llamacpp"`` (the shipped
SmolLM2 file) or ``"llamacpp:/path/to/model.gguf"``.

Decoding is greedy (temperature 0) and one request runs at a time (a lock: a llama.cpp context
is not thread-safe); consecutive prompts that share a beginning (the system prompt) reuse its
cached keys and values. A cancelled run stops at the next token.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, PrivateAttr

from graph.cancellation import current_token, holding

logger = logging.getLogger(__name__)

_ROLES = {"system": "system", "human": "user", "ai": "assistant"}


class LlamaCppChatModel(BaseChatModel):
    """Greedy chat generation with llama.cpp over a local GGUF file (CPU)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_path: str
    """The GGUF file (its chat template is read from the file's metadata)."""
    max_new_tokens: int = 128
    """Longest reply, in tokens."""
    context_tokens: int = 4096
    """llama.cpp context size: the longest prompt plus reply."""
    threads: int | None = None
    """CPU threads (default: every core this process may use)."""

    _llama: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, context: Any, /) -> None:
        """Load the GGUF file once."""
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ValueError(
                "generator 'llamacpp' needs llama-cpp-python: pip install -e '.[llamacpp]' "
                "(it compiles llama.cpp, a few minutes)"
            ) from exc
        path = Path(self.model_path)
        if not path.is_file():
            raise ValueError(f"no GGUF file at {path}")
        threads = self.threads or len(os.sched_getaffinity(0))
        self._llama = Llama(
            model_path=str(path),
            n_ctx=self.context_tokens,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        logger.info("generator %s loaded in llama.cpp (%d threads)", path.name, threads)

    @property
    def _llm_type(self) -> str:
        return "crag-llamacpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "max_new_tokens": self.max_new_tokens}

    def _completion(
        self, messages: list[BaseMessage], stop: list[str] | None, stream: bool, **kwargs: Any
    ) -> Any:
        chat = [{"role": _ROLES.get(m.type, "user"), "content": m.text} for m in messages]
        return self._llama.create_chat_completion(
            messages=chat,
            max_tokens=int(kwargs.get("max_new_tokens", self.max_new_tokens)),
            temperature=0.0,
            top_k=1,
            stop=list(stop or []),
            stream=stream,
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # tokens are not reported one by one here: LangChain streams through _stream itself
        pieces = [chunk.message.text for chunk in self._stream(messages, stop, None, **kwargs)]
        message = AIMessage(content="".join(pieces).strip())
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        token = current_token()
        with holding(self._lock):
            first = True
            for part in self._completion(messages, stop, stream=True, **kwargs):
                if token is not None:
                    token.raise_if_cancelled()
                piece = part["choices"][0]["delta"].get("content") or ""
                if first:
                    piece = piece.lstrip()
                if not piece:
                    continue
                first = False
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
                if run_manager:
                    run_manager.on_llm_new_token(piece, chunk=chunk)
                yield chunk
        if token is not None:
            token.raise_if_cancelled()
