"""The Incorrect and Ambiguous branches end to end, with real web search and page reading.

The compiled graph runs with a fixed-score evaluator and a scripted chat model, but web search
goes through the real wiring (``DefaultComponents.search`` -> registry -> ``SearxngSearch``) to
a local SearxNG stand-in, whose results link to pages on the same local server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from crag.app.wiring import DefaultComponents
from crag.graph.builder import CragGraph, build_graph
from crag.prompts.generate import ABSTENTION, ABSTENTION_WITHOUT_WEB
from crag.settings.context import Context
from crag.settings.deployment import DeploymentSettings, deployment_with
from crag.settings.method import MethodConfig
from crag.websearch import retry as retry_module
from crag.websearch.cache import clear_web_caches
from tests.fakes import (
    FakeComponents,
    FixedScoreEvaluator,
    StaticStore,
    corpus_documents,
    scripted_chat,
)
from tests.websearch_server import WebsearchServer

QUESTION = "Who painted the Mona Lisa?"
P1 = (
    "The Mona Lisa is a half-length portrait painting by the Italian artist Leonardo da Vinci, "
    "painted between 1503 and 1519."
)
P2 = "It is held at the Louvre in Paris, where it has been on permanent display since 1797."
BLOG = "Ten pasta recipes for summer evenings, each ready in less than thirty minutes."
PAGE = f"""<!doctype html><html><head><title>Mona Lisa - Wikipedia</title></head><body>
<nav><p>Main page, contents, current events, random article, about Wikipedia</p></nav>
<main><h1>Mona Lisa</h1><p>{P1}</p><p>{P2}</p></main>
<footer><p>Text is available under the Creative Commons Attribution-ShareAlike License.</p>
</footer></body></html>"""


class WebComponents(FakeComponents):
    """Fakes for store, evaluator and chat; the real search provider from the settings."""

    def search(self, context: Any) -> Any:
        return DefaultComponents().search(context)


@pytest.fixture(scope="module")
def web() -> Iterator[WebsearchServer]:
    with WebsearchServer() as server:
        server.add_route("/wiki/Mona_Lisa", PAGE)
        server.add_page("/blog/pasta", "Pasta", BLOG)
        server.add_route("/files/catalogue.zip", b"PK\x03\x04", content_type="application/zip")
        server.add_route("/broken", "oops", status=500, content_type="text/plain")
        server.results = [
            server.result("Pasta blog", "/blog/pasta", "Recipes."),
            server.result("Mona Lisa - Wikipedia", "/wiki/Mona_Lisa", "SNIPPET of the article."),
            server.result("Catalogue", "/files/catalogue.zip", "A zip file."),
            server.result("Broken", "/broken", "Broken page snippet."),
        ]
        yield server


@pytest.fixture
def server(web: WebsearchServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebsearchServer]:
    web.search_status = None
    with web._lock:
        web.requests = []
    monkeypatch.setattr(retry_module, "SEARCH_BACKOFF", 0.05)
    clear_web_caches()
    yield web
    clear_web_caches()


def components(scores: dict[str, float], default: float) -> WebComponents:
    return WebComponents(
        store=StaticStore(corpus_documents()),
        scorer=FixedScoreEvaluator(scores, default=default),
        chat=scripted_chat(),
    )


# These tests pin which strips each branch gives and which query was searched, so they run the
# paper's recomposition (each branch's strips side by side, in passage order) and its keyword
# rewrite; the defaults (Ambiguous pooled, the question itself searched) are tested in
# test_knowledge_combination.py and test_ablations.py.
PAPER_SETTINGS: dict[str, Any] = {
    "ambiguous_knowledge": "both",
    "knowledge_order": "original",
    "rewrite_for_search": True,
    "upper_threshold": 0.59,
    "lower_threshold": -0.99,
}
"""The paper's recomposition, keyword rewrite and thresholds (not the defaults), which these
tests pin: their scripted scores were chosen around the paper's thresholds."""


def local_search(server: WebsearchServer, **changes: Any) -> DeploymentSettings:
    """The operator's settings with the local SearxNG stand-in as the search provider."""
    return deployment_with(search_provider="searxng", search_url=server.url, **changes)


def paper_graph(fakes: WebComponents, server: WebsearchServer) -> CragGraph:
    """The CRAG graph under :data:`PAPER_SETTINGS`, searching the local stand-in (allowed)."""
    return build_graph(
        components=fakes,
        method=MethodConfig(**PAPER_SETTINGS),
        deployment=local_search(server, allowed_hosts="127.0.0.1", page_timeout=3.0),
    )


