"""A model server's failures as one line each: what happened, at which endpoint, never the key.

The OpenAI client raises its own exceptions (and ``langchain-openai`` wraps some of them); this
module reads them once, in one place: which ones are worth retrying and after how long (the
server's ``Retry-After``), and how each reads to a person (:func:`describe`).

A server's own words are quoted only as a short excerpt (:func:`excerpt`): on one line, without
control characters, without the key as far as it can be recognised, and never after a refusal
of credentials (401, 403, 407), whose body may echo the key in any disguise.
"""

from __future__ import annotations

import base64
import email.utils
import json
import math
import re
import ssl
import time
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from crag.generator.endpoint_config import EndpointConfig, EndpointError

if TYPE_CHECKING:
    import httpx

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""Statuses that say "not now": the request is sent again (after ``Retry-After``)."""

CREDENTIAL_STATUSES = frozenset({401, 403, 407})
"""Refusals of credentials: nothing of their body is quoted (it may echo the key, transformed)."""

BACKOFF_SECONDS = 0.5
"""First wait before a retry the server gave no ``Retry-After`` for; doubled each time."""

MAX_BACKOFF_SECONDS = 8.0
"""Longest wait without a ``Retry-After``."""

EXCERPT_CHARS = 120
"""Most characters of a server's own words quoted in an error."""

_READ_CHARS = 4000
"""Characters of a server's words read at all (to classify them, and before cutting)."""

_CONTEXT_WORDS = re.compile(
    r"context length|context window|context_length|maximum context|too long|"
    r"exceeds? the (?:available )?context|n_ctx|max_model_len|prompt is too long|"
    r"input tokens exceed",
    re.IGNORECASE,
)
_MODEL_WORDS = re.compile(r"\bmodel\b", re.IGNORECASE)
_HTML_START = re.compile(r"\s*<(?:!doctype\s+html|html|head|body)\b", re.IGNORECASE)
_HTML_ANYWHERE = re.compile(r"<(?:!doctype\s+html|html)\b", re.IGNORECASE)
_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_NOT_THE_API = "the URL is probably not an OpenAI-compatible /v1 endpoint (CRAG_LLM_BASE_URL)"
_PLAIN_HTTP_TO_TLS = re.compile(
    r"HTTP request (?:was sent )?to (?:an )?HTTPS (?:server|port)", re.IGNORECASE
)  # nginx's and Go's 400 to plain HTTP on a TLS port
_TLS_TO_PLAIN_HTTP = frozenset(
    {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL"}
)
"""OpenSSL's reasons when the server answered a TLS greeting in plain HTTP."""


def quiet_serializer_warnings() -> None:
    """Keep pydantic's serializer warnings, about a reply of the wrong shape, off the terminal.

    The OpenAI client builds a streamed chunk without checking it and ``langchain-openai``
    serializes it, so a chunk such as ``{"choices": 5}`` makes pydantic warn (a path into
    site-packages, a repr of the value) before the reading fails; that failure is reported as
    one line by :func:`describe`, which is all the user needs. The filter is the process's (a
    warning is filtered where it is shown), and lets every other warning through.
    """
    warnings.filterwarnings(
        "ignore",
        message="Pydantic serializer warnings",
        category=UserWarning,
        module=r"pydantic\.main",
    )


quiet_serializer_warnings()


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a failed request, where the server answered."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def retry_after(exc: BaseException, now: float | None = None) -> float | None:
    """Seconds the server asked to wait (``Retry-After``/``retry-after-ms``), if it said.

    A value that is neither a number of seconds nor an HTTP date (``soon``, ``inf``) counts as
    not given: the request is retried after the usual back-off.
    """
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    millis = _seconds(headers.get("retry-after-ms"), per_second=1000.0)
    if millis is not None:
        return millis
    raw: str | None = headers.get("retry-after")
    if raw is None:
        return None
    seconds = _seconds(raw)
    return seconds if seconds is not None else _seconds_until(raw, now)


def _seconds(raw: str | None, per_second: float = 1.0) -> float | None:
    """``raw`` read as a finite, non-negative number of seconds; ``None`` if it is not one."""
    if raw is None:
        return None
    try:
        value = float(raw) / per_second
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None


def _seconds_until(date: str, now: float | None) -> float | None:
    """Seconds from ``now`` to the HTTP date ``date``; ``None`` if it is not a date."""
    try:
        parsed = email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:  # "-0000": HTTP dates are in GMT
        parsed = parsed.replace(tzinfo=UTC)
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
    else for an exponential back-off; a connection that could not be made backs off too, unless
    TLS failed (that is a setting, which no retry mends).

    Not the OpenAI client's own retries (``max_retries``, which also read ``Retry-After`` and
    ``retry-after-ms``; openai 2.x, ``_base_client``): they are switched off
    (:mod:`crag.generator.endpoint`) because they retry inside one call, so the error that
    comes out cannot say how many tries were made, how long they took, nor what the server
    asked (:func:`describe_status`); each try gets the whole timeout instead of sharing one
    deadline (:func:`crag.generator.endpoint_loop.request` gives up at once when the wait
    would not fit); and they also retry a timeout, a failed TLS handshake, HTTP 409 and every
    5xx, which crag does not.
    """
    status = status_of(exc)
    if status is not None and status not in RETRY_STATUSES:
        return None
    if status is None and (not connection_failure(exc) or _tls_error(exc) is not None):
        return None
    asked = retry_after(exc)
    if asked is not None:
        return asked
    return min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS * 2.0**attempt)


def server_text(exc: BaseException) -> str:
    """The server's own words on a failed request, as it sent them (the key may be in them)."""
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
    return text or str(getattr(exc, "message", "") or exc)


