"""Model servers the tests start on 127.0.0.1: a real one, and a fake for what it cannot do.

:func:`transformers_serve` runs ``transformers serve`` (the ``transformers[serving]`` extra, a
dev dependency) over the shipped SmolLM2 folder: a real OpenAI-compatible server, offline.

:class:`FakeModelServer` is a **fake**: a small HTTP server that answers from a script, for
what no real server produces on demand: 429 and 503 with ``Retry-After``, a reply that is not
JSON, a 401, a context-length refusal, an answer that never comes; and the misbehaving
streams: one without end, one closed cleanly mid-answer, an event of megabytes, a tool call
instead of text, a model list sent one byte at a time or of many megabytes. It also
counts the requests in flight at once and notices a client that hangs up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from crag_bench.dev_server import HOST, free_port, stop_process_group
from tests.server_support import wait_until_up

STARTUP_TIMEOUT = 120.0


@dataclass
class ModelServer:
    """A running ``transformers serve``."""

    port: int
    model: str
    """The model name requests must send: the served folder's path."""
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    def env(self, **extra: str) -> dict[str, str]:
        """``CRAG_LLM_*`` variables pointing at this server."""
        return {"CRAG_LLM_BASE_URL": self.base_url, "CRAG_LLM_MODEL": self.model, **extra}


def smollm2_folder() -> str:
    """The converted SmolLM2 folder the shipped generator loads (converted once, cached)."""
    from crag.generator.smollm2 import ensure_smollm2

    return str(ensure_smollm2())


