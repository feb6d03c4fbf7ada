"""Tests of the web search package, against a local server only (no internet needed)."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx
import pytest
from ddgs.ddgs import DDGS
from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException

from crag.settings.context import Context
from crag.settings.deployment import deployment_with
from crag.settings.run_settings import RunSettings
from crag.websearch.base import SearchProvider, SearchResult, SearchUnavailableError
from crag.websearch.duckduckgo import DuckDuckGoSearch
from crag.websearch.ranking import is_wikipedia, normalize_url, rank_results, wikipedia_query
from crag.websearch.registry import (
    SEARCH_PROVIDERS,
    SearchSettings,
    create_search_provider,
    get_search_provider,
)
from crag.websearch.safety import AddressPolicy
from crag.websearch.searxng import SearxngSearch
from tests import websearch_server as _shared
from tests.process_caches import clear_search_provider_cache
from tests.websearch_server import LOOPBACK, LOOPBACK_HOSTS, WebsearchServer

# The shared fixture, registered here under a shorter name (pytest uses the attribute name).
server = _shared.websearch_server


def free_port() -> int:
    """A port nobody listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------
# SearxNG


def test_searxng_maps_results_and_sends_query(server: WebsearchServer) -> None:
    page = server.add_page("/wiki/Paris", "Paris", "Paris is the capital of France.")
    server.results = [
        server.result("Paris - Wikipedia", page, "  Paris is the\ncapital of France. "),
        {"title": "", "url": "https://example.org/paris", "content": ""},
        {"title": "FTP", "url": "ftp://example.org/file", "content": "not http"},
        {"title": "JS", "url": "javascript:alert(1)", "content": "not http"},
        {"title": "No URL", "content": "dropped"},
        {"title": "Third", "url": "http://example.com/3", "content": "c"},
    ]
    provider = SearxngSearch(server.url + "/", policy=LOOPBACK, timeout=5)

    results = provider.search("  capital of France ", max_results=2)

    assert results == [
        SearchResult("Paris - Wikipedia", page, "Paris is the capital of France."),
        SearchResult("https://example.org/paris", "https://example.org/paris", ""),
    ]
    assert server.search_queries() == ["capital of France"]
    (request,) = server.requests_to("/search")
    assert request.method == "GET"
    assert request.param("format") == "json"
    assert "json" in request.headers["accept"]
    # The result URL points back at the server: the page is really there.
    assert "capital of France" in httpx.get(page).text


def test_searxng_all_results_and_empty(server: WebsearchServer) -> None:
    provider = SearxngSearch(server.url, policy=LOOPBACK, timeout=5)
    assert provider.search("nothing here", max_results=5) == []
    server.results = lambda q: [server.result(f"hit for {q}", "/a", "x")]
    assert provider.search("dynamic", max_results=5)[0].title == "hit for dynamic"


def test_searxng_skips_blank_query_without_request(server: WebsearchServer) -> None:
    provider = SearxngSearch(server.url, policy=LOOPBACK)
    assert provider.search("   ", max_results=5) == []
    assert provider.search("q", max_results=0) == []
    assert server.requests == []


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (429, "rate-limited"),
        (500, "HTTP 500 Internal Server Error"),
        (502, "HTTP 502"),
        (404, "HTTP 404"),
        (403, "search.formats"),
    ],
)
def test_searxng_http_errors(server: WebsearchServer, status: int, expected: str) -> None:
    server.search_status = status
    with pytest.raises(SearchUnavailableError, match=expected) as info:
        SearxngSearch(server.url, policy=LOOPBACK, timeout=5).search("q", max_results=5)
    assert server.url in str(info.value)


