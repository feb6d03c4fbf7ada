from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from urllib.error import HTTPError
from urllib.request import urlopen

import pytest

from crag.websearch.cache import clear_web_caches
from crag.websearch.ranking import wikipedia_query
from crag.websearch.reader import ReaderOptions, read_results
from crag.websearch.registry import SearchSettings, create_search_provider
from crag.websearch.searxng import SearxngSearch
from crag_bench.simweb import (
    SNIPPET_CHARS,
    SimulatedWeb,
    WebDocument,
    corpus_web_documents,
    page_html,
    snippet,
)

EIFFEL = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
    "It is named after the engineer Gustave Eiffel, whose company designed the tower.\n\n"
    "Locally nicknamed La dame de fer, it was constructed as the centerpiece of the 1889 "
    "World's Fair, and to crown the centennial anniversary of the French Revolution."
)
DOCUMENTS = (
    WebDocument("Eiffel Tower", EIFFEL),
    WebDocument(
        "Great Wall of China",
        "The Great Wall of China is a series of fortifications that were built across the "
        "historical northern borders of ancient Chinese states and Imperial China.",
    ),
    WebDocument(
        "Mount Everest",
        "Mount Everest is the highest mountain above sea level on Earth, located in the "
        "Mahalangur Himal sub-range of the Himalayas on the border of Nepal and China.",
    ),
    WebDocument(
        "HIV/AIDS",
        "Human immunodeficiency virus infection and acquired immunodeficiency syndrome is a "
        "spectrum of conditions caused by infection with the human immunodeficiency virus.",
    ),
    WebDocument("Tower", "A tower is a tall structure, taller than it is wide, often tall."),
)


@pytest.fixture(autouse=True)
def fresh_caches() -> Iterator[None]:
    clear_web_caches()
    yield
    clear_web_caches()


@pytest.fixture
def web() -> Iterator[SimulatedWeb]:
    with SimulatedWeb(DOCUMENTS) as running:
        yield running


def provider(web: SimulatedWeb) -> SearxngSearch:
    made = create_search_provider(
        SearchSettings("searxng", url=web.base_url, timeout=5.0, allowed_hosts=web.allowed_hosts)
    )
    assert isinstance(made, SearxngSearch)
    return made


def options(web: SimulatedWeb) -> ReaderOptions:
    return ReaderOptions(timeout=5.0, allowed_hosts=web.allowed_hosts, cache_ttl=0.0)


def get_json(url: str) -> dict[str, object]:
    with urlopen(url, timeout=5) as response:
        data = json.loads(response.read())
    assert isinstance(data, dict)
    return data


def test_search_through_the_searxng_provider_ranks_the_page_first(web: SimulatedWeb) -> None:
    results = provider(web).search(wikipedia_query("Who designed the Eiffel Tower?"), 3)
    assert [r.title for r in results][:2] == ["Eiffel Tower - Wikipedia", "Tower - Wikipedia"]
    assert results[0].url == web.page_url("Eiffel Tower")
    assert results[0].url.startswith(f"{web.base_url}/wiki/")
    assert results[0].snippet.startswith("The Eiffel Tower is a wrought-iron lattice tower")
    top = provider(web).search("highest mountain Nepal", 5)
    assert [r.title for r in top] == ["Mount Everest - Wikipedia"]


def test_reader_reads_the_pages_paragraphs(web: SimulatedWeb) -> None:
    results = provider(web).search("Eiffel Tower Paris", 1)
    reading = read_results(results, pages=1, options=options(web))
    assert reading.notes == []
    assert all(p.from_page for p in reading.passages)
    assert [p.source for p in reading.passages] == [web.page_url("Eiffel Tower")] * 2
    first, second = (p.text for p in reading.passages)
    assert first.startswith("Eiffel Tower\nThe Eiffel Tower is a wrought-iron lattice tower")
    assert second.startswith("Eiffel Tower\nLocally nicknamed La dame de fer")
    assert second.endswith("French Revolution.")


def test_title_with_a_slash_has_a_readable_page(web: SimulatedWeb) -> None:
    results = provider(web).search("immunodeficiency virus", 1)
    assert results[0].url == web.page_url("HIV/AIDS")
    reading = read_results(results, pages=1, options=options(web))
    assert reading.passages[0].text.startswith("HIV/AIDS\nHuman immunodeficiency virus")
    assert reading.passages[0].from_page


