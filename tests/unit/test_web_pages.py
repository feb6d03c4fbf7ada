"""Reading web pages: extraction, limits, safety, caching and retries, against 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import ipaddress
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from ddgs.ddgs import DDGS
from ddgs.exceptions import RatelimitException
from langgraph.runtime import Runtime

from crag.nodes.web_search import web_search
from crag.settings.deployment import deployment_with
from crag.settings.run_settings import RunSettings
from crag.websearch import retry as retry_module
from crag.websearch import safety as safety_module
from crag.websearch.base import SearchResult, SearchUnavailableError
from crag.websearch.cache import PAGE_CACHE, SEARCH_CACHE, TTLCache, clear_web_caches
from crag.websearch.duckduckgo import DuckDuckGoSearch
from crag.websearch.fetch import FetchOptions, PageFetcher
from crag.websearch.pages import MAX_PARAGRAPH_WORDS, html_text, page_title, pdf_supported
from crag.websearch.reader import ReaderOptions, WebReading, cached_search, read_results, run_sync
from crag.websearch.registry import SearchSettings, create_search_provider, get_search_provider
from crag.websearch.retry import TransientSearchError, search_with_retry
from crag.websearch.safety import (
    AddressPolicy,
    HostLookupError,
    UnsafeURLError,
    check_url,
    resolve_checked,
    strip_userinfo,
)
from crag.websearch.searxng import SearxngSearch
from crag.websearch.tavily import TavilySearch
from tests import websearch_server as _shared
from tests.fakes import FakeComponents, FixedScoreEvaluator, StaticStore, scripted_chat
from tests.websearch_server import LOOPBACK, WebsearchServer

server = _shared.websearch_server

LOCAL = "127.0.0.1"
P1 = (
    "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci, "
    "painted between 1503 and 1519."
)
P2 = "It is held at the Louvre in Paris, where it has been on permanent display since 1797."
WIKI_HTML = f"""<!doctype html>
<html class="client-js vector-feature-main-menu-pinned-disabled"><head>
<meta charset="utf-8"><title>Mona Lisa - Wikipedia</title>
<style>p {{ color: red }}</style><script>var tracking = "do not read this script text";</script>
</head>
<body class="has-sidebar mediawiki">
<header><p>Header paragraph with site name and tagline that should be dropped.</p></header>
<nav><p>Navigation paragraph listing many links that should be dropped entirely.</p></nav>
<div id="cookie-banner"><p>This banner paragraph asks you politely to accept all of it.</p></div>
<p>We use cookies to improve your experience on our website, please accept them.</p>
<main><div class="mw-parser-output">
<h1>Mona Lisa</h1>
<p>{P1}<sup class="reference">[1]</sup></p>
<p>Edit this page</p>
<p>{P2} [citation needed]</p>
<aside><p>Sidebar paragraph about related articles that should be dropped.</p></aside>
<form><p>Search form paragraph with a text box that should be dropped.</p></form>
</div></main>
<footer><p>Footer paragraph with copyright and licence text that should be dropped.</p></footer>
</body></html>"""


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    clear_web_caches()
    monkeypatch.setattr(retry_module, "SEARCH_BACKOFF", 0.05)
    yield
    clear_web_caches()


def options(**overrides: Any) -> ReaderOptions:
    values: dict[str, Any] = {"timeout": 3.0, "allowed_hosts": LOCAL, "cache_ttl": 0.0}
    values.update(overrides)
    return ReaderOptions(**values)


def read(results: list[SearchResult], **overrides: Any) -> WebReading:
    return read_results(results, pages=len(results), options=options(**overrides))


def hit(
    url: str, title: str = "Mona Lisa - Wikipedia", snippet: str = "A snippet."
) -> SearchResult:
    return SearchResult(title=title, url=url, snippet=snippet)


def tiny_pdf(title: str, text: str) -> bytes:
    """A one-page PDF with ``text`` in Helvetica and ``title`` in its metadata."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        f"<< /Title ({title}) >>".encode(),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


