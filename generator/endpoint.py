"""A chat model on the operator's OpenAI-compatible model server (the ``endpoint`` spec).

Ollama, vLLM, llama.cpp's server, LM Studio, TGI and ``transformers serve`` all speak OpenAI's
chat-completions API, so this is ``langchain-openai``'s chat model (its ``BaseChatOpenAI``:
plain chat completions, ``max_tokens`` as these servers read it, never the Responses API),
with what a served graph needs added (:mod:`crag.generator.endpoint_loop`): every request
runs on one event loop where a cancelled run closes its connection, within the server's
in-flight limit, retried after the server's ``Retry-After``, bounded by one timeout, and each
failure is one line naming the endpoint, never the key (:mod:`crag.generator.endpoint_errors`).

Tokens stream as they arrive (LangGraph's ``messages`` mode, ``crag ask``, Studio).
The model's context length is the setting ``llm_context_length``, else what the server says
(vLLM's ``max_model_len``, llama.cpp's ``n_ctx``, LM Studio's ``max_context_length``), else
unknown; prompts are fitted to it by the generate node. Tokens are counted by an estimate
(:func:`estimate_tokens`): the served tokenizer is not at hand, and ``tiktoken`` downloads
its tables at run time, which fails offline.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, ClassVar

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_openai.chat_models.base import BaseChatOpenAI
from pydantic import PrivateAttr, SecretStr

from crag.generator.endpoint_config import EndpointConfig
from crag.generator.endpoint_loop import request, run_cancellable, stream, stream_cancellable

logger = logging.getLogger(__name__)

NO_KEY = "no-key"
"""Sent as the bearer token when no key is set: the OpenAI client needs one, and without it
would fall back to ``OPENAI_API_KEY``, sending a hosted service's key to any server."""

BYTES_PER_TOKEN = 3.0
"""The token estimate's divisor: BPE vocabularies average about 4 bytes of English text a
token, so counting 3 overestimates, which keeps fitted prompts inside the context."""

MESSAGE_TOKENS = 4
"""Tokens a chat template adds around each message (role markers), in the estimate."""

PROBE_SECONDS = 5.0
"""Longest wait for the server's model list when asking it for the context length."""


def estimate_tokens(text: str) -> int:
    """A generous count of the tokens ``text`` takes (UTF-8 bytes / :data:`BYTES_PER_TOKEN`)."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def _context_from_entry(entry: dict[str, Any]) -> int | None:
    """The context length a ``/v1/models`` entry states (vLLM, LM Studio, llama.cpp)."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (
        entry.get("max_model_len"),
        entry.get("context_length"),
        entry.get("max_context_length"),
        entry.get("context_window"),
        (meta or {}).get("n_ctx"),
        (meta or {}).get("n_ctx_train"),
    ):
        if isinstance(value, int) and value > 0:
            return value
    return None


def server_context_length(config: EndpointConfig) -> int | None:
    """What the server says of ``config.model``'s context length; ``None`` if it says nothing.

    Reads ``GET {base_url}/models`` (the entry whose id is the model, or the only one), then
    llama.cpp's ``GET /props`` (the context it was started with).
    """
    import httpx

    key = config.api_key.get_secret_value()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = min(PROBE_SECONDS, config.timeout)
    base = config.base_url.rstrip("/")
    try:
        listed = httpx.get(f"{base}/models", headers=headers, timeout=timeout).json()
        entries = [e for e in listed.get("data", []) if isinstance(e, dict)]
        mine = [e for e in entries if e.get("id") == config.model] or entries[:1]
        found = _context_from_entry(mine[0]) if mine else None
        if found is not None:
            return found
        root = base.removesuffix("/v1")
        props = httpx.get(f"{root}/props", headers=headers, timeout=timeout).json()
        n_ctx = props.get("default_generation_settings", {}).get("n_ctx")
        return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
    except Exception as exc:  # noqa: BLE001 - any failure: the length stays unknown
        logger.info("model server %s did not say its context length (%s)", config.where, exc)
        return None


