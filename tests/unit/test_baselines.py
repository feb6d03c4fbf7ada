"""crag-bench eval's baselines: no retrieval, standard RAG, RAG + web, the LangGraph tutorial."""

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from crag.core.validation import InvalidQuestionError
from crag.graph.baselines import (
    BASELINES,
    build_no_retrieval_graph,
    build_rag_graph,
    build_rag_web_graph,
    build_tutorial_graph,
)
from crag.graph.routers import route_tutorial
from crag.prompts.generate import CLOSED_BOOK_SYSTEM
from crag.prompts.tutorial import GRADER_SYSTEM, REWRITER_SYSTEM
from crag.settings.context import Context
from crag.settings.method import MethodConfig
from crag.websearch.base import SearchResult
from tests.fakes import FakeComponents, ScriptedChatModel, StaticSearch

QUESTION = "Who painted the Mona Lisa?"
WEB = [
    SearchResult(f"Result {i}", f"https://example.org/{i}", f"snippet number {i}") for i in range(5)
]


def tutorial_chat() -> ScriptedChatModel:
    """Grades passages that mention Leonardo relevant; rewrites; answers."""

    def respond(messages: list[BaseMessage]) -> str:
        system = messages[0].text
        if system == GRADER_SYSTEM:
            return "yes" if "Leonardo" in messages[-1].text else "no"
        if system == REWRITER_SYSTEM:
            return "Which artist painted the Mona Lisa portrait?"
        return "Leonardo da Vinci."

    return ScriptedChatModel(respond=respond, prompts=[])


def _invoke(build: Callable[..., Any], components: FakeComponents, **method: Any) -> dict[str, Any]:
    """One run of the baseline ``build`` makes with ``components`` and ``method``'s parameters."""
    graph = build(components, method=MethodConfig(fetch_pages=False, **method))
    result: dict[str, Any] = graph.invoke({"question": QUESTION}, context=Context())
    return result


def test_every_baseline_is_named_and_compiles(fake_components: FakeComponents) -> None:
    assert set(BASELINES) == {"no-retrieval", "rag", "rag-web", "tutorial"}
    for build in BASELINES.values():
        assert build(fake_components).get_graph().nodes


def test_no_retrieval_answers_closed_book(fake_components: FakeComponents) -> None:
    out = _invoke(build_no_retrieval_graph, fake_components)
    assert out["answer"] == "Leonardo da Vinci."
    assert out["documents"] == [] and out["knowledge"] == []
    prompt = fake_components.chat.prompts[-1]
    assert prompt[0].text == CLOSED_BOOK_SYSTEM and prompt[-1].text == QUESTION
    assert fake_components.store.queries == [], "the store was searched"


def test_no_retrieval_rejects_an_empty_question(fake_components: FakeComponents) -> None:
    with pytest.raises(InvalidQuestionError, match="empty"):
        build_no_retrieval_graph(fake_components).invoke({"question": "  "})


def test_rag_passes_every_passage_whole_and_unscored(fake_components: FakeComponents) -> None:
    out = _invoke(build_rag_graph, fake_components)
    assert [k["text"] for k in out["knowledge"]] == [d["text"] for d in out["documents"]]
    assert len(out["knowledge"]) == 2
    assert all(k["score"] is None for k in out["knowledge"])
    assert fake_components.scorer.calls == [], "RAG must not call the evaluator"
    assert "Photosynthesis" in fake_components.chat.prompts[-1][-1].text


def test_rag_web_adds_web_results_to_the_passages(fake_components: FakeComponents) -> None:
    fake_components.web = StaticSearch(WEB)
    out = _invoke(
        build_rag_web_graph, fake_components, select_web_knowledge=False, prefer_wikipedia=False
    )
    origins = [k["origin"] for k in out["knowledge"]]
    assert origins.count("internal") == 2 and origins.count("external") == 5
    assert fake_components.web.queries == [QUESTION]


def test_tutorial_searches_when_any_passage_is_irrelevant(
    fake_components: FakeComponents,
) -> None:
    fake_components.chat = tutorial_chat()
    fake_components.web = StaticSearch(WEB)
    out = _invoke(build_tutorial_graph, fake_components)
    relevant = [k for k in out["knowledge"] if k["origin"] == "internal"]
    assert len(relevant) == 1 and "Leonardo" in relevant[0]["text"]
    external = [k for k in out["knowledge"] if k["origin"] == "external"]
    assert len(external) == 3, "the tutorial keeps the top three web results"
    assert fake_components.web.queries == ["Which artist painted the Mona Lisa portrait?"]
    assert out["action"] == "ambiguous"
    assert [d["score"] for d in out["documents"]] == [1.0, -1.0]
    assert fake_components.scorer.calls == [], "the tutorial grades with the LLM, not CRAG's"


def test_tutorial_skips_the_web_when_every_passage_is_relevant(
    fake_components: FakeComponents,
) -> None:
    chat = tutorial_chat()
    fake_components.chat = chat
    fake_components.store.documents = fake_components.store.documents[:1]
    fake_components.web = StaticSearch(WEB)
    out = _invoke(build_tutorial_graph, fake_components)
    assert out["action"] == "correct"
    assert fake_components.web.queries == []
    assert [k["origin"] for k in out["knowledge"]] == ["internal"]


def test_tutorial_goes_on_when_the_web_is_down(fake_components: FakeComponents) -> None:
    fake_components.chat = tutorial_chat()
    out = _invoke(build_tutorial_graph, fake_components)
    assert out["answer"] == "Leonardo da Vinci."
    assert any("web search unavailable" in n for n in out["notes"])


@pytest.mark.parametrize(
    ("action", "route"),
    [("correct", "generate"), ("ambiguous", "transform_query"), ("incorrect", "transform_query")],
)
def test_route_tutorial(action: str, route: str) -> None:
    assert route_tutorial({"action": action}) == route  # type: ignore[typeddict-item]
