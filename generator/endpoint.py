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

A reply is bounded by what was asked for, whatever the server sends: reading stops (and the
connection closes) once the answer runs past ``max_tokens`` by the estimate, with slack
(:func:`reply_allowance`), and no reply may take more than :data:`MAX_REPLY_BYTES`. A reply
that is no answer fails as the server's other failures do, one line naming the endpoint: a
tool call instead of text, no choices, a stream that ends without a finish reason.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, ClassVar

import httpx
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_openai.chat_models.base import BaseChatOpenAI
from pydantic import PrivateAttr, SecretStr

from crag.generator.endpoint_config import EndpointConfig, EndpointError
from crag.generator.endpoint_errors import excerpt, refuse_html_pages
from crag.generator.endpoint_loop import (
    close_stream,
    request,
    run_cancellable,
    stream,
    stream_cancellable,
)
from crag.net.guarded_transport import (
    AsyncGuardedTransport,
    ReplyRefusedError,
    ReplyTooLargeError,
    UnaskedEncodingError,
)

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
"""Longest the context-length probe may take, all its requests together (and never longer
than ``llm_timeout``)."""

PROBE_BYTES = 1 << 20
"""Largest model list (or ``/props``) the context-length probe reads; past it, it gives up."""

MAX_REPLY_BYTES = 8 << 20
"""Largest reply read from the server, stream or body: an answer of thousands of tokens takes
a few hundred kilobytes even as server-sent events."""

REPLY_SLACK = 3.0
"""How far past the ``max_tokens`` asked for a reply may run, by the estimate, before crag stops
reading it: the estimate counts 1.3 times a tokenizer's tokens for English, twice and more for
long words."""

REPLY_EXTRA = 16
"""Tokens, and events, a reply may take beyond ``max_tokens * REPLY_SLACK`` (role and finish
events, a short reply's rounding)."""

DEFAULT_MAX_TOKENS = 1024
"""The bound of a reply when no ``max_tokens`` was asked for."""

_CHOICELESS = "crag_choiceless"
"""A streamed chunk's ``generation_info`` key: its event had no ``choices``."""


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


class ProbeGaveUpError(Exception):
    """The context-length probe stopped reading: the server's answer was too long or too slow."""