def test_searxng_redirect_is_not_followed(server: WebsearchServer) -> None:
    server.add_route("/search", status=302, headers={"Location": "http://127.0.0.1:1/elsewhere"})
    with pytest.raises(SearchUnavailableError, match="redirect"):
        SearxngSearch(server.url, policy=LOOPBACK, timeout=5).search("q", max_results=5)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("<html><body>I am a web page</body></html>", "text/html"),
        ('{"query": "q"}', "application/json"),
        ('{"results": "not a list"}', "application/json"),
        ("[1, 2, 3]", "application/json"),
        (b"\xff\xfe\x00garbage", "application/octet-stream"),
        ("", "application/json"),
    ],
)
def test_searxng_not_json(server: WebsearchServer, body: str | bytes, content_type: str) -> None:
    server.search_body = body
    server.search_content_type = content_type
    with pytest.raises(SearchUnavailableError, match="not SearxNG JSON"):
        SearxngSearch(server.url, policy=LOOPBACK, timeout=5).search("q", max_results=5)


def test_searxng_refuses_huge_answer(
    server: WebsearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("crag.websearch.searxng.MAX_RESPONSE_BYTES", 1000)
    server.results = [server.result(f"t{i}", f"/p{i}", "x" * 100) for i in range(50)]
    with pytest.raises(SearchUnavailableError, match="more than 1000 bytes"):
        SearxngSearch(server.url, policy=LOOPBACK, timeout=5).search("q", max_results=5)


def test_searxng_unresponsive_engines_without_results(server: WebsearchServer) -> None:
    server.unresponsive_engines = [["google", "CAPTCHA"], ["bing", "timeout"]]
    with pytest.raises(SearchUnavailableError, match="google: CAPTCHA"):
        SearxngSearch(server.url, policy=LOOPBACK, timeout=5).search("q", max_results=5)
    # With some results, unresponsive engines do not matter.
    server.results = [server.result("t", "/t", "c")]
    provider = SearxngSearch(server.url, policy=LOOPBACK, timeout=5)
    assert len(provider.search("q", max_results=5)) == 1


def test_searxng_connection_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(SearchUnavailableError, match="could not be reached") as info:
        SearxngSearch(url, policy=LOOPBACK, timeout=3).search("q", max_results=5)
    assert url in str(info.value)
    assert time.monotonic() - started < 3


def test_searxng_slow_server_times_out(server: WebsearchServer) -> None:
    server.search_delay = 5.0
    started = time.monotonic()
    with pytest.raises(SearchUnavailableError, match=r"within 0\.5 s"):
        SearxngSearch(server.url, policy=LOOPBACK, timeout=0.5).search("q", max_results=5)
    assert time.monotonic() - started < 2.0


def test_searxng_keeps_no_cookies(server: WebsearchServer) -> None:
    body = json.dumps({"query": "q", "results": []})
    server.add_route(
        "/search",
        body,
        content_type="application/json",
        headers={"Set-Cookie": "session=abc; Path=/"},
    )
    provider = SearxngSearch(server.url, policy=LOOPBACK, timeout=5)
    provider.search("one", max_results=5)
    provider.search("two", max_results=5)
    assert [r.headers.get("cookie") for r in server.requests_to("/search")] == [None, None]


@pytest.mark.parametrize("url", ["", "127.0.0.1:8888", "ftp://host", "http://", "not a url"])
def test_searxng_rejects_bad_base_url(url: str) -> None:
    with pytest.raises(ValueError, match="http"):
        SearxngSearch(url)


def test_searxng_rejects_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout"):
        SearxngSearch("http://127.0.0.1:8888", timeout=0)


# --------------------------------------------------------------------------------------------
# The SearxNG endpoint's address: the same rules as pages


def _resolving(monkeypatch: pytest.MonkeyPatch, answers: dict[str, str]) -> list[str]:
    """Stub the SearxNG client's resolver: host name -> one address; returns the names asked."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        if host not in answers:  # a literal address, when connecting
            return real(host, port, *args, **kwargs)
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def _no_connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record (and refuse) every TCP connection the SearxNG client would open."""
    attempts: list[str] = []

    def connect_tcp(self: Any, host: str, port: int, **kwargs: Any) -> Any:
        attempts.append(f"{host}:{port}")
        raise httpcore.ConnectError("no connections in this test")

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", connect_tcp)
    return attempts


def test_searxng_on_a_loopback_address_is_refused_unless_allowed(server: WebsearchServer) -> None:
    server.results = [server.result("t", "/t", "c")]
    with pytest.raises(SearchUnavailableError) as info:
        SearxngSearch(server.url, timeout=5).search("q", max_results=5)
    assert str(info.value) == (
        f"SearxNG at {server.url} was not queried: 127.0.0.1 is a loopback address; list it "
        "in allowed_hosts (CRAG_ALLOWED_HOSTS) if it is a trusted instance"
    )
    assert server.requests_to("/search") == []
    allowed = SearxngSearch(server.url, timeout=5, policy=LOOPBACK)
    assert len(allowed.search("q", max_results=5)) == 1


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://10.1.2.3:8888", "10.1.2.3 is a private address"),
        ("http://169.254.169.254/", "169.254.169.254 is a link-local address"),
        ("http://[::1]:8888", "::1 is a loopback address"),
        ("http://0.0.0.0:8888", "0.0.0.0 is an unspecified address"),
    ],
)
def test_searxng_on_a_literal_non_public_address_is_refused_without_connecting(
    monkeypatch: pytest.MonkeyPatch, url: str, reason: str
) -> None:
    attempts = _no_connections(monkeypatch)
    with pytest.raises(SearchUnavailableError, match=re.escape(f"was not queried: {reason}")):
        SearxngSearch(url, timeout=2).search("q", max_results=5)
    assert attempts == []