@contextmanager
def transformers_serve(workdir: Path, model: str | None = None) -> Iterator[ModelServer]:
    """``transformers serve MODEL`` on a free port of 127.0.0.1, float32 on the CPU.

    A failed start fails the test; the server is stopped by PID at the end.
    """
    cli = Path(sys.executable).with_name("transformers")
    if not cli.is_file():
        pytest.fail(f"transformers' CLI is not installed next to {sys.executable}")
    folder = model or smollm2_folder()
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"transformers-serve-{port}.log"
    command = [
        str(cli), "serve", folder, "--host", HOST, "--port", str(port),
        "--device", "cpu", "--dtype", "float32",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = ModelServer(port, folder, process, log)
    try:
        wait_until_up(
            process, f"http://{HOST}:{port}/health", log, "transformers serve", STARTUP_TIMEOUT
        )
        yield server
    finally:
        stop_process_group(process)


@dataclass
class Reply:
    """One scripted answer of the fake server."""

    status: int = 200
    body: str | None = None
    """The body as sent; ``None``: a chat completion of :attr:`text`."""
    headers: dict[str, str] = field(default_factory=dict)
    text: str = "Yes"
    delay: float = 0.0
    """Seconds to wait before answering (the client may hang up meanwhile)."""
    events: list[str] | None = None
    """A stream (``text/event-stream``) of these events' data instead of a body."""
    endless: str | None = None
    """An event's data sent again and again after :attr:`events`, as fast as the client reads,
    until it hangs up."""
    done: bool = True
    """Whether a stream ends with ``data: [DONE]`` (else the connection just closes)."""
    drip: float = 0.0
    """Seconds between the body's bytes (0: all at once)."""
    padding: int = 0
    """Bytes of white space sent after the body (still valid JSON), in 64 KiB writes."""
    echo_header: str | None = None
    """A request header whose value replaces ``{echo}`` in :attr:`body` (a server that quotes
    the ``Authorization`` it was sent in its error)."""


def chunk(content: str | None = None, finish_reason: str | None = None, **delta: Any) -> str:
    """The data of one streamed chat-completion event (``delta`` adds to its ``delta``)."""
    body: dict[str, Any] = {"role": "assistant", **delta}
    if content is not None:
        body["content"] = content
    return json.dumps(
        {
            "id": "fake-1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake",
            "choices": [{"index": 0, "delta": body, "finish_reason": finish_reason}],
        }
    )


def streamed(*texts: str, finish_reason: str | None = "stop") -> Reply:
    """A stream of ``texts``, one event each, then one with ``finish_reason`` (if any)."""
    events = [chunk(text) for text in texts]
    if finish_reason is not None:
        events.append(chunk("", finish_reason))
    return Reply(events=events)


def completion(text: str, model: str = "fake") -> str:
    """The JSON of a chat completion answering ``text``."""
    return json.dumps(
        {
            "id": "fake-1",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )


class FakeModelServer:
    """A **fake** OpenAI-compatible server answering from a script (see the module's doc).

    ``script`` is consumed one reply per request; when it runs out, :attr:`default` answers.
    """

    def __init__(
        self,
        *replies: Reply,
        default: Reply | None = None,
        models: list[dict[str, Any]] | None = None,
        models_reply: Reply | None = None,
    ) -> None:
        self.models = models
        """What ``GET /v1/models`` lists (``None``: 404, as some servers answer)."""
        self.models_reply = models_reply
        """What ``GET /v1/models`` answers instead, when set (a drip, padding)."""
        self.models_asked = threading.Event()
        """Set when ``GET /v1/models`` arrives."""
        self.script = list(replies)
        self.default = default or Reply()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.hung_up = threading.Event()
        """Set when the client closes its connection before the reply was all sent."""
        self.sent = 0
        """Bytes of bodies and streams written so far."""
        self._lock = threading.Lock()
        self._server = _FakeHTTPServer((HOST, 0), _FakeHandler)
        self._server.fake = self
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self._server.server_port}/v1"

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, request: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(request)
            self.headers.append(headers)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            return self.script.pop(0) if self.script else self.default

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _count(self, sent: int) -> None:
        with self._lock:
            self.sent += sent


class _FakeHTTPServer(ThreadingHTTPServer):
    fake: FakeModelServer


class _FakeHandler(BaseHTTPRequestHandler):
    """Answers one request of the fake from its script (HTTP/1.0: a stream ends on close)."""

    server: _FakeHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        del format, args

    def do_GET(self) -> None:
        fake = self.server.fake
        listing = self.path.rstrip("/").endswith("/models")
        if listing:
            fake.models_asked.set()
        if listing and fake.models_reply is not None:
            self._answer(fake.models_reply, {})
        elif listing and fake.models is not None:
            self._answer(Reply(body=json.dumps({"data": fake.models})), {})
        else:
            self._answer(Reply(status=404, body='{"error": "not found"}'), {})

    def do_POST(self) -> None:
        fake = self.server.fake
        size = int(self.headers.get("content-length", "0"))
        request = json.loads(self.rfile.read(size) or b"{}")
        reply = fake._next(request, {k.lower(): v for k, v in self.headers.items()})
        try:
            self._answer(reply, request)
        finally:
            fake._done()

    def _answer(self, reply: Reply, request: dict[str, Any]) -> None:
        if reply.delay and self._hangs_up_within(reply.delay):
            self.server.fake.hung_up.set()
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        try:
            if reply.events is not None:
                self._stream(reply)
            else:
                self._send_body(reply, request)
        except OSError:
            self.server.fake.hung_up.set()

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()
        self.server.fake._count(len(data))

    def _send_body(self, reply: Reply, request: dict[str, Any]) -> None:
        """The body, at once or a byte at a time (:attr:`Reply.drip`), then its padding."""
        body = reply.body
        if body is None:
            body = completion(reply.text, str(request.get("model", "fake")))
        if reply.echo_header is not None:
            echoed = json.dumps(self.headers.get(reply.echo_header, ""))[1:-1]
            body = body.replace("{echo}", echoed)
        data = body.encode("utf-8")
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data) + reply.padding))
        self.end_headers()
        if reply.drip:
            for byte in data:
                self._write(bytes([byte]))
                time.sleep(reply.drip)
        else:
            self._write(data)
        left = reply.padding
        while left > 0:
            self._write(b" " * min(left, 1 << 16))
            left -= 1 << 16

    def _stream(self, reply: Reply) -> None:
        """The reply's events, then its endless one (if any), then ``[DONE]`` (if asked)."""
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        for data in reply.events or []:
            self._write(f"data: {data}\n\n".encode())
        if reply.endless is not None:
            burst = f"data: {reply.endless}\n\n".encode() * 64
            while True:
                self._write(burst)
        if reply.done:
            self._write(b"data: [DONE]\n\n")

    def _hangs_up_within(self, seconds: float) -> bool:
        """Wait ``seconds``; True as soon as the client closes its connection."""
        import select

        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if readable and not self.connection.recv(1, 2):  # MSG_PEEK: b"" = closed
                return True
        return False
