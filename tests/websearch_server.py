"""A local HTTP server for tests: a fake SearxNG JSON API plus static pages.

It listens on 127.0.0.1 on an ephemeral port, in a background thread::

    with WebsearchServer() as server:
        page = server.add_page("/wiki/Paris", "Paris", "Paris is the capital of France.")
        server.results = [server.result("Paris", page, "Capital of France")]
        provider = SearxngSearch(server.url, policy=LOOPBACK)
        ...
        assert server.search_queries() == ["capital of france"]

or through the ``websearch_server`` pytest fixture (a fresh, started server per test).

What it serves:

* ``GET|POST /search?q=...&format=json``: ``{"query": q, "results": [...],
  "unresponsive_engines": [...]}`` where the results are ``server.results``: a list of
  ``{"title", "url", "content"}`` dicts, or a callable ``query -> list``. Without
  ``format=json`` it answers a small HTML page, as SearxNG does.
* any path registered with :meth:`WebsearchServer.add_route` / :meth:`~WebsearchServer.add_page`:
  the given status, content type, body and headers (optionally after a delay, optionally
  chunked without a ``Content-Length``); everything else is ``404``.

Failure modes for ``/search``: ``search_status`` (e.g. 429 or 500) answers that status,
``search_body`` answers a raw body (e.g. not JSON) with ``search_content_type``, and
``search_delay`` sleeps that many seconds first (to test timeouts). Every request is recorded
in ``server.requests``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from html import escape
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest

from crag.websearch.safety import AddressPolicy

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = "127.0.0.1"
"""The ``allowed_hosts`` setting that lets crag reach these servers (they listen on 127.0.0.1)."""
LOOPBACK = AddressPolicy.from_setting(LOOPBACK_HOSTS)
"""The same, as the address policy the SearxNG provider takes."""

ResultDict = dict[str, str]
ResultsSource = list[ResultDict] | Callable[[str], list[ResultDict]]


@dataclass
class Route:
    """A canned answer for one path."""

    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    body: bytes | str = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunked: bool = False
    """Send the body with ``Transfer-Encoding: chunked`` (no ``Content-Length``)."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def param(self, name: str, default: str | None = None) -> str | None:
        """First value of query parameter ``name``."""
        values = self.query.get(name)
        return values[0] if values else default


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("websearch_server: " + format, *args)

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle(send_body=False)

    def _handle(self, send_body: bool = True) -> None:
        owner = self.server.owner
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        query = parse_qs(parts.query, keep_blank_values=True)
        if self.command == "POST" and "form-urlencoded" in self.headers.get("Content-Type", ""):
            for key, values in parse_qs(body.decode("utf-8", "replace")).items():
                query.setdefault(key, []).extend(values)
        request = RecordedRequest(
            method=self.command,
            path=parts.path,
            query=query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        route = owner._answer(request)
        if route.delay > 0 and owner._stopping.wait(route.delay):
            return  # shutting down: drop the connection
        payload = route.body.encode("utf-8") if isinstance(route.body, str) else route.body
        try:
            self.send_response(route.status)
            self.send_header("Content-Type", route.content_type)
            if route.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(payload)))
            for name, value in route.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if send_body and route.chunked:
                for start in range(0, len(payload), 16 * 1024):
                    piece = payload[start : start + 16 * 1024]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            elif send_body:
                self.wfile.write(payload)
        except OSError:  # the client gave up (e.g. it timed out)
            logger.debug("websearch_server: client went away", exc_info=True)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: WebsearchServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log instead of printing a traceback (clients hanging up early is normal here)."""
        logger.debug("websearch_server: error serving %s", client_address, exc_info=True)


class WebsearchServer:
    """A threaded HTTP server on 127.0.0.1 faking SearxNG and serving canned pages.

    Attributes:
        results: Results for ``/search``: a list of ``{"title", "url", "content"}`` dicts or
            a callable that takes the query and returns such a list.
        unresponsive_engines: Reported as SearxNG's ``unresponsive_engines``.
        search_status: If set, ``/search`` answers this status (e.g. 429, 500) and no results.
        search_body: If set, ``/search`` answers this raw body (with ``search_content_type``).
        search_delay: Seconds ``/search`` sleeps before answering.
        routes: Path -> :class:`Route`.
        requests: Every request received, oldest first.
    """

    def __init__(self, results: ResultsSource | None = None) -> None:
        self.results: ResultsSource = results if callable(results) else list(results or [])
        self.unresponsive_engines: list[list[str]] = []
        self.search_status: int | None = None
        self.search_body: bytes | str | None = None
        self.search_content_type = "application/json"
        self.search_delay = 0.0
        self.routes: dict[str, Route] = {}
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> WebsearchServer:
        """Bind an ephemeral port and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="websearch-test-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port; delayed answers are abandoned."""
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> WebsearchServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- addresses ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port it listens on."""
        if self._httpd is None:
            raise RuntimeError("WebsearchServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def url_for(self, path: str) -> str:
        """Absolute URL of ``path`` on this server (absolute URLs are returned unchanged)."""
        return urljoin(self.url + "/", path)

    # -- configuration -----------------------------------------------------------------------

    def add_route(
        self,
        path: str,
        body: bytes | str = b"",
        *,
        status: int = 200,
        content_type: str = "text/html; charset=utf-8",
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        chunked: bool = False,
    ) -> str:
        """Serve ``body`` at ``path`` (any method); return the absolute URL.

        ``chunked=True`` sends the body in chunks without a ``Content-Length``.
        """
        if not path.startswith("/"):
            path = "/" + path
        self.routes[path] = Route(status, content_type, body, dict(headers or {}), delay, chunked)
        return self.url_for(path)

    def add_page(self, path: str, title: str, text: str, **kwargs: Any) -> str:
        """Serve a minimal HTML page (``<title>``, ``<h1>``, one ``<p>`` per paragraph)."""
        paragraphs = "".join(f"<p>{escape(p)}</p>" for p in text.split("\n\n") if p.strip())
        html = (
            f"<!doctype html><html><head><title>{escape(title)}</title></head>"
            f"<body><h1>{escape(title)}</h1>{paragraphs}</body></html>"
        )
        return self.add_route(path, html, **kwargs)

    def result(self, title: str, url_or_path: str, content: str = "") -> ResultDict:
        """A SearxNG result dict; a path (``/wiki/X``) becomes a URL on this server."""
        return {"title": title, "url": self.url_for(url_or_path), "content": content}

    def reset(self) -> None:
        """Back to no results, no routes, no failure mode and no recorded requests."""
        with self._lock:
            self.results = []
            self.unresponsive_engines = []
            self.search_status = None
            self.search_body = None
            self.search_content_type = "application/json"
            self.search_delay = 0.0
            self.routes = {}
            self.requests = []

    # -- inspection --------------------------------------------------------------------------

    def search_queries(self) -> list[str]:
        """The ``q`` of every ``/search`` request, oldest first."""
        with self._lock:
            return [r.param("q") or "" for r in self.requests if r.path == "/search"]

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """Recorded requests for ``path``."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # -- request handling (server threads) ---------------------------------------------------

    def _answer(self, request: RecordedRequest) -> Route:
        with self._lock:
            self.requests.append(request)
        if request.path in self.routes:
            return self.routes[request.path]
        if request.path == "/search":
            return self._search(request)
        return Route(404, "text/plain; charset=utf-8", "not found")

    def _search(self, request: RecordedRequest) -> Route:
        delay = self.search_delay
        if self.search_status is not None:
            try:
                phrase = HTTPStatus(self.search_status).phrase
            except ValueError:
                phrase = "error"
            return Route(self.search_status, "text/plain; charset=utf-8", phrase, delay=delay)
        if self.search_body is not None:
            return Route(200, self.search_content_type, self.search_body, delay=delay)
        query = request.param("q") or ""
        if request.param("format") != "json":
            html = f"<html><body>results for {escape(query)}</body></html>"
            return Route(200, "text/html; charset=utf-8", html, delay=delay)
        source = self.results
        results = source(query) if callable(source) else list(source)
        payload = {
            "query": query,
            "number_of_results": len(results),
            "results": results,
            "answers": [],
            "suggestions": [],
            "unresponsive_engines": self.unresponsive_engines,
        }
        return Route(200, "application/json", json.dumps(payload), delay=delay)


@pytest.fixture
def websearch_server() -> Iterator[WebsearchServer]:
    """A started :class:`WebsearchServer`, stopped after the test."""
    with WebsearchServer() as server:
        yield server