# --------------------------------------------------------------------------------------------
# Safety


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.org/x", "javascript:alert(1)", "data:text/html,hi"],
)
def test_only_http_and_https(url: str) -> None:
    with pytest.raises(UnsafeURLError, match=r"not an http\(s\) link"):
        check_url(url, AddressPolicy())


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://127.8.9.10:8080/", "loopback"),
        ("http://10.0.0.1/", "private"),
        ("http://172.16.5.4/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://100.64.0.1/", "non-public"),
        ("http://[::1]/", "loopback"),
        ("http://[::]/", "unspecified"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[fc00::1]/", "private"),
        ("http://[ff02::1]/", "multicast"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:10.0.0.1]/", "private"),
    ],
)
def test_literal_non_public_addresses_are_refused(url: str, kind: str) -> None:
    with pytest.raises(UnsafeURLError, match=f"is an? {kind} address"):
        check_url(url, AddressPolicy())


@pytest.mark.parametrize("url", ["http://93.184.216.34/", "https://[2606:4700::1111]/a"])
def test_public_addresses_pass(url: str) -> None:
    assert check_url(url, AddressPolicy()) == url


def test_allow_list() -> None:
    policy = AddressPolicy.from_setting(" 127.0.0.1, Intranet.Example. ,10.0.0.0/8, ::1 ")
    assert check_url("http://127.0.0.1:8080/x", policy) == "http://127.0.0.1:8080/x"
    assert check_url("http://10.1.2.3/", policy) == "http://10.1.2.3/"
    assert check_url("http://[::1]:80/", policy) == "http://[::1]:80/"
    with pytest.raises(UnsafeURLError):
        check_url("http://192.168.0.1/", policy)
    private = [ipaddress.ip_address("192.168.7.7")]
    assert policy.check_resolved("intranet.example", private) == private
    with pytest.raises(UnsafeURLError, match=r"evil\.test resolves to 192\.168\.7\.7, a private"):
        policy.check_resolved("evil.test", private)
    mixed = [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("192.168.7.7")]
    with pytest.raises(UnsafeURLError, match="private"):
        AddressPolicy().check_resolved("mixed.test", mixed)
    assert AddressPolicy.from_setting("") == AddressPolicy()
    for bad in ("10.0.0.0/33", "http://x", "a b"):
        with pytest.raises(ValueError, match="allowed_hosts"):
            AddressPolicy.from_setting(bad)


def test_resolve_checked_resolves_once_and_checks_every_address() -> None:
    loopback = ipaddress.ip_address(LOCAL)
    assert resolve_checked(AddressPolicy.from_setting(LOCAL), LOCAL, 80) == [loopback]
    with pytest.raises(UnsafeURLError, match=r"^127\.0\.0\.1: 127\.0\.0\.1 is a loopback address$"):
        resolve_checked(AddressPolicy(), LOCAL, 80)
    with pytest.raises(UnsafeURLError, match=r"^localhost: localhost resolves to .*loopback"):
        resolve_checked(AddressPolicy(), "localhost", 80)
    allowed = resolve_checked(AddressPolicy.from_setting("localhost"), "localhost", 80)
    assert allowed and all(address.is_loopback for address in allowed)
    with pytest.raises(HostLookupError, match=r"^DNS lookup of no-such-host\.invalid failed: "):
        resolve_checked(AddressPolicy(), "no-such-host.invalid", 80)


def test_userinfo_and_fragment_are_stripped() -> None:
    assert strip_userinfo("https://user:secret@example.org/a?b=1#c") == "https://example.org/a?b=1"
    assert check_url("http://u:p@93.184.216.34/x#y", AddressPolicy()) == "http://93.184.216.34/x"


def test_no_credentials_reach_the_server(server: WebsearchServer) -> None:
    url = server.add_page("/secret", "Secret", P1)
    with_userinfo = url.replace("http://", "http://admin:hunter2@")
    reading = read([hit(with_userinfo)])
    assert reading.passages[0].source == url
    (request,) = server.requests_to("/secret")
    assert "authorization" not in request.headers
    assert request.headers["user-agent"].startswith("crag/")