async def _read_json(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Any:
    """The JSON at ``url``, read up to :data:`PROBE_BYTES`.

    Raises:
        ProbeGaveUpError: The body is longer than that (the connection is closed unread).
    """
    body = bytearray()
    async with client.stream("GET", url, headers=headers) as response:
        async for part in response.aiter_bytes():  # decoded: counted here too
            body += part
            if len(body) > PROBE_BYTES:
                raise ProbeGaveUpError(f"its answer is over {PROBE_BYTES >> 20} MiB")
    return json.loads(bytes(body))


def _gave_up(refusal: ReplyRefusedError) -> ProbeGaveUpError:
    if isinstance(refusal, UnaskedEncodingError):
        return ProbeGaveUpError(f"its answer is compressed as {refusal.encoding!r}")
    return ProbeGaveUpError(f"its answer is over {PROBE_BYTES >> 20} MiB")


def _probe_client(config: EndpointConfig) -> httpx.AsyncClient:
    """The probe's client: no compression, answers cut at :data:`PROBE_BYTES` on the wire."""
    return httpx.AsyncClient(
        timeout=config.timeout,
        transport=AsyncGuardedTransport(PROBE_BYTES, refused=_gave_up),
        headers={"Accept-Encoding": "identity"},
        auth=config.basic_auth,
    )


async def _ask_context_length(config: EndpointConfig) -> int | None:
    """``GET {base_url}/models``, then llama.cpp's ``GET /props``: the first length stated."""
    key = config.api_key.get_secret_value()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    base = config.request_url.rstrip("/")
    async with _probe_client(config) as client:
        listed = await _read_json(client, f"{base}/models", headers)
        entries = [e for e in listed.get("data", []) if isinstance(e, dict)]
        mine = [e for e in entries if e.get("id") == config.model] or entries[:1]
        found = _context_from_entry(mine[0]) if mine else None
        if found is not None:
            return found
        props = await _read_json(client, f"{base.removesuffix('/v1')}/props", headers)
    n_ctx = props.get("default_generation_settings", {}).get("n_ctx")
    return n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None


def server_context_length(config: EndpointConfig) -> int | None:
    """What the server says of ``config.model``'s context length; ``None`` if it says nothing.

    Reads ``GET {base_url}/models`` (the entry whose id is the model, or the only one), then
    llama.cpp's ``GET /props`` (the context it was started with): on the requests' loop, so
    that a cancelled run abandons it at once, within one deadline of :data:`PROBE_SECONDS`
    (at most ``llm_timeout``) and reading at most :data:`PROBE_BYTES` of each answer.

    Raises:
        RunCancelledError: The calling run was cancelled meanwhile.
    """
    seconds = min(PROBE_SECONDS, config.timeout)

    async def probe() -> int | None:
        async with asyncio.timeout(seconds):
            return await _ask_context_length(config)

    try:
        return run_cancellable(probe())
    except (TimeoutError, ProbeGaveUpError) as exc:
        why = str(exc) or f"no answer within {seconds:g} s"
        logger.warning(
            "model server %s: gave up asking its context length (%s); prompts are not fitted "
            "to it: set CRAG_LLM_CONTEXT_LENGTH",
            config.where,
            why,
        )
    except Exception as exc:  # noqa: BLE001 - any failure: the length stays unknown
        logger.info(
            "model server %s did not say its context length (%s)",
            config.where,
            excerpt(str(exc), config) or type(exc).__name__,
        )
    return None


def reply_allowance(max_tokens: int | None) -> int:
    """Tokens (by :func:`estimate_tokens`), and events, a reply of ``max_tokens`` may take."""
    asked = max_tokens if max_tokens and max_tokens > 0 else DEFAULT_MAX_TOKENS
    return math.ceil(asked * REPLY_SLACK) + REPLY_EXTRA


def clip_to_tokens(text: str, tokens: float) -> str:
    """The start of ``text`` that :func:`estimate_tokens` counts as at most ``tokens``."""
    room = max(0, math.floor(tokens * BYTES_PER_TOKEN))
    data = text.encode("utf-8")
    return text if len(data) <= room else data[:room].decode("utf-8", "ignore")


def _refused(config: EndpointConfig, refusal: ReplyRefusedError) -> EndpointError:
    """The one line for a reply the client stopped reading: too large, or compressed."""
    if isinstance(refusal, UnaskedEncodingError):
        what = f"a reply compressed as {refusal.encoding!r}, which crag did not ask for"
    elif isinstance(refusal, ReplyTooLargeError):
        what = f"a reply of more than {refusal.limit >> 20} MiB; crag stopped reading it"
    else:
        what = f"a reply crag refused ({refusal})"
    return EndpointError(f"the model server {config.where} sent {what}", "malformed")


def _capped_client(config: EndpointConfig) -> httpx.AsyncClient:
    """The HTTP client of the chat model: every reply capped, on the wire and decoded.

    Its transport (:class:`~crag.net.guarded_transport.AsyncGuardedTransport`, without address
    checks: the operator chose the server) asks for no compression, refuses a compressed reply
    unread (a gzip or zstd body would be inflated whole as httpx reads it) and stops reading a
    body past :data:`MAX_REPLY_BYTES`. An HTML page answering (a web server or proxy at a wrong
    URL) is refused first (:func:`~crag.generator.endpoint_errors.refuse_html_pages`).
    """
    transport = AsyncGuardedTransport(
        MAX_REPLY_BYTES, refused=functools.partial(_refused, config), max_connections=100
    )
    hooks = [refuse_html_pages(config)]  # a web page at the URL: one line, not "empty"
    return httpx.AsyncClient(
        timeout=config.timeout,
        transport=transport,
        headers={"Accept-Encoding": "identity"},
        auth=config.basic_auth,  # the URL's user:password, kept out of the logged URL
        event_hooks={"response": hooks},
    )


def _no_text(config: EndpointConfig, what: str) -> EndpointError:
    """The error for a reply that holds no answer (``what``: what it held instead)."""
    return EndpointError(f"the model server {config.where} {what}", "malformed")


def _is_tool_call(message: BaseMessage) -> bool:
    """Whether ``message`` calls a tool (or a legacy function) instead of answering."""
    if not isinstance(message, AIMessage):
        return False
    return bool(
        message.tool_calls
        or message.invalid_tool_calls
        or (isinstance(message, AIMessageChunk) and message.tool_call_chunks)
        or message.additional_kwargs.get("function_call")
        or message.additional_kwargs.get("tool_calls")
    )


class _StreamedReply:
    """What a streamed reply has shown so far, and whether crag reads any more of it."""

    def __init__(self, config: EndpointConfig, max_tokens: int | None) -> None:
        self.config = config
        self.allowance = reply_allowance(max_tokens)
        self.text_bytes = 0
        self.events = 0
        self.texts = 0
        self.with_choices = False
        self.tool_call = False
        self.finished = False
        self.cut = False

    def take(self, chunk: ChatGenerationChunk) -> ChatGenerationChunk | None:
        """``chunk`` as passed on (its text clipped to what is left), or ``None``: none is.

        The text is counted as one (:func:`estimate_tokens` of all of it so far): a token an
        event is a few bytes, each of which an estimate of its own would round up.
        """
        info = dict(chunk.generation_info or {})
        self.events += 1
        self.with_choices |= not info.pop(_CHOICELESS, False)
        self.tool_call |= _is_tool_call(chunk.message)
        self.finished |= bool(info.get("finish_reason"))
        text = chunk.text
        room = math.floor(self.allowance * BYTES_PER_TOKEN) - self.text_bytes
        if len(text.encode("utf-8")) > room:
            text = clip_to_tokens(text, room / BYTES_PER_TOKEN)
            self.cut = True
        if text != chunk.text or info != (chunk.generation_info or {}):
            message = chunk.message.model_copy(update={"content": text})
            chunk = ChatGenerationChunk(message=message, generation_info=info or None)
        self.text_bytes += len(text.encode("utf-8"))
        self.texts += bool(text)
        self.cut |= self.events >= self.allowance  # events without text, without end
        return chunk if text or not self.cut else None

    def check_end(self) -> None:
        """At the end of the stream: whether it was an answer, else the error it was.

        Raises:
            EndpointError: A tool call instead of text, no choices, or an unfinished stream.
        """
        if self.cut:
            logger.warning(
                "model server %s: the reply ran past the %d tokens allowed (max_tokens with "
                "slack); crag stopped reading it there",
                self.config.where,
                self.allowance,
            )
            return
        if self.tool_call and not self.texts:
            raise _no_text(self.config, "replied with a tool call, not text")
        if not self.with_choices:
            raise _no_text(self.config, "replied with no choices")
        if not self.finished:
            raise EndpointError(
                f"the model server {self.config.where} closed the connection mid-answer, "
                f"after {self.texts} {'token' if self.texts == 1 else 'tokens'} "
                "(the stream ended without a finish reason)",
                "disconnected",
            )


async def bounded_reply(
    config: EndpointConfig, chunks: AsyncIterator[ChatGenerationChunk], max_tokens: int | None
) -> AsyncIterator[ChatGenerationChunk]:
    """The chunks of a streamed reply up to what was asked for (:func:`reply_allowance`).

    Past it, reading stops and the stream is closed (its connection with it); a reply that
    ends is checked to be an answer (:meth:`_StreamedReply.check_end`).
    """
    reply = _StreamedReply(config, max_tokens)
    try:
        async for chunk in chunks:
            passed = reply.take(chunk)
            if passed is not None:
                yield passed
            if reply.cut:
                break
    finally:
        await close_stream(chunks)
    if reply.events:  # an empty stream is the loop's to name
        reply.check_end()


def checked_result(
    config: EndpointConfig, result: ChatResult, max_tokens: int | None
) -> ChatResult:
    """A whole reply if it is an answer, its text clipped to :func:`reply_allowance`.

    Raises:
        EndpointError: No choices, or a tool call instead of text.
    """
    if not result.generations:
        raise _no_text(config, "replied with no choices")
    generation = result.generations[0]
    message = generation.message
    if _is_tool_call(message) and not message.text:
        raise _no_text(config, "replied with a tool call, not text")
    allowance = reply_allowance(max_tokens)
    if estimate_tokens(message.text) <= allowance:
        return result
    logger.warning(
        "model server %s: the reply ran past the %d tokens allowed (max_tokens with slack); "
        "crag cut it there",
        config.where,
        allowance,
    )
    clipped = message.model_copy(update={"content": clip_to_tokens(message.text, allowance)})
    kept = ChatGeneration(message=clipped, generation_info=generation.generation_info)
    return ChatResult(generations=[kept], llm_output=result.llm_output)


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
        key = config.api_key.get_secret_value() or NO_KEY
        model = cls(
            model=config.model,
            base_url=config.request_url,
            api_key=SecretStr(key),
            timeout=config.timeout,
            max_retries=0,  # retried on the requests' loop, within one deadline
            temperature=0,
            max_tokens=max_new_tokens,
            stream_usage=False,
            use_responses_api=False,
            # No per-chunk wait_for: under a fast stream it swallows the cancellation of the
            # one deadline that bounds the whole stream (endpoint_loop.stream).
            stream_chunk_timeout=None,
            http_async_client=_capped_client(config),
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

    def _max_tokens(self, kwargs: dict[str, Any]) -> int | None:
        """The ``max_tokens`` a call asks for: its own, else the model's."""
        limit = kwargs.get("max_tokens", self.max_tokens)
        return limit if isinstance(limit, int) else None

    def _convert_chunk_to_generation_chunk(
        self,
        chunk: dict[str, Any],
        default_chunk_class: type,
        base_generation_info: dict[str, Any] | None,
    ) -> ChatGenerationChunk | None:
        """LangChain's chunk of a streamed event, marked when the event had no ``choices``.

        Such events (usage, a server's extras) carry no answer; a stream of nothing else is
        "no choices" (:class:`_StreamedReply`). A finish reason in an event without a
        ``delta`` (which LangChain skips) is kept: the stream did finish.
        """
        converted = super()._convert_chunk_to_generation_chunk(
            chunk, default_chunk_class, base_generation_info
        )
        choices = chunk.get("choices") or (chunk.get("chunk") or {}).get("choices")
        if converted is not None and not choices:
            converted.generation_info = {**(converted.generation_info or {}), _CHOICELESS: True}
        finish = choices[0].get("finish_reason") if choices else None
        if converted is None and finish:
            converted = ChatGenerationChunk(
                message=AIMessageChunk(content=""), generation_info={"finish_reason": finish}
            )
        return converted

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

        result = run_cancellable(request(self._endpoint, attempt))
        return checked_result(self._endpoint, result, self._max_tokens(kwargs))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """The completion's tokens as the server sends them (cancellable, bounded)."""
        kwargs = self._limits(kwargs)
        config, max_tokens = self._endpoint, self._max_tokens(kwargs)

        def open_stream() -> AsyncIterator[ChatGenerationChunk]:
            chunks = BaseChatOpenAI._astream(self, messages, stop, None, **kwargs)
            return bounded_reply(config, chunks, max_tokens)

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
