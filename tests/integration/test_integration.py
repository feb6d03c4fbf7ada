"""End to end with real components: MiniLM, Chroma on disk, SmolLM2, a tiny T5, local web."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crag.app.graphs import components
from crag.graph.builder import build_graph
from crag.settings.context import Context
from crag.settings.deployment import deployment_with
from crag.settings.method import MethodConfig
from crag.vectorstore.embeddings import load_embeddings
from crag.vectorstore.store import StoreError, open_store
from tests.integration_support import build_small_store
from tests.tiny_t5 import build_tiny_t5
from tests.websearch_server import WebsearchServer

pytestmark = pytest.mark.integration

MONA = "Who painted the Mona Lisa?"
ABSENT = "What is the boiling point of liquid nitrogen in kelvin?"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small_store(tmp_path_factory.mktemp("store") / "chroma")


@pytest.fixture(scope="module")
def web() -> Iterator[WebsearchServer]:
    with WebsearchServer() as server:
        yield server


@pytest.fixture
def search_down(web: WebsearchServer) -> WebsearchServer:
    web.reset()
    web.search_status = 500
    return web


def run(
    question: str,
    store: Path,
    web: WebsearchServer,
    method: MethodConfig | None = None,
    **deployment: Any,
) -> dict[str, Any]:
    """The app's CRAG graph (its real components) over ``store``, searching ``web``."""
    graph = build_graph(
        components,
        method=method,
        deployment=deployment_with(
            store_path=str(store),
            default_corpus=False,
            search_provider="searxng",
            search_url=web.url,
            allowed_hosts="127.0.0.1",
            **deployment,
        ),
    )
    out: dict[str, Any] = graph.invoke({"question": question}, context=Context())
    return out


def test_mona_lisa_is_answered_from_the_store(
    store_path: Path, search_down: WebsearchServer
) -> None:
    out = run(MONA, store_path, search_down)
    assert out["action"] == "correct"
    assert "Leonardo" in out["answer"]
    assert out["documents"][0]["source"] == "wikipedia:Mona Lisa"
    assert all(-1.0 <= d["score"] <= 1.0 for d in out["documents"])
    assert len(out["documents"]) == 10
    assert any(k["source"] == "wikipedia:Mona Lisa" for k in out["knowledge"])
    assert 1 <= len(out["knowledge"]) <= 5
    assert search_down.search_queries() == []  # Correct never searches the web


def test_unanswerable_question_turns_to_the_web_and_notes_it_is_down(
    store_path: Path, search_down: WebsearchServer
) -> None:
    out = run(ABSENT, store_path, search_down)
    assert out["action"] in ("incorrect", "ambiguous")
    assert any("web search unavailable" in n and "500" in n for n in out["notes"])
    assert search_down.search_queries(), "the graph should have tried the web"
    assert out["answer"]


def test_web_results_become_external_knowledge(store_path: Path, web: WebsearchServer) -> None:
    web.reset()
    web.results = [
        web.result(
            "Nitrogen - Wikipedia",
            "https://en.wikipedia.org/wiki/Liquid_nitrogen",
            "Liquid nitrogen boils at 77 K (-196 °C) at atmospheric pressure.",
        ),
        web.result("Cooking blog", "https://blog.example/recipes", "Ten pasta recipes for summer."),
    ]
    out = run(ABSENT, store_path, web, MethodConfig(upper_threshold=0.99, lower_threshold=0.98))
    assert out["action"] == "incorrect"
    sources = [k["source"] for k in out["knowledge"]]
    assert sources[0] == "https://en.wikipedia.org/wiki/Liquid_nitrogen"
    assert "https://blog.example/recipes" not in sources
    assert all(k["origin"] == "external" for k in out["knowledge"])
    assert "wikipedia" in web.search_queries()[0].lower()


def test_tiny_t5_evaluator_runs_the_graph(
    store_path: Path, search_down: WebsearchServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    t5 = build_tiny_t5(tmp_path_factory.mktemp("t5"))
    out = run(MONA, store_path, search_down, evaluator="t5", evaluator_model=str(t5))
    assert out["action"] in ("correct", "incorrect", "ambiguous")
    scores = [d["score"] for d in out["documents"]]
    assert len(scores) == 10 and all(-1.0 <= s <= 1.0 for s in scores)
    assert len(set(scores)) > 1  # a real model, not a constant


def test_missing_store_is_a_clear_error(tmp_path: Path, search_down: WebsearchServer) -> None:
    with pytest.raises(StoreError, match="crag ingest"):
        run(MONA, tmp_path / "nowhere", search_down)


def test_empty_store_is_a_clear_error(tmp_path: Path, search_down: WebsearchServer) -> None:
    open_store(tmp_path / "empty", "crag", load_embeddings(), create=True)
    with pytest.raises(StoreError, match="empty"):
        run(MONA, tmp_path / "empty", search_down)