def test_searxng_name_resolving_to_a_private_address_is_refused_before_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = _resolving(monkeypatch, {"searx.internal": "10.0.0.7"})
    attempts = _no_connections(monkeypatch)
    with pytest.raises(SearchUnavailableError) as info:
        SearxngSearch("http://searx.internal:8080", timeout=2).search("q", max_results=5)
    assert "searx.internal resolves to 10.0.0.7, a private address" in str(info.value)
    assert asked == ["searx.internal"]
    assert attempts == []
    # The operator's allow-list lets it through (here to the refused connection stub).
    policy = AddressPolicy.from_setting("10.0.0.0/8")
    with pytest.raises(SearchUnavailableError, match="could not be reached"):
        SearxngSearch("http://searx.internal:8080", timeout=2, policy=policy).search("q", 5)
    assert attempts == ["10.0.0.7:8080"]


def test_searxng_connects_to_the_address_it_checked(
    server: WebsearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An allowed host name is resolved once and the connection goes to that very address, with
    # the name still sent as Host.
    port = server.url.rsplit(":", 1)[1]
    asked = _resolving(monkeypatch, {"searx.test": "127.0.0.1"})
    server.results = [server.result("t", "/t", "c")]
    provider = SearxngSearch(
        f"http://searx.test:{port}", timeout=5, policy=AddressPolicy.from_setting("searx.test")
    )
    assert len(provider.search("q", max_results=5)) == 1
    assert asked == ["searx.test"]
    (request,) = server.requests_to("/search")
    assert request.headers.get("host") == f"searx.test:{port}"


def test_registry_passes_allowed_hosts_to_searxng(server: WebsearchServer) -> None:
    clear_search_provider_cache()
    refused = get_search_provider(SearchSettings("searxng", url=server.url, timeout=5))
    allowed = get_search_provider(
        SearchSettings("searxng", url=server.url, timeout=5, allowed_hosts="127.0.0.1")
    )
    assert refused is not allowed
    with pytest.raises(SearchUnavailableError, match="loopback"):
        refused.search("q", max_results=5)
    assert allowed.search("q", max_results=5) == []
    # Other providers ignore the setting (and are not made twice for it).
    ddg = get_search_provider(SearchSettings("duckduckgo", url="", timeout=5))
    assert (
        get_search_provider(
            SearchSettings("duckduckgo", url="", timeout=5, allowed_hosts="10.0.0.0/8")
        )
        is ddg
    )
    clear_search_provider_cache()


# --------------------------------------------------------------------------------------------
# DuckDuckGo (ddgs)


class FakeText:
    """Stands in for ``DDGS.text``: records calls, returns or raises what it is given."""

    def __init__(self, outcome: list[dict[str, Any]] | BaseException, sleep: float = 0.0):
        self.outcome = outcome
        self.sleep = sleep
        self.calls: list[tuple[str, dict[str, Any], Any]] = []

    def __call__(self, ddgs: DDGS, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append((query, kwargs, ddgs._timeout))
        if self.sleep:
            time.sleep(self.sleep)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


@pytest.fixture
def fake_text(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def install(outcome: list[dict[str, Any]] | BaseException, sleep: float = 0.0) -> FakeText:
        fake = FakeText(outcome, sleep)

        def text(self: DDGS, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            return fake(self, query, **kwargs)

        monkeypatch.setattr(DDGS, "text", text)
        return fake

    yield install


def test_ddg_maps_results(fake_text: Any) -> None:
    fake = fake_text(
        [
            {
                "title": "Paris - Wikipedia",
                "href": "https://en.wikipedia.org/wiki/Paris",
                "body": "Paris is\n the capital.",
            },
            {"title": "", "href": "https://example.org/", "body": None},
            {"title": "no href", "body": "dropped"},
            {"title": "bad scheme", "href": "mailto:x@example.org", "body": "dropped"},
            "not a dict",
            {"title": "Third", "href": "http://example.com/3", "body": "3"},
            {"title": "Fourth", "href": "http://example.com/4", "body": "4"},
        ]
    )
    provider = DuckDuckGoSearch(timeout=4, region="uk-en", safesearch="off", backend="duckduckgo")

    results = provider.search(" capital of France ", max_results=3)

    assert results == [
        SearchResult(
            "Paris - Wikipedia", "https://en.wikipedia.org/wiki/Paris", "Paris is the capital."
        ),
        SearchResult("https://example.org/", "https://example.org/", ""),
        SearchResult("Third", "http://example.com/3", "3"),
    ]
    ((query, kwargs, ddgs_timeout),) = fake.calls
    assert query == "capital of France"
    assert kwargs == {
        "region": "uk-en",
        "safesearch": "off",
        "max_results": 3,
        "backend": "duckduckgo",
    }
    assert ddgs_timeout == 4


def test_ddg_defaults() -> None:
    provider = DuckDuckGoSearch()
    assert provider.name == "duckduckgo"
    assert (provider.timeout, provider.safesearch, provider.backend) == (10.0, "moderate", "auto")
    assert isinstance(provider, SearchProvider)


def test_ddg_empty_results_are_not_an_error(fake_text: Any) -> None:
    fake_text([])
    assert DuckDuckGoSearch(timeout=3).search("q", max_results=5) == []
    fake_text(DDGSException("No results found."))
    assert DuckDuckGoSearch(timeout=3).search("q", max_results=5) == []


def test_ddg_blank_query_is_not_sent(fake_text: Any) -> None:
    fake = fake_text([])
    assert DuckDuckGoSearch(timeout=3).search("  ", max_results=5) == []
    assert DuckDuckGoSearch(timeout=3).search("q", max_results=0) == []
    assert fake.calls == []


DNS_ERROR = (
    "DNSError: DNSError('error sending request for url (https://html.duckduckgo.com/html/) > "
    "error resolving DNS > DNS error: no records found')"
)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RatelimitException("202 Ratelimit"), r"DuckDuckGo rate-limited the search"),
        (DDGSException(RatelimitException("x")), r"DuckDuckGo rate-limited the search"),
        (TimeoutException("read timed out"), r"DuckDuckGo search timed out after 3 s"),
        (DDGSException(DDGSException(DNS_ERROR)), r"could not be reached \(DNS lookup failed"),
        (DDGSException("Connection refused"), r"could not be reached \(connection failed"),
        (DDGSException("something odd"), r"could not be reached \(something odd\)"),
        (httpx.ConnectError("boom"), r"could not be reached"),
        (ConnectionResetError("reset by peer"), r"could not be reached"),
        (TimeoutError("timed out"), r"timed out after 3 s"),
        (ValueError("parser broke"), r"DuckDuckGo search failed \(ValueError: parser broke\)"),
    ],
)
def test_ddg_translates_errors(fake_text: Any, error: BaseException, expected: str) -> None:
    fake_text(error)
    with pytest.raises(SearchUnavailableError, match=expected):
        DuckDuckGoSearch(timeout=3).search("q", max_results=5)


def test_ddg_overall_deadline(fake_text: Any) -> None:
    fake_text([{"title": "late", "href": "https://example.org", "body": ""}], sleep=5.0)
    started = time.monotonic()
    with pytest.raises(SearchUnavailableError, match=r"timed out after 0\.5 s"):
        DuckDuckGoSearch(timeout=0.5).search("q", max_results=5)
    assert time.monotonic() - started < 1.5


def test_ddg_unreachable_through_dead_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real ddgs, forced offline (a proxy nobody listens on): fails fast with a clear message."""
    monkeypatch.setenv("DDGS_PROXY", f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(SearchUnavailableError, match="DuckDuckGo"):
        DuckDuckGoSearch(timeout=3, backend="duckduckgo").search("python", max_results=3)
    assert time.monotonic() - started < 5


def test_ddg_real_call_is_bounded() -> None:
    """Real ddgs, default settings: offline it raises quickly; online it may return hits."""
    started = time.monotonic()
    try:
        results = DuckDuckGoSearch(timeout=3).search("corrective retrieval", max_results=3)
    except SearchUnavailableError as exc:
        assert "DuckDuckGo" in str(exc)
    else:  # pragma: no cover - only with network access
        assert all(isinstance(r, SearchResult) for r in results)
    assert time.monotonic() - started < 5


# --------------------------------------------------------------------------------------------
# Ranking


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Who wrote Hamlet?", "Who wrote Hamlet? wikipedia"),
        ("  Paris  ", "Paris wikipedia"),
        ("Paris Wikipedia", "Paris Wikipedia"),
        ("WIKIPEDIA paris", "WIKIPEDIA paris"),
        ("paris site:en.wikipedia.org", "paris site:en.wikipedia.org"),
        ("wikipedians", "wikipedians wikipedia"),
        ("", ""),
        ("   ", ""),
    ],
)
def test_wikipedia_query(query: str, expected: str) -> None:
    assert wikipedia_query(query) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://en.wikipedia.org/wiki/Paris", True),
        ("https://en.m.wikipedia.org/wiki/Paris", True),
        ("http://wikipedia.org/", True),
        ("https://DE.WIKIPEDIA.ORG/wiki/Berlin", True),
        ("https://en.wikipedia.org.:443/wiki/X", True),
        ("https://notwikipedia.org/wiki/Paris", False),
        ("https://wikipedia.org.evil.example/wiki", False),
        ("https://example.org/wikipedia.org", False),
        ("https://en.wikibooks.org/wiki/Paris", False),
        ("not a url", False),
        ("http://[::1", False),
        ("", False),
    ],
)
def test_is_wikipedia(url: str, expected: bool) -> None:
    assert is_wikipedia(url) is expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://Example.ORG/a/#frag", "https://example.org/a"),
        ("https://example.org/", "https://example.org"),
        ("https://example.org/a?x=1#y", "https://example.org/a?x=1"),
        ("https://example.org/A", "https://example.org/A"),
    ],
)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


def r(url: str) -> SearchResult:
    return SearchResult(title=url, url=url, snippet="")


W1 = "https://en.wikipedia.org/wiki/A"
W2 = "https://fr.wikipedia.org/wiki/B"
O1 = "https://example.org/1"
O2 = "https://example.com/2"


@pytest.mark.parametrize(
    ("urls", "prefer", "only", "expected"),
    [
        ([O1, W1, O2, W2], True, False, [W1, W2, O1, O2]),
        ([O1, W1, O2, W2], False, False, [O1, W1, O2, W2]),
        ([O1, W1, O2, W2], True, True, [W1, W2]),
        ([O1, W1, O2, W2], False, True, [W1, W2]),
        ([O1, O2], True, False, [O1, O2]),
        ([O1, O2], True, True, []),
        ([], True, False, []),
        ([O1, O1 + "/", O1 + "#x", W1, W1 + "#History"], True, False, [W1, O1]),
        ([O2, O1, O2], False, False, [O2, O1]),
    ],
)
def test_rank_results(urls: list[str], prefer: bool, only: bool, expected: list[str]) -> None:
    ranked = rank_results([r(u) for u in urls], prefer_wikipedia=prefer, only_wikipedia=only)
    assert [x.url for x in ranked] == expected


def test_rank_results_keeps_first_duplicate() -> None:
    first = SearchResult("first", O1, "a")
    second = SearchResult("second", O1 + "/", "b")
    assert rank_results([first, second], prefer_wikipedia=True) == [first]


# --------------------------------------------------------------------------------------------
# Registry


def test_create_search_provider() -> None:
    ddg = create_search_provider(SearchSettings("duckduckgo", url="", timeout=4))
    assert isinstance(ddg, DuckDuckGoSearch)
    assert ddg.timeout == 4
    sx = create_search_provider(
        SearchSettings(" SearxNG ", url="http://127.0.0.1:8888/", timeout=2.5)
    )
    assert isinstance(sx, SearxngSearch)
    assert (sx.base_url, sx.timeout, sx.name) == ("http://127.0.0.1:8888", 2.5, "searxng")
    assert isinstance(sx, SearchProvider)


def test_unknown_provider_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown search provider 'bing'") as info:
        create_search_provider(SearchSettings("bing", url="", timeout=1))
    for name in SEARCH_PROVIDERS:
        assert name in str(info.value)
    with pytest.raises(ValueError, match="duckduckgo, searxng"):
        get_search_provider(SearchSettings("google", url="", timeout=1))


def test_search_settings_come_from_the_runs_context_and_the_deployment() -> None:
    deployment = deployment_with(
        search_provider="searxng",
        search_url=" http://127.0.0.1:8888 ",
        search_timeout=3,
        allowed_hosts="127.0.0.1",
    )
    context = Context(search_region="de-de", only_wikipedia=True)
    settings = SearchSettings.from_context(RunSettings.combine(context, deployment=deployment))
    assert settings == SearchSettings(
        "searxng",
        url=" http://127.0.0.1:8888 ",
        timeout=3.0,
        region="de-de",
        allowed_hosts="127.0.0.1",
        only_wikipedia=True,
    )
    # What the searxng provider ignores does not count.
    assert settings.relevant() == SearchSettings(
        "searxng", url="http://127.0.0.1:8888", timeout=3.0, allowed_hosts="127.0.0.1"
    )


def test_get_search_provider_caches() -> None:
    clear_search_provider_cache()
    a = get_search_provider(SearchSettings("searxng", url="http://127.0.0.1:8888", timeout=10))
    assert (
        get_search_provider(SearchSettings("searxng", url="http://127.0.0.1:8888", timeout=10.0))
        is a
    )
    assert (
        get_search_provider(SearchSettings("searxng", url="http://127.0.0.1:9999", timeout=10))
        is not a
    )
    d = get_search_provider(SearchSettings("duckduckgo", url="http://x", timeout=10))
    assert get_search_provider(SearchSettings("duckduckgo", url="http://y", timeout=10)) is d
    assert get_search_provider(SearchSettings("duckduckgo", url="", timeout=5)) is not d
    clear_search_provider_cache()
    assert get_search_provider(SearchSettings("duckduckgo", url="", timeout=10)) is not d


def test_registry_searxng_end_to_end(server: WebsearchServer) -> None:
    server.results = [
        server.result("Other", "https://example.org/paris", "o"),
        server.result("Paris - Wikipedia", "https://en.wikipedia.org/wiki/Paris", "w"),
    ]
    provider = create_search_provider(
        SearchSettings("searxng", url=server.url, timeout=5, allowed_hosts=LOOPBACK_HOSTS)
    )
    hits = provider.search(wikipedia_query("Paris"), max_results=5)
    ranked = rank_results(hits, prefer_wikipedia=True)
    assert [h.title for h in ranked] == ["Paris - Wikipedia", "Other"]
    assert server.search_queries() == ["Paris wikipedia"]
