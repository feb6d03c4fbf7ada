"""A simulated web for the benchmark: BM25 search and Wikipedia-like pages on 127.0.0.1.

This is a simulation, not the web. :class:`SimulatedWeb` indexes the same Wikipedia
summaries the vector store holds (the bundled corpus, by default) with BM25 and serves them
on 127.0.0.1 in two ways:

* ``GET /search?q=...&format=json`` answers as a SearxNG instance does (its JSON API), so the
  project's real ``searxng`` provider can query it unchanged;
* ``GET /wiki/<title>`` answers an HTML page (title, heading, one ``<p>`` per paragraph of the
  summary), so the project's real page reader can read it unchanged.

Because every page comes from the corpus, "the web" holds the gold article even when the
vector store does not (for instance when the store was built from part of the corpus, or
when dense retrieval misses it): web search can correct what retrieval got wrong, which is
the point of CRAG. Search quality is that of BM25 over short summaries, nothing more.

The search endpoint and the page URLs are on 127.0.0.1, which the SearxNG provider and the page
reader refuse unless it is allowed: pass :attr:`SimulatedWeb.allowed_hosts` as the run's
``allowed_hosts``. They are not ``wikipedia.org`` URLs, so ``only_wikipedia`` would drop every
result.

Example::

    with SimulatedWeb() as web:
        policy = AddressPolicy.from_setting(web.allowed_hosts)
        provider = SearxngSearch(web.base_url, policy=policy)
        results = provider.search("who painted the Mona Lisa", 5)
"""

from __future__ import annotations

import html
import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import bm25s
import numpy as np

logger = logging.getLogger(__name__)
# bm25s sets its own logger to DEBUG when imported, which prints index-building lines at every
# level of `crag-bench eval`; NOTSET hands the choice back to the application's logging setup.
logging.getLogger("bm25s").setLevel(logging.NOTSET)

DEFAULT_RESULTS = 10
"""Results per search when the request does not ask for a number."""
MAX_RESULTS = 100
"""Most results one search answers."""
SNIPPET_CHARS = 300
"""Longest search snippet (cut at a word boundary)."""
ENGINE = "simulated"
"""The engine name reported with every result."""
TITLE_SUFFIX = " - Wikipedia"
"""Appended to page titles, as on Wikipedia (the reader strips it)."""
WIKI_PATH = "/wiki/"
SEARCH_PATH = "/search"
HOST = "127.0.0.1"
POLL_SECONDS = 0.05
"""How often the server thread checks for shutdown."""
_BIAS_TOKEN = "wikipedia"


@dataclass(frozen=True)
class WebDocument:
    """One page of the simulated web.

    Attributes:
        title: The page title (unique; later documents with the same title are ignored).
        text: The page text; lines are paragraphs.
    """

    title: str
    text: str


def corpus_web_documents() -> list[WebDocument]:
    """The bundled corpus as web pages: each summary's extract without its title line.

    Raises:
        CorpusError: The corpus package or file is missing or unreadable.
    """
    from crag.vectorstore.corpus import load_corpus

    documents: list[WebDocument] = []
    for doc in load_corpus():
        title = doc.title or doc.text.split("\n", 1)[0]
        head, _, rest = doc.text.partition("\n")
        text = rest if head.strip() == title.strip() else doc.text
        documents.append(WebDocument(title=title, text=text.strip()))
    return documents


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """The first ``limit`` characters of ``text`` (whitespace collapsed), cut between words."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit + 1].rsplit(" ", 1)[0]
    return cut if cut and len(cut) <= limit else flat[:limit]


def paragraphs(text: str) -> list[str]:
    """The paragraphs of a page text: its non-blank lines, whitespace collapsed."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def page_html(document: WebDocument) -> str:
    """The HTML page of ``document``: title, heading and one ``<p>`` per paragraph."""
    title = html.escape(document.title)
    body = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs(document.text))
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<title>{title}{html.escape(TITLE_SUFFIX)}</title></head>"
        f"<body><h1>{title}</h1>{body}</body></html>"
    )


def _tokens(text: str) -> list[str]:
    """bm25s tokens of one text: lowercase, English stopwords removed."""
    tokenized = bm25s.tokenize(
        text, lower=True, stopwords="en", return_ids=False, show_progress=False
    )
    return [str(token) for token in tokenized[0]]


class SearchIndex:
    """BM25 over documents (title and text), best first, ties broken by title.

    Args:
        documents: The pages; the first of several with the same title is kept.
    """

    def __init__(self, documents: Sequence[WebDocument]) -> None:
        unique: dict[str, WebDocument] = {}
        for document in documents:
            if document.title in unique:
                logger.debug("simulated web: duplicate title %r ignored", document.title)
                continue
            unique[document.title] = document
        self.documents: tuple[WebDocument, ...] = tuple(sorted(unique.values(), key=_title_key))
        self.by_title: dict[str, WebDocument] = unique
        self._retriever = bm25s.BM25()
        self._lock = threading.Lock()
        if self.documents:
            corpus = [f"{d.title}\n{d.text}" for d in self.documents]
            tokens = bm25s.tokenize(corpus, lower=True, stopwords="en", show_progress=False)
            self._retriever.index(tokens, show_progress=False)

    def search(self, query: str, limit: int) -> list[WebDocument]:
        """The ``limit`` best documents for ``query`` (none for a query without known words).

        The word "wikipedia" is ignored unless it is the only word: every page here is a
        Wikipedia summary, so it says nothing about which one is wanted.
        """
        tokens = _tokens(query)
        if len(set(tokens)) > 1:
            tokens = [t for t in tokens if t != _BIAS_TOKEN]
        if not self.documents or not tokens or limit <= 0:
            return []
        with self._lock:
            ids = self._retriever.get_tokens_ids(tokens)
            if not ids:
                return []
            scores = np.asarray(self._retriever.get_scores(ids), dtype=np.float64)
        # Documents are sorted by title, so a stable sort on -score breaks ties by title.
        order = np.argsort(-scores, kind="stable")[:limit]
        return [self.documents[int(i)] for i in order if scores[int(i)] > 0]


