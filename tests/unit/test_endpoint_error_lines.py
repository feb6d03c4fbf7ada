"""How the model server's misbehaviours read: one line, the endpoint named, never the key.

The servers here are **fakes**: tests/model_server.py's FakeModelServer and :class:`PageServer`,
a small http.server that answers every request with one scripted page (any status, content
type and body, over plain HTTP or TLS). No real model server sends an unreadable
``Retry-After``, echoes a transformed key, answers a stream with an HTML page or a chunk of the
wrong shape on demand; the TLS mismatches are real TLS (Python's ``ssl``) on 127.0.0.1.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from pydantic import SecretStr

from crag.generator.endpoint import EndpointChatModel
from crag.generator.endpoint_config import EndpointConfig, EndpointError
from crag.generator.endpoint_errors import (
    EXCERPT_CHARS,
    retry_after,
    retry_delay,
)
from tests.model_server import FakeModelServer, Reply

KEY = "k+/=Q9xZ7mW2pL5vR8tY3nB6"
QUESTION = [HumanMessage("Is the sky blue?")]
HTML = "<!DOCTYPE html><html><head><title>It works!</title></head><body>Hello</body></html>"


@dataclass
class Page:
    """What :class:`PageServer` answers to every request."""

    status: int = 200
    content_type: str = "application/json"
    body: str = "{}"
    headers: dict[str, str] = field(default_factory=dict)


class PageServer:
    """A **fake** server on 127.0.0.1 answering every request with one :class:`Page`."""

    def __init__(self, page: Page, tls: ssl.SSLContext | None = None) -> None:
        self.page = page
        self.connections = 0
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self._server.server_port}/v1"

    def __enter__(self) -> PageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                del format, args

            def setup(self) -> None:
                server.connections += 1
                super().setup()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                server.requests += 1
                page = server.page
                data = page.body.encode("utf-8")
                self.send_response(page.status)
                self.send_header("content-type", page.content_type)
                self.send_header("content-length", str(len(data)))
                for name, value in page.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST

        return Handler


def model_at(url: str, **settings: Any) -> EndpointChatModel:
    values: dict[str, Any] = {"model": "fake", "timeout": 5.0, "max_retries": 2}
    values.update(settings)
    return EndpointChatModel.for_endpoint(EndpointConfig(url, **values), max_new_tokens=8)


def failure(url: str, *, streamed: bool = False, **settings: Any) -> EndpointError:
    """The error a request to ``url`` ends in (streamed as ``crag ask`` does, or not)."""
    model = model_at(url, **settings)
    with pytest.raises(EndpointError) as caught:
        if streamed:
            list(model.stream(QUESTION))
        else:
            model.invoke(QUESTION)
    assert "\n" not in str(caught.value)
    return caught.value


# -- Retry-After that is neither seconds nor an HTTP date -----------------------------------------


def failed_with(headers: dict[str, str], status: int = 429) -> Any:
    """An object shaped as the client's status error (``status_code``, ``response.headers``)."""
    return SimpleNamespace(status_code=status, response=SimpleNamespace(headers=headers))


@pytest.mark.parametrize("value", ["soon", "", "  ", "nan", "inf", "-inf", "1e999", "Mon, 99 Foo"])
def test_an_unreadable_retry_after_counts_as_absent(value: str) -> None:
    assert retry_after(failed_with({"retry-after": value})) is None
    assert retry_after(failed_with({"retry-after-ms": value})) is None
    assert retry_delay(failed_with({"retry-after": value}), 0) == 0.5  # the normal back-off


def test_a_readable_retry_after_is_still_read() -> None:
    assert retry_after(failed_with({"retry-after": "2"})) == 2.0
    assert retry_after(failed_with({"retry-after-ms": "1500", "retry-after": "soon"})) == 1.5
    date = "Wed, 21 Oct 2015 07:28:10 GMT"
    then = datetime.datetime(2015, 10, 21, 7, 28, 0, tzinfo=datetime.UTC).timestamp()
    assert retry_after(failed_with({"retry-after": date}), now=then) == 10.0


def test_retry_after_soon_is_retried_after_the_normal_back_off() -> None:
    soon = Reply(status=429, body='{"error": "slow down"}', headers={"Retry-After": "soon"})
    with FakeModelServer(soon, Reply(text="Blue.")) as server:
        start = time.monotonic()
        reply = model_at(server.base_url).invoke(QUESTION)
        took = time.monotonic() - start
    assert reply.text == "Blue."
    assert len(server.requests) == 2
    assert took >= 0.45  # the first back-off, 0.5 s