def one_line(text: str) -> str:
    """``text`` on one line: whitespace runs as one space, other unprintable characters dropped.

    Dropped, not shown: an escape sequence would act on the user's terminal, and a key with
    one inserted would slip past :func:`redact`.
    """
    kept = (c if c.isprintable() else " " if c.isspace() else "" for c in text)
    return " ".join("".join(kept).split())


_BASIC_CREDENTIAL = re.compile(r"\b(Basic|Bearer)\s+[A-Za-z0-9+/=._~-]+", re.IGNORECASE)
"""An ``Authorization`` value a server echoes: whatever follows the scheme is a credential."""


def _url_secrets(config: EndpointConfig) -> list[str]:
    """The base URL's userinfo as a server may echo it: plain, percent-encoded, in base64.

    httpx sends a URL's ``user:password`` as HTTP Basic (base64 of ``user:password``), so a
    server quoting the header it got prints the password in base64.
    """
    parts = urlsplit(config.base_url.strip())
    if "@" not in parts.netloc:
        return []
    userinfo = parts.netloc.rpartition("@")[0]
    user, _, password = (unquote(piece) for piece in userinfo.partition(":"))
    pair = f"{user}:{password}"
    forms = [userinfo, pair, base64.b64encode(pair.encode("utf-8")).decode("ascii")]
    if password:
        forms += [password, quote(password, safe="")]
    return [form for form in forms if len(form) >= 3]


def redact(text: str, config: EndpointConfig) -> str:
    """``text`` (on :func:`one_line`) with the API key and any credential replaced by ``***``.

    Any ``Basic``/``Bearer`` credential a server echoes is hidden whatever it holds, and the
    base URL's userinfo in every form httpx sends it (:func:`_url_secrets`). The key verbatim;
    and, for a key of 8 characters or more, in any letter case, percent-encoded, and any word
    holding its first or last 8 characters. Other disguises (spaced out, base64) are not
    looked for: a refusal of credentials, the reply likely to echo the key, is never quoted
    (:data:`CREDENTIAL_STATUSES`), and a quote is short.
    """
    text = _BASIC_CREDENTIAL.sub(lambda found: f"{found.group(1)} ***", text)
    for secret in sorted(_url_secrets(config), key=len, reverse=True):
        text = re.sub(re.escape(secret), "***", text, flags=re.IGNORECASE)
    return _redact_key(text, config)


def _redact_key(text: str, config: EndpointConfig) -> str:
    """``text`` with the API key replaced by ``***`` (see :func:`redact`)."""
    key = one_line(config.api_key.get_secret_value())
    if len(key) < 8:
        return text.replace(key, "***") if key else text
    for form in (key, quote(key, safe=""), quote(key)):
        text = re.sub(re.escape(form), "***", text, flags=re.IGNORECASE)
    pieces = {
        piece.lower() for form in (key, quote(key, safe="")) for piece in (form[:8], form[-8:])
    }
    return " ".join(
        "***" if any(piece in word.lower() for piece in pieces) else word
        for word in text.split(" ")
    )