def _title_key(document: WebDocument) -> str:
    return document.title


class _Server(ThreadingHTTPServer):
    """The HTTP server; its handler reaches the web through ``self.web``."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], web: SimulatedWeb) -> None:
        super().__init__(address, _Handler)
        self.web = web

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log a failed request instead of printing it to stderr."""
        logger.debug("simulated web: request from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """Routes ``/search`` and ``/wiki/<title>``; everything else is 404."""

    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        """Answer a search or a page."""
        parts = urlsplit(self.path)
        if parts.path == SEARCH_PATH:
            self._search(parse_qs(parts.query))
        elif parts.path.startswith(WIKI_PATH):
            self._page(unquote(parts.path[len(WIKI_PATH) :]))
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"not found\n")

    def _search(self, params: dict[str, list[str]]) -> None:
        query = " ".join(params.get("q", [""])[0].split())
        body = self.server.web.search_json(query, _count(params))
        self._send(HTTPStatus.OK, "application/json; charset=utf-8", body)

    def _page(self, title: str) -> None:
        document = self.server.web.document(title)
        if document is None:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8", b"no such page\n")
            return
        self._send(HTTPStatus.OK, "text/html; charset=utf-8", page_html(document).encode())

    def _send(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Log requests at debug level instead of writing them to stderr."""
        logger.debug("simulated web: %s - %s", self.address_string(), format % args)


def _count(params: dict[str, list[str]]) -> int:
    """Results asked for (``count``), else :data:`DEFAULT_RESULTS`; at most :data:`MAX_RESULTS`."""
    raw = params.get("count", [""])[0].strip()
    if not raw.isdigit():
        return DEFAULT_RESULTS
    return max(0, min(int(raw), MAX_RESULTS))


class SimulatedWeb:
    """A SearxNG-compatible search and Wikipedia-like pages on 127.0.0.1, in a thread.

    Use it as a context manager: entering builds the BM25 index and starts the server,
    leaving stops it.

    Args:
        documents: The pages (default: the bundled corpus, see :func:`corpus_web_documents`).
        host: Address to listen on.
        port: Port to listen on (0: any free port).
    """

    def __init__(
        self,
        documents: Sequence[WebDocument] | None = None,
        *,
        host: str = HOST,
        port: int = 0,
    ) -> None:
        self._documents = documents
        self._host = host
        self._port = port
        self._index: SearchIndex | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._searches = 0
        self._count_lock = threading.Lock()

    def __enter__(self) -> SimulatedWeb:
        documents = self._documents if self._documents is not None else corpus_web_documents()
        self._index = SearchIndex(documents)
        self._server = _Server((self._host, self._port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": POLL_SECONDS},
            name="simulated-web",
            daemon=True,
        )
        self._thread.start()
        logger.info("simulated web: %d pages at %s", len(self._index.documents), self.base_url)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (only while running)."""
        if self._server is None:
            raise RuntimeError("the simulated web is not running; use it in a with block")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def allowed_hosts(self) -> str:
        """The ``allowed_hosts`` setting that lets the page reader read these pages."""
        return self._host

    @property
    def searches(self) -> int:
        """How many search requests were answered."""
        with self._count_lock:
            return self._searches

    def page_url(self, title: str) -> str:
        """The URL of the page titled ``title``."""
        return f"{self.base_url}{WIKI_PATH}{quote(title, safe='')}"

    def document(self, title: str) -> WebDocument | None:
        """The page titled ``title``, or ``None``."""
        return self._running_index().by_title.get(title)

    def search(self, query: str, limit: int = DEFAULT_RESULTS) -> list[WebDocument]:
        """The best ``limit`` pages for ``query`` (as the search endpoint ranks them)."""
        return self._running_index().search(query, limit)

    def search_json(self, query: str, limit: int = DEFAULT_RESULTS) -> bytes:
        """The SearxNG JSON answer to ``query`` (counts as one search)."""
        with self._count_lock:
            self._searches += 1
        results = [
            {
                "url": self.page_url(d.title),
                "title": f"{d.title}{TITLE_SUFFIX}",
                "content": snippet(d.text),
                "engine": ENGINE,
            }
            for d in self.search(query, limit)
        ]
        answer = {
            "query": query,
            "number_of_results": len(results),
            "results": results,
            "unresponsive_engines": [],
        }
        return json.dumps(answer, ensure_ascii=False).encode("utf-8")

    def _running_index(self) -> SearchIndex:
        if self._index is None:
            raise RuntimeError("the simulated web is not running; use it in a with block")
        return self._index