def test_busy_with_retry_after_soon_gives_up_in_one_line_naming_the_server() -> None:
    soon = Reply(status=503, body='{"error": "busy"}', headers={"Retry-After": "soon"})
    with FakeModelServer(default=soon) as server:
        error = failure(server.base_url, max_retries=1)
    assert error.kind == "busy"
    assert server.base_url in str(error) and "HTTP 503" in str(error)
    assert "asked to retry" not in str(error) and "soon" not in str(error)
    assert len(server.requests) == 2


# -- the key, however the server's words transform it ---------------------------------------------

TRANSFORMS = {
    "url-encoded": urllib.parse.quote(KEY, safe=""),
    "upper-cased": KEY.upper(),
    "its tail": KEY[-12:],
    "spaced out": " ".join(KEY),
    "base64": base64.b64encode(KEY.encode()).decode(),
    "an ESC inside": KEY[:10] + "\x1b" + KEY[10:],
}


def leaks(message: str, echoed: str) -> bool:
    """Whether ``message`` holds 6 characters in a row of the key or of its echo."""
    return any(text[i : i + 6] in message for text in (KEY, echoed) for i in range(len(text) - 5))


def refusal(echoed: str) -> str:
    return json.dumps({"error": {"message": f"Invalid credentials: {echoed}"}})


@pytest.mark.parametrize("status", [401, 403, 407])
@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_a_refusal_of_credentials_quotes_nothing_of_the_body(status: int, transform: str) -> None:
    echoed = TRANSFORMS[transform]
    with FakeModelServer(default=Reply(status=status, body=refusal(echoed))) as server:
        error = failure(server.base_url, api_key=SecretStr(KEY))
    message = str(error)
    assert error.kind == "auth" and f"HTTP {status}" in message and server.base_url in message
    assert "Invalid credentials" not in message  # the body is not quoted at all
    assert not leaks(message, echoed), message
    assert len(server.requests) == 1


def test_a_407_names_the_proxy_settings() -> None:
    with FakeModelServer(default=Reply(status=407, body="{}")) as server:
        error = failure(server.base_url)
    assert "proxy" in str(error) and "HTTPS_PROXY" in str(error)


@pytest.mark.parametrize("status", [400, 500])
@pytest.mark.parametrize(
    "echoed", [KEY, json.dumps(KEY)[1:-1], KEY.upper(), KEY[-12:], TRANSFORMS["an ESC inside"],
               urllib.parse.quote(KEY, safe="")],
    ids=["verbatim", "json-quoted", "upper-cased", "its tail", "an ESC inside", "url-encoded"],
)  # fmt: skip
def test_other_statuses_quote_the_body_without_the_key(status: int, echoed: str) -> None:
    body = json.dumps({"error": {"message": f"bad request from {echoed} (see logs)"}})
    with FakeModelServer(default=Reply(status=status, body=body)) as server:
        message = str(failure(server.base_url, api_key=SecretStr(KEY), max_retries=0))
    assert "bad request from" in message  # the server's words are quoted, the key is not
    assert not leaks(message, echoed), message


def test_the_quoted_body_is_short_and_has_no_control_characters() -> None:
    words = "\x1b[2J\x1b]0;owned\x07 line one\r\nline\ttwo \u202e\u200b" + "blah " * 400
    body = json.dumps({"error": {"message": words}})
    with FakeModelServer(default=Reply(status=400, body=body)) as server:
        message = str(failure(server.base_url))
    quoted = message.split("HTTP 400: ", 1)[1]
    assert len(quoted) <= EXCERPT_CHARS
    assert quoted.startswith("[2J]0;owned line one line two blah")
    assert all(c.isprintable() for c in message)


def test_a_long_context_refusal_is_still_recognised_past_the_quoted_part() -> None:
    words = "Invalid request. " + "Detail. " * 30 + "This model's maximum context length is 2048."
    body = json.dumps({"object": "error", "message": words})
    with FakeModelServer(default=Reply(status=400, body=body)) as server:
        error = failure(server.base_url)
    assert error.kind == "context"


# -- a reply of the wrong shape: no warning on the terminal ---------------------------------------

STREAM_SCRIPT = """
import sys
from langchain_core.messages import HumanMessage
from crag.generator.endpoint import EndpointChatModel
from crag.generator.endpoint_config import EndpointConfig, EndpointError

model = EndpointChatModel.for_endpoint(EndpointConfig(sys.argv[1], "fake", max_retries=0))
try:
    list(model.stream([HumanMessage("hi")]))
except EndpointError as exc:
    print(exc)
"""