class EndpointChatModel(BaseChatOpenAI):
    """Chat completions from an OpenAI-compatible server, cancellable and bounded.

    Build it with :meth:`for_endpoint`. ``max_new_tokens`` (the local generator's name) is
    taken as ``max_tokens`` in a call's keyword arguments.
    """

    takes_max_new_tokens: ClassVar[bool] = True
    """A call may cap its reply with ``max_new_tokens`` (:mod:`crag.generator.reply_cap`)."""
    _endpoint: EndpointConfig = PrivateAttr()
    _context_length: int | None = PrivateAttr(default=None)
    _context_known: bool = PrivateAttr(default=False)

    @classmethod
    def for_endpoint(cls, config: EndpointConfig, max_new_tokens: int = 128) -> EndpointChatModel:
        """A greedy chat model on ``config``'s server, answers of at most ``max_new_tokens``."""
        import httpx

        key = config.api_key.get_secret_value() or NO_KEY
        model = cls(
            model=config.model,
            base_url=config.base_url,
            api_key=SecretStr(key),
            timeout=config.timeout,
            max_retries=0,  # retried on the requests' loop, within one deadline
            temperature=0,
            max_tokens=max_new_tokens,
            stream_usage=False,
            use_responses_api=False,
            http_async_client=httpx.AsyncClient(timeout=config.timeout),
        )
        model._endpoint = config
        return model

    @property
    def endpoint(self) -> EndpointConfig:
        """The server this model calls."""
        return self._endpoint

    @property
    def parallel_requests(self) -> int:
        """Requests a caller may send at once (the in-flight limit): the llm evaluator's."""
        return self._endpoint.max_concurrency

    @property
    def context_length(self) -> int | None:
        """Tokens of the served model's context: the setting, else what the server says."""
        if self._endpoint.context_length > 0:
            return self._endpoint.context_length
        if not self._context_known:
            self._context_length = server_context_length(self._endpoint)
            self._context_known = True
        return self._context_length

    def get_num_tokens(self, text: str) -> int:
        """An estimate of ``text``'s tokens (:func:`estimate_tokens`; works offline)."""
        return estimate_tokens(text)

    def get_num_tokens_from_messages(
        self,
        messages: Sequence[BaseMessage],
        tools: Sequence[Any] | None = None,
        *,
        allow_fetching_images: bool = False,
    ) -> int:
        """An estimate of a prompt's tokens: each message's text and its role markers."""
        del tools, allow_fetching_images
        return sum(estimate_tokens(m.text) + MESSAGE_TOKENS for m in messages)

    @staticmethod
    def _limits(kwargs: dict[str, Any]) -> dict[str, Any]:
        """A call's keyword arguments with ``max_new_tokens`` read as ``max_tokens``."""
        limit = kwargs.pop("max_new_tokens", None)
        if limit is not None:
            kwargs["max_tokens"] = limit
        return kwargs

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """One completion, on the requests' loop (cancellable, retried, bounded)."""
        kwargs = self._limits(kwargs)

        async def attempt() -> ChatResult:
            return await BaseChatOpenAI._agenerate(self, messages, stop, None, **kwargs)

        return run_cancellable(request(self._endpoint, attempt))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """The completion's tokens as the server sends them (cancellable, bounded)."""
        kwargs = self._limits(kwargs)

        def open_stream() -> AsyncIterator[ChatGenerationChunk]:
            return BaseChatOpenAI._astream(self, messages, stop, None, **kwargs)

        for chunk in stream_cancellable(lambda: stream(self._endpoint, open_stream)):
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    # The async paths run the sync ones on a worker thread (LangChain's default), so that the
    # client is only ever used on the requests' loop.
    _agenerate = BaseChatModel._agenerate
    _astream = BaseChatModel._astream

    @property
    def _llm_type(self) -> str:
        return "crag-endpoint"