def test_search_json_matches_searxng_shape(web: SimulatedWeb) -> None:
    data = get_json(f"{web.base_url}/search?q=great+wall&format=json&count=1")
    assert data["query"] == "great wall"
    assert data["number_of_results"] == 1
    assert data["unresponsive_engines"] == []
    assert data["results"] == [
        {
            "url": web.page_url("Great Wall of China"),
            "title": "Great Wall of China - Wikipedia",
            "content": DOCUMENTS[1].text,
            "engine": "simulated",
        }
    ]


def test_empty_and_unknown_queries_find_nothing(web: SimulatedWeb) -> None:
    assert get_json(f"{web.base_url}/search?q=&format=json")["results"] == []
    assert get_json(f"{web.base_url}/search?format=json")["results"] == []
    assert provider(web).search("zyzzyva quux", 5) == []
    assert web.search("the of and", 5) == []


def test_search_is_deterministic_with_ties_broken_by_title() -> None:
    twins = [WebDocument("Zeta", "alpha beta gamma"), WebDocument("Alpha", "alpha beta gamma")]
    with SimulatedWeb(twins) as web:
        assert [d.title for d in web.search("gamma", 5)] == ["Alpha", "Zeta"]
        assert [r.title for r in provider(web).search("gamma", 5)] == [
            "Alpha - Wikipedia",
            "Zeta - Wikipedia",
        ]


def test_unknown_page_and_path_are_404(web: SimulatedWeb) -> None:
    for path in ("/wiki/No%20such%20page", "/elsewhere"):
        with pytest.raises(HTTPError) as caught:
            urlopen(f"{web.base_url}{path}", timeout=5)
        assert caught.value.code == 404
        caught.value.close()


def test_page_is_html_with_escaped_paragraphs(web: SimulatedWeb) -> None:
    with urlopen(web.page_url("Eiffel Tower"), timeout=5) as response:
        assert response.headers["Content-Type"] == "text/html; charset=utf-8"
        body = response.read().decode("utf-8")
    assert "<title>Eiffel Tower - Wikipedia</title>" in body
    assert "<h1>Eiffel Tower</h1>" in body
    assert body.count("<p>") == 2
    html = page_html(WebDocument("A & B", "x < y\n\n<script>z</script>"))
    assert "<title>A &amp; B - Wikipedia</title>" in html
    assert "<p>x &lt; y</p><p>&lt;script&gt;z&lt;/script&gt;</p>" in html


def test_searches_counter(web: SimulatedWeb) -> None:
    assert web.searches == 0
    provider(web).search("tower", 2)
    provider(web).search("wall", 2)
    get_json(f"{web.base_url}/search?q=&format=json")
    urlopen(web.page_url("Tower"), timeout=5).close()
    assert web.searches == 3


def test_not_running_and_stopped() -> None:
    web = SimulatedWeb(DOCUMENTS)
    with pytest.raises(RuntimeError, match="not running"):
        _ = web.base_url
    with web:
        url = web.base_url
        assert url.startswith("http://127.0.0.1:")
        assert web.allowed_hosts == "127.0.0.1"
    with pytest.raises(OSError):
        urlopen(f"{url}/search?q=tower&format=json", timeout=2)


def test_snippet_cuts_at_a_word_boundary() -> None:
    text = " ".join(["word"] * 100)
    cut = snippet(text)
    assert len(cut) <= SNIPPET_CHARS
    assert cut.split() == ["word"] * len(cut.split())
    assert snippet("short  text\nhere") == "short text here"


def test_default_corpus_finds_mona_lisa() -> None:
    documents = corpus_web_documents()
    assert len(documents) > 10_000
    mona = next(d for d in documents if d.title == "Mona Lisa")
    assert mona.text.startswith("The Mona Lisa is a half-length portrait painting")
    with SimulatedWeb() as web:
        results = provider(web).search(wikipedia_query("Who painted the Mona Lisa?"), 3)
        assert "Mona Lisa - Wikipedia" in [r.title for r in results]
        assert web.document("Mona Lisa") == mona


def test_bm25s_logs_at_the_applications_level_not_its_own_debug() -> None:
    """bm25s sets its logger to DEBUG on import; the simulated web hands that back."""
    bm25s_logger = logging.getLogger("bm25s")
    assert bm25s_logger.level == logging.NOTSET
    assert bm25s_logger.getEffectiveLevel() == logging.getLogger().getEffectiveLevel()