def excerpt(text: str, config: EndpointConfig) -> str:
    """A server's words as an error quotes them: one line, redacted, :data:`EXCERPT_CHARS` long.

    Cut at a word's end where one is near, so that no part of a word (of a key) is shown.
    """
    line = redact(one_line(text[:_READ_CHARS]), config)
    if len(line) <= EXCERPT_CHARS:
        return line
    cut = line[: EXCERPT_CHARS - 3]
    space = cut.rfind(" ")
    return (cut[:space] if space >= EXCERPT_CHARS // 2 else cut) + "..."


def html_page(text: str, config: EndpointConfig) -> str | None:
    """``an HTML page ('its title')`` if ``text`` is one; ``None`` if it is not."""
    if not _HTML_START.match(text[:_READ_CHARS]):
        return None
    title = _HTML_TITLE.search(text[:_READ_CHARS])
    named = excerpt(title.group(1), config) if title else ""
    return f"an HTML page ({named!r})" if named else "an HTML page"


def refuse_html_pages(config: EndpointConfig) -> Callable[[httpx.Response], Awaitable[None]]:
    """A response hook for an httpx client: an HTML page answering the API stops as one line.

    A web server or proxy at a wrong URL answers 200 with a page, which the OpenAI client would
    read as a stream without events; its headers say what it is. Only a streamed request is
    refused here: a page answering a plain request is read and named by its title
    (:func:`describe`). Give it to the client as
    ``event_hooks={"response": [refuse_html_pages(config)]}``.
    """

    async def refuse_html(response: httpx.Response) -> None:
        content_type = response.headers.get("content-type", "")
        media_type = content_type.split(";")[0].strip().lower()
        if response.is_success and media_type in _HTML_TYPES and _asks_to_stream(response.request):
            raise EndpointError(
                f"the model server {config.where} replied with an HTML page ({content_type}), "
                f"not an event stream: {_NOT_THE_API}",
                "malformed",
            )

    return refuse_html


def _asks_to_stream(request: httpx.Request) -> bool:
    """Whether ``request`` is a chat completion asked for as a stream of events."""
    try:
        sent = json.loads(request.content or b"{}")
    except (ValueError, TypeError, RuntimeError):  # RuntimeError: a body not read (a stream)
        return False
    return isinstance(sent, dict) and sent.get("stream") is True


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it, outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _tls_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS failure behind a connection failure, if TLS is what failed."""
    return next((e for e in _chain(exc) if isinstance(e, ssl.SSLError)), None)


def _tls_failure(error: ssl.SSLError, config: EndpointConfig) -> EndpointError:
    """The error for a TLS handshake that failed: which side lacks TLS, or whose certificate."""
    where = f"the model server {config.where}"
    if isinstance(error, ssl.SSLCertVerificationError):
        why = error.verify_message or "certificate verify failed"
        return EndpointError(
            f"{where}: its TLS certificate is not trusted ({why}): "
            "point SSL_CERT_FILE at the certificate of the authority that signed it",
            "unreachable",
        )
    reason = str(error.reason or "")
    said = f"TLS handshake failed ({reason.lower().replace('_', ' ') or one_line(str(error))})"
    if reason in _TLS_TO_PLAIN_HTTP:
        said += f": is the server plain HTTP? try {config.where_with_scheme('http')}"
    return EndpointError(f"{where}: {said}", "unreachable")


def _cause_words(exc: BaseException) -> str:
    """What the network layer said of a connection failure (refused, name not found, ...)."""
    for seen in _chain(exc):
        text = str(seen).lower()
        if isinstance(seen, ConnectionRefusedError) or "refused" in text:
            return "refused the connection (is it running?)"
        if "name or service not known" in text or "nodename nor servname" in text:
            return "cannot be found (unknown host name)"
    return "cannot be reached"


def _connection_failure(exc: BaseException, config: EndpointConfig) -> EndpointError:
    """The error for a request that got no answer: TLS, a hang-up, or no connection at all."""
    where = f"the model server {config.where}"
    tls = _tls_error(exc)
    if tls is not None:
        return _tls_failure(tls, config)
    if _closed_early(exc):
        hint = ""
        if config.where.startswith("http://"):  # a TLS server hangs up on plain HTTP
            hint = f" (if it speaks HTTPS, try {config.where_with_scheme('https')})"
        return EndpointError(
            f"{where} closed the connection before answering{hint}", "disconnected"
        )
    return EndpointError(f"{where} {_cause_words(exc)}", "unreachable")


def _refused_credentials(where: str, status: int) -> EndpointError:
    """The error for a 401, 403 or 407: what to check, and nothing of what the server said."""
    if status == 407:
        return EndpointError(
            f"a proxy on the way to {where} wants credentials (HTTP 407): "
            "check HTTP_PROXY, HTTPS_PROXY and NO_PROXY",
            "auth",
        )
    return EndpointError(
        f"{where} refused the API key (HTTP {status}): check CRAG_LLM_API_KEY", "auth"
    )


def _wrong_address(
    text: str, config: EndpointConfig, status: int, said: str
) -> EndpointError | None:
    """The error for an answer from something other than the API: an HTTPS port, a web page."""
    where = f"the model server {config.where}"
    if status == 400 and config.where.startswith("http://") and _PLAIN_HTTP_TO_TLS.search(text):
        return EndpointError(
            f"{where} speaks HTTPS: try {config.where_with_scheme('https')} "
            f"(it answered HTTP 400: {said})",
            "unreachable",
        )
    page = html_page(text, config)
    if page is not None and status in (404, 405):
        return EndpointError(
            f"{where} answered HTTP {status} with {page}: {_NOT_THE_API}", "malformed"
        )
    return None


def describe_status(
    exc: BaseException, config: EndpointConfig, status: int, tries: int, waited: float
) -> EndpointError:
    """The error for a request the server answered with ``status``."""
    where = f"the model server {config.where}"
    if status in CREDENTIAL_STATUSES:
        return _refused_credentials(where, status)
    text = one_line(server_text(exc)[:_READ_CHARS])
    said = html_page(text, config) or excerpt(text, config)
    wrong = _wrong_address(text, config, status, said)
    if wrong is not None:
        return wrong
    if status == 404 or (status in (400, 422) and _mentions_model(text, config)):
        return EndpointError(
            f"{where} has no model {config.model!r} (HTTP {status}): {said}", "model"
        )
    if status in (400, 413, 422) and _CONTEXT_WORDS.search(text):
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
        return _connection_failure(exc, config)
    if isinstance(exc, json.JSONDecodeError):
        return _not_a_completion(exc.doc, config, quoted=True)
    if isinstance(exc, openai.APIResponseValidationError) or _bad_reply(exc):
        return _not_a_completion(str(exc), config)
    return EndpointError(f"{where} failed: {excerpt(str(exc), config)}", "server")


def malformed(config: EndpointConfig, what: str) -> EndpointError:
    """The error for a reply that is not a chat completion (``what``: what came instead)."""
    return EndpointError(
        f"the model server {config.where} sent a reply that is not the JSON of a chat "
        f"completion: {what}",
        "malformed",
    )


def _not_a_completion(text: str, config: EndpointConfig, *, quoted: bool = False) -> EndpointError:
    """The error for a reply that could not be read: ``text`` is it, or the reader's complaint.

    An HTML page in it (a web server's, a proxy's: ``langchain-openai`` quotes the start of a
    reply it could not read) is named as such; anything else is quoted (in quotes: ``quoted``).
    """
    start = _HTML_ANYWHERE.search(text[:_READ_CHARS])
    page = html_page(text[start.start() :], config) if start else None
    if page is not None:
        return malformed(config, f"{page}: {_NOT_THE_API}")
    shown = excerpt(text, config)
    return malformed(config, repr(shown) if quoted else shown)


def _closed_early(exc: BaseException) -> bool:
    """Whether the server hung up mid-request (it did connect), or reset the connection."""
    for seen in _chain(exc):
        text = str(seen).lower()
        if isinstance(seen, ConnectionResetError) or "connection reset" in text:
            return True
        if "disconnected" in text or "peer closed" in text or "incomplete" in text:
            return True
    return False


def _bad_reply(exc: BaseException) -> bool:
    """Whether parsing the reply failed: not JSON, or JSON of another shape."""
    return isinstance(exc, AttributeError | KeyError | TypeError | ValueError)
