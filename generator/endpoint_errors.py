"""A model server's failures as one line each: what happened, at which endpoint, never the key.

The OpenAI client raises its own exceptions (and ``langchain-openai`` wraps some of them); this
module reads them once, in one place: which ones are worth retrying and after how long (the
server's ``Retry-After``), and how each reads to a person (:func:`describe`).
"""

from __future__ import annotations

import email.utils
import json
import re
import time

from crag.generator.endpoint_config import EndpointConfig, EndpointError

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""Statuses that say "not now": the request is sent again (after ``Retry-After``)."""

BACKOFF_SECONDS = 0.5
"""First wait before a retry the server gave no ``Retry-After`` for; doubled each time."""

MAX_BACKOFF_SECONDS = 8.0
"""Longest wait without a ``Retry-After``."""

_CONTEXT_WORDS = re.compile(
    r"context length|context window|context_length|maximum context|too long|"
    r"exceeds? the (?:available )?context|n_ctx|max_model_len|prompt is too long|"
    r"input tokens exceed",
    re.IGNORECASE,
)
_MODEL_WORDS = re.compile(r"\bmodel\b", re.IGNORECASE)
_SNIPPET_CHARS = 160


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a failed request, where the server answered."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def retry_after(exc: BaseException, now: float | None = None) -> float | None:
    """Seconds the server asked to wait (``Retry-After``/``retry-after-ms``), if it said."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    millis: str | None = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    raw: str | None = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    parsed = email.utils.parsedate_to_datetime(raw) if raw.strip() else None
    if parsed is None:
        return None
    return max(0.0, parsed.timestamp() - (time.time() if now is None else now))


def connection_failure(exc: BaseException) -> bool:
    """Whether the request failed before any answer: refused, unreachable, reset on connect."""
    import openai

    return isinstance(exc, openai.APIConnectionError) and not isinstance(
        exc, openai.APITimeoutError
    )


def retry_delay(exc: BaseException, attempt: int) -> float | None:
    """How long to wait before trying again after ``exc``; ``None``: do not retry.

    Statuses of :data:`RETRY_STATUSES` wait for the server's ``Retry-After`` where it gave one,
    else for an exponential back-off; a connection that could not be made backs off too.
    """
    status = status_of(exc)
    if status is not None and status not in RETRY_STATUSES:
        return None
    if status is None and not connection_failure(exc):
        return None
    asked = retry_after(exc)
    if asked is not None:
        return asked
    return min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS * 2.0**attempt)


def server_message(exc: BaseException, config: EndpointConfig) -> str:
    """The server's own words on a failed request, cut short, with the key removed."""
    body = getattr(exc, "body", None)
    text = ""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            text = str(inner.get("message") or inner.get("detail") or "")
        elif isinstance(inner, str):
            text = inner
        text = text or str(body.get("detail") or body.get("message") or "")
    elif isinstance(body, str):
        text = body
    if not text:
        text = str(getattr(exc, "message", "") or exc)
    return snippet(redact(text, config))


def redact(text: str, config: EndpointConfig) -> str:
    """``text`` with the API key (and any part of it from its first 8 characters) removed."""
    key = config.api_key.get_secret_value()
    if not key:
        return text
    text = text.replace(key, "***")
    if len(key) >= 8:
        text = re.sub(re.escape(key[:8]) + r"\S*", "***", text)
    return text


def snippet(text: str) -> str:
    """One line of at most :data:`_SNIPPET_CHARS` characters, control characters dropped."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= _SNIPPET_CHARS else line[: _SNIPPET_CHARS - 3] + "..."


def _cause_words(exc: BaseException) -> str:
    """What the network layer said of a connection failure (refused, name not found, ...)."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen).lower()
        if isinstance(seen, ConnectionRefusedError) or "refused" in text:
            return "refused the connection (is it running?)"
        if "name or service not known" in text or "nodename nor servname" in text:
            return "cannot be found (unknown host name)"
        seen = seen.__cause__ or seen.__context__
    return "cannot be reached"


