"""The compiled graph driven down each of the three branches with fakes."""

import asyncio
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from crag.core.validation import InvalidQuestionError
from crag.graph.builder import CragGraph, build_graph
from crag.settings.context import Context
from crag.settings.method import MethodConfig
from crag.websearch.base import SearchResult
from tests.fakes import FakeComponents, FixedScoreEvaluator, StaticSearch

WIKI = SearchResult(
    "Mona Lisa - Wikipedia",
    "https://en.wikipedia.org/wiki/Mona_Lisa",
    "The Mona Lisa was painted by Leonardo da Vinci.",
)
NODES = {
    "retrieve",
    "grade",
    "decide_action",
    "refine",
    "rewrite_query",
    "web_search",
    "decide_answer",
    "generate",
}
"""The nodes an Ambiguous run that answers passes (every node but contextualize and abstain)."""


def run(
    components: FakeComponents, question: str = "Who painted the Mona Lisa?", **method: Any
) -> dict[str, Any]:
    """A run of the graph built with ``components`` and the method's parameters ``method``."""
    graph = build_graph(components, method=MethodConfig(**method))
    return graph.invoke({"question": question}, context=Context())


def executed_nodes(
    components: FakeComponents, question: str = "Who painted the Mona Lisa?", **method: Any
) -> list[str]:
    """The nodes a run executes, in order (snippets only: no page is read)."""
    graph = build_graph(components, method=MethodConfig(fetch_pages=False, **method))
    return [
        node
        for chunk in graph.stream({"question": question}, context=Context(), stream_mode="updates")
        for node in chunk
    ]


def test_drawn_graph_has_three_branches_and_the_answer_choice(fake_graph: CragGraph) -> None:
    drawn = fake_graph.get_graph()
    assert set(drawn.nodes) >= NODES
    edges = {(e.source, e.target, e.conditional) for e in drawn.edges}
    assert ("decide_action", "refine", True) in edges
    assert ("decide_action", "rewrite_query", True) in edges
    assert ("refine", "decide_answer", False) in edges
    assert ("rewrite_query", "web_search", False) in edges
    assert ("web_search", "decide_answer", False) in edges
    # abstain or generate: a conditional edge out of the join, drawn
    assert ("decide_answer", "generate", True) in edges
    assert ("decide_answer", "abstain", True) in edges
    assert ("generate", "__end__", False) in edges
    assert ("abstain", "__end__", False) in edges
    mermaid = drawn.draw_mermaid()
    for node in NODES | {"contextualize", "abstain"}:
        assert node in mermaid


def test_output_schema_is_the_documented_one(fake_graph: CragGraph) -> None:
    assert set(fake_graph.get_output_jsonschema()["properties"]) == {
        "answer",
        "citations",
        "abstained",
        "action",
        "documents",
        "knowledge",
        "notes",
        "standalone_question",
        "messages",
    }


def test_correct_branch(fake_components: FakeComponents) -> None:
    out = run(fake_components)
    assert out["action"] == "correct"
    assert out["answer"] == "Leonardo da Vinci."
    assert {k["origin"] for k in out["knowledge"]} == {"internal"}
    assert [d["score"] for d in out["documents"]] == [0.9, -1.0]
    assert out["notes"] == []
    assert fake_components.web.queries == []
    assert executed_nodes(fake_components) == [
        "retrieve",
        "grade",
        "decide_action",
        "refine",
        "decide_answer",
        "generate",
    ]


def test_incorrect_branch_uses_only_the_web(fake_components: FakeComponents) -> None:
    fake_components.scorer = FixedScoreEvaluator({"painted by Leonardo": 0.8}, default=-1.0)
    fake_components.web = StaticSearch([WIKI])
    # snippets only: no page of the internet is read; the paper's keyword rewrite
    out = run(fake_components, fetch_pages=False, rewrite_for_search=True)
    assert out["action"] == "incorrect"
    assert [k["source"] for k in out["knowledge"]] == [WIKI.url]
    assert fake_components.web.queries == ["Mona Lisa, painter wikipedia"]
    assert executed_nodes(fake_components) == [
        "retrieve",
        "grade",
        "decide_action",
        "rewrite_query",
        "web_search",
        "decide_answer",
        "generate",
    ]


def test_ambiguous_branch_runs_both_and_generates_once(fake_components: FakeComponents) -> None:
    fake_components.scorer = FixedScoreEvaluator(
        {"painted by Leonardo": 0.8, "Leonardo": 0.3}, default=-0.9
    )
    fake_components.web = StaticSearch([WIKI])
    # each branch's strips side by side, in order (the paper's recomposition; not the default)
    out = run(
        fake_components,
        fetch_pages=False,
        ambiguous_knowledge="both",
        knowledge_order="original",
        upper_threshold=0.59,  # the passage scores 0.3: Ambiguous under the paper's threshold
    )
    assert out["action"] == "ambiguous"
    origins = [k["origin"] for k in out["knowledge"]]
    assert origins[0] == "internal" and origins[-1] == "external"
    nodes = executed_nodes(fake_components, upper_threshold=0.59)
    assert nodes.count("generate") == 1 and nodes[-1] == "generate"
    assert set(nodes) == NODES


def test_search_down_goes_on_and_says_so(fake_components: FakeComponents) -> None:
    fake_components.scorer = FixedScoreEvaluator({}, default=-1.0)
    fake_components.web = StaticSearch(error="DuckDuckGo could not be reached (no network)")
    out = run(fake_components, abstain_without_knowledge=False)
    assert out["action"] == "incorrect"
    assert out["answer"]
    assert any("web search unavailable" in n for n in out["notes"])
    assert any("no knowledge reached the generator" in n for n in out["notes"])


def test_thread_state_is_reset_between_runs(
    fake_components: FakeComponents, fake_graph: CragGraph
) -> None:
    threaded = build_graph(fake_components, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}
    fake_components.scorer = FixedScoreEvaluator({}, default=-1.0)
    first = threaded.invoke({"question": "Who painted the Mona Lisa?"}, config)
    assert first["action"] == "incorrect" and first["notes"]
    fake_components.scorer = FixedScoreEvaluator({"Leonardo": 0.9})
    second = threaded.invoke({"question": "Who painted the Mona Lisa?"}, config)
    assert second["action"] == "correct"
    assert second["notes"] == []
    assert {k["origin"] for k in second["knowledge"]} == {"internal"}


def test_async_invoke(fake_components: FakeComponents, fake_graph: CragGraph) -> None:
    out = asyncio.run(fake_graph.ainvoke({"question": "Who painted the Mona Lisa?"}))
    assert out["action"] == "correct"


@pytest.mark.parametrize("question", ["", "   ", "x" * 100_000])
def test_bad_question_raises_clear_error(fake_graph: CragGraph, question: str) -> None:
    with pytest.raises(ValueError, match="question"):
        fake_graph.invoke({"question": question})


def test_question_with_lone_surrogates_is_rejected_before_any_component(
    fake_components: FakeComponents, fake_graph: CragGraph
) -> None:
    question = "Who painted \udcff?"
    with pytest.raises(InvalidQuestionError, match=r"not valid UTF-8 text.*unpaired surrogate"):
        fake_graph.invoke({"question": question})
    with pytest.raises(InvalidQuestionError, match="character 13"):
        asyncio.run(fake_graph.ainvoke({"question": question}))
    assert fake_components.store.queries == []