def run(graph: CragGraph, mode: str) -> dict[str, Any]:
    inputs: Any = {"question": QUESTION}
    context = Context()  # the run's own settings: the defaults
    if mode == "invoke":
        return dict(graph.invoke(inputs, context=context))
    if mode == "ainvoke":
        return dict(asyncio.run(graph.ainvoke(inputs, context=context)))
    if mode == "stream":
        *_, last = graph.stream(inputs, context=context, stream_mode="values")
        return dict(last)

    async def collect() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async for chunk in graph.astream(inputs, context=context, stream_mode="values"):
            out = chunk
        return out

    return asyncio.run(collect())


MODES = ["invoke", "ainvoke", "stream", "astream"]


@pytest.mark.parametrize("mode", MODES)
def test_incorrect_answers_from_page_paragraphs(server: WebsearchServer, mode: str) -> None:
    fakes = components({"1503": 0.8, "permanent display": 0.6}, default=-1.0)
    out = run(paper_graph(fakes, server), mode)
    wiki = server.url_for("/wiki/Mona_Lisa")
    assert out["action"] == "incorrect"
    assert out["answer"] == "Leonardo da Vinci."
    assert [(k["text"], k["source"], k["origin"]) for k in out["knowledge"]] == [
        (f"Mona Lisa\n{P1}", wiki, "external"),
        (f"Mona Lisa\n{P2}", wiki, "external"),
    ]
    zipped, broken = server.url_for("/files/catalogue.zip"), server.url_for("/broken")
    assert out["notes"] == [
        f"skipped {zipped}: not a web page (application/zip), used its search snippet",
        f"{broken}: page answered HTTP 500 Internal Server Error, used its search snippet",
    ]
    assert server.search_queries() == ["Mona Lisa, painter wikipedia"]
    # One evaluator batch for the web: every paragraph and fallback snippet, not the nav.
    _grade, web_call = fakes.scorer.calls
    assert web_call[1] == [
        f"Pasta\n{BLOG}",
        f"Mona Lisa\n{P1}",
        f"Mona Lisa\n{P2}",
        "Catalogue\nA zip file.",
        "Broken\nBroken page snippet.",
    ]
    # The generator saw the page text, inside the untrusted-knowledge block.
    human = fakes.chat.prompts[-1][1].text
    assert f"<knowledge>\nMona Lisa: {P1}\nMona Lisa: {P2}\n</knowledge>" in human


@pytest.mark.parametrize("mode", MODES)
def test_ambiguous_combines_store_and_pages(server: WebsearchServer, mode: str) -> None:
    fakes = components({"1503": 0.8, "permanent display": 0.6, "Leonardo": 0.3}, default=-1.0)
    out = run(paper_graph(fakes, server), mode)
    assert out["action"] == "ambiguous"
    wiki = server.url_for("/wiki/Mona_Lisa")
    assert [(k["origin"], k["source"]) for k in out["knowledge"]] == [
        ("internal", "wikipedia:Mona Lisa"),
        ("external", wiki),
        ("external", wiki),
    ]
    assert "Leonardo da Vinci" in out["knowledge"][0]["text"]
    assert out["answer"] == "Leonardo da Vinci."
    assert len(server.requests_to("/wiki/Mona_Lisa")) == 1


@pytest.mark.parametrize("mode", MODES)
def test_search_down_is_noted_and_the_run_goes_on(server: WebsearchServer, mode: str) -> None:
    server.search_status = 500
    fakes = components({}, default=-1.0)
    out = run(paper_graph(fakes, server), mode)
    assert out["action"] == "incorrect"
    assert out["answer"] == ABSTENTION and out["abstained"] is True
    assert out["knowledge"] == []
    down = (
        f"web search unavailable: SearxNG at {server.url} answered HTTP 500 Internal Server Error"
    )
    assert out["notes"] == [
        f"{down}; answered without web knowledge",
        "abstained, the generator was not asked: no knowledge passed the strip threshold "
        "(-0.99); store: no passage used: every passage scores below lower threshold -0.99 "
        f"(best -1.000); web: {down}",
    ]
    assert not any("<knowledge>" in p[-1].text for p in fakes.chat.prompts)  # no generation
    assert len(server.requests_to("/search")) == 2  # retried once
    assert server.requests_to("/wiki/Mona_Lisa") == []


def test_second_run_uses_the_cache(server: WebsearchServer) -> None:
    fakes = components({"1503": 0.8}, default=-1.0)
    graph = paper_graph(fakes, server)
    first = run(graph, "invoke")
    second = run(graph, "ainvoke")
    assert first["knowledge"] == second["knowledge"]
    assert len(server.requests_to("/search")) == 1
    assert len(server.requests_to("/wiki/Mona_Lisa")) == 1