def test_a_chunk_of_the_wrong_shape_prints_one_line_and_no_warning() -> None:
    # In a fresh interpreter, as the CLI runs: pytest's own warning filters stay out of it.
    chunk = 'data: {"choices": 5}\n\ndata: [DONE]\n\n'
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    with PageServer(Page(content_type="text/event-stream", body=chunk)) as server:
        done = subprocess.run(
            [sys.executable, "-c", STREAM_SCRIPT, server.url()],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )  # fmt: skip
    assert "not the JSON of a chat completion" in done.stdout, done.stderr
    assert server.url() in done.stdout
    assert "Warning" not in done.stderr and "site-packages" not in done.stderr, done.stderr


# -- an HTML page where the API should be ---------------------------------------------------------


def test_an_html_page_answering_a_request_is_named_as_such() -> None:
    with PageServer(Page(content_type="text/html; charset=utf-8", body=HTML)) as server:
        error = failure(server.url())
    assert error.kind == "malformed"
    assert "an HTML page" in str(error) and "OpenAI-compatible /v1" in str(error)
    assert "It works!" in str(error)


def test_an_html_page_answering_a_stream_is_named_with_its_content_type() -> None:
    # Without refuse_html_pages the OpenAI client reads the page as a stream of no events.
    with PageServer(Page(content_type="text/html; charset=utf-8", body=HTML)) as server:
        model = model_at(server.url())
        hooks = model.http_async_client.event_hooks["response"]  # type: ignore[union-attr]
        assert any(hook.__name__ == "refuse_html" for hook in hooks)
        with pytest.raises(EndpointError) as caught:
            list(model.stream(QUESTION))
        assert server.requests == 1  # not retried: an HTML page is no passing failure
    message = str(caught.value)
    assert caught.value.kind == "malformed"
    assert message.startswith(f"the model server {server.url()} replied with an HTML page")
    assert "(text/html; charset=utf-8), not an event stream" in message
    assert "OpenAI-compatible /v1" in message


def test_an_event_stream_passes_refuse_html_pages() -> None:
    chunk = json.dumps(
        {"id": "1", "object": "chat.completion.chunk", "created": 0, "model": "fake",
         "choices": [{"index": 0, "delta": {"content": "Blue"}, "finish_reason": "stop"}]}
    )  # fmt: skip
    body = f"data: {chunk}\n\ndata: [DONE]\n\n"
    with PageServer(Page(content_type="text/event-stream", body=body)) as server:
        chunks = list(model_at(server.url()).stream(QUESTION))
    assert "".join(c.text for c in chunks) == "Blue"


def test_a_404_html_page_is_not_called_a_missing_model() -> None:
    page = Page(status=404, content_type="text/html", body="<html><title>404 Not Found</title>")
    with PageServer(page) as server:
        error = failure(server.url())
    assert "has no model" not in str(error)
    assert "HTTP 404" in str(error) and "an HTML page ('404 Not Found')" in str(error)
    assert "OpenAI-compatible /v1" in str(error)


# -- TLS on one side only -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A server context with a self-signed certificate for 127.0.0.1, made now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    folder: Path = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context


@pytest.mark.parametrize("streamed", [False, True])
def test_https_to_a_plain_http_server_names_tls(streamed: bool) -> None:
    with PageServer(Page()) as server:
        error = failure(server.url("https"), streamed=streamed, max_retries=3)
        assert server.requests == 0
    message = str(error)
    assert message.startswith(f"the model server {server.url('https')}: TLS handshake failed")
    assert f"is the server plain HTTP? try {server.url('http')}" in message


def test_https_is_not_retried_against_a_plain_http_server() -> None:
    with PageServer(Page()) as server:
        failure(server.url("https"), max_retries=3)
        assert server.connections == 1  # a retry would not mend the setting


def test_plain_http_to_a_tls_server_suggests_https(tls_context: ssl.SSLContext) -> None:
    with PageServer(Page(), tls=tls_context) as server:
        error = failure(server.url("http"), max_retries=0)
    assert f"if it speaks HTTPS, try {server.url('https')}" in str(error)


def test_an_untrusted_certificate_is_named(tls_context: ssl.SSLContext) -> None:
    with PageServer(Page(), tls=tls_context) as server:
        error = failure(server.url("https"), max_retries=0)
    message = str(error)
    assert "TLS certificate" in message and "self-signed certificate" in message
    assert "try http://" not in message


@pytest.mark.parametrize(
    "words",
    [
        "<html><head><title>400 The plain HTTP request was sent to HTTPS port</title></head>",
        "Client sent an HTTP request to an HTTPS server.\n",
    ],
    ids=["nginx", "go"],
)
def test_a_tls_server_answering_plain_http_with_400_suggests_https(words: str) -> None:
    with PageServer(Page(status=400, content_type="text/plain", body=words)) as server:
        error = failure(server.url("http"))
    assert f"speaks HTTPS: try {server.url('https')}" in str(error)