def test_no_cookie_is_ever_sent(server: WebsearchServer) -> None:
    first = server.add_route(
        "/c1",
        status=302,
        headers={"Location": "/c2", "Set-Cookie": "session=abc; Path=/"},
    )
    server.add_page("/c2", "Cookies", P1, headers={"Set-Cookie": "other=def; Path=/"})
    read([hit(first)])
    read([hit(first)])
    requests = server.requests_to("/c1") + server.requests_to("/c2")
    assert len(requests) == 4
    assert all("cookie" not in r.headers for r in requests)


# --------------------------------------------------------------------------------------------
# Extraction


def test_html_paragraphs_drop_boilerplate_and_keep_title(server: WebsearchServer) -> None:
    url = server.add_route("/wiki/Mona_Lisa", WIKI_HTML)
    reading = read([hit(url, snippet="The snippet is not used when the page is read.")])
    assert reading.notes == []
    assert [p.text for p in reading.passages] == [f"Mona Lisa\n{P1}", f"Mona Lisa\n{P2}"]
    assert all(p.source == url and p.from_page for p in reading.passages)


def test_html_text_details() -> None:
    long = " ".join(f"Sentence number {i} says something about the painting." for i in range(60))
    markup = f"<html><head><title>  A   Title | Site  </title></head><body><p>{long}</p></body>"
    title, paragraphs = html_text(markup)
    assert title == "A Title | Site"
    assert len(paragraphs) > 1
    assert all(len(p.split()) <= MAX_PARAGRAPH_WORDS for p in paragraphs)
    assert " ".join(paragraphs) == long
    # A wrapper named like boilerplate that holds most paragraphs is still the page.
    _, paragraphs = html_text(
        f'<body><div class="menu-open page"><p>{P1}</p><p>{P2}</p></div>'
        '<div class="sidebar-right"><p>Sidebar text that is long enough to be a paragraph.</p>'
        "</div></body>"
    )
    assert paragraphs == [P1, P2]
    # No <p> at all: the text blocks are used.
    title, paragraphs = html_text(
        "<html><body><div>Only a div holds this text, which is long enough to count as a "
        "paragraph of the page.</div><div>short</div></body></html>"
    )
    assert title == ""
    assert paragraphs == [
        "Only a div holds this text, which is long enough to count as a paragraph of the page."
    ]


@pytest.mark.parametrize(
    "markup",
    [
        b"<html><p>Unclosed <b>bold <i>italic text that runs on for a while <p>Second "
        b"paragraph with quite enough words here</td></span><div",
        b"\x00\xff\xfe<<<>>>&&&;;;</p></p><p>",
        "<p>" * 500 + "deeply nested paragraph text with enough words to count",
        b"",
        "<html><head><title>\u00c9cole</title><meta charset='latin-1'></head></html>",
    ],
)
def test_malformed_html_does_not_crash(markup: bytes | str) -> None:
    title, paragraphs = html_text(markup)
    assert isinstance(title, str) and isinstance(paragraphs, list)


def test_malformed_page_through_the_reader(server: WebsearchServer) -> None:
    url = server.add_route(
        "/broken",
        b"<html><title>Broken</title><p>This paragraph is never closed but has many words"
        b"<p>\xff\xfe invalid bytes and <b>tags <i>that never close properly at all",
        content_type="text/html",
    )
    reading = read([hit(url)])
    assert reading.passages and reading.passages[0].text.startswith("Broken\n")


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Mona Lisa - Wikipedia", "Mona Lisa"),
        ("What is it?", "What is it"),
        ("", ""),
        ("Liquid nitrogen \u2014 Wikipedia, the free", "Liquid nitrogen"),
        ("Plain title", "Plain title"),
    ],
)
def test_page_title(title: str, expected: str) -> None:
    assert page_title(title) == expected


# --------------------------------------------------------------------------------------------
# Failures fall back to the snippet, with a note