def test_snippets_only_and_only_wikipedia(server: WebsearchServer) -> None:
    fakes = components({"of the article": 0.8, "Recipes": 0.7}, default=-1.0)
    graph = build_graph(
        components=fakes,
        method=MethodConfig(fetch_pages=False, **PAPER_SETTINGS),
        deployment=local_search(server, allowed_hosts="127.0.0.1", web_cache_ttl=0),
    )
    out = graph.invoke({"question": QUESTION}, context=Context())
    assert [k["text"] for k in out["knowledge"]] == [
        "Pasta blog\nRecipes.",
        "Mona Lisa\nSNIPPET of the article.",
    ]
    # Only Wikipedia: local pages are not on wikipedia.org, so nothing is left.
    graph = build_graph(
        components=fakes,
        method=MethodConfig(rewrite_for_search=True),
        deployment=local_search(server, allowed_hosts="127.0.0.1"),
    )
    out = graph.invoke({"question": QUESTION}, context=Context(only_wikipedia=True))
    assert out["knowledge"] == []
    assert out["notes"][0] == (
        "web search found nothing usable for 'Mona Lisa, painter wikipedia' (only_wikipedia is on)"
    )
    assert [r.path for r in server.requests if r.path != "/search"] == []


def test_sync_invoke_inside_a_running_event_loop(server: WebsearchServer) -> None:
    fakes = components({"1503": 0.8}, default=-1.0)

    async def caller() -> dict[str, Any]:
        return graph.invoke({"question": QUESTION}, context=Context())

    graph = paper_graph(fakes, server)
    out = asyncio.run(caller())
    assert out["knowledge"][0]["text"] == f"Mona Lisa\n{P1}"


def test_a_search_endpoint_on_a_non_public_address_needs_allowed_hosts(
    server: WebsearchServer,
) -> None:
    # The endpoint gets the same address rules as pages: 127.0.0.1 is refused until the
    # operator's allowed_hosts lists it, and the run goes on without web knowledge.
    fakes = components({"of the article": 0.8}, default=-1.0)
    graph = build_graph(
        components=fakes,
        method=MethodConfig(fetch_pages=False),
        deployment=local_search(server, allowed_hosts=""),
    )
    out = graph.invoke({"question": QUESTION}, context=Context())
    refused = (
        f"web search unavailable: SearxNG at {server.url} was not queried: 127.0.0.1 is a "
        "loopback address; list it in allowed_hosts (CRAG_ALLOWED_HOSTS) if it is a trusted "
        "instance"
    )
    assert out["notes"] == [
        f"{refused}; answered without web knowledge",
        "abstained, the generator was not asked: no knowledge passed the strip threshold "
        "(-0.99); store: no passage used: every passage scores below lower threshold -0.9 "
        f"(best -1.000); web: {refused}",
    ]
    assert server.requests_to("/search") == []


def test_a_run_that_turns_the_web_off_sends_nothing(server: WebsearchServer) -> None:
    """``web_search`` off (a per-run setting): no search, no page, no rewrite; a note says so."""
    graph = paper_graph(components({"1503": 0.8, "Leonardo": 0.3}, default=-1.0), server)
    incorrect = components({}, default=-1.0)
    out = dict(
        paper_graph(incorrect, server).invoke(
            {"question": QUESTION}, context=Context(web_search=False)
        )
    )
    assert out["action"] == "incorrect"
    assert out["abstained"] is True and out["knowledge"] == []
    assert out["answer"] == ABSTENTION_WITHOUT_WEB  # not "... or on the web": it was not searched
    assert any("web search is off for this run" in note for note in out["notes"])
    assert server.search_queries() == [] and server.requests_to("/wiki/Mona_Lisa") == []
    # The rewrite prompt (the paper's keywords) was never sent: nothing was to be searched.
    assert not any(p[-1].text.startswith("question:") for p in incorrect.chat.prompts)

    served: Any = {"web_search": False}  # as a served run's context arrives: a dict
    ambiguous = dict(graph.invoke({"question": QUESTION}, context=served))
    assert ambiguous["action"] == "ambiguous"
    assert [k["origin"] for k in ambiguous["knowledge"]] == ["internal"]
    assert ambiguous["answer"] == "Leonardo da Vinci."
    assert server.search_queries() == []
    # The same graph searches for the next run that leaves the web on.
    dict(graph.invoke({"question": QUESTION}, context=Context()))
    assert server.search_queries() == ["Mona Lisa, painter wikipedia"]
