"""Model servers the tests start on 127.0.0.1: a real one, and a fake for what it cannot do.

:func:`transformers_serve` runs ``transformers serve`` (the ``transformers[serving]`` extra, a
dev dependency) over the shipped SmolLM2 folder: a real OpenAI-compatible server, offline.

:class:`FakeModelServer` is a **fake**: a small HTTP server that answers from a script, for
what no real server produces on demand: 429 and 503 with ``Retry-After``, a reply that is not
JSON, a 401, a context-length refusal, an answer that never comes. It also counts the requests
in flight at once and notices a client that hangs up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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
    ) -> None:
        self.models = models
        """What ``GET /v1/models`` lists (``None``: 404, as some servers answer)."""
        self.script = list(replies)
        self.default = default or Reply()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.hung_up = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((HOST, 0), self._handler())
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

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                del format, args

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models") and fake.models is not None:
                    self._answer(Reply(body=json.dumps({"data": fake.models})), {})
                else:
                    self._answer(Reply(status=404, body='{"error": "not found"}'), {})

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                request = json.loads(self.rfile.read(size) or b"{}")
                reply = fake._next(request, {k.lower(): v for k, v in self.headers.items()})
                try:
                    self._answer(reply, request)
                finally:
                    fake._done()

            def _answer(self, reply: Reply, request: dict[str, Any]) -> None:
                if reply.delay and self._hangs_up_within(reply.delay):
                    fake.hung_up.set()
                    return
                body = reply.body
                if body is None:
                    body = completion(reply.text, str(request.get("model", "fake")))
                data = body.encode("utf-8")
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                with suppress(OSError):
                    self.wfile.write(data)

            def _hangs_up_within(self, seconds: float) -> bool:
                """Wait ``seconds``; True as soon as the client closes its connection."""
                import select

                deadline = time.monotonic() + seconds
                while (left := deadline - time.monotonic()) > 0:
                    readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                    if readable and not self.connection.recv(1, 2):  # MSG_PEEK: b"" = closed
                        return True
                return False

        return Handler