def test_oversized_page_uses_its_snippet(server: WebsearchServer) -> None:
    big = "<html><body>" + f"<p>{P1}</p>" * 500 + "</body></html>"
    declared = server.add_route("/big", big)
    streamed = server.add_route("/big-chunked", big, chunked=True)
    reading = read(
        [hit(declared, snippet="Big one."), hit(streamed, snippet="Big two.")], max_bytes=20_000
    )
    assert reading.notes == [
        f"{declared}: page too large (more than 20,000 bytes), used its search snippet",
        f"{streamed}: page too large (more than 20,000 bytes), used its search snippet",
    ]
    assert [p.text for p in reading.passages] == ["Mona Lisa\nBig one.", "Mona Lisa\nBig two."]
    assert not any(p.from_page for p in reading.passages)


def test_slow_page_times_out_while_others_are_read(server: WebsearchServer) -> None:
    slow = server.add_page("/slow", "Slow", P1, delay=10)
    fast = server.add_page("/fast", "Fast", P2)
    started = time.monotonic()
    reading = read([hit(slow, snippet="Slow snippet."), hit(fast)], timeout=0.5)
    assert time.monotonic() - started < 2.0
    assert reading.notes == [f"{slow}: page did not load within 0.5 s, used its search snippet"]
    assert [p.text for p in reading.passages] == ["Mona Lisa\nSlow snippet.", f"Fast\n{P2}"]


def test_server_error_uses_the_snippet(server: WebsearchServer) -> None:
    url = server.add_route("/error", "oops", status=500, content_type="text/plain")
    missing = server.url_for("/missing")
    reading = read([hit(url, snippet="Error snippet."), hit(missing, snippet="")])
    assert reading.notes == [
        f"{url}: page answered HTTP 500 Internal Server Error, used its search snippet",
        f"{missing}: page answered HTTP 404 Not Found, nothing used from it",
    ]
    assert [p.text for p in reading.passages] == ["Mona Lisa\nError snippet."]


def test_not_a_web_page_is_skipped(server: WebsearchServer) -> None:
    zipped = server.add_route(
        "/file.zip", b"PK\x03\x04" + b"\x00" * 100, content_type="application/zip"
    )
    unknown = server.add_route("/blob", b"\x00\x01binary", content_type="")
    reading = read([hit(zipped, snippet="An archive."), hit(unknown, snippet="")])
    assert reading.notes == [
        f"skipped {zipped}: not a web page (application/zip), used its search snippet",
        f"skipped {unknown}: not a web page (unknown type), nothing used from it",
    ]
    assert [r.method for r in server.requests_to("/file.zip")] == ["GET"]


def test_html_without_content_type_is_sniffed(server: WebsearchServer) -> None:
    url = server.add_route(
        "/sniff", f"<!DOCTYPE html><title>Sniffed</title><p>{P1}</p>", content_type=""
    )
    assert read([hit(url)]).passages[0].text == f"Sniffed\n{P1}"


@pytest.mark.skipif(not pdf_supported(), reason="pypdf is not installed")
def test_pdf_is_read_with_pypdf(server: WebsearchServer) -> None:
    text = "Liquid nitrogen boils at 77 kelvin at atmospheric pressure, which is very cold."
    url = server.add_route(
        "/doc.pdf", tiny_pdf("Liquid nitrogen", text), content_type="application/pdf"
    )
    reading = read([hit(url, snippet="PDF snippet.")])
    assert reading.notes == []
    assert [p.text for p in reading.passages] == [f"Liquid nitrogen\n{text}"]