def describe_status(
    exc: BaseException, config: EndpointConfig, status: int, tries: int, waited: float
) -> EndpointError:
    """The error for a request the server answered with ``status``."""
    where = f"the model server {config.where}"
    said = server_message(exc, config)
    if status in (401, 403):
        return EndpointError(
            f"{where} refused the API key (HTTP {status}): check CRAG_LLM_API_KEY", "auth"
        )
    if status == 404 or (status in (400, 422) and _mentions_model(said, config)):
        return EndpointError(
            f"{where} has no model {config.model!r} (HTTP {status}): {said}", "model"
        )
    if status in (400, 413, 422) and _CONTEXT_WORDS.search(said):
        return EndpointError(
            f"{where}: the prompt is longer than the model's context (HTTP {status}): {said}; "
            "set CRAG_LLM_CONTEXT_LENGTH to the served context so that crag fits its prompts",
            "context",
        )
    if status in RETRY_STATUSES:
        after = retry_after(exc)
        asked = f", asked to retry after {after:g} s" if after is not None else ""
        what = "is busy" if status in (429, 503) else "failed"
        return EndpointError(
            f"{where} {what} (HTTP {status}{asked}): gave up after {tries} "
            f"{'try' if tries == 1 else 'tries'} in {waited:.1f} s (CRAG_LLM_TIMEOUT "
            f"{config.timeout:g} s, CRAG_LLM_MAX_RETRIES {config.max_retries}): {said}",
            "busy" if status in (429, 503) else "server",
        )
    return EndpointError(f"{where} answered HTTP {status}: {said}", "server")


def _mentions_model(said: str, config: EndpointConfig) -> bool:
    """Whether a 400/422 is about the model name.

    It quotes the name, or says "model ... not found" (transformers serve: "Server is pinned
    to 'A'; requested 'B'").
    """
    lowered = said.lower()
    name = config.model.lower()
    if any(f"{q}{name}{q}" in lowered for q in ("'", '"', "`")):
        return True
    return bool(_MODEL_WORDS.search(said)) and "not found" in lowered


def describe(
    exc: BaseException,
    config: EndpointConfig,
    *,
    tries: int = 1,
    waited: float = 0.0,
    tokens: int = 0,
) -> EndpointError:
    """One line for ``exc``, a failed request to ``config``'s server.

    Args:
        exc: What the client raised (or :class:`TimeoutError` for the deadline).
        config: The endpoint, named in the message (without credentials; the key never).
        tries: How many times the request was sent.
        waited: Seconds spent on it, retries included.
        tokens: Tokens of the answer already received (a stream cut short).
    """
    import openai

    if isinstance(exc, EndpointError):
        return exc
    where = f"the model server {config.where}"
    status = status_of(exc)
    if status is not None:
        return describe_status(exc, config, status, tries, waited)
    if isinstance(exc, TimeoutError | openai.APITimeoutError):
        return EndpointError(
            f"{where} did not answer within {config.timeout:g} s (CRAG_LLM_TIMEOUT)", "timeout"
        )
    if tokens and isinstance(exc, openai.APIConnectionError | OSError):
        return EndpointError(
            f"{where} closed the connection mid-answer, after {tokens} "
            f"{'token' if tokens == 1 else 'tokens'}",
            "disconnected",
        )
    if isinstance(exc, openai.APIConnectionError):
        if _closed_early(exc):
            return EndpointError(f"{where} closed the connection before answering", "disconnected")
        return EndpointError(f"{where} {_cause_words(exc)}", "unreachable")
    if isinstance(exc, json.JSONDecodeError):
        return malformed(config, f"{snippet(redact(exc.doc, config))!r}")
    if isinstance(exc, openai.APIResponseValidationError) or _bad_reply(exc):
        return malformed(config, snippet(redact(str(exc), config)))
    return EndpointError(f"{where} failed: {snippet(redact(str(exc), config))}", "server")


def malformed(config: EndpointConfig, what: str) -> EndpointError:
    """The error for a reply that is not a chat completion (``what``: what came instead)."""
    return EndpointError(
        f"the model server {config.where} sent a reply that is not the JSON of a chat "
        f"completion: {what}",
        "malformed",
    )


def _closed_early(exc: BaseException) -> bool:
    """Whether the server hung up mid-request (it did connect)."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen).lower()
        if "disconnected" in text or "peer closed" in text or "incomplete" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _bad_reply(exc: BaseException) -> bool:
    """Whether parsing the reply failed: not JSON, or JSON of another shape."""
    return isinstance(exc, AttributeError | KeyError | TypeError | ValueError)