def test_pdf_without_pypdf_is_skipped(
    server: WebsearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("crag.websearch.reader.pdf_supported", lambda: False)
    url = server.add_route("/doc.pdf", tiny_pdf("T", "text"), content_type="application/pdf")
    reading = read([hit(url, snippet="PDF snippet.")])
    assert reading.notes == [
        f"skipped {url}: a PDF, and reading PDFs needs the pypdf package, which is not "
        "installed (reinstall crag), used its search snippet"
    ]


def test_broken_pdf_uses_the_snippet(server: WebsearchServer) -> None:
    url = server.add_route("/bad.pdf", b"%PDF-1.4 not really", content_type="application/pdf")
    reading = read([hit(url, snippet="PDF snippet.")])
    assert len(reading.notes) == 1 and reading.notes[0].endswith("used its search snippet")
    assert [p.text for p in reading.passages] == ["Mona Lisa\nPDF snippet."]


# --------------------------------------------------------------------------------------------
# Redirects


def test_redirects_are_followed_and_checked(server: WebsearchServer) -> None:
    final = server.add_page("/new", "Moved", P1)
    start = server.add_route("/old", status=301, headers={"Location": "/new"})
    reading = read([hit(start)])
    assert reading.notes == []
    assert reading.passages[0].source == final


def test_redirect_loop_stops_at_max_redirects(server: WebsearchServer) -> None:
    a = server.add_route("/loop-a", status=302, headers={"Location": "/loop-b"})
    server.add_route("/loop-b", status=302, headers={"Location": "/loop-a"})
    reading = read([hit(a, snippet="Loop snippet.")], max_redirects=3)
    assert reading.notes == [f"{a}: too many redirects (more than 3), used its search snippet"]
    assert len(server.requests_to("/loop-a")) + len(server.requests_to("/loop-b")) == 4


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://10.0.0.1/admin", "10.0.0.1 is a private address"),
        ("file:///etc/passwd", "not an http(s) link (file)"),
    ],
)
def test_redirect_to_a_refused_address_is_not_followed(
    server: WebsearchServer, monkeypatch: pytest.MonkeyPatch, target: str, reason: str
) -> None:
    looked_up: list[str] = []
    real_resolve = safety_module.lookup_host

    def spy(host: str, port: int) -> list[Any]:
        looked_up.append(host)
        return real_resolve(host, port)

    monkeypatch.setattr(safety_module, "lookup_host", spy)
    url = server.add_route("/go", status=302, headers={"Location": target})
    reading = read([hit(url, snippet="Redirect snippet.")])
    assert reading.notes == [
        f"skipped {url}: refused to follow its redirect to {target}: {reason}, "
        "used its search snippet"
    ]
    assert looked_up == [LOCAL]  # the refused target was never resolved nor connected to


def test_host_names_are_checked_after_resolution(
    server: WebsearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name is resolved once, checked, and the connection goes to the checked address."""
    answers = {"pinned.test": "127.0.0.1", "evil.test": "10.0.0.1"}
    calls: list[str] = []

    def resolve(host: str, port: int) -> list[Any]:
        calls.append(host)
        return [ipaddress.ip_address(answers.get(host, host))]

    monkeypatch.setattr(safety_module, "lookup_host", resolve)
    server.add_page("/pinned", "Pinned", P1)
    pinned = f"http://pinned.test:{server.port}/pinned"
    evil = f"http://evil.test:{server.port}/pinned"
    reading = read([hit(pinned), hit(evil, snippet="Evil snippet.")], allowed_hosts="pinned.test")
    assert reading.passages[0].text == f"Pinned\n{P1}"
    assert reading.notes == [
        f"skipped {evil}: refused to read it: evil.test resolves to 10.0.0.1, a private "
        "address, used its search snippet"
    ]
    (request,) = server.requests_to("/pinned")
    assert request.headers["host"] == f"pinned.test:{server.port}"
    assert sorted(calls) == ["evil.test", "pinned.test"]


def test_localhost_is_refused_without_the_allow_list(server: WebsearchServer) -> None:
    server.add_page("/local", "Local", P1)
    url = f"http://localhost:{server.port}/local"
    reading = read([hit(url, snippet="")], allowed_hosts="")
    assert len(reading.notes) == 1
    assert reading.notes[0].startswith(f"skipped {url}: refused to read it: localhost resolves to")
    assert "loopback address" in reading.notes[0]
    assert server.requests_to("/local") == []
    literal = server.url_for("/local")
    reading = read([hit(literal, snippet="")], allowed_hosts="")
    assert reading.notes == [
        f"skipped {literal}: refused to read it: 127.0.0.1 is a loopback address, "
        "nothing used from it"
    ]


def test_unreachable_host_uses_the_snippet() -> None:
    reading = read([hit("http://no-such-host.invalid/page", snippet="Offline snippet.")])
    assert reading.notes == [
        "http://no-such-host.invalid/page: could not be reached (DNS lookup failed), "
        "used its search snippet"
    ]


def test_fetch_options_are_validated() -> None:
    for bad in ({"timeout": 0}, {"max_bytes": 0}, {"max_redirects": -1}):
        with pytest.raises(ValueError):
            FetchOptions(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allowed_hosts"):
        read([hit("http://example.org/")], allowed_hosts="not a host")


def test_fetcher_needs_its_context_manager() -> None:
    with pytest.raises(RuntimeError, match="async context manager"):
        asyncio.run(PageFetcher(FetchOptions()).fetch("http://example.org/"))


def test_read_results_inside_a_running_loop(server: WebsearchServer) -> None:
    url = server.add_page("/in-loop", "Loop", P1)

    async def caller() -> WebReading:
        return read([hit(url)])  # sync API called from async code: runs on a worker thread

    reading = asyncio.run(caller())
    assert reading.passages[0].text == f"Loop\n{P1}"
    assert run_sync(lambda: asyncio.sleep(0, result=42)) == 42


def test_snippets_only_when_no_page_is_read(server: WebsearchServer) -> None:
    url = server.add_page("/unread", "Unread", P1)
    results = [hit(url, snippet="First."), hit(url + "?2", snippet="Second.")]
    reading = read_results(results, pages=1, options=options())
    assert [p.text for p in reading.passages] == [f"Unread\n{P1}", "Mona Lisa\nSecond."]
    reading = read_results(results, pages=0, options=options())
    assert [p.from_page for p in reading.passages] == [False, False]
    assert len(server.requests_to("/unread")) == 1


# --------------------------------------------------------------------------------------------
# Cache


def test_ttl_cache() -> None:
    cache: TTLCache[str, int] = TTLCache(maxsize=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a", ttl=10) == 1
    cache.put("c", 3)  # evicts b, the least recently used
    assert (cache.get("a", 10), cache.get("b", 10), cache.get("c", 10)) == (1, None, 3)
    assert cache.get("a", ttl=0) is None
    assert len(cache) == 2
    with pytest.raises(ValueError):
        TTLCache(maxsize=0)


def test_search_and_pages_are_cached_within_the_ttl(server: WebsearchServer) -> None:
    page = server.add_page("/cached", "Cached", P1)
    server.results = [server.result("Cached", "/cached", "snippet")]
    provider = SearxngSearch(server.url, policy=LOOPBACK, timeout=5)
    for _ in range(2):
        results = cached_search(provider, "mona lisa", 5, ttl=60)
        read_results(results, pages=5, options=options(cache_ttl=60))
    assert len(server.requests_to("/search")) == 1
    assert len(server.requests_to("/cached")) == 1
    assert len(SEARCH_CACHE) == 1 and len(PAGE_CACHE) == 1
    # Another provider setting or query is another search.
    cached_search(provider, "Mona  LISA", 5, ttl=60)
    cached_search(provider, "mona lisa", 3, ttl=60)
    assert len(server.requests_to("/search")) == 2
    # A stricter reading policy does not reuse a page read under a looser one.
    other = read_results(results, pages=5, options=options(cache_ttl=60, allowed_hosts=""))
    assert other.notes and len(server.requests_to("/cached")) == 1
    assert page == results[0].url


class SteppedClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_ttl_cache_entries_expire_on_its_clock() -> None:
    clock = SteppedClock()
    cache: TTLCache[str, int] = TTLCache(clock=clock)
    cache.put("a", 1)
    clock.now += 9.99
    assert cache.get("a", ttl=10) == 1
    clock.now += 0.01
    assert cache.get("a", ttl=10) is None  # exactly ttl seconds old: expired
    assert cache.get("a", ttl=10.5) == 1  # a longer ttl of another run still finds it


def test_cache_expires_after_the_ttl(
    server: WebsearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SteppedClock()
    monkeypatch.setattr(SEARCH_CACHE, "clock", clock)
    monkeypatch.setattr(PAGE_CACHE, "clock", clock)
    server.add_page("/expiring", "Expiring", P1)
    server.results = [server.result("Expiring", "/expiring", "snippet")]
    provider = SearxngSearch(server.url, policy=LOOPBACK, timeout=5)
    for _ in range(2):
        results = cached_search(provider, "q", 5, ttl=0.2)
        read_results(results, pages=5, options=options(cache_ttl=0.2))
        clock.now += 0.3
    assert len(server.requests_to("/search")) == 2
    assert len(server.requests_to("/expiring")) == 2


def test_failures_are_not_cached(server: WebsearchServer) -> None:
    server.search_status = 404
    provider = SearxngSearch(server.url, policy=LOOPBACK, timeout=5)
    for _ in range(2):
        with pytest.raises(SearchUnavailableError):
            cached_search(provider, "q", 5, ttl=60)
    assert len(server.requests_to("/search")) == 2


# --------------------------------------------------------------------------------------------
# Retries


def test_rate_limit_is_retried_once_then_noted(server: WebsearchServer) -> None:
    server.search_status = 429
    components = FakeComponents(
        store=StaticStore([]),
        scorer=FixedScoreEvaluator({}),
        chat=scripted_chat(),
        web=SearxngSearch(server.url, policy=LOOPBACK, timeout=5),
    )
    runtime = Runtime(
        context=RunSettings(
            deployment=deployment_with(search_provider="searxng", search_url=server.url)
        )
    )
    update = web_search({"question": "q", "search_query": "mona lisa"}, runtime, components)
    assert len(server.requests_to("/search")) == 2
    assert update["external_knowledge"] == []
    assert update["notes"] == [
        f"web search unavailable: SearxNG at {server.url} rate-limited the search (HTTP 429 Too "
        "Many Requests); wait a minute and try again; answered without web knowledge"
    ]


def test_duckduckgo_rate_limit_is_retried_once_then_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def text(self: DDGS, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        calls.append(query)
        raise RatelimitException("202 Ratelimit")

    monkeypatch.setattr(DDGS, "text", text)
    components = FakeComponents(
        store=StaticStore([]),
        scorer=FixedScoreEvaluator({}),
        chat=scripted_chat(),
        web=DuckDuckGoSearch(timeout=3),
    )
    runtime = Runtime(context=RunSettings())
    update = web_search({"question": "q", "search_query": "mona lisa"}, runtime, components)
    assert calls == ["mona lisa wikipedia", "mona lisa wikipedia"]
    assert update["notes"] == [
        "web search unavailable: DuckDuckGo rate-limited the search; wait a minute and try "
        "again, or use the 'searxng' search provider; answered without web knowledge"
    ]


@pytest.mark.parametrize(("status", "attempts"), [(500, 2), (503, 2), (404, 1), (403, 1)])
def test_only_transient_failures_are_retried(
    server: WebsearchServer, status: int, attempts: int
) -> None:
    server.search_status = status
    with pytest.raises(SearchUnavailableError, match=f"HTTP {status}"):
        search_with_retry(SearxngSearch(server.url, policy=LOOPBACK, timeout=5), "q", 5)
    assert len(server.requests_to("/search")) == attempts


def test_retry_recovers_after_one_failure() -> None:
    class Flaky:
        name = "flaky"
        calls = 0

        def search(self, query: str, max_results: int) -> list[SearchResult]:
            self.calls += 1
            if self.calls == 1:
                raise TransientSearchError("busy")
            return [hit("https://example.org/")]

    flaky = Flaky()
    assert len(search_with_retry(flaky, "q", 5, backoff=0)) == 1
    assert flaky.calls == 2


# --------------------------------------------------------------------------------------------
# Providers: registry settings and Tavily


def test_registry_passes_duckduckgo_settings() -> None:
    ddg: Any = create_search_provider(
        SearchSettings(
            "duckduckgo", url="", timeout=3, region="de-de", safesearch="off", backend="wikipedia"
        )
    )
    assert (ddg.region, ddg.safesearch, ddg.backend) == ("de-de", "off", "wikipedia")
    assert ddg.cache_key == ("duckduckgo", "de-de", "off", "wikipedia")
    same = get_search_provider(SearchSettings("duckduckgo", url="", timeout=3, region="de-de"))
    assert (
        get_search_provider(SearchSettings("duckduckgo", url="x", timeout=3, region="de-de"))
        is same
    )
    assert (
        get_search_provider(SearchSettings("duckduckgo", url="", timeout=3, region="fr-fr"))
        is not same
    )


class FakeTavilyClient:
    instances: list[FakeTavilyClient] = []  # noqa: RUF012
    outcome: Any = None

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.calls: list[dict[str, Any]] = []
        FakeTavilyClient.instances.append(self)

    def search(self, query: str, **kwargs: Any) -> Any:
        self.calls.append({"query": query, **kwargs})
        if isinstance(FakeTavilyClient.outcome, Exception):
            raise FakeTavilyClient.outcome
        return FakeTavilyClient.outcome


@pytest.fixture
def fake_tavily(monkeypatch: pytest.MonkeyPatch) -> type[FakeTavilyClient]:
    module = types.ModuleType("tavily")
    module.TavilyClient = FakeTavilyClient  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tavily", module)
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    FakeTavilyClient.instances = []
    FakeTavilyClient.outcome = {
        "results": [
            {
                "title": "Mona Lisa - Wikipedia",
                "url": "https://en.wikipedia.org/wiki/Mona_Lisa",
                "content": "A portrait  by Leonardo.",
            },
            {"title": "FTP", "url": "ftp://example.org/x", "content": "dropped"},
            "not a dict",
        ]
    }
    return FakeTavilyClient


def test_tavily_maps_results(fake_tavily: type[FakeTavilyClient]) -> None:
    provider = create_search_provider(
        SearchSettings("tavily", url="", timeout=4, only_wikipedia=True)
    )
    assert provider.search(" mona lisa ", max_results=3) == [
        SearchResult(
            "Mona Lisa - Wikipedia",
            "https://en.wikipedia.org/wiki/Mona_Lisa",
            "A portrait by Leonardo.",
        )
    ]
    (client,) = fake_tavily.instances
    assert client.api_key == "tvly-test"
    assert client.calls == [
        {
            "query": "mona lisa",
            "max_results": 3,
            "search_depth": "basic",
            "include_domains": ["wikipedia.org"],
            "timeout": 4.0,
        }
    ]


def named_error(name: str, message: str = "detail") -> Exception:
    error: Exception = type(name, (Exception,), {})(message)
    return error


@pytest.mark.parametrize(
    ("error", "expected", "transient"),
    [
        (named_error("UsageLimitExceededError"), "rate-limited", True),
        (named_error("InvalidAPIKeyError"), "refused the API key", False),
        (named_error("TimeoutError"), "timed out after 10 s", True),
        (ConnectionError("offline"), "could not be reached", False),
        (named_error("BadRequestError", "query too long"), "query too long", False),
        (ValueError("odd"), r"failed \(ValueError: odd\)", False),
    ],
)
def test_tavily_errors(
    fake_tavily: type[FakeTavilyClient], error: Exception, expected: str, transient: bool
) -> None:
    fake_tavily.outcome = error
    with pytest.raises(SearchUnavailableError, match=expected) as info:
        TavilySearch().search("q", max_results=5)
    assert isinstance(info.value, TransientSearchError) is transient


def test_tavily_needs_key_and_package(
    fake_tavily: type[FakeTavilyClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAVILY_API_KEY")
    with pytest.raises(SearchUnavailableError, match="set TAVILY_API_KEY"):
        TavilySearch().search("q", max_results=5)
    monkeypatch.setitem(sys.modules, "tavily", None)
    with pytest.raises(SearchUnavailableError, match=r"pip install 'crag\[tavily\]'"):
        TavilySearch(api_key="k").search("q", max_results=5)
    assert TavilySearch().search("  ", max_results=5) == []
